//! RDB snapshots end to end: SAVE / kill -9 / restart, BGSAVE under
//! concurrent writers (the file is exactly the state at one cut), interop
//! with redis-server and redis-check-rdb in both directions, bad files,
//! SHUTDOWN and SIGTERM saving, MISCONF after a failed BGSAVE.

mod common;

use common::{Redis, Server};
use redis::Connection;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("corekv-persistence-{}-{name}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn corekv(dir: &TempDir, shards: usize) -> Server {
    Server::start(&["--shards", &shards.to_string(), "--dir", dir.path()])
}

fn redis_conn(port: u16) -> Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap()
}

fn kill9(server: Server) {
    drop(server); // the harness kills with SIGKILL
}

/// Every type in its small and large encodings, TTLs, two databases.
fn populate(c: &mut Connection) {
    let far = 4_000_000_000_000u64; // absolute ms, far in the future
    let mut p = redis::pipe();
    for i in 0..300 {
        p.cmd("SET").arg(format!("str:{i}")).arg(i * 7).ignore();
    }
    p.cmd("SET").arg("emb").arg("short string").ignore();
    p.cmd("SET").arg("raw").arg("r".repeat(300)).ignore();
    p.cmd("SET").arg("bin").arg(vec![0u8, 255, 10, 13, 0]).ignore();
    p.cmd("APPEND").arg("appended").arg("x".repeat(50)).ignore();
    p.cmd("HSET").arg("hash:small").arg("a").arg("1").arg("b").arg("two").ignore();
    for i in 0..600 {
        p.cmd("HSET").arg("hash:large").arg(format!("f{i}")).arg(format!("v{i}")).ignore();
    }
    p.cmd("SADD").arg("set:ints").arg(1).arg(2).arg(-300).arg(70000).ignore();
    p.cmd("SADD").arg("set:strs").arg("a").arg("b").arg("c").ignore();
    for i in 0..700 {
        p.cmd("SADD").arg("set:large").arg(i).ignore();
    }
    p.cmd("RPUSH").arg("list:small").arg("a").arg(1).arg("c").ignore();
    for i in 0..1500 {
        p.cmd("RPUSH").arg("list:large").arg(format!("element-{i}")).ignore();
    }
    p.cmd("ZADD").arg("zset:small").arg(1.5).arg("a").arg(-2).arg("b").ignore();
    for i in 0..300 {
        p.cmd("ZADD").arg("zset:large").arg(i as f64 / 3.0).arg(format!("m{i}")).ignore();
    }
    for key in ["str:1", "emb", "hash:small", "set:large", "list:large", "zset:small"] {
        p.cmd("PEXPIREAT").arg(key).arg(far + key.len() as u64).ignore();
    }
    p.cmd("SELECT").arg(3).ignore();
    p.cmd("SET").arg("in-db3").arg("three").ignore();
    p.cmd("HSET").arg("hash-db3").arg("f").arg("v").ignore();
    p.cmd("PEXPIREAT").arg("in-db3").arg(far).ignore();
    p.cmd("SELECT").arg(0).ignore();
    p.query::<()>(c).unwrap();
}

fn sorted(mut v: Vec<String>) -> String {
    v.sort();
    v.join(",")
}

/// Every key of databases 0 and 3: type, encoding, value, absolute expiry.
fn state(c: &mut Connection) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for db in [0, 3] {
        redis::cmd("SELECT").arg(db).query::<()>(c).unwrap();
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(c).unwrap();
        for key in keys {
            let kind: String = redis::cmd("TYPE").arg(&key).query(c).unwrap();
            let value = match kind.as_str() {
                "string" => {
                    let v: Vec<u8> = redis::cmd("GET").arg(&key).query(c).unwrap();
                    format!("{v:?}")
                }
                "hash" => {
                    let v: Vec<String> = redis::cmd("HGETALL").arg(&key).query(c).unwrap();
                    sorted(v.chunks(2).map(|p| p.join("=")).collect())
                }
                "set" => sorted(redis::cmd("SMEMBERS").arg(&key).query(c).unwrap()),
                "list" => redis::cmd("LRANGE").arg(&key).arg(0).arg(-1).query::<Vec<String>>(c).unwrap().join(","),
                "zset" => redis::cmd("ZRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query::<Vec<String>>(c)
                    .unwrap()
                    .join(","),
                other => panic!("unexpected type {other}"),
            };
            let encoding: String = redis::cmd("OBJECT").arg("ENCODING").arg(&key).query(c).unwrap();
            let expire: i64 = redis::cmd("PEXPIRETIME").arg(&key).query(c).unwrap();
            out.insert(format!("{db}:{key}"), format!("{kind} {encoding} {expire} {value}"));
        }
    }
    redis::cmd("SELECT").arg(0).query::<()>(c).unwrap();
    out
}

