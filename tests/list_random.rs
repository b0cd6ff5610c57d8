//! Random list command sequences with `list-compress-depth` 1 and 2:
//! corekv on three shards and redis-server must answer every command the
//! same way, DUMP included. With `rdbcompression no` a DUMP payload shows
//! each node's elements and whether it is held compressed, so equal
//! payloads mean the same nodes compressed the same way as Redis's
//! quicklist (count-based nodes, `list-max-listpack-size 4`, keep node
//! boundaries comparable). Plain keys land on different shards, so LMOVE
//! runs across shards too.
//!
//! Each DUMP follows an `LRANGE key 0 -1`: Redis compresses lazily (a node
//! that grows by LINSERT stays as it was until a read passes over it, and
//! every read recompresses the interior nodes it visits), while corekv
//! keeps every interior node compressed when it compresses. After a full
//! read the two agree.

mod common;

use common::with_flushed_pair;
use proptest::prelude::*;
use proxy::resp::Value;

fn key() -> impl Strategy<Value = String> {
    prop_oneof![Just("l1"), Just("l2"), Just("{t}a"), Just("{t}b")].prop_map(String::from)
}

/// Long values that compress, and short ones that leave nodes too small.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (0..8u8).prop_map(|i| format!("v{i}:{}", "abcdefgh".repeat(6))),
        1 => prop_oneof![Just("a"), Just("b"), Just("7")].prop_map(String::from),
    ]
}

fn index() -> impl Strategy<Value = String> {
    (-12i64..12).prop_map(|i| i.to_string())
}

fn v(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}

fn command() -> impl Strategy<Value = Vec<String>> {
    let k = key;
    let side = || prop_oneof![Just("LEFT"), Just("RIGHT")];
    prop_oneof![
        6 => (k(), any::<bool>(), proptest::collection::vec(value(), 1..10)).prop_map(|(k, head, vals)| {
            let mut c = v(&[if head { "LPUSH" } else { "RPUSH" }, &k]);
            c.extend(vals);
            c
        }),
        2 => (k(), any::<bool>(), 0..4usize).prop_map(|(k, head, n)| v(&[if head { "LPOP" } else { "RPOP" }, &k, &n.to_string()])),
        2 => (k(), index()).prop_map(|(k, i)| v(&["LINDEX", &k, &i])),
        2 => (k(), index(), value()).prop_map(|(k, i, x)| v(&["LSET", &k, &i, &x])),
        1 => (k(), index(), index()).prop_map(|(k, a, b)| v(&["LRANGE", &k, &a, &b])),
        1 => (k(), index(), index()).prop_map(|(k, a, b)| v(&["LTRIM", &k, &a, &b])),
        1 => (k(), -2i64..3, value()).prop_map(|(k, n, x)| v(&["LREM", &k, &n.to_string(), &x])),
        3 => (k(), any::<bool>(), value(), value())
            .prop_map(|(k, before, p, x)| v(&["LINSERT", &k, if before { "BEFORE" } else { "AFTER" }, &p, &x])),
        1 => (k(), value(), prop_oneof![Just("1"), Just("-1"), Just("2")])
            .prop_map(|(k, x, r)| v(&["LPOS", &k, &x, "RANK", r, "COUNT", "0"])),
        2 => (k(), k(), side(), side()).prop_map(|(a, b, f, t)| v(&["LMOVE", &a, &b, f, t])),
        3 => k().prop_map(|k| v(&["DUMP", &k])),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn list_sequences_agree_with_redis(depth in 1u8..3, cmds in proptest::collection::vec(command(), 1..120)) {
        with_flushed_pair(|a, b| {
            for c in [
                v(&["CONFIG", "SET", "list-compress-depth", &depth.to_string()]),
                v(&["CONFIG", "SET", "list-max-listpack-size", "4"]),
                v(&["CONFIG", "SET", "rdbcompression", "no"]),
            ] {
                let args: Vec<&[u8]> = c.iter().map(|s| s.as_bytes()).collect();
                prop_assert_eq!(a.cmd(&args), Value::Simple(b"OK".to_vec()));
                prop_assert_eq!(b.cmd(&args), Value::Simple(b"OK".to_vec()));
            }
            for c in &cmds {
                if c[0] == "DUMP" {
                    let read: [&[u8]; 4] = [b"LRANGE", c[1].as_bytes(), b"0", b"-1"];
                    prop_assert_eq!(a.cmd(&read), b.cmd(&read));
                }
                let args: Vec<&[u8]> = c.iter().map(|s| s.as_bytes()).collect();
                let (want, got) = (a.cmd(&args), b.cmd(&args));
                prop_assert!(want == got, "command {:?}\n  redis:  {:?}\n  corekv: {:?}", c, want, got);
            }
            Ok(())
        })?;
    }
}
