//! Background persistence jobs next to each other and AOF write errors,
//! each scenario run step for step on the real binary and on a real
//! redis-server, replies compared: BGSAVE [SCHEDULE] during an AOF rewrite,
//! BGREWRITEAOF during a BGSAVE (both started later by the cron); with
//! `appendfsync everysec` a full disk refuses writes with MISCONF and the
//! server recovers once space is back, losing no acknowledged write.

mod common;

use common::{Raw, Redis, Server, TempDir};
use proxy::resp::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A reply in one line: `+status`, `-error`, `:int`, or a bulk's text.
fn say(raw: &mut Raw, line: &str) -> String {
    text(raw.cmd_str(line))
}

fn text(v: Value) -> String {
    match v {
        Value::Simple(s) => format!("+{}", String::from_utf8_lossy(&s)),
        Value::Error(s) => format!("-{}", String::from_utf8_lossy(&s)),
        Value::Int(n) => format!(":{n}"),
        Value::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        v => format!("{v:?}"),
    }
}

/// `field:value` from INFO persistence.
fn field(raw: &mut Raw, name: &str) -> String {
    let info = say(raw, "INFO persistence");
    let prefix = format!("{name}:");
    let line = info.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("{name} in {info}"));
    line.to_string()
}

/// Polls INFO persistence until it holds every one of `fields`.
fn wait_for(raw: &mut Raw, fields: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let info = say(raw, "INFO persistence");
        if fields.iter().all(|f| info.lines().any(|l| l == *f)) {
            return;
        }
        assert!(Instant::now() < deadline, "{fields:?} never in {info}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The same steps on either server; every reply and INFO field it checks.
/// `rdb-key-save-delay` (100 ms a key) keeps each job running for seconds.
fn schedule_each_other(raw: &mut Raw) -> Vec<String> {
    for i in 0..40 {
        raw.cmd_str(&format!("SET k{i} v{i}"));
    }
    raw.cmd_str("CONFIG SET rdb-key-save-delay 100000");
    let mut seen = vec![
        say(raw, "BGREWRITEAOF"),
        say(raw, "BGREWRITEAOF"),
        say(raw, "BGSAVE"),
        say(raw, "BGSAVE SCHEDULE"),
        field(raw, "aof_rewrite_in_progress"),
        field(raw, "rdb_bgsave_in_progress"),
    ];
    // The rewrite ends; the cron starts the scheduled save.
    wait_for(raw, &["rdb_bgsave_in_progress:1"]);
    seen.extend([
        field(raw, "aof_rewrite_in_progress"),
        say(raw, "BGSAVE"),
        say(raw, "BGSAVE SCHEDULE"),
        say(raw, "BGREWRITEAOF"),
        field(raw, "aof_rewrite_scheduled"),
    ]);
    raw.cmd_str("CONFIG SET rdb-key-save-delay 0");
    // The save ends; the cron starts the scheduled rewrite.
    wait_for(
        raw,
        &["rdb_bgsave_in_progress:0", "aof_rewrite_scheduled:0", "aof_rewrite_in_progress:0", "aof_rewrites:2"],
    );
    for name in ["rdb_saves", "rdb_last_bgsave_status", "aof_last_bgrewrite_status"] {
        seen.push(field(raw, name));
    }
    seen
}

#[test]
fn bgsave_and_bgrewriteaof_schedule_each_other_as_redis() {
    common::ensure_test_deps();
    let (redis_dir, corekv_dir) = (TempDir::new("sched-redis"), TempDir::new("sched-corekv"));
    let redis = Redis::start_with(&["--dir", redis_dir.path(), "--appendonly", "yes"]);
    let expected = schedule_each_other(&mut redis.raw());
    assert_eq!(
        expected[..4],
        [
            "+Background append only file rewriting started",
            "-ERR Background append only file rewriting already in progress",
            "-ERR Another child process is active (AOF?): can't BGSAVE right now. Use BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible.",
            "+Background saving scheduled",
        ]
    );
    let server = Server::start_in(Some(&corekv_dir.0), &["--shards", "2", "--appendonly", "yes"]);
    assert_eq!(schedule_each_other(&mut server.raw()), expected);
    // The scheduled save wrote the dump, the scheduled rewrite new bases.
    drop(server);
    assert!(corekv_dir.0.join("dump.rdb").exists());
    let server = Server::start_in(Some(&corekv_dir.0), &["--shards", "2", "--appendonly", "yes"]);
    assert_eq!(say(&mut server.raw(), "GET k39"), "v39");
}

#[test]
fn save_during_a_rewrite_answers_as_redis_once_the_rewrite_is_done() {
    common::ensure_test_deps();
    let (redis_dir, corekv_dir) = (TempDir::new("save-redis"), TempDir::new("save-corekv"));
    let redis = Redis::start_with(&["--dir", redis_dir.path(), "--appendonly", "yes"]);
    let server = Server::start_in(Some(&corekv_dir.0), &["--shards", "2", "--appendonly", "yes"]);
    for raw in [&mut redis.raw(), &mut server.raw()] {
        for i in 0..20 {
            raw.cmd_str(&format!("SET k{i} v{i}"));
        }
        raw.cmd_str("CONFIG SET rdb-key-save-delay 50000");
        assert_eq!(say(raw, "BGREWRITEAOF"), "+Background append only file rewriting started");
        assert_eq!(say(raw, "SAVE"), "+OK");
    }
    // corekv's SAVE waited for the rewrite (Redis saves beside its child).
    let mut raw = server.raw();
    assert_eq!(field(&mut raw, "aof_rewrite_in_progress"), "aof_rewrite_in_progress:0");
    assert_eq!(field(&mut raw, "aof_rewrites"), "aof_rewrites:1");
    assert!(corekv_dir.0.join("dump.rdb").exists());
}

/// A tmpfs of `size` mounted on a fresh folder (needs root), unmounted and
/// removed when dropped.
struct Tmpfs(TempDir);

impl Tmpfs {
    fn mount(name: &str, size: &str) -> Option<Tmpfs> {
        let dir = TempDir::new(name);
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir.0)
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs(dir))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0 .0).status();
    }
}

