//! Differential tests: the command scripts in tests/diff/ run against a real
//! redis-server and against corekv (one shard, and three shards so that
//! cross-shard paths run), and every reply must be the same.
//!
//! Script lines are commands in redis-cli quoting. A line may start with a
//! directive:
//!   !sort CMD        compare array replies as sorted multisets
//!   !any CMD         compare only the reply's kind (nondeterministic values)
//!   !near N CMD      integers may differ by at most N (timing)
//!   !scan CMD        run a SCAN-family command to completion, compare the
//!                    sorted set of all elements returned
//!   !page CMD        one SCAN-family call: the cursor exactly, the
//!                    elements as a sorted multiset
//!   !field NAME CMD  only the `NAME:value` line of an INFO-like reply
//!   !sleep MS        wait (both servers at once)
//!   !fresh           start a new connection (resets SELECT, HELLO, AUTH)
//!   !args ARGS       (first line only) run this script against its own
//!                    pair of servers started with these arguments (settings
//!                    that cannot change at run time: enable-debug-command),
//!                    each writing its files into a temporary folder
//!   !noreply CMD     send without reading: no reply is expected (CLIENT
//!                    REPLY OFF/SKIP); a stray one shows in the next reply

mod common;

use common::{with_flushed_pair, Raw, Redis, Server, TempDir};
use proxy::resp::Value;
use shard::config::split_args;

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Simple(_) => "simple",
        Value::Error(_) => "error",
        Value::Int(_) => "int",
        Value::Bulk(_) => "bulk",
        Value::Nil | Value::Null => "null",
        Value::Array(_) => "array",
        Value::NilArray => "nil-array",
        Value::Map(_) => "map",
        Value::Set(_) => "set",
        Value::Double(_) => "double",
        Value::Bool(_) => "bool",
        Value::Verbatim(_) => "verbatim",
    }
}

/// A readable rendering of a reply for failure messages.
fn show(v: &Value) -> String {
    let text = |b: &[u8]| format!("{:?}", String::from_utf8_lossy(b));
    match v {
        Value::Simple(b) => format!("+{}", text(b)),
        Value::Error(b) => format!("-{}", text(b)),
        Value::Bulk(b) => text(b),
        Value::Verbatim(b) => format!("={}", text(b)),
        Value::Double(b) => format!(",{}", text(b)),
        Value::Array(items) | Value::Set(items) => {
            format!("[{}]", items.iter().map(show).collect::<Vec<_>>().join(", "))
        }
        Value::Map(pairs) => format!(
            "{{{}}}",
            pairs.iter().map(|(k, v)| format!("{}: {}", show(k), show(v))).collect::<Vec<_>>().join(", ")
        ),
        other => format!("{other:?}"),
    }
}

fn sorted(v: Value) -> Value {
    match v {
        Value::Array(mut items) | Value::Set(mut items) => {
            items.sort_by_key(|i| format!("{i:?}"));
            Value::Array(items)
        }
        other => other,
    }
}

/// Runs a SCAN-family command from cursor 0 until it returns 0; all
/// elements, sorted.
fn scan_all(conn: &mut Raw, words: &[Vec<u8>]) -> Value {
    let cursor_at = if words[0].eq_ignore_ascii_case(b"scan") { 1 } else { 2 };
    let mut cursor = b"0".to_vec();
    let mut all = Vec::new();
    for _ in 0..100_000 {
        let mut args: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
        args.insert(cursor_at, &cursor);
        match conn.cmd(&args) {
            Value::Array(mut parts) if parts.len() == 2 => {
                if let Value::Array(items) = parts.pop().unwrap() {
                    all.extend(items);
                }
                cursor = parts.pop().unwrap().as_bytes().unwrap().to_vec();
                if cursor == b"0" {
                    let mut all = sorted(Value::Array(all));
                    if let Value::Array(items) = &mut all {
                        items.dedup();
                    }
                    return all;
                }
            }
            other => return other,
        }
    }
    panic!("SCAN did not finish")
}

enum Directive {
    Exact,
    Sort,
    Any,
    Near(i64),
    Scan,
    Page,
    Field(String),
}

