//! MEMORY and DEBUG end to end, for what a differential script cannot say:
//! the default refusal of DEBUG and MODULE next to redis-server's, memory
//! going back to the OS after MEMORY PURGE, DEBUG RELOAD keeping every key
//! over three shards, DEBUG SLEEP holding its core, active expiry switched
//! off and on, MEMORY STATS and MALLOC-STATS on real figures, and DEBUG
//! PROTOCOL's RESP3 types byte for byte (the test client does not parse
//! attributes, pushes or big numbers).

mod common;

use common::{Raw, Redis, Server, TempDir};
use proxy::resp::Value;
use std::io::Read;
use std::time::{Duration, Instant};

const DEBUG_ON: &[&str] = &["--enable-debug-command", "yes"];

fn text(v: &Value) -> String {
    match v {
        Value::Bulk(b) | Value::Simple(b) | Value::Error(b) | Value::Verbatim(b) => {
            String::from_utf8_lossy(b).into_owned()
        }
        other => format!("{other:?}"),
    }
}

fn int(v: Value) -> i64 {
    match v {
        Value::Int(n) => n,
        other => panic!("not an integer: {other:?}"),
    }
}

fn info_field(raw: &mut Raw, section: &str, field: &str) -> u64 {
    let info = text(&raw.cmd_str(&format!("INFO {section}")));
    let line = info.lines().find_map(|l| l.strip_prefix(&format!("{field}:"))).unwrap_or_else(|| panic!("{field}"));
    line.trim().parse().unwrap()
}

