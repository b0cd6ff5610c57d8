//! Operator statistics across cores: SLOWLOG entries (arguments, client,
//! name) against redis-server's, one merged slow log over every core,
//! INFO commandstats / errorstats / stats counted as Redis counts them and
//! summed over cores, LATENCY events and histograms after slow commands.
//! (Replies and errors of SLOWLOG/LATENCY themselves: tests/diff/31.)

mod common;

use common::{Raw, Redis, Server};
use proxy::resp::Value;
use std::collections::BTreeMap;
use std::net::TcpListener;

fn cmd(conn: &mut Raw, args: &[&str]) -> Value {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    conn.cmd(&args)
}

fn text(v: &Value) -> String {
    String::from_utf8_lossy(v.as_bytes().unwrap_or_default()).into_owned()
}

/// A slow-log entry as comparable between servers: its arguments, whether
/// the client is a script ("?:0") or a TCP client, and the client's name.
#[derive(Debug, PartialEq)]
struct Entry {
    id: i64,
    args: Vec<String>,
    script: bool,
    name: String,
}

fn slowlog(conn: &mut Raw) -> Vec<Entry> {
    let Value::Array(entries) = cmd(conn, &["SLOWLOG", "GET", "-1"]) else { panic!("SLOWLOG GET") };
    entries
        .iter()
        .map(|e| {
            let Value::Array(f) = e else { panic!("entry {e:?}") };
            assert_eq!(f.len(), 6);
            let Value::Array(args) = &f[3] else { panic!("args") };
            let Value::Int(id) = f[0] else { panic!("id") };
            assert!(matches!(f[1], Value::Int(t) if t > 1_600_000_000), "unix time {:?}", f[1]);
            assert!(matches!(f[2], Value::Int(d) if d >= 0), "duration {:?}", f[2]);
            let peer = text(&f[4]);
            assert!(peer == "?:0" || peer.starts_with("127.0.0.1:"), "peer {peer}");
            Entry { id, args: args.iter().map(text).collect(), script: peer == "?:0", name: text(&f[5]) }
        })
        .collect()
}

/// The same commands on a connection to each server.
fn both(a: &mut Raw, b: &mut Raw, args: &[&str]) {
    let (x, y) = (cmd(a, args), cmd(b, args));
    assert_eq!(std::mem::discriminant(&x), std::mem::discriminant(&y), "{args:?}: {x:?} vs {y:?}");
}

#[test]
fn slowlog_entries_are_redis_s() {
    let redis = Redis::start();
    let corekv = Server::shards(3);
    let (mut a, mut b) = (redis.raw(), corekv.raw());
    let long = "x".repeat(200);
    let many: Vec<String> = (0..40).map(|i| format!("{{l}}e{i}")).collect();
    let mut rpush = vec!["RPUSH", "{l}list"];
    rpush.extend(many.iter().map(String::as_str));
    let script = "redis.call('set', KEYS[1], ARGV[1]) return redis.call('get', KEYS[1])";
    let steps: Vec<Vec<&str>> = vec![
        vec!["CONFIG", "SET", "slowlog-log-slower-than", "0"],
        vec!["SLOWLOG", "RESET"],
        // Keys on every shard (the connection's and two others).
        vec!["SET", "a", "1"],
        vec!["SET", "b", &long],
        vec!["GET", "c"],
        vec!["MSET", "a", "1", "b", "2", "c", "3"],
        rpush.clone(),
        vec!["AUTH", "secret"],
        vec!["AUTH", "user", "secret"],
        vec!["HELLO", "2", "AUTH", "default", "nopass"],
        vec!["CONFIG", "SET", "masterauth", "hidden"],
        vec!["ACL", "SETUSER", "someone", "on", ">pw"],
        vec!["CLIENT", "SETNAME", "operator"],
        vec!["INCR", "b"],
        vec!["EVAL", script, "1", "{s}k", "v"],
        vec!["MULTI"],
        vec!["SET", "{t}a", "1"],
        vec!["GET", "{t}a"],
        vec!["EXEC"],
        vec!["NOSUCHCOMMAND"],
        vec!["GET"],
    ];
    for s in &steps {
        both(&mut a, &mut b, s);
    }
    let (want, got) = (slowlog(&mut a), slowlog(&mut b));
    let strip = |v: &[Entry]| v.iter().map(|e| (e.args.clone(), e.script, e.name.clone())).collect::<Vec<_>>();
    assert_eq!(strip(&got), strip(&want));
    // Unique ids.
    let mut ids: Vec<i64> = got.iter().map(|e| e.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), got.len());
    for c in [&mut a, &mut b] {
        cmd(c, &["CONFIG", "SET", "masterauth", ""]);
        cmd(c, &["ACL", "DELUSER", "someone"]);
    }
}

