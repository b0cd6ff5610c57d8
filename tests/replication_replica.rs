//! corekv (3 shards) as a replica of a real redis-server 7.0, the
//! migration path: every type in its small and large encodings, TTLs and
//! several databases arrive through the full resync (disk-backed and
//! diskless); the stream that follows (MULTI/EXEC, relative expiries,
//! INCRBYFLOAT, SPOP, a Lua script, FLUSHDB...) is applied on the owning
//! shards; the datasets end equal key by key (DUMP, or the values when the
//! payloads' layouts differ) with TTLs within a second. Writes to the
//! replica get READONLY; a killed link comes back as a partial resync.

mod common;

use common::{Raw, Redis, Server, TempDir};
use proxy::resp::Value;
use std::time::{Duration, Instant};

const DATABASES: usize = 3;

fn run(conn: &mut Raw, parts: &[&str]) -> Value {
    let words: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
    conn.cmd(&words)
}

fn ok(conn: &mut Raw, parts: &[&str]) {
    let reply = run(conn, parts);
    assert!(!matches!(reply, Value::Error(_)), "{parts:?}: {reply:?}");
}

/// A field of INFO's text.
fn info_field(conn: &mut Raw, section: &str, field: &str) -> Option<String> {
    let text = match run(conn, &["INFO", section]) {
        Value::Bulk(b) | Value::Verbatim(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("INFO: {other:?}"),
    };
    let prefix = format!("{field}:");
    text.lines().find_map(|l| l.strip_prefix(&prefix).map(|v| v.trim().to_string()))
}

/// Every type in small and large encodings, TTLs, three databases.
fn populate(primary: &mut Raw) {
    let raw = "abcdefghij".repeat(10);
    for db in 0..DATABASES {
        ok(primary, &["SELECT", &db.to_string()]);
        let p = format!("d{db}:");
        let k = |name: &str| format!("{p}{name}");
        ok(primary, &["SET", &k("s:int"), "12345"]);
        ok(primary, &["SET", &k("s:emb"), "hello world"]);
        ok(primary, &["SET", &k("s:raw"), &raw]);
        ok(primary, &["SET", &k("s:ttl"), "soon", "EX", "1000"]);
        ok(primary, &["SET", &k("f"), "10.5"]);
        ok(primary, &["RPUSH", &k("l:small"), "a", "1", "-70000", "hello"]);
        ok(primary, &["HSET", &k("h:small"), "f1", "v1", "f2", "2"]);
        ok(primary, &["SADD", &k("s:intset"), "1", "2", "3", "-40000"]);
        ok(primary, &["SADD", &k("s:small"), "a", "b", "c"]);
        ok(primary, &["ZADD", &k("z:small"), "1", "a", "2.5", "b", "-3", "c"]);
        ok(primary, &["PFADD", &k("hll:sparse"), "a", "b", "c"]);
        ok(primary, &["PEXPIRE", &k("h:small"), "900000"]);
        for i in 0..300 {
            let (i, v) = (i.to_string(), format!("value-{i}"));
            ok(primary, &["RPUSH", &k("l:big"), &v]);
            ok(primary, &["HSET", &k("h:big"), &format!("field-{i}"), &v]);
            ok(primary, &["SADD", &k("s:big"), &v]);
            ok(primary, &["SADD", &k("s:bigint"), &(i.parse::<i64>().unwrap() * 7).to_string()]);
            ok(primary, &["ZADD", &k("z:big"), &i, &v]);
        }
        for i in 0..2000 {
            ok(primary, &["PFADD", &k("hll:dense"), &format!("e{i}")]);
        }
        for i in 0..100 {
            ok(primary, &["SET", &k(&format!("plain:{i}")), &format!("{i}")]);
        }
    }
    ok(primary, &["SELECT", "0"]);
}

/// Writes after the sync: what Redis propagates as effects.
fn keep_writing(primary: &mut Raw, round: usize) {
    let r = round.to_string();
    ok(primary, &["SELECT", "0"]);
    ok(primary, &["MULTI"]);
    ok(primary, &["SET", &format!("m:{r}:a"), "1"]);
    ok(primary, &["INCR", "d0:s:int"]);
    ok(primary, &["LPUSH", "d0:l:big", "pushed"]);
    ok(primary, &["HSET", "d0:h:big", "multi", &r]);
    ok(primary, &["ZINCRBY", "d0:z:big", "5", "value-3"]);
    ok(primary, &["EXEC"]);
    ok(primary, &["EXPIRE", &format!("d0:plain:{round}"), "500"]);
    ok(primary, &["INCRBYFLOAT", "d0:f", "1.25"]);
    ok(primary, &["SPOP", "d0:s:big"]);
    ok(primary, &["SPOP", "d0:s:bigint", "3"]);
    ok(primary, &[
        "EVAL",
        "redis.call('set', KEYS[1], ARGV[1]); redis.call('hincrby', KEYS[2], 'n', 1); return redis.call('rpop', KEYS[3])",
        "3",
        &format!("lua:{r}"),
        "d0:h:small",
        "d0:l:small",
        &r,
    ]);
    ok(primary, &["SETEX", &format!("ex:{r}"), "700", "v"]);
    ok(primary, &["GETEX", "d0:s:emb", "PX", "800000"]);
    ok(primary, &["RENAME", &format!("d0:plain:{}", 50 + round), &format!("renamed:{r}")]);
    ok(primary, &["SUNIONSTORE", &format!("union:{r}"), "d0:s:small", "d0:s:intset"]);
    ok(primary, &["LMOVE", "d0:l:big", &format!("moved:{r}"), "LEFT", "RIGHT"]);
    ok(primary, &["ZPOPMIN", "d0:z:small"]);
    ok(primary, &["HDEL", "d0:h:big", "field-7"]);
    ok(primary, &["PFADD", "d0:hll:sparse", &format!("x{r}")]);
    ok(primary, &["DEL", &format!("d0:plain:{}", 80 + round)]);
    ok(primary, &["SELECT", "1"]);
    ok(primary, &["APPEND", "d1:s:raw", "-more"]);
    ok(primary, &["SADD", "d1:s:intset", &format!("{}", 100 + round)]);
    ok(primary, &["PERSIST", "d1:s:ttl"]);
    ok(primary, &["SELECT", "2"]);
    if round == 1 {
        ok(primary, &["FLUSHDB"]);
    }
    ok(primary, &["SET", &format!("d2:after:{r}"), &r]);
    ok(primary, &["SELECT", "0"]);
}

/// Waits until the replica's link is up and its offset is the primary's.
fn wait_in_sync(primary: &mut Raw, replica: &mut Raw) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let target = info_field(primary, "replication", "master_repl_offset");
        let link = info_field(replica, "replication", "master_link_status");
        let at = info_field(replica, "replication", "slave_repl_offset");
        if link.as_deref() == Some("up") && at.is_some() && at == target {
            return;
        }
        assert!(Instant::now() < deadline, "no sync: link {link:?}, replica at {at:?}, primary at {target:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn keys(conn: &mut Raw) -> Vec<Vec<u8>> {
    let Value::Array(items) = run(conn, &["KEYS", "*"]) else { panic!("KEYS") };
    let mut keys: Vec<Vec<u8>> = items
        .into_iter()
        .map(|v| match v {
            Value::Bulk(b) => b,
            other => panic!("{other:?}"),
        })
        .collect();
    keys.sort();
    keys
}

fn sorted(v: Value) -> Value {
    match v {
        Value::Array(mut items) => {
            items.sort_by_key(|a| format!("{a:?}"));
            Value::Array(items)
        }
        other => other,
    }
}

/// The value read back, for payloads whose layout differs (hash order,
/// list node splits).
fn value(conn: &mut Raw, key: &[u8]) -> Value {
    let t = conn.cmd(&[b"TYPE", key]);
    let read = match &t {
        Value::Simple(s) if s == b"string" => conn.cmd(&[b"GET", key]),
        Value::Simple(s) if s == b"list" => conn.cmd(&[b"LRANGE", key, b"0", b"-1"]),
        Value::Simple(s) if s == b"set" => sorted(conn.cmd(&[b"SMEMBERS", key])),
        Value::Simple(s) if s == b"hash" => {
            let Value::Array(flat) = conn.cmd(&[b"HGETALL", key]) else { panic!("HGETALL") };
            sorted(Value::Array(flat.chunks(2).map(|p| Value::Array(p.to_vec())).collect()))
        }
        Value::Simple(s) if s == b"zset" => conn.cmd(&[b"ZRANGE", key, b"0", b"-1", b"WITHSCORES"]),
        other => panic!("unexpected type {other:?}"),
    };
    Value::Array(vec![t, read])
}

/// Every database: the same keys, each with the same DUMP (or the same
/// value) and a TTL within a second. Returns (keys, identical payloads).
fn assert_same_dataset(primary: &mut Raw, replica: &mut Raw) -> (usize, usize) {
    let (mut total, mut identical) = (0, 0);
    for db in 0..DATABASES {
        let db = db.to_string();
        ok(primary, &["SELECT", &db]);
        ok(replica, &["SELECT", &db]);
        let names = keys(primary);
        assert_eq!(names, keys(replica), "keys of db {db}");
        for key in &names {
            let name = String::from_utf8_lossy(key);
            let (a, b) = (primary.cmd(&[b"DUMP", key]), replica.cmd(&[b"DUMP", key]));
            if a == b {
                identical += 1;
            } else {
                assert_eq!(value(primary, key), value(replica, key), "db {db} key {name}");
            }
            let (Value::Int(ta), Value::Int(tb)) = (primary.cmd(&[b"PTTL", key]), replica.cmd(&[b"PTTL", key])) else {
                panic!("PTTL {name}")
            };
            assert!((ta < 0 && ta == tb) || (ta >= 0 && (ta - tb).abs() < 1000), "PTTL of {name}: {ta} vs {tb}");
            total += 1;
        }
    }
    ok(primary, &["SELECT", "0"]);
    ok(replica, &["SELECT", "0"]);
    (total, identical)
}

fn stat(primary: &mut Raw, field: &str) -> u64 {
    info_field(primary, "stats", field).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{field}"))
}

fn replica_of_redis(diskless: bool) {
    let name = if diskless { "diskless" } else { "disk" };
    let dir = TempDir::new(name);
    let yes_no = if diskless { "yes" } else { "no" };
    let primary_home = TempDir::new(&format!("{name}-primary"));
    let primary_dir = primary_home.0.to_str().unwrap();
    // Its disk-backed sync saves a dump.rdb: not into the working directory
    // other tests' servers load from.
    let redis =
        Redis::start_with(&["--repl-diskless-sync", yes_no, "--repl-diskless-sync-delay", "0", "--dir", primary_dir]);
    let mut primary = redis.raw();
    populate(&mut primary);
    let dir_arg = dir.0.to_str().unwrap();
    let corekv = Server::start(&["--shards", "3", "--dir", dir_arg, "--save", ""]);
    let mut replica = corekv.raw();
    let port = redis.port.to_string();
    assert_eq!(run(&mut replica, &["REPLICAOF", "127.0.0.1", &port]), Value::Simple(b"OK".to_vec()));
    wait_in_sync(&mut primary, &mut replica);
    // (During the load it would get LOADING, as from Redis.)
    assert_eq!(
        run(&mut replica, &["REPLICAOF", "127.0.0.1", &port]),
        Value::Simple(b"OK Already connected to specified master".to_vec())
    );
    let (total, identical) = assert_same_dataset(&mut primary, &mut replica);
    eprintln!("{name}: after the full sync {total} keys, {identical} identical DUMPs");

    // The stream: effects applied on the owning shards.
    for round in 0..3 {
        keep_writing(&mut primary, round);
    }
    wait_in_sync(&mut primary, &mut replica);
    assert_same_dataset(&mut primary, &mut replica);
    // REPLCONF GETACK is answered with the offset applied.
    ok(&mut primary, &["SET", "acked", "1"]);
    assert_eq!(run(&mut primary, &["WAIT", "1", "5000"]), Value::Int(1));

    // Client writes are refused; reads are served.
    let readonly = Value::Error(b"READONLY You can't write against a read only replica.".to_vec());
    assert_eq!(run(&mut replica, &["SET", "x", "1"]), readonly);
    assert_eq!(run(&mut replica, &["GET", "d0:s:emb"]), Value::Bulk(b"hello world".to_vec()));

    // A key expiring on the primary: hidden at once, then DEL'd by it.
    ok(&mut primary, &["SET", "short", "v", "PX", "300"]);
    wait_in_sync(&mut primary, &mut replica);
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(run(&mut replica, &["GET", "short"]), Value::Nil);

    // The link killed: a partial resync, no second full one.
    let (full, partial) = (stat(&mut primary, "sync_full"), stat(&mut primary, "sync_partial_ok"));
    ok(&mut primary, &["CLIENT", "KILL", "TYPE", "replica"]);
    keep_writing(&mut primary, 3);
    wait_in_sync(&mut primary, &mut replica);
    assert_eq!(stat(&mut primary, "sync_full"), full, "a second full sync");
    assert!(stat(&mut primary, "sync_partial_ok") > partial, "no partial resync");
    keep_writing(&mut primary, 4);
    wait_in_sync(&mut primary, &mut replica);
    assert_same_dataset(&mut primary, &mut replica);

    // Promoted: writes accepted again, the data kept.
    assert_eq!(run(&mut replica, &["REPLICAOF", "NO", "ONE"]), Value::Simple(b"OK".to_vec()));
    ok(&mut replica, &["SET", "x", "1"]);
    assert_eq!(run(&mut replica, &["GET", "d0:s:emb"]), Value::Bulk(b"hello world".to_vec()));
}

#[test]
fn replica_of_redis_disk_backed_sync() {
    replica_of_redis(false);
}

#[test]
fn replica_of_redis_diskless_sync() {
    replica_of_redis(true);
}

/// `replicaof` in the configuration starts the link; with
/// `replica-serve-stale-data no` a lost link answers MASTERDOWN (INFO
/// still served), and the master's offset is kept for the next PSYNC.
#[test]
fn replicaof_at_start_and_stale_data() {
    let dir = TempDir::new("start");
    let primary_home = TempDir::new("start-primary");
    let redis = Redis::start_with(&["--repl-diskless-sync-delay", "0", "--dir", primary_home.0.to_str().unwrap()]);
    let mut primary = redis.raw();
    ok(&mut primary, &["SET", "k", "v"]);
    let (dir_arg, port) = (dir.0.to_str().unwrap(), redis.port.to_string());
    let corekv = Server::start(&["--shards", "2", "--dir", dir_arg, "--save", "", "--replicaof", "127.0.0.1", &port]);
    let mut replica = corekv.raw();
    wait_in_sync(&mut primary, &mut replica);
    assert_eq!(run(&mut replica, &["GET", "k"]), Value::Bulk(b"v".to_vec()));
    ok(&mut replica, &["CONFIG", "SET", "replica-serve-stale-data", "no"]);
    drop(primary);
    drop(redis);
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_field(&mut replica, "replication", "master_link_status").as_deref() != Some("down") {
        assert!(Instant::now() < deadline, "the link stays up");
        std::thread::sleep(Duration::from_millis(20));
    }
    let masterdown = b"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.".to_vec();
    assert_eq!(run(&mut replica, &["GET", "k"]), Value::Error(masterdown));
    let readonly = b"READONLY You can't write against a read only replica.".to_vec();
    assert_eq!(run(&mut replica, &["SET", "k", "w"]), Value::Error(readonly));
    ok(&mut replica, &["CONFIG", "SET", "replica-serve-stale-data", "yes"]);
    assert_eq!(run(&mut replica, &["GET", "k"]), Value::Bulk(b"v".to_vec()));
}

/// REPLICAOF another primary: PSYNC with the old history fails there, so
/// a full resync replaces the whole dataset (the old primary's keys gone).
#[test]
fn switching_primaries_replaces_the_dataset() {
    let (home_a, home_b, home) = (TempDir::new("switch-a"), TempDir::new("switch-b"), TempDir::new("switch"));
    let start =
        |dir: &TempDir| Redis::start_with(&["--repl-diskless-sync-delay", "0", "--dir", dir.0.to_str().unwrap()]);
    let (redis_a, redis_b) = (start(&home_a), start(&home_b));
    let (mut a, mut b) = (redis_a.raw(), redis_b.raw());
    for i in 0..50 {
        ok(&mut a, &["SET", &format!("a:{i}"), "from a"]);
        ok(&mut b, &["HSET", &format!("b:{i}"), "f", "from b"]);
    }
    let corekv = Server::start(&["--shards", "3", "--dir", home.0.to_str().unwrap(), "--save", ""]);
    let mut replica = corekv.raw();
    ok(&mut replica, &["REPLICAOF", "127.0.0.1", &redis_a.port.to_string()]);
    wait_in_sync(&mut a, &mut replica);
    assert_same_dataset(&mut a, &mut replica);
    ok(&mut replica, &["REPLICAOF", "127.0.0.1", &redis_b.port.to_string()]);
    wait_in_sync(&mut b, &mut replica);
    assert_same_dataset(&mut b, &mut replica);
    assert_eq!(stat(&mut b, "sync_full"), 1);
    assert_eq!(run(&mut replica, &["EXISTS", "a:1"]), Value::Int(0));
}

/// `repl-timeout`: a primary silent for longer (DEBUG SLEEP) drops the
/// link with Redis's log line; it comes back as a partial resync.
#[test]
fn a_silent_primary_times_out_and_resumes_partially() {
    let (home_primary, home) = (TempDir::new("timeout-primary"), TempDir::new("timeout"));
    let redis = Redis::start_with(&[
        "--repl-diskless-sync-delay",
        "0",
        "--repl-ping-replica-period",
        "1",
        "--enable-debug-command",
        "yes",
        "--dir",
        home_primary.0.to_str().unwrap(),
    ]);
    let mut primary = redis.raw();
    ok(&mut primary, &["SET", "k", "1"]);
    let port = redis.port.to_string();
    let args = ["--shards", "2", "--dir", home.0.to_str().unwrap(), "--save", "", "--repl-timeout", "2"];
    let corekv = Server::start(&args);
    let mut replica = corekv.raw();
    ok(&mut replica, &["REPLICAOF", "127.0.0.1", &port]);
    wait_in_sync(&mut primary, &mut replica);
    // Pings every second keep an idle link up.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(info_field(&mut replica, "replication", "master_link_status").as_deref(), Some("up"));
    let partial = stat(&mut primary, "sync_partial_ok");
    ok(&mut primary, &["DEBUG", "SLEEP", "3.5"]);
    ok(&mut primary, &["INCR", "k"]);
    wait_in_sync(&mut primary, &mut replica);
    assert!(corekv.log.lock().unwrap().iter().any(|l| l.contains("MASTER timeout: no data nor PING received...")));
    assert_eq!(stat(&mut primary, "sync_full"), 1);
    assert!(stat(&mut primary, "sync_partial_ok") > partial);
    assert_eq!(run(&mut replica, &["GET", "k"]), Value::Bulk(b"2".to_vec()));
}

/// With `appendonly yes` the replica's AOF restarts on the loaded dataset
/// and logs the stream after it: a restart from the AOF alone holds the
/// primary's dataset.
#[test]
fn the_aof_restarts_on_the_synced_dataset() {
    let (home_primary, home) = (TempDir::new("aof-primary"), TempDir::new("aof"));
    let redis = Redis::start_with(&["--repl-diskless-sync-delay", "0", "--dir", home_primary.0.to_str().unwrap()]);
    let mut primary = redis.raw();
    for i in 0..100 {
        ok(&mut primary, &["RPUSH", &format!("l:{i}"), "a", "b"]);
    }
    let dir = home.0.to_str().unwrap();
    let port = redis.port.to_string();
    let aof_args = ["--shards", "3", "--dir", dir, "--save", "", "--appendonly", "yes", "--appendfsync", "always"];
    let corekv = Server::start(&aof_args);
    let mut replica = corekv.raw();
    ok(&mut replica, &["SET", "local", "gone after the sync"]);
    ok(&mut replica, &["REPLICAOF", "127.0.0.1", &port]);
    wait_in_sync(&mut primary, &mut replica);
    for i in 0..100 {
        ok(&mut primary, &["LPUSH", &format!("l:{i}"), "c"]);
    }
    ok(&mut primary, &["SET", "after", "1"]);
    wait_in_sync(&mut primary, &mut replica);
    drop(replica);
    assert!(corekv.terminate().success());
    let restarted = Server::start(&aof_args);
    let mut replica = restarted.raw();
    assert_same_dataset(&mut primary, &mut replica);
}