/// A SCAN-family reply with its elements sorted (`!page`).
fn page(v: Value) -> Value {
    match v {
        Value::Array(mut parts) if parts.len() == 2 => {
            let elements = sorted(parts.pop().unwrap());
            parts.push(elements);
            Value::Array(parts)
        }
        other => other,
    }
}

/// The `name:value` line of an INFO-like bulk reply (`!field`).
fn field(v: &Value, name: &str) -> Value {
    let Some(text) = v.as_bytes() else { return v.clone() };
    let prefix = format!("{name}:");
    let line = String::from_utf8_lossy(text).lines().find(|l| l.starts_with(&prefix)).map(str::to_string);
    line.map_or(Value::Nil, |l| Value::Bulk(l.into_bytes()))
}

fn run_script(name: &str, text: &str, redis: &Redis, corekv: &Server, shards: usize) {
    let mut a = redis.raw();
    let mut b = corekv.raw();
    a.cmd_str("FLUSHALL");
    b.cmd_str("FLUSHALL");
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (directive, rest) = match line.split_once(' ') {
            Some(("!args", _)) => continue,
            Some(("!sort", r)) => (Directive::Sort, r),
            Some(("!any", r)) => (Directive::Any, r),
            Some(("!scan", r)) => (Directive::Scan, r),
            Some(("!page", r)) => (Directive::Page, r),
            Some(("!field", r)) => {
                let (name, cmd) = r.split_once(' ').expect("!field NAME CMD");
                (Directive::Field(name.to_string()), cmd)
            }
            Some(("!near", r)) => {
                let (n, cmd) = r.split_once(' ').expect("!near N CMD");
                (Directive::Near(n.parse().expect("!near N")), cmd)
            }
            Some(("!sleep", ms)) => {
                std::thread::sleep(std::time::Duration::from_millis(ms.parse().expect("!sleep MS")));
                continue;
            }
            Some(("!noreply", cmd)) => {
                let words = split_args(cmd.as_bytes()).unwrap_or_else(|| panic!("{name}:{}: bad quoting", n + 1));
                let args: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
                a.send(&Raw::encode(&args));
                b.send(&Raw::encode(&args));
                continue;
            }
            _ if line == "!fresh" => {
                a = redis.raw();
                b = corekv.raw();
                continue;
            }
            _ => (Directive::Exact, line),
        };
        let words = split_args(rest.as_bytes()).unwrap_or_else(|| panic!("{name}:{}: bad quoting", n + 1));
        let args: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
        let (want, got) = match directive {
            Directive::Scan => (scan_all(&mut a, &words), scan_all(&mut b, &words)),
            _ => (a.cmd(&args), b.cmd(&args)),
        };
        let same = match directive {
            Directive::Exact | Directive::Scan => want == got,
            Directive::Page => page(want.clone()) == page(got.clone()),
            Directive::Field(name) => field(&want, &name) == field(&got, &name),
            Directive::Sort => sorted(want.clone()) == sorted(got.clone()),
            Directive::Any => kind(&want) == kind(&got),
            Directive::Near(tolerance) => match (&want, &got) {
                (Value::Int(x), Value::Int(y)) => (x - y).abs() <= tolerance,
                _ => want == got,
            },
        };
        assert!(
            same,
            "{name}:{} ({shards} shard(s)): {rest}\n  redis:  {}\n  corekv: {}",
            n + 1,
            show(&want),
            show(&got)
        );
    }
}

/// The arguments of a script's `!args` line (its first command line).
fn script_args(text: &str) -> Option<&str> {
    let first = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#'))?;
    first.strip_prefix("!args ")
}

fn run_all(shards: usize) {
    let redis = Redis::start();
    let corekv = Server::shards(shards);
    let shards_arg = shards.to_string();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/diff");
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty());
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        // DIFF_SCRIPT=acl runs only the scripts whose names contain it.
        if std::env::var("DIFF_SCRIPT").is_ok_and(|only| !name.contains(&only)) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        match script_args(&text) {
            Some(args) => {
                // Each server of the pair writes its files (DEBUG RELOAD's
                // dump) into a folder of its own.
                let dirs =
                    [TempDir::new(&format!("diff-{shards}-redis")), TempDir::new(&format!("diff-{shards}-corekv"))];
                let mut redis_args = vec!["--dir", dirs[0].path()];
                let mut corekv_args = vec!["--shards", &*shards_arg, "--dir", dirs[1].path()];
                redis_args.extend(args.split_whitespace());
                corekv_args.extend(args.split_whitespace());
                let (redis, corekv) = (Redis::start_with(&redis_args), Server::start(&corekv_args));
                run_script(&name, &text, &redis, &corekv, shards);
            }
            None => run_script(&name, &text, &redis, &corekv, shards),
        }
    }
}

