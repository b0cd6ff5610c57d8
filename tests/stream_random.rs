//! Random stream command sequences: corekv (one shard and three) and
//! redis-server must answer every command the same way. IDs are explicit
//! (or derived from explicit ones: `ms-*`) so replies are deterministic;
//! nodes are small (`stream-node-max-entries 3`) so approximate trimming
//! and node splits run along the way; plain keys land on different shards,
//! so XREAD over several shards runs too.

mod common;

use common::{Raw, Redis, Server};
use proptest::prelude::*;
use proxy::resp::Value;

fn key() -> impl Strategy<Value = String> {
    prop_oneof![Just("s1"), Just("s2"), Just("{t}a"), Just("{t}b"), Just("str")].prop_map(String::from)
}

fn id() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0u64..30, 0u64..3).prop_map(|(ms, seq)| format!("{ms}-{seq}")),
        2 => (0u64..30).prop_map(|ms| format!("{ms}-*")),
        1 => (0u64..30).prop_map(|ms| ms.to_string()),
        1 => Just("0-0".to_string()),
        1 => Just("bad".to_string()),
    ]
}

fn bound() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("-".to_string()),
        Just("+".to_string()),
        (0u64..30).prop_map(|ms| ms.to_string()),
        (0u64..30).prop_map(|ms| format!("({ms}-1")),
    ]
}

fn field() -> impl Strategy<Value = String> {
    prop_oneof![Just("f"), Just("g"), Just("12"), Just("")].prop_map(String::from)
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![Just("v"), Just("-5"), Just("123456789012"), Just("1.5"), Just("a-longer-value-with-some-bytes")]
        .prop_map(String::from)
}

fn group() -> impl Strategy<Value = String> {
    prop_oneof![Just("g1"), Just("g2")].prop_map(String::from)
}

fn consumer() -> impl Strategy<Value = String> {
    prop_oneof![Just("alice"), Just("bob")].prop_map(String::from)
}

fn v(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}

fn trim() -> impl Strategy<Value = Vec<String>> {
    (any::<bool>(), prop_oneof![Just(""), Just("="), Just("~")], 0u64..8, 0u64..30).prop_map(|(len, op, n, ms)| {
        let mut c = if len { v(&["MAXLEN"]) } else { v(&["MINID"]) };
        if !op.is_empty() {
            c.push(op.into());
        }
        c.push(if len { n.to_string() } else { ms.to_string() });
        c
    })
}

fn command() -> impl Strategy<Value = Vec<String>> {
    let k = key;
    prop_oneof![
        8 => (k(), id(), proptest::collection::vec((field(), value()), 1..3), proptest::option::of(trim())).prop_map(|(k, id, fields, t)| {
            let mut c = v(&["XADD", &k]);
            if let Some(t) = t {
                c.extend(t);
            }
            c.push(id);
            for (f, x) in fields {
                c.push(f);
                c.push(x);
            }
            c
        }),
        2 => (k(), id(), id()).prop_map(|(k, a, b)| v(&["XDEL", &k, &a, &b])),
        2 => (k(), trim()).prop_map(|(k, t)| {
            let mut c = v(&["XTRIM", &k]);
            c.extend(t);
            c
        }),
        3 => (k(), bound(), bound(), 0u8..4).prop_map(|(k, a, b, n)| v(&["XRANGE", &k, &a, &b, "COUNT", &n.to_string()])),
        1 => (k(), bound(), bound()).prop_map(|(k, a, b)| v(&["XREVRANGE", &k, &a, &b])),
        1 => k().prop_map(|k| v(&["XLEN", &k])),
        2 => (k(), group(), prop_oneof![Just("0"), Just("$"), Just("5-0")]).prop_map(|(k, g, id)| v(&["XGROUP", "CREATE", &k, &g, id, "MKSTREAM"])),
        1 => (k(), group(), prop_oneof![Just("0"), Just("$"), Just("5-0")]).prop_map(|(k, g, id)| v(&["XGROUP", "SETID", &k, &g, id])),
        1 => (k(), group()).prop_map(|(k, g)| v(&["XGROUP", "DESTROY", &k, &g])),
        1 => (k(), group(), consumer()).prop_map(|(k, g, c)| v(&["XGROUP", "DELCONSUMER", &k, &g, &c])),
        4 => (k(), group(), consumer(), 0u8..3, prop_oneof![Just(">"), Just("0")], any::<bool>()).prop_map(|(k, g, c, n, id, noack)| {
            let mut cmd = v(&["XREADGROUP", "GROUP", &g, &c, "COUNT", &n.to_string()]);
            if noack {
                cmd.push("NOACK".into());
            }
            cmd.extend(v(&["STREAMS", &k, id]));
            cmd
        }),
        2 => (k(), group(), id(), id()).prop_map(|(k, g, a, b)| v(&["XACK", &k, &g, &a, &b])),
        2 => (k(), group()).prop_map(|(k, g)| v(&["XPENDING", &k, &g])),
        1 => (k(), group(), consumer(), id()).prop_map(|(k, g, c, id)| v(&["XCLAIM", &k, &g, &c, "0", &id, "TIME", "1000", "JUSTID"])),
        1 => (k(), group(), consumer()).prop_map(|(k, g, c)| v(&["XAUTOCLAIM", &k, &g, &c, "0", "0", "COUNT", "2", "JUSTID"])),
        2 => (k(), k(), bound()).prop_map(|(a, b, id)| {
            let id = if id == "-" || id == "+" { "0".to_string() } else { id.trim_start_matches('(').to_string() };
            v(&["XREAD", "COUNT", "2", "STREAMS", &a, &b, &id, "$"])
        }),
        1 => k().prop_map(|k| v(&["XINFO", "GROUPS", &k])),
        1 => k().prop_map(|k| v(&["XINFO", "STREAM", &k])),
        1 => (k(), id()).prop_map(|(k, id)| v(&["XSETID", &k, &id])),
        1 => k().prop_map(|k| v(&["SET", &k, "x"])),
        1 => k().prop_map(|k| v(&["DEL", &k])),
        1 => k().prop_map(|k| v(&["TYPE", &k])),
    ]
}

fn pair(shards: usize) -> (Raw, Raw) {
    thread_local! {
        static ONE: (Redis, Server) = (Redis::start(), Server::shards(1));
        static THREE: (Redis, Server) = (Redis::start(), Server::shards(3));
    }
    let get = |p: &(Redis, Server)| (p.0.raw(), p.1.raw());
    if shards == 1 {
        ONE.with(get)
    } else {
        THREE.with(get)
    }
}

fn agree(shards: usize, cmds: &[Vec<String>]) -> Result<(), TestCaseError> {
    let (mut a, mut b) = pair(shards);
    for c in ["FLUSHALL", "CONFIG SET stream-node-max-entries 3"] {
        a.cmd_str(c);
        b.cmd_str(c);
    }
    for c in cmds {
        let args: Vec<&[u8]> = c.iter().map(|s| s.as_bytes()).collect();
        let (want, got): (Value, Value) = (a.cmd(&args), b.cmd(&args));
        prop_assert!(
            want == got,
            "{shards} shard(s): {:?} in {:?}\n  redis:  {:?}\n  corekv: {:?}",
            c,
            cmds,
            want,
            got
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]
    #[test]
    fn random_stream_sequences_agree(cmds in proptest::collection::vec(command(), 1..60)) {
        agree(1, &cmds)?;
        agree(3, &cmds)?;
    }
}
