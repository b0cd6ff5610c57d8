//! Hashes and sets at sizes the differential scripts do not reach: large
//! (hash table) sets on different shards combined over the mesh, compared
//! with redis-server; HSCAN/SSCAN cursors over large values while they
//! change, with the SCAN guarantee checked.

mod common;

use common::{with_flushed_pair, Raw, Redis, Server};
use proxy::resp::Value;
use std::collections::BTreeSet;

fn words(parts: &[String]) -> Vec<&[u8]> {
    parts.iter().map(|s| s.as_bytes()).collect()
}

fn cmd(conn: &mut Raw, parts: &[String]) -> Value {
    conn.cmd(&words(parts))
}

fn strs(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// Members of an array or set reply, sorted.
fn members(v: Value) -> BTreeSet<Vec<u8>> {
    match v {
        Value::Array(items) | Value::Set(items) => items.into_iter().map(|i| i.as_bytes().unwrap().to_vec()).collect(),
        other => panic!("not a collection: {other:?}"),
    }
}

/// SADD of `range` members formatted by `f`, in batches.
fn load(conn: &mut Raw, key: &str, range: std::ops::Range<u32>, f: impl Fn(u32) -> String) {
    let all: Vec<u32> = range.collect();
    for chunk in all.chunks(500) {
        let mut c = strs(&["SADD", key]);
        c.extend(chunk.iter().map(|&i| f(i)));
        cmd(conn, &c);
    }
}

#[test]
fn large_sets_across_shards_agree_with_redis() {
    let redis = Redis::start();
    let corekv = Server::shards(3);
    let (mut a, mut b) = (redis.raw(), corekv.raw());
    for conn in [&mut a, &mut b] {
        // Keys on all three shards, integers (hash table past 512) and strings.
        load(conn, "x", 0..3000, |i| i.to_string());
        load(conn, "y", 1500..4000, |i| i.to_string());
        load(conn, "z", 0..2000, |i| format!("m{}", i * 3));
        load(conn, "w", 0..1000, |i| if i % 2 == 0 { format!("m{i}") } else { i.to_string() });
    }
    let checks: Vec<Vec<String>> = vec![
        strs(&["SINTER", "x", "y"]),
        strs(&["SINTER", "x", "y", "w"]),
        strs(&["SUNION", "x", "z", "w"]),
        strs(&["SDIFF", "x", "y", "w"]),
        strs(&["SDIFF", "z", "w"]),
        strs(&["SINTER", "z", "w"]),
    ];
    for c in &checks {
        assert_eq!(members(cmd(&mut a, c)), members(cmd(&mut b, c)), "{c:?}");
    }
    let exact: Vec<Vec<String>> = vec![
        strs(&["SINTERCARD", "2", "x", "y"]),
        strs(&["SINTERCARD", "3", "x", "y", "w", "LIMIT", "10"]),
        strs(&["SINTERSTORE", "d1", "x", "y"]),
        strs(&["OBJECT", "ENCODING", "d1"]),
        strs(&["SINTERSTORE", "d2", "x", "w"]),
        strs(&["OBJECT", "ENCODING", "d2"]),
        strs(&["SMEMBERS", "d2"]),
        strs(&["SUNIONSTORE", "d3", "z", "w"]),
        strs(&["SCARD", "d3"]),
        strs(&["SDIFFSTORE", "d4", "x", "y"]),
        strs(&["OBJECT", "ENCODING", "d4"]),
        strs(&["SCARD", "d4"]),
        strs(&["SMOVE", "x", "z", "7"]),
        strs(&["SISMEMBER", "z", "7"]),
        strs(&["SISMEMBER", "x", "7"]),
        strs(&["SCARD", "x"]),
        strs(&["SPOP", "d4", "1490"]),
        strs(&["OBJECT", "ENCODING", "d4"]),
        strs(&["SCARD", "d4"]),
    ];
    for c in &exact {
        let (want, got) = (cmd(&mut a, c), cmd(&mut b, c));
        if c[0] == "SPOP" {
            assert_eq!(members(want).len(), members(got).len(), "{c:?}");
        } else {
            assert_eq!(want, got, "{c:?}");
        }
    }
    for key in ["d1", "d3"] {
        let c = strs(&["SMEMBERS", key]);
        assert_eq!(members(cmd(&mut a, &c)), members(cmd(&mut b, &c)), "{key}");
    }
}

/// Runs a scan command to its end, calling `between` after every call.
fn scan_all(conn: &mut Raw, cmd_name: &str, key: &str, count: &str, mut between: impl FnMut(&mut Raw)) -> Vec<Vec<u8>> {
    let mut cursor = "0".to_string();
    let mut seen = Vec::new();
    for _ in 0..1_000_000 {
        let reply = cmd(conn, &strs(&[cmd_name, key, &cursor, "COUNT", count]));
        let Value::Array(mut parts) = reply else { panic!("{reply:?}") };
        let Some(Value::Array(items)) = parts.pop() else { panic!() };
        seen.extend(items.into_iter().map(|i| i.as_bytes().unwrap().to_vec()));
        cursor = String::from_utf8(parts.pop().unwrap().as_bytes().unwrap().to_vec()).unwrap();
        if cursor == "0" {
            return seen;
        }
        between(conn);
    }
    panic!("scan did not end")
}

#[test]
fn scans_of_large_values_return_every_stable_element() {
    let corekv = Server::shards(2);
    let mut c = corekv.raw();
    load(&mut c, "s", 0..5000, |i| format!("stable{i}"));
    for chunk in (0..3000u32).collect::<Vec<_>>().chunks(500) {
        let mut h = strs(&["HSET", "h"]);
        h.extend(chunk.iter().flat_map(|i| [format!("f{i}"), i.to_string()]));
        cmd(&mut c, &h);
    }
    // Elements come and go (and segments split) while the scans run.
    let mut extra = 0u32;
    let seen = scan_all(&mut c, "SSCAN", "s", "20", |conn| {
        let mut add = strs(&["SADD", "s"]);
        add.extend((0..40).map(|i| format!("extra{}", extra + i)));
        cmd(conn, &add);
        cmd(conn, &strs(&["SREM", "s", &format!("extra{}", extra / 2)]));
        extra += 40;
    });
    let seen: BTreeSet<Vec<u8>> = seen.into_iter().collect();
    for i in 0..5000 {
        assert!(seen.contains(format!("stable{i}").as_bytes()), "SSCAN missed stable{i}");
    }
    let mut n = 0u32;
    let seen = scan_all(&mut c, "HSCAN", "h", "7", |conn| {
        cmd(conn, &strs(&["HSET", "h", &format!("new{n}"), "v", &format!("new{}", n + 1), "v"]));
        n += 2;
    });
    let fields: BTreeSet<Vec<u8>> = seen.chunks(2).map(|p| p[0].clone()).collect();
    for i in 0..3000 {
        assert!(fields.contains(format!("f{i}").as_bytes()), "HSCAN missed f{i}");
    }
    for p in seen.chunks(2) {
        if p[0].starts_with(b"f") {
            assert_eq!(p[0][1..], p[1][..], "value of {:?}", String::from_utf8_lossy(&p[0]));
        }
    }
    assert_eq!(cmd(&mut c, &strs(&["OBJECT", "ENCODING", "h"])), Value::Bulk(b"hashtable".to_vec()));
}

mod random {
    //! Random hash and set command sequences over a few keys spread over
    //! three shards: corekv and redis-server answer alike (collections
    //! compared as sorted multisets, their order being unspecified).
    use super::*;
    use proptest::prelude::*;

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![Just("a"), Just("b"), Just("c"), Just("{t}x"), Just("{t}y"), Just("n")].prop_map(String::from)
    }

    fn elem() -> impl Strategy<Value = String> {
        prop_oneof![(0i64..8).prop_map(|n| n.to_string()), "[p-s]{1,2}", Just("-1".to_string())]
    }

    fn command() -> impl Strategy<Value = (bool, Vec<String>)> {
        let (k, e) = (key, elem);
        let exact = |c: Vec<String>| (false, c);
        let sorted = |c: Vec<String>| (true, c);
        prop_oneof![
            4 => (k(), proptest::collection::vec(e(), 1..4))
                .prop_map(move |(k, m)| exact([vec!["SADD".into(), k], m].concat())),
            2 => (k(), proptest::collection::vec(e(), 1..3))
                .prop_map(move |(k, m)| exact([vec!["SREM".into(), k], m].concat())),
            1 => (k(), e()).prop_map(move |(k, m)| exact(vec!["SISMEMBER".into(), k, m])),
            1 => (k(), e(), e()).prop_map(move |(k, a, b)| exact(vec!["SMISMEMBER".into(), k, a, b])),
            1 => k().prop_map(move |k| exact(vec!["SCARD".into(), k])),
            1 => k().prop_map(move |k| sorted(vec!["SMEMBERS".into(), k])),
            2 => (k(), k(), e()).prop_map(move |(a, b, m)| exact(vec!["SMOVE".into(), a, b, m])),
            2 => (prop_oneof![Just("SINTER"), Just("SUNION"), Just("SDIFF")], k(), k(), k())
                .prop_map(move |(c, a, b, d)| sorted(vec![c.into(), a, b, d])),
            2 => (prop_oneof![Just("SINTERSTORE"), Just("SUNIONSTORE"), Just("SDIFFSTORE")], k(), k(), k())
                .prop_map(move |(c, d, a, b)| exact(vec![c.into(), d, a, b])),
            1 => (k(), k(), 0i64..3).prop_map(move |(a, b, l)| {
                exact(vec!["SINTERCARD".into(), "2".into(), a, b, "LIMIT".into(), l.to_string()])
            }),
            3 => (k(), e(), e()).prop_map(move |(k, f, v)| exact(vec!["HSET".into(), k, f, v])),
            1 => (k(), e(), e()).prop_map(move |(k, f, v)| exact(vec!["HSETNX".into(), k, f, v])),
            1 => (k(), e()).prop_map(move |(k, f)| exact(vec!["HDEL".into(), k, f])),
            1 => (k(), e()).prop_map(move |(k, f)| exact(vec!["HGET".into(), k, f])),
            1 => (k(), e(), -3i64..3).prop_map(move |(k, f, d)| exact(vec!["HINCRBY".into(), k, f, d.to_string()])),
            1 => k().prop_map(move |k| exact(vec!["HLEN".into(), k])),
            1 => k().prop_map(move |k| sorted(vec!["HGETALL".into(), k])),
            1 => k().prop_map(move |k| exact(vec!["OBJECT".into(), "ENCODING".into(), k])),
            1 => k().prop_map(move |k| exact(vec!["TYPE".into(), k])),
            1 => (k(), k()).prop_map(move |(a, b)| exact(vec!["RENAME".into(), a, b])),
            1 => (k(), k()).prop_map(move |(a, b)| exact(vec!["COPY".into(), a, b])),
            1 => k().prop_map(move |k| exact(vec!["DEL".into(), k])),
        ]
    }

    fn normalized(v: Value, sort: bool) -> Value {
        match v {
            Value::Array(mut items) | Value::Set(mut items) if sort => {
                items.sort_by_key(|i| format!("{i:?}"));
                Value::Array(items)
            }
            other => other,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
        #[test]
        fn hash_and_set_sequences_agree(cmds in proptest::collection::vec(command(), 1..50)) {
            with_flushed_pair(|a, b| {
                for (sort, c) in &cmds {
                    let (want, got) = (cmd(a, c), cmd(b, c));
                    let (want, got) = (normalized(want, *sort), normalized(got, *sort));
                    prop_assert!(want == got, "{:?} in {:?}\n  redis:  {:?}\n  corekv: {:?}", c, cmds, want, got);
                }
                Ok(())
            })?;
        }
    }
}