fn free_base(n: u16) -> u16 {
    loop {
        let base = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if base < 60000 && (0..n).all(|i| TcpListener::bind(("127.0.0.1", base + i)).is_ok()) {
            return base;
        }
    }
}

/// Each core keeps the entries of its connections; SLOWLOG GET from any
/// core shows them all, newest first, with unique ids; LEN and RESET cover
/// every core.
#[test]
fn one_slow_log_over_every_core() {
    let base = free_base(3);
    let _server =
        Server::start(&["--shards", "3", "--cluster-mode", "per-core", "--cluster-port-base", &base.to_string()]);
    // A connection on each core's own port runs on that core.
    let mut conns: Vec<Raw> = (0..3).map(|i| Raw::connect(base + i)).collect();
    cmd(&mut conns[0], &["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    cmd(&mut conns[0], &["SLOWLOG", "RESET"]);
    for i in 0..9 {
        let word = format!("w{i}");
        assert_eq!(text(&cmd(&mut conns[i % 3], &["ECHO", &word])), word);
    }
    let entries = slowlog(&mut conns[1]);
    let echoes: Vec<String> = entries.iter().filter(|e| e.args[0] == "ECHO").map(|e| e.args[1].clone()).collect();
    assert_eq!(echoes, (0..9).rev().map(|i| format!("w{i}")).collect::<Vec<_>>());
    // The ids tell the cores apart (interleaved sequences).
    let cores: std::collections::HashSet<i64> =
        entries.iter().filter(|e| e.args[0] == "ECHO").map(|e| e.id % 3).collect();
    assert_eq!(cores.len(), 3);
    let mut ids: Vec<i64> = entries.iter().map(|e| e.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), entries.len());
    // RESET, then the RESET itself (core 2) and the two ECHOs.
    cmd(&mut conns[2], &["SLOWLOG", "RESET"]);
    cmd(&mut conns[0], &["ECHO", "x"]);
    cmd(&mut conns[1], &["ECHO", "y"]);
    assert_eq!(cmd(&mut conns[2], &["SLOWLOG", "LEN"]), Value::Int(3));
    // slowlog-max-len bounds the merged log.
    cmd(&mut conns[0], &["CONFIG", "SET", "slowlog-max-len", "2"]);
    assert_eq!(cmd(&mut conns[1], &["SLOWLOG", "LEN"]), Value::Int(2));
    let args: Vec<Vec<String>> = slowlog(&mut conns[2]).into_iter().map(|e| e.args).collect();
    assert_eq!(
        args,
        vec![
            vec!["SLOWLOG".to_string(), "LEN".into()],
            vec!["CONFIG".into(), "SET".into(), "slowlog-max-len".into(), "2".into()]
        ]
    );
}

/// INFO's `name:field=value,...` lines of one section, by name.
fn section(conn: &mut Raw, name: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let info = text(&cmd(conn, &["INFO", name]));
    info.lines()
        .filter(|l| !l.starts_with('#') && l.contains(':'))
        .map(|l| {
            let (k, v) = l.trim_end().split_once(':').unwrap();
            let fields =
                v.split(',').filter_map(|f| f.split_once('=')).map(|(a, b)| (a.to_string(), b.to_string())).collect();
            (k.to_string(), fields)
        })
        .collect()
}

fn stat(conn: &mut Raw, field: &str) -> i64 {
    let info = text(&cmd(conn, &["INFO", "stats"]));
    let line = info.lines().find_map(|l| l.strip_prefix(&format!("{field}:"))).expect(field);
    line.trim().parse().unwrap()
}

#[test]
fn command_and_error_stats_are_counted_as_redis_counts_them() {
    let redis = Redis::start();
    let corekv = Server::shards(3);
    // Several connections: they land on several cores.
    let mut pairs: Vec<(Raw, Raw)> = (0..4).map(|_| (redis.raw(), corekv.raw())).collect();
    // Groups of commands, each group on one connection (MULTI ... EXEC).
    let groups: Vec<Vec<Vec<&str>>> = vec![
        vec![vec!["CONFIG", "RESETSTAT"], vec!["SET", "a", "1"], vec!["SET", "b", "2"], vec!["GET", "c"]],
        vec![vec!["MSET", "a", "1", "b", "2", "c", "3"], vec!["MGET", "a", "b", "c"], vec!["DEL", "a", "b", "zz"]],
        vec![vec!["LPUSH", "c", "x"], vec!["INCR", "c"], vec!["GET"], vec!["NOSUCH", "x"]],
        vec![vec!["CONFIG", "NOSUCH"], vec!["CONFIG"], vec!["CONFIG", "GET"], vec!["CLIENT", "SETNAME", "x y"]],
        vec![vec!["MULTI"], vec!["SET", "{t}x", "1"], vec!["INCR", "{t}x"], vec!["LPOP", "{t}x"], vec!["EXEC"]],
        vec![vec!["MULTI"], vec!["GET"], vec!["EXEC"], vec!["EXEC"]],
        vec![
            vec!["EVAL", "return redis.call('incr', KEYS[1])", "1", "{s}str"],
            vec!["SET", "{s}str", "text"],
            vec!["EVAL", "return redis.call('incr', KEYS[1])", "1", "{s}str"],
            vec!["EVAL", "return redis.pcall('incr', KEYS[1])", "1", "{s}str"],
        ],
        vec![
            vec!["EVAL", "return redis.call('nosuch')", "0"],
            vec!["EVAL", "error('x')", "0"],
            vec!["EVAL", "return redis.error_reply('MYERR custom')", "0"],
            vec!["EVAL", "return 1", "x"],
            vec!["EVALSHA", "0000000000000000000000000000000000000000", "0"],
        ],
        vec![vec!["XADD", "s", "0-0", "f", "v"], vec!["SUBSCRIBE"], vec!["PING"]],
    ];
    for (i, group) in groups.iter().enumerate() {
        let (a, b) = &mut pairs[i % 4];
        for s in group {
            both(a, b, s);
        }
    }
    let (a, b) = &mut pairs[0];
    let strip = |m: BTreeMap<String, BTreeMap<String, String>>| {
        m.into_iter()
            .map(|(k, mut f)| {
                f.remove("usec");
                f.remove("usec_per_call");
                (k, f)
            })
            .collect::<BTreeMap<_, _>>()
    };
    let want = strip(section(a, "commandstats"));
    assert!(want.contains_key("cmdstat_eval") && want.contains_key("cmdstat_config"), "{want:?}");
    assert_eq!(strip(section(b, "commandstats")), want);
    assert_eq!(section(b, "errorstats"), section(a, "errorstats"));
    for field in ["total_error_replies", "unexpected_error_replies", "total_commands_processed"] {
        assert_eq!(stat(b, field), stat(a, field), "{field}");
    }
    // usec_per_call is usec / calls.
    let stats = section(b, "commandstats");
    let set = &stats["cmdstat_set"];
    let (calls, usec): (f64, f64) = (set["calls"].parse().unwrap(), set["usec"].parse().unwrap());
    assert_eq!(set["usec_per_call"], format!("{:.2}", usec / calls));
    // CONFIG RESETSTAT clears them all.
    for c in [&mut *a, &mut *b] {
        cmd(c, &["CONFIG", "RESETSTAT"]);
    }
    assert_eq!(section(b, "errorstats"), BTreeMap::new());
    assert_eq!(stat(b, "total_error_replies"), 0);
    // INFO: errorstats by default, commandstats and latencystats with all.
    for c in [&mut *a, &mut *b] {
        let default = text(&cmd(c, &["INFO"]));
        assert!(default.contains("# Errorstats\r\n") && !default.contains("# Commandstats"));
        let all = text(&cmd(c, &["INFO", "all"]));
        assert!(all.contains("# Commandstats\r\n") && all.contains("# Latencystats\r\n"));
        let everything = text(&cmd(c, &["INFO", "everything"]));
        assert!(everything.contains("# Commandstats\r\n") && everything.contains("# Latencystats\r\n"));
    }
}

/// The busy-wait script: runs about `ms` milliseconds.
fn busy(ms: u64) -> String {
    format!(
        "local s = redis.call('time') repeat local n = redis.call('time') until (n[1] - s[1]) * 1000000 + (n[2] - s[2]) >= {}",
        ms * 1000
    )
}

#[test]
fn latency_events_and_histograms_over_cores() {
    let server = Server::shards(3);
    let mut c = server.raw();
    cmd(&mut c, &["CONFIG", "SET", "latency-monitor-threshold", "1"]);
    assert_eq!(cmd(&mut c, &["LATENCY", "LATEST"]), Value::Array(Vec::new()));
    // A script holding every shard, then one on its key's core (another
    // core for some of these keys), each a "command" event of ~5 ms.
    cmd(&mut c, &["EVAL", &busy(5), "0"]);
    for key in ["a", "b", "c"] {
        cmd(&mut c, &["EVAL", &busy(5), "1", key]);
    }
    let Value::Array(latest) = cmd(&mut c, &["LATENCY", "LATEST"]) else { panic!("LATEST") };
    let command = latest
        .iter()
        .find_map(|e| match e {
            Value::Array(f) if text(&f[0]) == "command" => Some(f.clone()),
            _ => None,
        })
        .expect("a command event");
    assert!(matches!(command[2], Value::Int(ms) if ms >= 5), "{command:?}");
    assert!(matches!(command[3], Value::Int(ms) if ms >= 5), "{command:?}");
    let Value::Array(history) = cmd(&mut c, &["LATENCY", "HISTORY", "command"]) else { panic!("HISTORY") };
    assert!(!history.is_empty() && history.len() <= 4);
    let graph = text(&cmd(&mut c, &["LATENCY", "GRAPH", "command"]));
    assert!(graph.starts_with("command - high "), "{graph}");
    let doctor = text(&cmd(&mut c, &["LATENCY", "DOCTOR"]));
    // (A preempted fast command may show up too on a loaded machine.)
    assert!(doctor.contains(". command: ") && doctor.contains("Check your Slow Log"), "{doctor}");
    assert!(matches!(cmd(&mut c, &["LATENCY", "RESET", "command"]), Value::Int(1)));
    cmd(&mut c, &["CONFIG", "SET", "latency-monitor-threshold", "0"]);
    // Histograms: calls of keys on every core, summed.
    cmd(&mut c, &["CONFIG", "RESETSTAT"]);
    for i in 0..30 {
        cmd(&mut c, &["SET", &format!("k{i}"), "v"]);
    }
    let Value::Array(h) = cmd(&mut c, &["LATENCY", "HISTOGRAM", "set"]) else { panic!("HISTOGRAM") };
    assert_eq!(text(&h[0]), "set");
    let Value::Array(fields) = &h[1] else { panic!("fields") };
    assert_eq!(text(&fields[0]), "calls");
    assert_eq!(fields[1], Value::Int(30));
    let Value::Array(buckets) = &fields[3] else { panic!("buckets") };
    assert_eq!(buckets.last(), Some(&Value::Int(30)), "cumulative: {buckets:?}");
    let latency = section(&mut c, "latencystats");
    let set = &latency["latency_percentiles_usec_set"];
    assert_eq!(set.keys().cloned().collect::<Vec<_>>(), vec!["p50", "p99", "p99.9"]);
    let commands = section(&mut c, "commandstats");
    assert_eq!(commands["cmdstat_set"]["calls"], "30");
}