/// DUMP of every key of db 0, where the server has DUMP.
fn dumps(c: &mut Connection) -> Option<BTreeMap<String, Vec<u8>>> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(c).unwrap();
    let mut out = BTreeMap::new();
    for key in keys {
        match redis::cmd("DUMP").arg(&key).query::<Vec<u8>>(c) {
            Ok(d) => out.insert(key, d),
            Err(_) => return None,
        };
    }
    Some(out)
}

fn info_field(c: &mut Connection, field: &str) -> String {
    let info: String = redis::cmd("INFO").arg("persistence").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")).map(str::to_string))
        .unwrap_or_else(|| panic!("no {field} in {info}"))
}

fn wait_for_bgsave(c: &mut Connection, saves_before: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let saves: u64 = info_field(c, "rdb_saves").parse().unwrap();
        if saves > saves_before && info_field(c, "rdb_bgsave_in_progress") == "0" {
            assert_eq!(info_field(c, "rdb_last_bgsave_status"), "ok");
            return;
        }
        assert!(Instant::now() < deadline, "BGSAVE did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn save_kill_restart(shards: usize) {
    let dir = TempDir::new(&format!("restart{shards}"));
    let server = corekv(&dir, shards);
    let mut c = server.client();
    populate(&mut c);
    let state_before = state(&mut c);
    let dumps_before = dumps(&mut c);
    assert!(dumps_before.is_some(), "DUMP is there");
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    kill9(server);
    let server = corekv(&dir, shards);
    let mut c = server.client();
    assert_eq!(state(&mut c), state_before);
    let (after, before) = (dumps(&mut c).unwrap_or_default(), dumps_before.unwrap_or_default());
    // A hashtable's DUMP follows its iteration order, which a reload may
    // change (in Redis too); `state` compared those by content.
    let ordered = |k: &&String| state_before[&format!("0:{k}")].split(" ").nth(1).is_none_or(|e| e != "hashtable");
    let differ: Vec<&String> = before.keys().filter(ordered).filter(|k| after.get(*k) != before.get(*k)).collect();
    assert!(differ.is_empty(), "DUMP differs for {differ:?}");
    assert_eq!(info_field(&mut c, "rdb_last_load_keys_loaded"), state_before.len().to_string());
}

#[test]
fn save_kill_restart_one_shard() {
    save_kill_restart(1);
}

#[test]
fn save_kill_restart_three_shards() {
    save_kill_restart(3);
}

/// Checks that `present` (key -> value of one writer's keys in a snapshot)
/// is the writer's state after its first n steps, for some n; returns n.
/// Writer `w` does SET w<i> i for i = 0, 1, ..., and after SET w<i> with
/// i % 10 == 9 also DEL w<i-9>, each acknowledged before the next.
fn check_prefix(w: &str, present: &BTreeMap<u64, u64>, total: u64) -> u64 {
    let n = present.keys().next_back().map_or(0, |last| last + 1);
    for i in 0..total {
        let found = present.get(&i);
        // DEL w<i> comes between SET w<i+9> and SET w<i+10>: a cut right
        // after SET w<i+9> may hold it or not.
        if i % 10 == 0 && i + 10 == n {
            continue;
        }
        let expect = i < n && !(i % 10 == 0 && i + 10 < n);
        assert_eq!(found.is_some(), expect, "writer {w}: key {w}{i} (cut after {n} of {total})");
        if let Some(&v) = found {
            assert_eq!(v, i, "writer {w}: value of {w}{i}");
        }
    }
    n
}

/// One writer's keys in an RDB file, read with the codec.
fn writer_keys_in_file(file: &[u8], w: &str) -> BTreeMap<u64, u64> {
    let mut reader = shard::rdb::Reader::new(file).unwrap();
    let mut out = BTreeMap::new();
    while let Some(item) = reader.next().unwrap() {
        if let shard::rdb::Item::Entry { key, value, .. } = item {
            let key = String::from_utf8_lossy(&key).into_owned();
            if let Some(i) = key.strip_prefix(w).and_then(|i| i.parse::<u64>().ok()) {
                let v = match value {
                    shard::value::Value::Int(n) => n as u64,
                    other => panic!("{key} holds {other:?}"),
                };
                out.insert(i, v);
            }
        }
    }
    out
}

/// Sequence-numbered writers, each waiting for every reply before the next
/// command, their keys spread over the shards: whatever a BGSAVE catches
/// must be a prefix of each writer's sequence, with the right values. The
/// first file is loaded into a fresh corekv; many more are read with the
/// codec.
#[test]
fn bgsave_under_writers_is_one_cut() {
    let dir = TempDir::new("cut");
    let server = corekv(&dir, 3);
    let mut c = server.client();
    // Ballast so the walk takes a while and overlaps the writers.
    let mut p = redis::pipe();
    for i in 0..100_000 {
        p.cmd("SET").arg(format!("ballast:{i}")).arg("x".repeat(40)).ignore();
    }
    p.query::<()>(&mut c).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|w| {
            let (stop, url) = (stop.clone(), server.url());
            std::thread::spawn(move || {
                let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) || i < 2000 {
                    let _: () = redis::cmd("SET").arg(format!("{w}{i}")).arg(i).query(&mut c).unwrap();
                    if i % 10 == 9 {
                        let _: () = redis::cmd("DEL").arg(format!("{w}{}", i - 9)).query(&mut c).unwrap();
                    }
                    i += 1;
                }
                i
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let mut files = Vec::new();
    for round in 0..20 {
        let saves: u64 = info_field(&mut c, "rdb_saves").parse().unwrap();
        let reply: String = redis::cmd("BGSAVE").query(&mut c).unwrap();
        assert_eq!(reply, "Background saving started");
        wait_for_bgsave(&mut c, saves);
        if round == 0 {
            let copy = TempDir::new("cut-copy");
            std::fs::copy(dir.file("dump.rdb"), copy.file("dump.rdb")).unwrap();
            files.push(Some(copy));
        } else {
            files.push(None);
            let bytes = std::fs::read(dir.file("dump.rdb")).unwrap();
            for w in ["a", "b"] {
                // `total` is unknown yet: check against what the file holds.
                let keys = writer_keys_in_file(&bytes, w);
                let total = keys.keys().next_back().map_or(0, |l| l + 1);
                check_prefix(w, &keys, total);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let written: Vec<u64> = writers.into_iter().map(|w| w.join().unwrap()).collect();

    // The first file, loaded into a fresh corekv.
    let copy = files[0].take().unwrap();
    let loaded = corekv(&copy, 2);
    let mut l = loaded.client();
    for (w, total) in ["a", "b"].into_iter().zip(written) {
        let mut present = BTreeMap::new();
        for i in 0..total {
            if let Some(v) = redis::cmd("GET").arg(format!("{w}{i}")).query::<Option<u64>>(&mut l).unwrap() {
                present.insert(i, v);
            }
        }
        let n = check_prefix(w, &present, total);
        assert!(n > 0 && n < total, "the save overlapped the writer {w}: {n} of {total}");
    }
    let size: usize = redis::cmd("DBSIZE").query(&mut l).unwrap();
    assert!(size >= 100_000);
}

fn wait_exit(child: &mut std::process::Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn redis_check_rdb_and_redis_server_read_corekv_files() {
    common::ensure_test_deps();
    let dir = TempDir::new("to-redis");
    let server = corekv(&dir, 3);
    let mut c = server.client();
    populate(&mut c);
    let before = state(&mut c);
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    let check = Command::new("redis-check-rdb").arg(dir.file("dump.rdb")).output().unwrap();
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success() && text.contains("RDB looks OK"), "{text}");
    let redis = Redis::start_with(&["--dir", dir.path(), "--dbfilename", "dump.rdb"]);
    let mut r = redis_conn(redis.port);
    assert_eq!(state(&mut r), before);
    assert_eq!(dumps(&mut r).map(|d| d.len()), dumps(&mut c).map(|d| d.len()));
}

#[test]
fn corekv_reads_redis_server_files() {
    common::ensure_test_deps();
    let dir = TempDir::new("from-redis");
    let redis = Redis::start_with(&["--dir", dir.path(), "--dbfilename", "dump.rdb"]);
    let mut r = redis_conn(redis.port);
    populate(&mut r);
    let before = state(&mut r);
    let _: () = redis::cmd("SAVE").query(&mut r).unwrap();
    drop(redis);
    for shards in [1, 3] {
        let server = corekv(&dir, shards);
        let mut c = server.client();
        assert_eq!(state(&mut c), before, "{shards} shard(s)");
        kill9(server);
    }
}

/// Starts corekv on `dir` expecting it to refuse; returns its stderr.
fn start_fails(dir: &TempDir) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_corekv"))
        .args(["--port", "0", "--bind", "127.0.0.1", "--shards", "2", "--dir", dir.path()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(30)).expect("corekv should refuse to start");
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{err}");
    assert_ne!(status.code(), None, "exited, not killed by a signal (no panic/abort): {err}");
    err
}

#[test]
fn truncated_or_bit_flipped_files_stop_the_start() {
    let dir = TempDir::new("bad");
    let server = corekv(&dir, 2);
    let mut c = server.client();
    populate(&mut c);
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    kill9(server);
    let good = std::fs::read(dir.file("dump.rdb")).unwrap();

    for cut in [good.len() - 1, good.len() - 9, good.len() / 2, 20, 5] {
        std::fs::write(dir.file("dump.rdb"), &good[..cut]).unwrap();
        let err = start_fails(&dir);
        assert!(err.contains("offset") || err.contains("EOF") || err.contains("signature"), "cut at {cut}: {err}");
    }
    // A flipped bit in a value: only the checksum can tell.
    let mut flipped = good.clone();
    let at = good.windows(12).position(|w| w == b"short string").unwrap();
    flipped[at + 2] ^= 0x01;
    std::fs::write(dir.file("dump.rdb"), &flipped).unwrap();
    let err = start_fails(&dir);
    assert!(err.to_lowercase().contains("checksum"), "{err}");
}

#[test]
fn shutdown_and_sigterm_save_when_a_save_point_is_set() {
    let dir = TempDir::new("shutdown");
    let file = dir.file("dump.rdb");
    // Default save points: SHUTDOWN saves.
    let server = corekv(&dir, 2);
    let mut c = server.client();
    let _: () = redis::cmd("SET").arg("a").arg("1").query(&mut c).unwrap();
    let mut raw = server.raw();
    raw.send(b"SHUTDOWN\r\n");
    assert!(raw.closed());
    server.wait_exit(Duration::from_secs(10)).expect("exits");
    assert!(file.exists());

    // NOSAVE does not.
    let server = corekv(&dir, 2);
    let mut c = server.client();
    let got: String = redis::cmd("GET").arg("a").query(&mut c).unwrap();
    assert_eq!(got, "1");
    let _: () = redis::cmd("SET").arg("b").arg("2").query(&mut c).unwrap();
    let mut raw = server.raw();
    raw.send(b"SHUTDOWN NOSAVE\r\n");
    assert!(raw.closed());
    server.wait_exit(Duration::from_secs(10)).expect("exits");

    // SIGTERM saves.
    let server = corekv(&dir, 2);
    let mut c = server.client();
    let b: Option<String> = redis::cmd("GET").arg("b").query(&mut c).unwrap();
    assert_eq!(b, None);
    let _: () = redis::cmd("SET").arg("c").arg("3").query(&mut c).unwrap();
    assert!(server.terminate().success());
    let server = corekv(&dir, 2);
    let mut c = server.client();
    let got: String = redis::cmd("GET").arg("c").query(&mut c).unwrap();
    assert_eq!(got, "3");
}

#[test]
fn commands_config_and_misconf() {
    let dir = TempDir::new("commands");
    let server = corekv(&dir, 2);
    let mut raw = server.raw();
    let mut c = server.client();
    let dir_got: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("dir").query(&mut c).unwrap();
    assert_eq!(dir_got[1], std::fs::canonicalize(dir.path()).unwrap().to_str().unwrap());
    let save: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("save").query(&mut c).unwrap();
    assert_eq!(save[1], "3600 1 300 100 60 10000");
    let e = redis::cmd("CONFIG").arg("SET").arg("dir").arg("/tmp").query::<()>(&mut c).unwrap_err();
    assert!(e.to_string().contains("can't set protected config"), "{e}");
    let e = redis::cmd("CONFIG").arg("SET").arg("save").arg("1 2 3").query::<()>(&mut c).unwrap_err();
    assert!(e.to_string().contains("Invalid save parameters"), "{e}");
    let e = redis::cmd("BGSAVE").arg("foo").query::<()>(&mut c).unwrap_err();
    assert!(e.to_string().contains("syntax error"), "{e}");
    let before: i64 = redis::cmd("LASTSAVE").query(&mut c).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut c).unwrap();
    assert_eq!(info_field(&mut c, "rdb_changes_since_last_save"), "1");
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    let after: i64 = redis::cmd("LASTSAVE").query(&mut c).unwrap();
    assert!(after > before);
    assert_eq!(info_field(&mut c, "rdb_changes_since_last_save"), "0");

    // A BGSAVE that cannot write: MISCONF on writes (and PING), as Redis.
    std::fs::remove_dir_all(&dir.0).unwrap();
    let saves: u64 = info_field(&mut c, "rdb_saves").parse().unwrap();
    let reply: String = redis::cmd("BGSAVE").query(&mut c).unwrap();
    assert_eq!(reply, "Background saving started");
    let deadline = Instant::now() + Duration::from_secs(20);
    while info_field(&mut c, "rdb_last_bgsave_status") != "err" {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    let misconf = "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk. Commands that may modify the data set are disabled, because this instance is configured to report errors during writes if RDB snapshotting fails (stop-writes-on-bgsave-error option). Please check the Redis logs for details about the RDB error.";
    raw.send(b"SET k v2\r\nGET k\r\nPING\r\n");
    let set = raw.read().unwrap();
    assert_eq!(format!("{set:?}"), format!("{:?}", proxy::resp::Value::Error(misconf.as_bytes().to_vec())));
    assert_eq!(format!("{:?}", raw.read().unwrap()), format!("{:?}", proxy::resp::Value::Bulk(b"v".to_vec())));
    assert!(matches!(raw.read().unwrap(), proxy::resp::Value::Error(_)));
    // Writes come back once a BGSAVE succeeds again.
    std::fs::create_dir_all(&dir.0).unwrap();
    let _: String = redis::cmd("BGSAVE").query(&mut c).unwrap();
    wait_for_bgsave(&mut c, saves);
    let _: () = redis::cmd("SET").arg("k").arg("v3").query(&mut c).unwrap();
    // Or once no save point is configured.
    let _: () = redis::cmd("CONFIG").arg("SET").arg("save").arg("").query(&mut c).unwrap();
    let save: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("save").query(&mut c).unwrap();
    assert_eq!(save[1], "");
}

/// A save leaves the dump and nothing else (parts and temp file removed).
#[test]
fn save_leaves_only_the_dump() {
    let dir = TempDir::new("temp");
    let server = corekv(&dir, 2);
    let mut c = server.client();
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut c).unwrap();
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    let names: Vec<String> =
        std::fs::read_dir(&dir.0).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, vec!["dump.rdb".to_string()]);
}

/// FLUSHALL and overwrites right after BGSAVE replied (during the walk):
/// the file still holds the keyspace as it was at the cut.
#[test]
fn flushall_during_bgsave_keeps_the_cut() {
    let dir = TempDir::new("flush");
    let server = corekv(&dir, 3);
    let mut c = server.client();
    let mut p = redis::pipe();
    for i in 0..100_000 {
        p.cmd("SET").arg(format!("k{i}")).arg(i).ignore();
    }
    p.cmd("SELECT").arg(2).cmd("SET").arg("other-db").arg("x").ignore().cmd("SELECT").arg(0).ignore();
    p.query::<()>(&mut c).unwrap();
    let saves: u64 = info_field(&mut c, "rdb_saves").parse().unwrap();
    let mut p = redis::pipe();
    p.cmd("BGSAVE").ignore().cmd("SET").arg("k1").arg("changed").ignore().cmd("FLUSHALL").ignore();
    p.cmd("SET").arg("after").arg("1").ignore();
    p.query::<()>(&mut c).unwrap();
    wait_for_bgsave(&mut c, saves);
    let size: usize = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(size, 1, "the flush happened");
    kill9(server);
    let server = corekv(&dir, 2);
    let mut c = server.client();
    let size: usize = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(size, 100_000);
    let v: String = redis::cmd("GET").arg("k1").query(&mut c).unwrap();
    assert_eq!(v, "1");
    let after: Option<String> = redis::cmd("GET").arg("after").query(&mut c).unwrap();
    assert_eq!(after, None);
    let other: String = redis::cmd("SELECT").arg(2).query(&mut c).unwrap();
    assert_eq!(other, "OK");
    let v: String = redis::cmd("GET").arg("other-db").query(&mut c).unwrap();
    assert_eq!(v, "x");
}

/// A client hanging up in the middle of SAVE does not leave the save lock
/// held: later saves still work.
#[test]
fn a_client_leaving_mid_save_does_not_wedge_saves() {
    let dir = TempDir::new("hangup");
    let server = corekv(&dir, 2);
    let mut c = server.client();
    let mut p = redis::pipe();
    for i in 0..50_000 {
        p.cmd("SET").arg(format!("k{i}")).arg(i).ignore();
    }
    p.query::<()>(&mut c).unwrap();
    for _ in 0..3 {
        let mut raw = server.raw();
        raw.send(b"SAVE\r\n");
        drop(raw);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match redis::cmd("SAVE").query::<()>(&mut c) {
            Ok(()) => break,
            Err(e) => {
                assert!(e.to_string().contains("already in progress"), "{e}");
                assert!(Instant::now() < deadline, "the save lock stays held");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    assert_eq!(info_field(&mut c, "rdb_bgsave_in_progress"), "0");
}

/// BGSAVE inside a transaction over several shards: EXEC holds its keys
/// as one unit and the cut waits for every unit, so the save starts after
/// EXEC (it deadlocked: no reply, and those keys locked for every client).
/// The snapshot has the whole transaction; a second BGSAVE in it gets
/// Redis's error.
#[test]
fn bgsave_inside_a_transaction_over_shards() {
    let dir = TempDir::new("bgsave-exec");
    let server = corekv(&dir, 2);
    let mut c = server.client();
    let saves: u64 = info_field(&mut c, "rdb_saves").parse().unwrap();
    let mut raw = server.raw();
    for line in ["WATCH w", "MULTI", "SET a 1", "SET b 2", "SET c 3", "BGSAVE", "BGSAVE"] {
        raw.cmd_str(line);
    }
    let reply = raw.cmd_str("EXEC");
    let expected = proxy::resp::Value::Array(vec![
        proxy::resp::Value::Simple(b"OK".to_vec()),
        proxy::resp::Value::Simple(b"OK".to_vec()),
        proxy::resp::Value::Simple(b"OK".to_vec()),
        proxy::resp::Value::Simple(b"Background saving started".to_vec()),
        proxy::resp::Value::Error(b"ERR Background save already in progress".to_vec()),
    ]);
    assert_eq!(reply, expected);
    wait_for_bgsave(&mut c, saves);
    let values: Vec<String> = redis::cmd("MGET").arg(&["a", "b", "c"]).query(&mut c).unwrap();
    assert_eq!(values, ["1", "2", "3"]);
    drop(server);
    let server = corekv(&dir, 2);
    let values: Vec<String> = redis::cmd("MGET").arg(&["a", "b", "c"]).query(&mut server.client()).unwrap();
    assert_eq!(values, ["1", "2", "3"], "the snapshot holds the whole transaction");
}

/// SIGTERM whose final save fails keeps the server running, as Redis does
/// ("can't exit"); the next SIGTERM, once saving works, saves and exits.
#[test]
fn sigterm_with_a_failing_save_keeps_serving() {
    let dir = TempDir::new("sigterm-fail");
    let mut server = corekv(&dir, 2);
    let mut c = server.client();
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut c).unwrap();
    std::fs::remove_dir_all(&dir.0).unwrap();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.log.lock().unwrap().iter().any(|l| l.contains("can't exit")) {
        assert!(Instant::now() < deadline, "no failed-save line: {:?}", server.log.lock().unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(server.is_running());
    let got: String = redis::cmd("GET").arg("k").query(&mut c).unwrap();
    assert_eq!(got, "v");
    std::fs::create_dir_all(&dir.0).unwrap();
    assert!(server.terminate().success());
    assert!(dir.file("dump.rdb").exists());
}

/// A save point fires as Redis's cron does: at least `changes` writes and
/// more than `seconds` since the last save.
#[test]
fn a_save_point_saves_in_the_background() {
    let dir = TempDir::new("save-point");
    let server = Server::start(&["--shards", "2", "--dir", dir.path(), "--save", "1 3"]);
    let mut c = server.client();
    let _: () = redis::cmd("SET").arg("a").arg(1).query(&mut c).unwrap();
    let _: () = redis::cmd("SET").arg("b").arg(2).query(&mut c).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    // Two changes of the three the point needs: no save.
    assert_eq!(info_field(&mut c, "rdb_saves"), "0");
    let _: () = redis::cmd("SET").arg("c").arg(3).query(&mut c).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_field(&mut c, "rdb_saves") != "1" {
        assert!(Instant::now() < deadline, "no save");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(info_field(&mut c, "rdb_changes_since_last_save"), "0");
    assert!(dir.file("dump.rdb").exists());
    assert!(server.log.lock().unwrap().iter().any(|l| l.contains("3 changes in 1 seconds. Saving...")));
}

/// `key` restored from a DUMP of "v" with `option` (FREQ n / IDLETIME s).
fn restore_with(c: &mut Connection, key: &str, option: &str, n: i64) {
    let _: () = redis::cmd("SET").arg("tmp").arg("v").query(c).unwrap();
    let payload: Vec<u8> = redis::cmd("DUMP").arg("tmp").query(c).unwrap();
    let _: () = redis::cmd("RESTORE").arg(key).arg(0).arg(payload).arg("REPLACE").arg(option).arg(n).query(c).unwrap();
    let _: () = redis::cmd("DEL").arg("tmp").query(c).unwrap();
}

fn object(c: &mut Connection, what: &str, key: &str) -> i64 {
    redis::cmd("OBJECT").arg(what).arg(key).query(c).unwrap()
}

#[test]
fn dumps_keep_lfu_frequency_and_lru_idle_time() {
    common::ensure_test_deps();
    // Redis writes FREQ under an LFU policy and IDLE under an LRU one, and
    // each is applied on load under the loader's policy; corekv reads
    // Redis's files, Redis reads corekv's, corekv its own.
    for (policy, what, option, n) in
        [("allkeys-lfu", "FREQ", "FREQ", 100), ("allkeys-lru", "IDLETIME", "IDLETIME", 5000)]
    {
        let check = |c: &mut Connection, from: &str| {
            let got = object(c, what, "k");
            let ok = if what == "FREQ" { (n - 1..=n).contains(&got) } else { (n..n + 60).contains(&got) };
            assert!(ok, "{policy}: OBJECT {what} after loading {from}'s file: {got}, wanted {n}");
        };
        let args = ["--maxmemory-policy", policy];
        let dir = TempDir::new("access-from-redis");
        let redis = Redis::start_with(&[&args[..], &["--dir", dir.path(), "--dbfilename", "dump.rdb"]].concat());
        let mut r = redis_conn(redis.port);
        restore_with(&mut r, "k", option, n);
        let _: () = redis::cmd("SAVE").query(&mut r).unwrap();
        drop(redis);
        let server = Server::start(&[&args[..], &["--shards", "2", "--dir", dir.path()]].concat());
        check(&mut server.client(), "redis-server");
        // corekv's own file, restarted, and read by redis-server.
        let mut c = server.client();
        restore_with(&mut c, "k", option, n);
        let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
        drop(c);
        kill9(server);
        let server = Server::start(&[&args[..], &["--shards", "2", "--dir", dir.path()]].concat());
        check(&mut server.client(), "corekv");
        kill9(server);
        let redis = Redis::start_with(&[&args[..], &["--dir", dir.path(), "--dbfilename", "dump.rdb"]].concat());
        check(&mut redis_conn(redis.port), "corekv (redis-server loading)");
        // Under another policy the file carries neither and nothing is applied.
        drop(redis);
        let server = Server::start(&["--maxmemory-policy", "allkeys-random", "--dir", dir.path()]);
        let mut c = server.client();
        let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
        let file = std::fs::read(dir.file("dump.rdb")).unwrap();
        let at = file.windows(3).position(|w| w == [0, 1, b'k']).expect("the key in the file");
        // [IDLE len] or [FREQ n] would sit right before the type byte.
        assert!(!matches!(file[at - 2], 248 | 249), "{policy}: IDLE/FREQ written under allkeys-random");
    }
}

/// Lists of compressible values with `list-compress-depth` 1 and 2.
fn populate_compressed_lists(c: &mut Connection) {
    for (key, n) in [("lz:a", 400), ("lz:b", 1000), ("lz:short", 9)] {
        let mut p = redis::pipe();
        for i in 0..n {
            p.cmd("RPUSH").arg(key).arg(format!("{key}:{i:05}:{}", "compressible".repeat(5))).ignore();
        }
        p.query::<()>(c).unwrap();
    }
    // LSET and LINSERT inside compressed nodes.
    let _: () = redis::cmd("LSET").arg("lz:b").arg(500).arg("set in the middle").query(c).unwrap();
    let _: i64 = redis::cmd("LINSERT")
        .arg("lz:a")
        .arg("AFTER")
        .arg(format!("lz:a:00200:{}", "compressible".repeat(5)))
        .arg("inserted")
        .query(c)
        .unwrap();
}

/// corekv's file with compressed list nodes written as Redis does (the LZF
/// blob of each compressed node, also with rdbcompression off): redis-check-rdb
/// accepts it, redis-server loads the same values and then DUMPs them byte
/// for byte as corekv does; and corekv loads redis-server's such file.
#[test]
fn compressed_list_nodes_interop_with_redis() {
    common::ensure_test_deps();
    let config = ["--list-compress-depth", "2", "--list-max-listpack-size", "8", "--rdbcompression", "no"];
    let dir = TempDir::new("lz-to-redis");
    let mut args = vec!["--shards", "3", "--dir", dir.path()];
    args.extend(config);
    let server = Server::start(&args);
    let mut c = server.client();
    populate_compressed_lists(&mut c);
    let before = state(&mut c);
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    let file = std::fs::read(dir.file("dump.rdb")).unwrap();
    // rdbcompression is off, so LZF strings are the compressed nodes.
    assert!(file.windows(2).filter(|w| w == &[0x02, 0xc3]).count() > 100, "no compressed quicklist nodes written");
    let check = Command::new("redis-check-rdb").arg(dir.file("dump.rdb")).output().unwrap();
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success() && text.contains("RDB looks OK"), "{text}");
    let mut redis_args = vec!["--dir", dir.path(), "--dbfilename", "dump.rdb"];
    redis_args.extend(config);
    let redis = Redis::start_with(&redis_args);
    let mut r = redis_conn(redis.port);
    assert_eq!(state(&mut r), before);
    // Same nodes, same compression: the same payloads.
    let ours = dumps(&mut c).unwrap();
    let theirs = dumps(&mut r).unwrap();
    assert_eq!(ours.keys().collect::<Vec<_>>(), theirs.keys().collect::<Vec<_>>());
    for (key, payload) in &ours {
        assert!(theirs[key] == *payload, "DUMP {key} differs from redis-server's");
    }
    drop(server);

    // Back: redis-server's file, read by corekv.
    let _: () = redis::cmd("SAVE").query(&mut r).unwrap();
    drop(redis);
    for shards in ["1", "3"] {
        let mut args = vec!["--shards", shards, "--dir", dir.path()];
        args.extend(config);
        let server = Server::start(&args);
        let mut c = server.client();
        assert_eq!(state(&mut c), before, "{shards} shard(s)");
        kill9(server);
    }
}
