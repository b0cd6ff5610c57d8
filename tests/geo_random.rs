//! Random geo command sequences: corekv (one shard, and three shards so that
//! STORE destinations land on other shards) and redis-server must answer
//! every command the same way: scores, positions, distances, hashes and
//! the order of search results, byte for byte. Points cluster around a few
//! centres (the equator, Sicily, near a pole, across the antimeridian) so
//! searches find some of them and scan neighbouring boxes.

mod common;

use common::{Raw, Redis, Server};
use proptest::prelude::*;
use proxy::resp::Value;

fn key() -> impl Strategy<Value = String> {
    prop_oneof![Just("g1"), Just("g2"), Just("{t}a"), Just("{t}b"), Just("dst")].prop_map(String::from)
}

fn member() -> impl Strategy<Value = String> {
    (0..12u8).prop_map(|i| format!("m{i}"))
}

const CENTRES: [(f64, f64); 4] = [(0.0, 0.0), (14.0, 37.5), (-60.0, 79.0), (179.5, -20.0)];

/// A position near one of the centres.
fn position() -> impl Strategy<Value = (String, String)> {
    (0..CENTRES.len(), -2.0f64..2.0, -2.0f64..2.0).prop_map(|(c, dx, dy)| {
        let (lon, lat) = CENTRES[c];
        let lon = lon + dx;
        let lon = if lon > 180.0 { lon - 360.0 } else { lon };
        (format!("{lon:.6}"), format!("{:.6}", lat + dy))
    })
}

fn unit() -> impl Strategy<Value = String> {
    prop_oneof![Just("m"), Just("km"), Just("mi"), Just("ft")].prop_map(String::from)
}

/// A distance in the unit, reaching from metres to a few hundred km.
fn size() -> impl Strategy<Value = (String, String)> {
    (prop_oneof![1.0f64..50.0, 50.0f64..400.0], unit()).prop_map(|(km, u)| {
        let per_unit = match u.as_str() {
            "m" => 0.001,
            "km" => 1.0,
            "mi" => 1.60934,
            _ => 0.0003048,
        };
        (format!("{:.3}", km / per_unit), u)
    })
}

fn v(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}

/// FROMLONLAT / FROMMEMBER, BYRADIUS / BYBOX and the options of a search.
fn search_args() -> impl Strategy<Value = Vec<String>> {
    let from = prop_oneof![
        position().prop_map(|(x, y)| v(&["FROMLONLAT", &x, &y])),
        member().prop_map(|m| v(&["FROMMEMBER", &m])),
    ];
    let by = prop_oneof![
        size().prop_map(|(r, u)| v(&["BYRADIUS", &r, &u])),
        (size(), size()).prop_map(|((w, u), (h, _))| v(&["BYBOX", &w, &h, &u])),
    ];
    let order = prop_oneof![Just(vec![]), Just(v(&["ASC"])), Just(v(&["DESC"]))];
    let count = prop_oneof![
        Just(vec![]),
        (1..5u8).prop_map(|n| v(&["COUNT", &n.to_string()])),
        (1..5u8).prop_map(|n| v(&["COUNT", &n.to_string(), "ANY"]))
    ];
    (from, by, order, count).prop_map(|(f, b, o, c)| [f, b, o, c].concat())
}

fn command() -> impl Strategy<Value = Vec<String>> {
    let k = key;
    prop_oneof![
        5 => (k(), proptest::collection::vec((position(), member()), 1..5), prop_oneof![Just(""), Just("NX"), Just("XX"), Just("CH")])
            .prop_map(|(k, points, opt)| {
                let mut c = v(&["GEOADD", &k]);
                if !opt.is_empty() {
                    c.push(opt.into());
                }
                for ((x, y), m) in points {
                    c.extend([x, y, m]);
                }
                c
            }),
        1 => (k(), member(), member()).prop_map(|(k, a, b)| v(&["GEOPOS", &k, &a, &b])),
        1 => (k(), member(), member()).prop_map(|(k, a, b)| v(&["GEOHASH", &k, &a, &b])),
        2 => (k(), member(), member(), unit()).prop_map(|(k, a, b, u)| v(&["GEODIST", &k, &a, &b, &u])),
        4 => (k(), search_args(), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(k, args, d, c, h)| {
            let mut cmd = v(&["GEOSEARCH", &k]);
            cmd.extend(args);
            for (on, w) in [(d, "WITHDIST"), (c, "WITHCOORD"), (h, "WITHHASH")] {
                if on {
                    cmd.push(w.into());
                }
            }
            cmd
        }),
        2 => (k(), k(), search_args(), any::<bool>()).prop_map(|(d, s, args, dist)| {
            let mut cmd = v(&["GEOSEARCHSTORE", &d, &s]);
            cmd.extend(args);
            if dist {
                cmd.push("STOREDIST".into());
            }
            cmd
        }),
        2 => (k(), position(), size(), prop_oneof![Just("WITHDIST"), Just("STORE"), Just("STOREDIST"), Just("ASC")], k())
            .prop_map(|(k, (x, y), (r, u), opt, dest)| {
                let mut cmd = v(&["GEORADIUS", &k, &x, &y, &r, &u, opt]);
                if opt.starts_with("STORE") {
                    cmd.push(dest);
                }
                cmd
            }),
        1 => (k(), member(), size()).prop_map(|(k, m, (r, u))| v(&["GEORADIUSBYMEMBER_RO", &k, &m, &r, &u, "WITHCOORD", "DESC"])),
        2 => k().prop_map(|k| v(&["ZRANGE", &k, "0", "-1", "WITHSCORES"])),
        1 => (k(), member()).prop_map(|(k, m)| v(&["ZREM", &k, &m])),
        1 => k().prop_map(|k| v(&["DEL", &k])),
        1 => k().prop_map(|k| v(&["OBJECT", "ENCODING", &k])),
    ]
}

fn run(pair: &(Redis, Server), cmds: &[Vec<String>]) -> Result<(), TestCaseError> {
    let (mut a, mut b): (Raw, Raw) = (pair.0.raw(), pair.1.raw());
    for c in [&mut a, &mut b] {
        c.cmd_str("FLUSHALL");
        c.cmd_str("CONFIG SET zset-max-listpack-entries 4");
    }
    for c in cmds {
        let args: Vec<&[u8]> = c.iter().map(|s| s.as_bytes()).collect();
        let (want, got): (Value, Value) = (a.cmd(&args), b.cmd(&args));
        prop_assert!(want == got, "command {:?} in {:?}\n  redis:  {:?}\n  corekv: {:?}", c, cmds, want, got);
    }
    Ok(())
}

thread_local! {
    static ONE: (Redis, Server) = (Redis::start(), Server::shards(1));
    static THREE: (Redis, Server) = (Redis::start(), Server::shards(3));
}

proptest! {
    // GEO_RANDOM_CASES=1000 for a longer run.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("GEO_RANDOM_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(32),
        ..ProptestConfig::default()
    })]
    #[test]
    fn random_geo_sequences_agree_on_one_shard(cmds in proptest::collection::vec(command(), 1..50)) {
        ONE.with(|pair| run(pair, &cmds))?;
    }

    #[test]
    fn random_geo_sequences_agree_on_three_shards(cmds in proptest::collection::vec(command(), 1..50)) {
        THREE.with(|pair| run(pair, &cmds))?;
    }
}