/// Waits (bounded) for a log line containing `needle`: lines arrive from
/// the server's stdout on a reader thread.
fn logged(server: &Server, needle: &str) -> bool {
    let give_up = Instant::now() + Duration::from_secs(10);
    while Instant::now() < give_up {
        if server.log.lock().unwrap().iter().any(|l| l.contains(needle)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[test]
fn protected_commands_are_refused_by_default_as_redis_refuses_them() {
    let redis = Redis::start();
    let corekv = Server::shards(2);
    let (mut a, mut b) = (redis.raw(), corekv.raw());
    for line in ["DEBUG SLEEP 0", "DEBUG HELP", "MODULE LOAD /x.so", "MODULE UNLOAD x", "MODULE LIST", "MODULE HELP"] {
        let (want, got) = (a.cmd_str(line), b.cmd_str(line));
        assert_eq!(want, got, "{line}");
    }
    // Before AUTH too, as Redis checks it first.
    let locked = Server::start(&["--requirepass", "pw"]);
    let mut c = locked.raw();
    assert!(text(&c.cmd_str("DEBUG DIGEST")).starts_with("ERR DEBUG command not allowed"));
    // `local`: a client on the loopback interface may.
    let local = Server::start(&["--enable-debug-command", "local", "--enable-module-command", "local"]);
    let mut d = local.raw();
    assert_eq!(d.cmd_str("DEBUG SLEEP 0"), Value::Simple(b"OK".to_vec()));
    assert!(text(&d.cmd_str("MODULE LOAD /x.so")).starts_with("ERR Error loading the extension"));
    assert!(logged(&local, "Module /x.so failed to load"));
    // The setting is fixed at start, as Redis's.
    assert!(text(&d.cmd_str("CONFIG SET enable-debug-command yes")).contains("can't set immutable config"));
    assert_eq!(
        d.cmd_str("CONFIG GET enable-debug-command"),
        Value::Array(vec![Value::Bulk(b"enable-debug-command".to_vec()), Value::Bulk(b"local".to_vec())])
    );
}

#[test]
fn memory_purge_gives_freed_pages_back() {
    let server = Server::start(&["--shards", "2", "--enable-debug-command", "yes"]);
    let mut c = server.raw();
    c.cmd_str("DEBUG POPULATE 200000 key 400");
    let full = info_field(&mut c, "memory", "used_memory_rss");
    let used_full = info_field(&mut c, "memory", "used_memory");
    assert!(used_full > 80 << 20, "used {used_full}");
    c.cmd_str("FLUSHALL");
    assert_eq!(c.cmd_str("MEMORY PURGE"), Value::Simple(b"OK".to_vec()));
    let purged = info_field(&mut c, "memory", "used_memory_rss");
    // The values' 80+ MB are gone from the process, not just from the count.
    assert!(purged + (60 << 20) < full, "RSS {full} -> {purged}");
}

#[test]
fn debug_reload_keeps_every_key_over_three_shards() {
    let dir = TempDir::new("memory-debug-reload");
    let server = Server::start(&["--shards", "3", "--dir", dir.path(), "--enable-debug-command", "yes"]);
    let mut c = server.raw();
    c.cmd_str("DEBUG POPULATE 5000");
    for i in 0..200 {
        c.cmd_str(&format!("HSET h{i} a {i} b x"));
        c.cmd_str(&format!("RPUSH l{i} {i} y z"));
        c.cmd_str(&format!("ZADD z{i} {i} m"));
        c.cmd_str(&format!("SET t{i} v EX 10000"));
    }
    c.cmd_str("SELECT 5");
    c.cmd_str("SET in5 x");
    c.cmd_str("SELECT 0");
    let digest = c.cmd_str("DEBUG DIGEST");
    let keys = int(c.cmd_str("DBSIZE"));
    assert_eq!(keys, 5800);
    assert_eq!(c.cmd_str("DEBUG RELOAD"), Value::Simple(b"OK".to_vec()));
    assert_eq!(int(c.cmd_str("DBSIZE")), keys);
    assert_eq!(c.cmd_str("DEBUG DIGEST"), digest);
    assert!(int(c.cmd_str("TTL t7")) > 9000);
    assert!(dir.0.join("dump.rdb").exists());
    // NOSAVE: back to the file; NOFLUSH MERGE: the file over what is there.
    c.cmd_str("DEL key:1 key:2");
    c.cmd_str("SET new 1");
    assert_eq!(c.cmd_str("DEBUG RELOAD NOSAVE"), Value::Simple(b"OK".to_vec()));
    assert_eq!(c.cmd_str("DEBUG DIGEST"), digest);
    c.cmd_str("SET new 1");
    c.cmd_str("DEL key:3");
    assert_eq!(c.cmd_str("DEBUG RELOAD NOSAVE NOFLUSH MERGE"), Value::Simple(b"OK".to_vec()));
    assert_eq!(int(c.cmd_str("EXISTS new key:3")), 2);
    // NOFLUSH without MERGE meets its own keys: refused (Redis stops).
    assert!(text(&c.cmd_str("DEBUG RELOAD NOSAVE NOFLUSH")).contains("Error trying to load the RDB dump"));
    assert!(logged(&server, "duplicated key"));
    // No file: the dataset is emptied and the error is Redis's.
    std::fs::remove_file(dir.0.join("dump.rdb")).unwrap();
    assert!(text(&c.cmd_str("DEBUG RELOAD NOSAVE")).contains("Error trying to load the RDB dump"));
    assert_eq!(int(c.cmd_str("DBSIZE")), 0);
}

#[test]
fn debug_sleep_holds_the_connections_core() {
    // One shard: every connection is on the sleeping core.
    let server = Server::start(&["--shards", "1", "--enable-debug-command", "yes"]);
    let mut sleeper = server.raw();
    let mut other = server.raw();
    assert_eq!(other.cmd_str("PING"), Value::Simple(b"PONG".to_vec()));
    sleeper.send(&Raw::encode(&[b"DEBUG", b"SLEEP", b"1"]));
    // Let the sleep begin before the PING is sent.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(other.cmd_str("PING"), Value::Simple(b"PONG".to_vec()));
    // The PING was served only once the core woke: by then the sleeper's
    // reply had been written.
    sleeper.stream.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 16];
    let n = sleeper.stream.read(&mut buf).expect("the sleeper's reply came first");
    assert_eq!(&buf[..n], b"+OK\r\n");
}

#[test]
fn active_expiry_can_be_switched_off_and_on() {
    let server = Server::start(&["--shards", "3", "--enable-debug-command", "yes"]);
    let mut c = server.raw();
    assert_eq!(c.cmd_str("DEBUG SET-ACTIVE-EXPIRE 0"), Value::Simple(b"OK".to_vec()));
    for i in 0..30 {
        c.cmd_str(&format!("SET k{i} v PX 1"));
    }
    // Several cron ticks (hz 10) pass without removing them.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(int(c.cmd_str("DBSIZE")), 30);
    for i in 0..10 {
        assert_eq!(c.cmd_str(&format!("GET k{i}")), Value::Nil);
    }
    assert_eq!(int(c.cmd_str("DBSIZE")), 20);
    assert_eq!(c.cmd_str("DEBUG SET-ACTIVE-EXPIRE 1"), Value::Simple(b"OK".to_vec()));
    let give_up = Instant::now() + Duration::from_secs(20);
    while int(c.cmd_str("DBSIZE")) > 0 {
        assert!(Instant::now() < give_up, "active expiry never removed the keys");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn memory_stats_and_malloc_stats_report_real_figures() {
    let server = Server::start(&["--shards", "2", "--enable-debug-command", "yes"]);
    let mut c = server.raw();
    c.cmd_str("DEBUG POPULATE 1000");
    c.cmd_str("SELECT 2");
    c.cmd_str("SET x y");
    let Value::Array(items) = c.cmd_str("MEMORY STATS") else { panic!("MEMORY STATS") };
    let field = |name: &str| -> &Value {
        let at = items.iter().position(|v| text(v) == name).unwrap_or_else(|| panic!("{name}"));
        &items[at + 1]
    };
    assert_eq!(field("keys.count"), &Value::Int(1001));
    let Value::Int(total) = *field("total.allocated") else { panic!() };
    let Value::Int(startup) = *field("startup.allocated") else { panic!() };
    let Value::Int(dataset) = *field("dataset.bytes") else { panic!() };
    assert!(total > startup && startup > 0 && dataset > 0, "{total} {startup} {dataset}");
    let Value::Array(db0) = field("db.0") else { panic!("db.0") };
    assert_eq!(text(&db0[0]), "overhead.hashtable.main");
    assert!(matches!(db0[1], Value::Int(n) if n > 1000 * 48));
    assert!(matches!(field("db.2"), Value::Array(_)));
    // MEMORY USAGE grows with the value.
    c.cmd_str("SET small x");
    c.cmd(&[b"SET", b"large", &[b'x'; 10_000]]);
    let (small, large) = (int(c.cmd_str("MEMORY USAGE small")), int(c.cmd_str("MEMORY USAGE large")));
    assert!(small > 0 && large >= small + 10_000, "{small} {large}");
    let stats = text(&c.cmd_str("MEMORY MALLOC-STATS"));
    assert!(stats.contains("### shard 0") && stats.contains("### shard 1") && stats.contains("### process"), "{stats}");
    assert!(stats.contains("rss"), "mimalloc's own text: {stats}");
    let doctor = text(&c.cmd_str("MEMORY DOCTOR"));
    assert!(doctor.starts_with("Hi Sam") || doctor.starts_with("Sam, I detected"), "{doctor}");
}

/// The raw bytes of one reply to `line` sent after HELLO 3.
fn resp3_bytes(port: u16, line: &[&[u8]]) -> Vec<u8> {
    let mut c = Raw::connect(port);
    c.cmd_str("HELLO 3");
    c.send(&Raw::encode(line));
    c.send(&Raw::encode(&[b"PING", b"end-of-reply"]));
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while !out.ends_with(b"$12\r\nend-of-reply\r\n") {
        let n = c.stream.read(&mut buf).unwrap();
        assert!(n > 0, "closed");
        out.extend_from_slice(&buf[..n]);
    }
    out.truncate(out.len() - b"$12\r\nend-of-reply\r\n".len());
    out
}

#[test]
fn debug_protocol_sends_every_resp3_type_as_redis() {
    let redis = Redis::start_with(DEBUG_ON);
    let corekv = Server::start(&["--shards", "2", "--enable-debug-command", "yes"]);
    for t in ["attrib", "push", "bignum", "map", "set", "double", "null", "true", "verbatim"] {
        let line: &[&[u8]] = &[b"DEBUG", b"PROTOCOL", t.as_bytes()];
        let want = resp3_bytes(redis.port, line);
        assert_eq!(String::from_utf8_lossy(&resp3_bytes(corekv.port, line)), String::from_utf8_lossy(&want), "{t}");
    }
}

#[test]
fn change_repl_id_gives_the_server_a_new_id() {
    let server = Server::start(&["--shards", "2", "--enable-debug-command", "yes"]);
    let mut c = server.raw();
    let field = |c: &mut Raw, name: &str| {
        let info = text(&c.cmd_str("INFO replication"));
        info.lines().find_map(|l| l.strip_prefix(&format!("{name}:"))).unwrap().trim().to_string()
    };
    let before = field(&mut c, "master_replid");
    assert_eq!(c.cmd_str("DEBUG CHANGE-REPL-ID"), Value::Simple(b"OK".to_vec()));
    let after = field(&mut c, "master_replid");
    assert_ne!(before, after);
    assert_eq!(after.len(), 40);
    assert_eq!(field(&mut c, "master_replid2"), "0".repeat(40));
}

/// The `name:value` fields of a DEBUG OBJECT line.
fn object_fields(line: &str) -> Vec<(String, String)> {
    line.split(' ').filter_map(|f| f.split_once(':')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn debug_object_reads_as_redis_with_the_same_rdb_length() {
    let redis = Redis::start_with(DEBUG_ON);
    let corekv = Server::start(&["--shards", "3", "--enable-debug-command", "yes"]);
    let setup = [
        "SET str hello",
        "SET num 7",
        "SET big 12345678901234567890123",
        "RPUSH list a b c 1 2 3",
        "HSET hash f v g w",
        "SADD ints 1 2 3",
        "SADD strs a b c",
        "ZADD zs 1 a 2 b",
    ];
    let (mut a, mut b) = (redis.raw(), corekv.raw());
    for line in setup {
        assert_eq!(a.cmd_str(line), b.cmd_str(line), "{line}");
    }
    for key in ["str", "num", "big", "list", "hash", "ints", "strs", "zs"] {
        let line = format!("DEBUG OBJECT {key}");
        let (want, got) = (text(&a.cmd_str(&line)), text(&b.cmd_str(&line)));
        let (want, got) = (object_fields(&want), object_fields(&got));
        let names = |f: &[(String, String)]| f.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        assert_eq!(names(&want), names(&got), "{key}");
        for name in ["refcount", "encoding", "serializedlength", "ql_nodes", "ql_listpack_max", "ql_compressed"] {
            let pick = |f: &[(String, String)]| f.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
            assert_eq!(pick(&want), pick(&got), "{key} {name}");
        }
    }
}
