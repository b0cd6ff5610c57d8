//! Random sorted-set command sequences: corekv on three shards and
//! redis-server must answer every command the same way. Plain keys land on
//! different shards, so the cross-shard forms of ZUNIONSTORE, ZINTER,
//! ZDIFF, ZRANGESTORE and ZMPOP run; the encoding threshold is small so sets
//! change encoding along the way.

mod common;

use common::with_flushed_pair;
use proptest::prelude::*;
use proxy::resp::Value;

fn key() -> impl Strategy<Value = String> {
    prop_oneof![Just("z1"), Just("z2"), Just("z3"), Just("{t}a"), Just("{t}b"), Just("s")].prop_map(String::from)
}

fn member() -> impl Strategy<Value = String> {
    prop_oneof![(0..12u8).prop_map(|i| format!("m{i}")), Just("a-very-long-member-name-past-the-limit".to_string())]
}

fn score() -> impl Strategy<Value = String> {
    prop_oneof![
        (-5i32..5).prop_map(|n| n.to_string()),
        Just("1.5".to_string()),
        Just("0.1".to_string()),
        Just("-inf".to_string()),
        Just("+inf".to_string()),
        Just("(1".to_string()),
        Just("abc".to_string()),
    ]
}

fn range_bound() -> impl Strategy<Value = String> {
    prop_oneof![score(), Just("-inf".to_string()), Just("(2".to_string())]
}

fn lex_bound() -> impl Strategy<Value = String> {
    prop_oneof![Just("-"), Just("+"), Just("[m3"), Just("(m5"), Just("[m"), Just("m1")].prop_map(String::from)
}

fn v(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}

fn command() -> impl Strategy<Value = Vec<String>> {
    let k = key;
    prop_oneof![
        4 => (k(), proptest::collection::vec((score(), member()), 1..5), prop_oneof![Just(""), Just("NX"), Just("XX"), Just("GT"), Just("LT"), Just("CH"), Just("INCR")])
            .prop_map(|(k, pairs, opt)| {
                let mut c = v(&["ZADD", &k]);
                if !opt.is_empty() {
                    c.push(opt.into());
                }
                for (s, m) in pairs {
                    c.push(s);
                    c.push(m);
                }
                c
            }),
        2 => (k(), score(), member()).prop_map(|(k, s, m)| v(&["ZINCRBY", &k, &s, &m])),
        2 => (k(), member(), member()).prop_map(|(k, a, b)| v(&["ZREM", &k, &a, &b])),
        1 => (k(), member()).prop_map(|(k, m)| v(&["ZSCORE", &k, &m])),
        1 => (k(), member(), member()).prop_map(|(k, a, b)| v(&["ZMSCORE", &k, &a, &b])),
        1 => (k(), member()).prop_map(|(k, m)| v(&["ZRANK", &k, &m])),
        1 => (k(), member()).prop_map(|(k, m)| v(&["ZREVRANK", &k, &m])),
        1 => k().prop_map(|k| v(&["ZCARD", &k])),
        2 => (k(), -6i32..6, -6i32..6, any::<bool>()).prop_map(|(k, a, b, r)| {
            let mut c = v(&["ZRANGE", &k, &a.to_string(), &b.to_string(), "WITHSCORES"]);
            if r {
                c.push("REV".into());
            }
            c
        }),
        2 => (k(), range_bound(), range_bound(), -1i32..3, -1i32..4).prop_map(|(k, a, b, o, l)| {
            v(&["ZRANGEBYSCORE", &k, &a, &b, "WITHSCORES", "LIMIT", &o.to_string(), &l.to_string()])
        }),
        1 => (k(), range_bound(), range_bound()).prop_map(|(k, a, b)| v(&["ZREVRANGEBYSCORE", &k, &a, &b, "WITHSCORES"])),
        // Member ranges are defined for sets of equal scores ("lex" only).
        2 => proptest::collection::vec(member(), 1..4).prop_map(|ms| {
            let mut c = v(&["ZADD", "lex"]);
            for m in ms {
                c.extend([String::from("0"), m]);
            }
            c
        }),
        1 => (lex_bound(), lex_bound(), prop_oneof![Just("ZRANGEBYLEX"), Just("ZREVRANGEBYLEX"), Just("ZLEXCOUNT"), Just("ZREMRANGEBYLEX")])
            .prop_map(|(a, b, cmd)| v(&[cmd, "lex", &a, &b])),
        1 => (k(), range_bound(), range_bound()).prop_map(|(k, a, b)| v(&["ZCOUNT", &k, &a, &b])),
        1 => (k(), -4i32..4, -4i32..4).prop_map(|(k, a, b)| v(&["ZREMRANGEBYRANK", &k, &a.to_string(), &b.to_string()])),
        1 => (k(), range_bound(), range_bound()).prop_map(|(k, a, b)| v(&["ZREMRANGEBYSCORE", &k, &a, &b])),
        1 => (k(), 0u8..4).prop_map(|(k, n)| v(&["ZPOPMIN", &k, &n.to_string()])),
        1 => k().prop_map(|k| v(&["ZPOPMAX", &k])),
        2 => (k(), k(), k(), prop_oneof![Just("ZUNIONSTORE"), Just("ZINTERSTORE"), Just("ZDIFFSTORE")], prop_oneof![Just("SUM"), Just("MIN"), Just("MAX")])
            .prop_map(|(d, a, b, cmd, agg)| {
                let mut c = v(&[cmd, &d, "2", &a, &b]);
                if cmd != "ZDIFFSTORE" {
                    c.extend(v(&["WEIGHTS", "2", "-1", "AGGREGATE", agg]));
                }
                c
            }),
        2 => (k(), k(), prop_oneof![Just("ZUNION"), Just("ZINTER"), Just("ZDIFF")]).prop_map(|(a, b, cmd)| v(&[cmd, "2", &a, &b, "WITHSCORES"])),
        1 => (k(), k()).prop_map(|(a, b)| v(&["ZINTERCARD", "2", &a, &b])),
        1 => (k(), k(), -3i32..3, -3i32..3).prop_map(|(d, s, a, b)| v(&["ZRANGESTORE", &d, &s, &a.to_string(), &b.to_string()])),
        1 => (k(), k(), any::<bool>()).prop_map(|(a, b, max)| v(&["ZMPOP", "2", &a, &b, if max { "MAX" } else { "MIN" }, "COUNT", "2"])),
        1 => k().prop_map(|k| v(&["OBJECT", "ENCODING", &k])),
        1 => k().prop_map(|k| v(&["TYPE", &k])),
        1 => (k(), member()).prop_map(|(k, m)| v(&["SET", &k, &m])),
        1 => (k(), k()).prop_map(|(a, b)| v(&["RENAME", &a, &b])),
        1 => (k(), k()).prop_map(|(a, b)| v(&["COPY", &a, &b, "REPLACE"])),
        1 => k().prop_map(|k| v(&["DEL", &k])),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
    #[test]
    fn random_zset_sequences_agree(cmds in proptest::collection::vec(command(), 1..60)) {
        with_flushed_pair(|a, b| {
            a.cmd_str("CONFIG SET zset-max-listpack-entries 4");
            b.cmd_str("CONFIG SET zset-max-listpack-entries 4");
            for c in &cmds {
                let args: Vec<&[u8]> = c.iter().map(|s| s.as_bytes()).collect();
                let (want, got): (Value, Value) = (a.cmd(&args), b.cmd(&args));
                prop_assert!(want == got, "command {:?} in {:?}\n  redis:  {:?}\n  corekv: {:?}", c, cmds, want, got);
            }
            Ok(())
        })?;
    }
}