#[test]
fn scripts_agree_with_redis_on_one_shard() {
    run_all(1);
}

#[test]
fn scripts_agree_with_redis_on_three_shards() {
    run_all(3);
}

mod random {
    //! Random command sequences over a small key space: corekv (three
    //! shards) and redis-server must answer every command the same way.
    use super::*;
    use proptest::prelude::*;

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![Just("a"), Just("b"), Just("c"), Just("{t}x"), Just("{t}y"), Just("n")].prop_map(String::from)
    }

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("1".to_string()),
            Just("-7".to_string()),
            Just("1.5".to_string()),
            "[a-z]{0,6}",
            Just("9223372036854775807".to_string())
        ]
    }

    fn command() -> impl Strategy<Value = Vec<String>> {
        let k = key;
        prop_oneof![
            (k(), value()).prop_map(|(k, v)| vec!["SET".into(), k, v]),
            (k(), value(), prop_oneof![Just("NX"), Just("XX"), Just("GET"), Just("KEEPTTL")])
                .prop_map(|(k, v, o)| vec!["SET".into(), k, v, o.into()]),
            k().prop_map(|k| vec!["GET".into(), k]),
            (k(), k(), k()).prop_map(|(a, b, c)| vec!["MGET".into(), a, b, c]),
            (k(), value(), k(), value()).prop_map(|(a, x, b, y)| vec!["MSET".into(), a, x, b, y]),
            (k(), value(), k(), value()).prop_map(|(a, x, b, y)| vec!["MSETNX".into(), a, x, b, y]),
            (k(), k()).prop_map(|(a, b)| vec!["DEL".into(), a, b]),
            (k(), k()).prop_map(|(a, b)| vec!["EXISTS".into(), a, b]),
            k().prop_map(|k| vec!["INCR".into(), k]),
            (k(), -5i64..5).prop_map(|(k, n)| vec!["DECRBY".into(), k, n.to_string()]),
            (k(), value()).prop_map(|(k, v)| vec!["INCRBYFLOAT".into(), k, v]),
            (k(), value()).prop_map(|(k, v)| vec!["APPEND".into(), k, v]),
            k().prop_map(|k| vec!["STRLEN".into(), k]),
            (k(), -3i64..8, -3i64..8).prop_map(|(k, s, e)| vec!["GETRANGE".into(), k, s.to_string(), e.to_string()]),
            (k(), 0i64..6, value()).prop_map(|(k, o, v)| vec!["SETRANGE".into(), k, o.to_string(), v]),
            (k(), k()).prop_map(|(a, b)| vec!["RENAME".into(), a, b]),
            (k(), k()).prop_map(|(a, b)| vec!["RENAMENX".into(), a, b]),
            (k(), k()).prop_map(|(a, b)| vec!["COPY".into(), a, b]),
            k().prop_map(|k| vec!["GETDEL".into(), k]),
            k().prop_map(|k| vec!["TYPE".into(), k]),
            k().prop_map(|k| vec!["OBJECT".into(), "ENCODING".into(), k]),
            (k(), 100i64..1000).prop_map(|(k, s)| vec!["EXPIRE".into(), k, s.to_string()]),
            k().prop_map(|k| vec!["TTL".into(), k]),
            k().prop_map(|k| vec!["PERSIST".into(), k]),
            Just(vec!["DBSIZE".to_string()]),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        #[test]
        fn random_sequences_agree(cmds in proptest::collection::vec(command(), 1..40)) {
            with_flushed_pair(|a, b| {
                for c in &cmds {
                    let args: Vec<&[u8]> = c.iter().map(|s| s.as_bytes()).collect();
                    let (want, got) = (a.cmd(&args), b.cmd(&args));
                    prop_assert!(want == got, "command {:?} in {:?}\n  redis:  {}\n  corekv: {}", c, cmds, show(&want), show(&got));
                }
                Ok(())
            })?;
        }
    }
}