/// Fills the disk until writes are refused, checks the refusal, frees
/// space and waits until writes are accepted again. Returns what it saw
/// and how many values were acknowledged.
/// `meanwhile` runs while writes are refused.
fn fill_and_recover(raw: &mut Raw, ballast: &Path, meanwhile: impl FnOnce(&mut Raw)) -> (Vec<String>, usize) {
    let value = "x".repeat(32 << 10);
    let mut acked = 0;
    let refusal = loop {
        let reply = text(raw.cmd(&[b"SET", format!("big{acked}").as_bytes(), value.as_bytes()]));
        if reply != "+OK" {
            break reply;
        }
        acked += 1;
        assert!(acked < 200, "the disk never filled");
    };
    let mut seen =
        vec![refusal, say(raw, "PING"), say(raw, "GET k"), field(raw, "aof_last_write_status"), say(raw, "SET k 2")];
    meanwhile(raw);
    std::fs::remove_file(ballast).unwrap();
    // Retried once a second until a write succeeds.
    let deadline = Instant::now() + Duration::from_secs(30);
    while say(raw, "PING") != "+PONG" {
        assert!(Instant::now() < deadline, "writes never accepted again");
        std::thread::sleep(Duration::from_millis(50));
    }
    seen.extend([field(raw, "aof_last_write_status"), say(raw, "SET k 3"), say(raw, "GET k")]);
    (seen, acked)
}

fn ballast_in(dir: &Path) -> PathBuf {
    let path = dir.join("ballast");
    std::fs::write(&path, vec![0u8; 256 << 10]).unwrap();
    path
}

