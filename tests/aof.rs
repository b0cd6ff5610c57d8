//! The per-shard append-only file against the real binary: every type
//! written (relative TTLs, SPOP, INCRBYFLOAT, cross-shard RENAME...) with
//! `appendfsync always`, `kill -9` right after the last reply, restart,
//! and every key, value and TTL identical; torn tails with
//! `aof-load-truncated` yes and no; BGREWRITEAOF under concurrent writes.

mod common;

use common::{Server, TempDir};
use redis::Connection;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn start(dir: &Path, shards: usize, extra: &[&str]) -> Server {
    let shards = shards.to_string();
    let mut args = vec!["--shards", &shards, "--appendonly", "yes", "--appendfsync", "always"];
    args.extend_from_slice(extra);
    Server::start_in(Some(dir), &args)
}

fn cmd(c: &mut Connection, line: &[&str]) -> redis::Value {
    let mut command = redis::cmd(line[0]);
    for a in &line[1..] {
        command.arg(*a);
    }
    command.query(c).unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

/// Every key of every database with its type, value and absolute expiry,
/// in a canonical text form.
fn state(c: &mut Connection) -> Vec<String> {
    let mut out = Vec::new();
    for db in 0..16 {
        cmd(c, &["SELECT", &db.to_string()]);
        let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(c).unwrap();
        keys.sort();
        for k in keys {
            let kind: String = redis::cmd("TYPE").arg(&k).query(c).unwrap();
            let value = match kind.as_str() {
                "string" => format!("{:?}", cmd(c, &["GET", &k])),
                "list" => format!("{:?}", cmd(c, &["LRANGE", &k, "0", "-1"])),
                "zset" => format!("{:?}", cmd(c, &["ZRANGE", &k, "0", "-1", "WITHSCORES"])),
                "hash" => {
                    let mut pairs: Vec<(String, String)> = redis::cmd("HGETALL").arg(&k).query(c).unwrap();
                    pairs.sort();
                    format!("{pairs:?}")
                }
                "set" => {
                    let mut members: Vec<String> = redis::cmd("SMEMBERS").arg(&k).query(c).unwrap();
                    members.sort();
                    format!("{members:?}")
                }
                other => panic!("type {other}"),
            };
            let at: i64 = redis::cmd("PEXPIRETIME").arg(&k).query(c).unwrap();
            out.push(format!("db{db} {k} {kind} {value} expires {at}"));
        }
    }
    cmd(c, &["SELECT", "0"]);
    out
}

/// Writes of every type, including the commands whose effect differs from
/// the command (relative TTLs, SPOP, INCRBYFLOAT) and the proxy's
/// cross-shard paths.
fn write_everything(c: &mut Connection) {
    let lines: &[&[&str]] = &[
        &["SET", "s:plain", "hello"],
        &["SET", "s:ex", "v", "EX", "1000"],
        &["SET", "s:px", "v", "PX", "900000"],
        &["SETEX", "s:setex", "500", "v"],
        &["PSETEX", "s:psetex", "700000", "v"],
        &["SET", "s:int", "41"],
        &["INCR", "s:int"],
        &["SET", "s:float", "1.5"],
        &["EXPIRE", "s:float", "3000"],
        &["INCRBYFLOAT", "s:float", "0.25"],
        &["APPEND", "s:plain", " world"],
        &["SETRANGE", "s:plain", "0", "J"],
        &["MSET", "m:a", "1", "m:b", "2", "m:c", "3"],
        &["SET", "gone", "x", "PX", "1"],
        &["GETEX", "s:plain", "EX", "4000"],
        &["RPUSH", "l:1", "a", "b", "c", "d"],
        &["LPUSH", "l:1", "z"],
        &["LPOP", "l:1"],
        &["LSET", "l:1", "0", "A"],
        &["HSET", "h:1", "f1", "v1", "f2", "2"],
        &["HINCRBY", "h:1", "f2", "5"],
        &["HINCRBYFLOAT", "h:1", "f3", "1.125"],
        &["HDEL", "h:1", "f1"],
        &["SADD", "set:1", "a", "b", "c", "d", "e", "1", "2"],
        &["SPOP", "set:1"],
        &["SPOP", "set:1", "2"],
        &["SREM", "set:1", "nothing"],
        &["ZADD", "z:1", "1.5", "a", "2", "b", "-3.25", "c"],
        &["ZINCRBY", "z:1", "0.5", "a"],
        &["ZPOPMIN", "z:1"],
        &["PFADD", "hll", "a", "b", "c"],
        &["PEXPIRE", "l:1", "8000000"],
        &["SET", "ren:src", "moved"],
        &["EXPIRE", "ren:src", "6000"],
        &["RENAME", "ren:src", "ren:dst"],
        &["SET", "ren2:src", "other"],
        &["RENAME", "ren2:src", "zzz"],
        &["RPUSH", "mv:src", "1", "2", "3"],
        &["LMOVE", "mv:src", "mv:dst", "LEFT", "RIGHT"],
        &["SADD", "u:1", "x", "y"],
        &["SADD", "u:2", "y", "z"],
        &["SUNIONSTORE", "u:all", "u:1", "u:2"],
        &["COPY", "h:1", "h:copy"],
        &["MSETNX", "n:1", "a", "n:2", "b"],
        &["SMOVE", "u:1", "u:3", "x"],
        &["ZUNIONSTORE", "z:union", "2", "z:1", "z:1"],
        &["DEL", "m:c"],
        &["SELECT", "3"],
        &["SET", "db3:key", "in db 3", "EX", "5000"],
        &["SELECT", "0"],
    ];
    for line in lines {
        cmd(c, line);
    }
    // Let "gone" expire and be deleted while the server runs.
    std::thread::sleep(Duration::from_millis(20));
    let _: Option<String> = redis::cmd("GET").arg("gone").query(c).unwrap();
}

fn kill_restart_compare(shards: usize, extra: &[&str]) {
    let dir = TempDir::new(&format!("types{shards}{}", extra.join("")));
    let server = start(&dir.0, shards, extra);
    let mut c = server.client();
    write_everything(&mut c);
    let before = state(&mut c);
    assert!(before.len() > 20, "{before:?}");
    drop(server); // SIGKILL right after the last reply
    let server = start(&dir.0, shards, &[]);
    let mut c = server.client();
    let after = state(&mut c);
    assert_eq!(before, after);
    // The restarted server appends to the same files.
    cmd(&mut c, &["SET", "after", "restart"]);
    drop(server);
    let server = start(&dir.0, shards, extra);
    let mut c = server.client();
    let v: String = redis::cmd("GET").arg("after").query(&mut c).unwrap();
    assert_eq!(v, "restart");
}

#[test]
fn every_type_survives_kill_9_one_shard() {
    kill_restart_compare(1, &[]);
}

/// `everysec` writes each batch to the file before its replies leave (as
/// Redis does), so a crash of the process alone loses no acknowledged write.
#[test]
fn everysec_acknowledged_writes_survive_kill_9() {
    kill_restart_compare(2, &["--appendfsync", "everysec"]);
    // A large pipelined batch: its write takes long enough that a reply
    // sent before it would be lost to a kill right after the last reply.
    let dir = TempDir::new("everysec-batch");
    let server = start(&dir.0, 1, &["--appendfsync", "everysec"]);
    let mut c = server.client();
    let value = "v".repeat(1000);
    let mut pipe = redis::pipe();
    for i in 0..20_000 {
        pipe.cmd("SET").arg(format!("k{i}")).arg(&value).ignore();
    }
    pipe.query::<()>(&mut c).unwrap();
    drop(server); // SIGKILL right after the last reply
    let server = start(&dir.0, 1, &["--appendfsync", "everysec"]);
    let mut c = server.client();
    let keys: u64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(keys, 20_000);
}

#[test]
fn every_type_survives_kill_9_three_shards() {
    kill_restart_compare(3, &[]);
}

/// Starts corekv expecting it to stop by itself; its exit status and output.
fn start_fails(dir: &Path, extra: &[&str]) -> (bool, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_corekv"))
        .current_dir(dir)
        .args(["--port", "0", "--bind", "127.0.0.1", "--shards", "1", "--appendonly", "yes"])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("corekv kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

fn manifest_and_incr(dir: &Path) -> (String, PathBuf) {
    let folder = dir.join("appendonlydir");
    let manifest = std::fs::read_to_string(folder.join("appendonly.aof.manifest")).unwrap();
    let incr = folder.join("appendonly.aof.0.1.incr.aof");
    (manifest, incr)
}

#[test]
fn torn_tail_loads_with_aof_load_truncated_and_fails_without() {
    let dir = TempDir::new("torn");
    let server = start(&dir.0, 1, &[]);
    let mut c = server.client();
    cmd(&mut c, &["SET", "a", "1"]);
    cmd(&mut c, &["SET", "b", "2"]);
    drop(server);
    let (manifest, incr) = manifest_and_incr(&dir.0);
    assert!(manifest.contains("file appendonly.aof.0.1.incr.aof seq 1 type i shard 0"), "{manifest}");
    let bytes = std::fs::read(&incr).unwrap();
    // Cut the last command (SET b 2) in the middle.
    std::fs::write(&incr, &bytes[..bytes.len() - 5]).unwrap();

    let (ok, text) = start_fails(&dir.0, &["--aof-load-truncated", "no"]);
    assert!(!ok);
    assert!(text.contains("Unexpected end of file reading the append only file appendonly.aof.0.1.incr.aof"), "{text}");

    let server = start(&dir.0, 1, &["--aof-load-truncated", "yes"]);
    assert!(server.log.lock().unwrap().iter().any(|l| l.contains("!!! Warning: short read while loading the AOF")));
    let mut c = server.client();
    let a: Option<String> = redis::cmd("GET").arg("a").query(&mut c).unwrap();
    let b: Option<String> = redis::cmd("GET").arg("b").query(&mut c).unwrap();
    assert_eq!((a.as_deref(), b), (Some("1"), None));
    // The file was cut back to whole commands, so new writes follow them.
    cmd(&mut c, &["SET", "c", "3"]);
    drop(server);
    let server = start(&dir.0, 1, &["--aof-load-truncated", "no"]);
    let mut c = server.client();
    let got: Vec<Option<String>> = redis::cmd("MGET").arg("a").arg("b").arg("c").query(&mut c).unwrap();
    assert_eq!(got, vec![Some("1".into()), None, Some("3".into())]);
}

#[test]
fn bgrewriteaof_under_concurrent_writes_loses_nothing() {
    let dir = TempDir::new("rewrite");
    let server = start(&dir.0, 3, &[]);
    let port = server.port;
    let mut c = server.client();
    for i in 0..2000 {
        cmd(&mut c, &["RPUSH", &format!("list{}", i % 17), &i.to_string()]);
        cmd(&mut c, &["SET", &format!("k{i}"), &i.to_string(), "EX", "10000"]);
    }
    let writer = std::thread::spawn(move || {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap();
        for i in 0..3000 {
            let _: i64 = redis::cmd("INCR").arg(format!("counter{}", i % 5)).query(&mut c).unwrap();
            let _: i64 = redis::cmd("RPUSH").arg("seq").arg(i).query(&mut c).unwrap();
        }
    });
    for _ in 0..3 {
        let reply: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
        assert_eq!(reply, "Background append only file rewriting started");
        loop {
            let info: String = redis::cmd("INFO").arg("persistence").query(&mut c).unwrap();
            if info.contains("aof_rewrite_in_progress:0") && !info.contains("aof_rewrites:0") {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    writer.join().unwrap();
    let before = state(&mut c);
    let info: String = redis::cmd("INFO").arg("persistence").query(&mut c).unwrap();
    assert!(info.contains("aof_enabled:1") && info.contains("aof_last_bgrewrite_status:ok"), "{info}");
    drop(server);
    let (manifest, _) = manifest_and_incr(&dir.0);
    assert!(manifest.contains("type b shard 2"), "{manifest}");
    assert!(!manifest.contains("seq 1 "), "{manifest}");
    // The bases carry the RDB preamble; Redis's checker accepts them.
    for line in manifest.lines().filter(|l| l.contains("type b")) {
        let name = line.split_whitespace().nth(1).unwrap();
        assert!(name.ends_with(".base.rdb"), "{name}");
        let check = std::process::Command::new("redis-check-rdb")
            .arg(dir.0.join("appendonlydir").join(name))
            .output()
            .expect("redis-check-rdb");
        assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
    }
    let server = start(&dir.0, 3, &[]);
    let mut c = server.client();
    assert_eq!(before, state(&mut c));
    let seq: Vec<i64> = redis::cmd("LRANGE").arg("seq").arg(0).arg(-1).query(&mut c).unwrap();
    assert_eq!(seq, (0..3000).collect::<Vec<_>>());
}

#[test]
fn blocking_pops_are_logged_and_sigterm_flushes_everysec() {
    let dir = TempDir::new("blocking");
    let server = Server::start_in(Some(&dir.0), &["--shards", "3", "--appendonly", "yes", "--appendfsync", "everysec"]);
    let port = server.port;
    let mut c = server.client();
    // Served at once, then served later by a push from another client.
    cmd(&mut c, &["RPUSH", "q1", "a", "b", "c"]);
    cmd(&mut c, &["BLPOP", "q1", "1"]);
    let waiter = std::thread::spawn(move || {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap();
        let got: (String, String) = redis::cmd("BRPOP").arg("q2").arg("10").query(&mut c).unwrap();
        let moved: String =
            redis::cmd("BLMOVE").arg("q3").arg("dst").arg("LEFT").arg("RIGHT").arg("10").query(&mut c).unwrap();
        (got, moved)
    });
    loop {
        let info: String = redis::cmd("INFO").arg("clients").query(&mut c).unwrap();
        if info.contains("blocked_clients:1") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cmd(&mut c, &["RPUSH", "q2", "x", "y"]);
    std::thread::sleep(Duration::from_millis(50));
    cmd(&mut c, &["RPUSH", "q3", "m", "n"]);
    let (got, moved) = waiter.join().unwrap();
    assert_eq!((got.1.as_str(), moved.as_str()), ("y", "m"));
    cmd(&mut c, &["ZADD", "zq", "1", "a", "2", "b", "3", "c", "4", "d"]);
    cmd(&mut c, &["BZPOPMIN", "zq", "1"]);
    cmd(&mut c, &["BZMPOP", "1", "1", "zq", "MAX", "COUNT", "2"]);
    cmd(&mut c, &["RPUSH", "{q}src", "1", "2", "3", "4", "5"]);
    cmd(&mut c, &["BLMPOP", "1", "1", "{q}src", "RIGHT", "COUNT", "2"]);
    cmd(&mut c, &["BLMOVE", "{q}src", "{q}dst", "LEFT", "LEFT", "1"]);
    cmd(&mut c, &["BLMOVE", "{q}src", "{q}src", "LEFT", "RIGHT", "1"]);
    let before = state(&mut c);
    assert!(server.terminate().success());
    let server = Server::start_in(Some(&dir.0), &["--shards", "3", "--appendonly", "yes"]);
    let mut c = server.client();
    assert_eq!(before, state(&mut c));
}

#[test]
fn config_and_info() {
    let dir = TempDir::new("config");
    let server = start(&dir.0, 1, &[]);
    let mut c = server.client();
    let got: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("append*").query(&mut c).unwrap();
    assert_eq!(
        got,
        vec![
            "appenddirname",
            "appendonlydir",
            "appendfilename",
            "appendonly.aof",
            "appendfsync",
            "always",
            "appendonly",
            "yes"
        ]
    );
    cmd(&mut c, &["CONFIG", "SET", "appendfsync", "everysec"]);
    let got: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("appendfsync").query(&mut c).unwrap();
    assert_eq!(got[1], "everysec");
    let err = redis::cmd("CONFIG").arg("SET").arg("appendfsync").arg("sometimes").query::<()>(&mut c).unwrap_err();
    assert!(err.to_string().contains("argument(s) must be one of the following: always, everysec, no"), "{err}");
    let info: String = redis::cmd("INFO").arg("persistence").query(&mut c).unwrap();
    for field in [
        "aof_enabled:1",
        "aof_rewrite_in_progress:0",
        "aof_rewrite_scheduled:0",
        "aof_last_rewrite_time_sec:-1",
        "aof_current_rewrite_time_sec:-1",
        "aof_last_bgrewrite_status:ok",
        "aof_rewrites:0",
        "aof_last_write_status:ok",
        "aof_last_cow_size:0",
        "aof_current_size:",
        "aof_base_size:0",
    ] {
        assert!(info.contains(field), "{field} in {info}");
    }
    let plain = Server::start(&[]);
    let mut c = plain.client();
    let info: String = redis::cmd("INFO").arg("persistence").query(&mut c).unwrap();
    assert!(info.contains("aof_enabled:0") && !info.contains("aof_current_size"), "{info}");
}

#[test]
fn kill_9_during_bgrewriteaof_keeps_every_acknowledged_write() {
    let dir = TempDir::new("rewrite-kill");
    let server = start(&dir.0, 2, &[]);
    let port = server.port;
    let mut c = server.client();
    for i in 0..3000 {
        cmd(&mut c, &["HSET", &format!("h{}", i % 50), &i.to_string(), "v"]);
    }
    let writer = std::thread::spawn(move || {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap();
        for i in 0..1500 {
            let _: i64 = redis::cmd("RPUSH").arg(format!("seq{}", i % 3)).arg(i).query(&mut c).unwrap();
        }
    });
    for _ in 0..5 {
        // "already in progress" is a fine answer too.
        let _ = redis::cmd("BGREWRITEAOF").query::<String>(&mut c);
        std::thread::sleep(Duration::from_millis(5));
    }
    writer.join().unwrap();
    drop(server); // SIGKILL, maybe mid-rewrite
    let server = start(&dir.0, 2, &[]);
    let mut c = server.client();
    for k in 0..3 {
        let seq: Vec<i64> = redis::cmd("LRANGE").arg(format!("seq{k}")).arg(0).arg(-1).query(&mut c).unwrap();
        assert_eq!(seq, (0..1500).filter(|i| i % 3 == k).collect::<Vec<_>>());
    }
    let n: i64 = redis::cmd("HLEN").arg("h7").query(&mut c).unwrap();
    assert_eq!(n, 60);
}

#[test]
fn resp_base_without_rdb_preamble() {
    let dir = TempDir::new("resp-base");
    let server = start(&dir.0, 2, &["--aof-use-rdb-preamble", "no"]);
    let mut c = server.client();
    write_everything(&mut c);
    let reply: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    assert_eq!(reply, "Background append only file rewriting started");
    loop {
        let info: String = redis::cmd("INFO").arg("persistence").query(&mut c).unwrap();
        if info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrites:1") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cmd(&mut c, &["SET", "after", "rewrite", "PX", "99999999"]);
    let before = state(&mut c);
    drop(server);
    let (manifest, _) = manifest_and_incr(&dir.0);
    assert!(manifest.contains("appendonly.aof.1.2.base.aof seq 2 type b shard 1"), "{manifest}");
    let server = start(&dir.0, 2, &[]);
    let mut c = server.client();
    assert_eq!(before, state(&mut c));
}

#[test]
fn appendonly_on_a_dump_starts_from_the_dump() {
    common::ensure_test_deps();
    let dir = TempDir::new("from-dump");
    // A dump made by corekv itself (SAVE), then the AOF switched on.
    let server = Server::start_in(Some(&dir.0), &["--shards", "2", "--save", "3600 1"]);
    let mut c = server.client();
    write_everything(&mut c);
    let before = state(&mut c);
    cmd(&mut c, &["SAVE"]);
    drop(server);
    let server = start(&dir.0, 2, &["--save", ""]);
    let mut c = server.client();
    assert_eq!(before, state(&mut c));
    cmd(&mut c, &["SET", "new", "write"]);
    drop(server);
    // The dump is gone: the AOF alone holds the dataset.
    std::fs::remove_file(dir.0.join("dump.rdb")).unwrap();
    let server = start(&dir.0, 2, &["--save", ""]);
    let mut c = server.client();
    let mut after = state(&mut c);
    after.retain(|l| !l.contains(" new "));
    assert_eq!(before, after);
    let v: String = redis::cmd("GET").arg("new").query(&mut c).unwrap();
    assert_eq!(v, "write");
}

/// One shard's AOF is Redis's own format: redis-server 7.0 loads what
/// corekv wrote (RDB base + incr file), and corekv loads what redis-server
/// wrote.
#[test]
fn aof_interoperates_with_redis_server() {
    common::ensure_test_deps();
    let dir = TempDir::new("interop");
    let server = start(&dir.0, 1, &["--save", ""]);
    let mut c = server.client();
    write_everything(&mut c);
    let reply: String = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    assert_eq!(reply, "Background append only file rewriting started");
    loop {
        let info: String = redis::cmd("INFO").arg("persistence").query(&mut c).unwrap();
        if info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrites:1") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cmd(&mut c, &["SET", "after", "the rewrite", "EX", "5000"]);
    cmd(&mut c, &["SADD", "set:after", "a", "b", "c"]);
    cmd(&mut c, &["SPOP", "set:after"]);
    let before = state(&mut c);
    drop(server);
    let redis = common::Redis::start_with(&["--dir", dir.0.to_str().unwrap(), "--appendonly", "yes", "--save", ""]);
    let mut rc = redis::Client::open(format!("redis://127.0.0.1:{}/", redis.port)).unwrap().get_connection().unwrap();
    assert_eq!(before, state(&mut rc));
    // redis-server appends, rewrites; corekv loads its files.
    cmd(&mut rc, &["SET", "from", "redis", "PX", "9000000"]);
    cmd(&mut rc, &["INCRBYFLOAT", "s:float", "1"]);
    let reply: String = redis::cmd("BGREWRITEAOF").query(&mut rc).unwrap();
    assert!(reply.contains("rewriting"), "{reply}");
    loop {
        let info: String = redis::cmd("INFO").arg("persistence").query(&mut rc).unwrap();
        if info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cmd(&mut rc, &["RPUSH", "l:1", "tail"]);
    let redis_state = state(&mut rc);
    drop(redis);
    let server = start(&dir.0, 1, &["--save", ""]);
    let mut c = server.client();
    assert_eq!(redis_state, state(&mut c));
}

#[test]
fn config_set_appendonly_at_runtime() {
    let dir = TempDir::new("runtime");
    let server = Server::start_in(Some(&dir.0), &["--shards", "2", "--save", ""]);
    let mut c = server.client();
    write_everything(&mut c);
    cmd(&mut c, &["CONFIG", "SET", "appendonly", "yes"]);
    cmd(&mut c, &["CONFIG", "SET", "appendfsync", "always"]);
    cmd(&mut c, &["RPUSH", "after:on", "1", "2"]);
    cmd(&mut c, &["EXPIRE", "after:on", "9000"]);
    let info: String = redis::cmd("INFO").arg("persistence").query(&mut c).unwrap();
    assert!(info.contains("aof_enabled:1"), "{info}");
    let on = state(&mut c);
    // Off: later writes are not logged; on again: a fresh AOF of the state.
    cmd(&mut c, &["CONFIG", "SET", "appendonly", "no"]);
    cmd(&mut c, &["SET", "while:off", "x"]);
    drop(server);
    let server = start(&dir.0, 2, &[]);
    let mut c = server.client();
    assert_eq!(on, state(&mut c));
    drop(server);
    let server = Server::start_in(Some(&dir.0), &["--shards", "2", "--save", ""]);
    let mut c = server.client();
    cmd(&mut c, &["SET", "fresh", "1"]);
    cmd(&mut c, &["CONFIG", "SET", "appendonly", "yes"]);
    cmd(&mut c, &["CONFIG", "SET", "appendonly", "no"]);
    cmd(&mut c, &["CONFIG", "SET", "appendonly", "yes"]);
    cmd(&mut c, &["SET", "fresh", "2"]);
    cmd(&mut c, &["CONFIG", "SET", "appendonly", "no"]); // flushes
    drop(server);
    let server = start(&dir.0, 2, &[]);
    let mut c = server.client();
    assert_eq!(state(&mut c), vec!["db0 fresh string bulk-string('\"2\"') expires -1".to_string()]);
}