#[test]
fn a_full_disk_refuses_writes_until_the_aof_can_be_written_again() {
    common::ensure_test_deps();
    let Some(redis_disk) = Tmpfs::mount("full-redis", "1m") else {
        eprintln!("SKIPPED: mounting a tmpfs needs root");
        return;
    };
    let redis_ballast = ballast_in(&redis_disk.0 .0);
    let redis = Redis::start_with(&["--dir", redis_disk.0.path(), "--appendonly", "yes"]);
    let mut raw = redis.raw();
    raw.cmd_str("SET k 1");
    let (expected, _) = fill_and_recover(&mut raw, &redis_ballast, |_| {});
    assert_eq!(expected[0], "-MISCONF Errors writing to the AOF file: No space left on device");
    drop(redis);

    let disk = Tmpfs::mount("full-corekv", "1m").expect("mounted once already");
    let ballast = ballast_in(&disk.0 .0);
    let args = ["--shards", "2", "--appendonly", "yes", "--appendfsync", "everysec"];
    let server = Server::start_in(Some(&disk.0 .0), &args);
    let mut raw = server.raw();
    raw.cmd_str("SET k 1");
    // A rewrite on the full disk fails; the server goes on.
    let rewrite_fails = |raw: &mut Raw| {
        assert_eq!(say(raw, "BGREWRITEAOF"), "+Background append only file rewriting started");
        wait_for(raw, &["aof_rewrite_in_progress:0", "aof_last_bgrewrite_status:err"]);
        assert!(say(raw, "PING").starts_with("-MISCONF"));
    };
    let (seen, acked) = fill_and_recover(&mut raw, &ballast, rewrite_fails);
    assert_eq!(seen, expected);
    assert_eq!(say(&mut raw, "BGREWRITEAOF"), "+Background append only file rewriting started");
    wait_for(&mut raw, &["aof_rewrite_in_progress:0", "aof_last_bgrewrite_status:ok"]);
    raw.cmd_str("SET after rewrite");
    let log = server.log.lock().unwrap().join("\n");
    // The first failure logs (a short write or ENOSPC); Redis's rate limit
    // keeps the retries quiet.
    assert!(
        log.contains("Error writing to the AOF file: No space left on device")
            || log.contains("Short write while writing to the AOF file"),
        "{log}"
    );
    assert!(log.contains("AOF write error looks solved, Redis can write again."), "{log}");
    // Every acknowledged write reached the files once, in order (SIGTERM:
    // with everysec a reply may leave before its batch is written).
    assert!(server.terminate().success());
    let server = Server::start_in(Some(&disk.0 .0), &args);
    let mut raw = server.raw();
    assert_eq!(say(&mut raw, "GET k"), "3");
    assert_eq!(say(&mut raw, "DBSIZE"), format!(":{}", acked + 2));
    assert_eq!(say(&mut raw, &format!("STRLEN big{}", acked - 1)), format!(":{}", 32 << 10));
}

#[test]
fn with_appendfsync_always_a_write_error_stops_the_server() {
    let Some(disk) = Tmpfs::mount("full-always", "1m") else {
        eprintln!("SKIPPED: mounting a tmpfs needs root");
        return;
    };
    let server = Server::start_in(Some(&disk.0 .0), &["--appendonly", "yes", "--appendfsync", "always"]);
    let mut raw = server.raw();
    let value = "x".repeat(32 << 10);
    for i in 0..200 {
        raw.send(&Raw::encode(&[b"SET", format!("big{i}").as_bytes(), value.as_bytes()]));
        match raw.read() {
            Some(Value::Simple(_)) => {}
            Some(other) => panic!("{other:?}"),
            None => break,
        }
    }
    let log = server.log.clone();
    let status = server.wait_exit(Duration::from_secs(10)).expect("the server exits");
    assert!(!status.success());
    let log = log.lock().unwrap().join("\n");
    assert!(
        log.contains("Can't recover from AOF write error when the AOF fsync policy is 'always'. Exiting..."),
        "{log}"
    );
}
