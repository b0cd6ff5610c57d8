//! FAILOVER end to end: corekv handing over to a redis-server replica and
//! to a corekv replica, a redis-server primary handing over to corekv, the
//! PSYNC ... FAILOVER a demoted primary sends (read by a socket playing
//! the target), and TIMEOUT, FORCE, ABORT and every error compared with
//! redis-server's replies to the same calls. Nothing here asserts timings.

mod common;

use common::{Raw, Redis, Server, TempDir};
use proxy::resp::Value;
use std::net::TcpListener;
use std::time::{Duration, Instant};

fn text(v: &Value) -> String {
    match v {
        Value::Simple(b) | Value::Bulk(b) | Value::Verbatim(b) | Value::Error(b) => String::from_utf8_lossy(b).into(),
        Value::Int(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

fn field(raw: &mut Raw, name: &str) -> String {
    let info = text(&raw.cmd_str("INFO replication"));
    info.lines().find_map(|l| l.strip_prefix(&format!("{name}:")).map(|v| v.trim().to_string())).unwrap_or_default()
}

/// The one replica has its snapshot (connected_slaves counts it from its
/// PSYNC on; FAILOVER TO wants it online).
fn replica_online(raw: &mut Raw) -> bool {
    field(raw, "connected_slaves") == "1" && field(raw, "slave0").contains("state=online")
}

fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ok() -> Value {
    Value::Simple(b"OK".to_vec())
}

fn role(raw: &mut Raw) -> String {
    match raw.cmd_str("ROLE") {
        Value::Array(a) => text(&a[0]),
        other => panic!("ROLE: {other:?}"),
    }
}

/// A replica whose link is up and whose offset is its primary's.
fn in_sync(primary: &mut Raw, replica: &mut Raw) -> bool {
    field(replica, "master_link_status") == "up"
        && field(primary, "master_repl_offset") == field(replica, "slave_repl_offset")
}

/// A corekv server whose log is printed when the test fails.
struct Logged(Server);

impl std::ops::Deref for Logged {
    type Target = Server;
    fn deref(&self) -> &Server {
        &self.0
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("corekv :{} log:\n{}", self.0.port, self.0.log.lock().unwrap().join("\n"));
        }
    }
}

fn corekv(dir: &TempDir, shards: &str) -> Logged {
    Logged(Server::start_in(Some(&dir.0), &["--shards", shards, "--dir", dir.path(), "--save", ""]))
}

fn redis(dir: &TempDir, extra: &[&str]) -> Redis {
    let mut args = vec!["--dir", dir.path()];
    args.extend_from_slice(extra);
    Redis::start_with(&args)
}

fn replicaof(raw: &mut Raw, port: u16) {
    assert_eq!(raw.cmd(&[b"REPLICAOF", b"127.0.0.1", port.to_string().as_bytes()]), ok());
}

/// Keys of several types over several databases.
fn fill(c: &mut Raw, prefix: &str) {
    for db in [0, 3] {
        c.cmd(&[b"SELECT", db.to_string().as_bytes()]);
        for i in 0..200 {
            let key = format!("{prefix}s{i}");
            c.cmd(&[b"SET", key.as_bytes(), i.to_string().as_bytes()]);
        }
        c.cmd_str(&format!("RPUSH {prefix}list a b c"));
        c.cmd_str(&format!("HSET {prefix}hash f v g w"));
        c.cmd_str(&format!("SADD {prefix}set x y z"));
        c.cmd_str(&format!("ZADD {prefix}zset 1 a 2 b"));
        c.cmd_str(&format!("SET {prefix}ttl v EX 1000"));
    }
    c.cmd_str("SELECT 0");
}

/// Every database's keys and values, as one comparable text.
fn dataset(c: &mut Raw) -> Vec<String> {
    let mut out = Vec::new();
    for db in 0..16 {
        c.cmd(&[b"SELECT", db.to_string().as_bytes()]);
        let Value::Array(keys) = c.cmd_str("KEYS *") else { panic!("KEYS") };
        for key in keys.iter().map(text) {
            let kind = text(&c.cmd(&[b"TYPE", key.as_bytes()]));
            let value = match kind.as_str() {
                "string" => text(&c.cmd(&[b"GET", key.as_bytes()])),
                "list" => format!("{:?}", c.cmd(&[b"LRANGE", key.as_bytes(), b"0", b"-1"])),
                "hash" => text(&c.cmd(&[b"HLEN", key.as_bytes()])),
                "set" => text(&c.cmd(&[b"SCARD", key.as_bytes()])),
                "zset" => format!("{:?}", c.cmd(&[b"ZRANGE", key.as_bytes(), b"0", b"-1", b"WITHSCORES"])),
                other => other.to_string(),
            };
            let ttl = matches!(c.cmd(&[b"TTL", key.as_bytes()]), Value::Int(t) if t > 0);
            out.push(format!("{db}/{key}={value} ttl={ttl}"));
        }
    }
    c.cmd_str("SELECT 0");
    out.sort();
    out
}

/// FAILOVER on `old` (a primary with `new` as its replica, in sync): a
/// write sent right after it is held, then refused as `old` is a replica;
/// `new` ends up the primary and `old` its replica with the same data.
fn hand_over(old: &mut Raw, new: &mut Raw, old_port: u16, writer: &mut Raw) {
    until("the replica in sync", || in_sync(old, new));
    let before = dataset(old);
    assert_eq!(old.cmd_str("FAILOVER"), ok());
    writer.send(&Raw::encode(&[b"SET", b"late", b"1"]));
    until("the new roles", || {
        role(new) == "master" && role(old) == "slave" && field(old, "master_link_status") == "up"
    });
    match writer.read() {
        Some(Value::Error(e)) => assert!(e.starts_with(b"READONLY"), "{}", String::from_utf8_lossy(&e)),
        other => panic!("the held write: {other:?}"),
    }
    assert_eq!(field(old, "master_failover_state"), "no-failover");
    assert_eq!(field(old, "master_port"), new.stream.peer_addr().unwrap().port().to_string());
    let Value::Array(r) = new.cmd_str("ROLE") else { panic!("ROLE") };
    match &r[2] {
        Value::Array(replicas) if replicas.len() == 1 => {
            let Value::Array(replica) = &replicas[0] else { panic!("ROLE: {r:?}") };
            assert_eq!(text(&replica[1]), old_port.to_string(), "{r:?}");
        }
        other => panic!("ROLE's replicas: {other:?}"),
    }
    assert_eq!(dataset(new), before);
    // The new primary's writes reach the old one.
    assert_eq!(new.cmd_str("SET after failover"), ok());
    until("the write on the old primary", || old.cmd_str("GET after") == Value::Bulk(b"failover".to_vec()));
    until("the replica in sync again", || in_sync(new, old));
    assert_eq!(dataset(old), dataset(new));
}

#[test]
fn corekv_hands_over_to_a_redis_replica() {
    let (pdir, rdir) = (TempDir::new("fo-primary"), TempDir::new("fo-redis"));
    let primary = corekv(&pdir, "3");
    let mut p = primary.raw();
    fill(&mut p, "k:");
    let replica = redis(&rdir, &["--replicaof", "127.0.0.1", &primary.port.to_string()]);
    let mut r = replica.raw();
    fill(&mut p, "more:");
    let mut writer = primary.raw();
    hand_over(&mut p, &mut r, primary.port, &mut writer);
    assert!(matches!(p.cmd_str("SET x 1"), Value::Error(e) if e.starts_with(b"READONLY")));
}

#[test]
fn a_redis_primary_hands_over_to_corekv() {
    let (pdir, rdir) = (TempDir::new("fo-redis-primary"), TempDir::new("fo-corekv-replica"));
    let primary = redis(&pdir, &[]);
    let mut p = primary.raw();
    fill(&mut p, "k:");
    let replica = corekv(&rdir, "3");
    let mut r = replica.raw();
    replicaof(&mut r, primary.port);
    fill(&mut p, "more:");
    let mut writer = primary.raw();
    hand_over(&mut p, &mut r, primary.port, &mut writer);
    let replid2 = field(&mut r, "master_replid2");
    assert_eq!(replid2, field(&mut p, "master_replid2"));
}

#[test]
fn corekv_hands_over_to_corekv_and_back() {
    let (adir, bdir) = (TempDir::new("fo-a"), TempDir::new("fo-b"));
    let (a, b) = (corekv(&adir, "3"), corekv(&bdir, "2"));
    let (mut ra, mut rb) = (a.raw(), b.raw());
    fill(&mut ra, "k:");
    replicaof(&mut rb, a.port);
    fill(&mut ra, "more:");
    let mut writer = a.raw();
    hand_over(&mut ra, &mut rb, a.port, &mut writer);
    // And back: the old primary is promoted again, continuing partially.
    fill(&mut rb, "third:");
    let mut writer = b.raw();
    hand_over(&mut rb, &mut ra, b.port, &mut writer);
    let stats = text(&ra.cmd_str("INFO stats"));
    assert!(stats.contains("sync_partial_ok:1"), "{stats}");
}

/// A socket playing a replica that never acknowledges anything.
fn silent_replica(primary: u16, listening: u16) -> Raw {
    let mut r = Raw::connect(primary);
    assert_eq!(r.cmd(&[b"REPLCONF", b"listening-port", listening.to_string().as_bytes()]), ok());
    r.send(&Raw::encode(&[b"PSYNC", b"?", b"-1"]));
    r
}

fn blocked(raw: &mut Raw) -> String {
    let info = text(&raw.cmd_str("INFO clients"));
    info.lines().find_map(|l| l.strip_prefix("blocked_clients:").map(str::to_string)).unwrap_or_default()
}

#[test]
fn errors_timeout_and_abort_match_redis() {
    let (d1, d2) = (TempDir::new("fo-err-redis"), TempDir::new("fo-err-corekv"));
    let (redis, corekv) = (redis(&d1, &[]), corekv(&d2, "3"));
    let ports = [redis.port, corekv.port];
    let mut c = [redis.raw(), corekv.raw()];
    let same = |c: &mut [Raw; 2], line: &str| {
        let (a, b) = (c[0].cmd_str(line), c[1].cmd_str(line));
        assert_eq!(a, b, "{line}");
        a
    };
    let err = |v: Value| match v {
        Value::Error(e) => String::from_utf8_lossy(&e).into_owned(),
        other => panic!("not an error: {other:?}"),
    };
    assert_eq!(err(same(&mut c, "FAILOVER")), "ERR FAILOVER requires connected replicas.");
    assert_eq!(err(same(&mut c, "FAILOVER ABORT")), "ERR No failover in progress.");
    assert_eq!(err(same(&mut c, "PSYNC abc 1 FAILOVER")), "ERR PSYNC FAILOVER can't be sent to a master.");
    for line in [
        "FAILOVER TIMEOUT 0",
        "FAILOVER TIMEOUT -5",
        "FAILOVER TIMEOUT abc",
        "FAILOVER TO 127.0.0.1",
        "FAILOVER TO 127.0.0.1 abc",
        "FAILOVER BOGUS",
        "FAILOVER ABORT TIMEOUT 10",
        "FAILOVER TIMEOUT 10 TIMEOUT 10",
        "FAILOVER FORCE FORCE",
        "FAILOVER TO a 1 TO b 2",
    ] {
        err(same(&mut c, line));
    }
    // A replica that never acknowledges: a failover waits for it.
    let _fakes = [silent_replica(ports[0], 1), silent_replica(ports[1], 1)];
    for raw in c.iter_mut() {
        until("the replica online", || replica_online(raw));
        assert_eq!(raw.cmd_str("SET k v"), ok());
    }
    assert_eq!(
        err(same(&mut c, "FAILOVER FORCE")),
        "ERR FAILOVER with force option requires both a timeout and target HOST and IP."
    );
    err(same(&mut c, "FAILOVER TO 127.0.0.1 1 FORCE"));
    assert_eq!(
        err(same(&mut c, "FAILOVER TO 127.0.0.1 2 TIMEOUT 100")),
        "ERR FAILOVER target HOST and PORT is not a replica."
    );
    assert_eq!(same(&mut c, "FAILOVER TIMEOUT 600000"), ok());
    let mut writers = [redis.raw(), corekv.raw()];
    for (raw, writer) in c.iter_mut().zip(writers.iter_mut()) {
        assert_eq!(field(raw, "master_failover_state"), "waiting-for-sync");
        writer.send(&Raw::encode(&[b"SET", b"held", b"1"]));
        until("the write held", || blocked(raw) == "1");
    }
    assert_eq!(err(same(&mut c, "FAILOVER")), "ERR FAILOVER already in progress.");
    assert_eq!(err(same(&mut c, "REPLICAOF NO ONE")), "ERR REPLICAOF not allowed while failing over.");
    let psync = [Raw::connect(ports[0]).cmd_str("PSYNC ? -1"), Raw::connect(ports[1]).cmd_str("PSYNC ? -1")];
    assert_eq!(psync[0], psync[1]);
    assert_eq!(err(psync[1].clone()), "NOMASTERLINK Can't SYNC while failing over");
    // CLIENT UNPAUSE leaves the failover's pause.
    assert_eq!(same(&mut c, "CLIENT UNPAUSE"), ok());
    assert_eq!(same(&mut c, "GET held"), Value::Nil);
    assert_eq!(same(&mut c, "FAILOVER ABORT"), ok());
    for (raw, writer) in c.iter_mut().zip(writers.iter_mut()) {
        assert_eq!(writer.read(), Some(ok()));
        assert_eq!(field(raw, "master_failover_state"), "no-failover");
    }
    // TIMEOUT without FORCE gives up; the writes it held go through.
    assert_eq!(same(&mut c, "FAILOVER TIMEOUT 200"), ok());
    for (raw, writer) in c.iter_mut().zip(writers.iter_mut()) {
        writer.send(&Raw::encode(&[b"SET", b"after", b"timeout"]));
        assert_eq!(writer.read(), Some(ok()));
        assert_eq!(field(raw, "master_failover_state"), "no-failover");
        assert_eq!(role(raw), "master");
    }
    // On a replica.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    for raw in c.iter_mut() {
        replicaof(raw, closed);
    }
    assert_eq!(err(same(&mut c, "FAILOVER")), "ERR FAILOVER is not valid when server is a replica.");
    assert_eq!(err(same(&mut c, "PSYNC abc 1 FAILOVER")), "ERR PSYNC FAILOVER replid must match my replid.");
}

/// Plays a primary's side of a replica's handshake: the PSYNC's arguments,
/// or `None` if the link closed or sent something else first.
fn handshake(link: &mut Raw) -> Option<Vec<String>> {
    loop {
        let Some(Value::Array(args)) = link.read() else { return None };
        let args: Vec<String> = args.iter().map(text).collect();
        match args.first()?.to_ascii_uppercase().as_str() {
            "PING" => link.send(b"+PONG\r\n"),
            "REPLCONF" => link.send(b"+OK\r\n"),
            "PSYNC" => return Some(args),
            _ => return None,
        }
    }
}

/// FORCE after the timeout hands over to a replica that is behind; the
/// target (a socket here) sees the handshake and `PSYNC <replid> <offset+1>
/// FAILOVER`, and its +CONTINUE ends the failover.
#[test]
fn force_hands_over_with_psync_failover() {
    let dir = TempDir::new("fo-force");
    let primary = corekv(&dir, "3");
    let mut p = primary.raw();
    let target = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = target.local_addr().unwrap().port();
    let _fake = silent_replica(primary.port, port);
    until("the replica online", || replica_online(&mut p));
    assert_eq!(p.cmd_str("SET behind 1"), ok());
    let replid = field(&mut p, "master_replid");
    let line = format!("FAILOVER TO 127.0.0.1 {port} FORCE TIMEOUT 100");
    let reply = p.cmd_str(&line);
    assert_eq!(reply, ok(), "{}", text(&p.cmd_str("INFO replication")));
    let mut writer = primary.raw();
    writer.send(&Raw::encode(&[b"SET", b"held", b"1"]));
    // Another test's replica may be dialling a port it was told is closed
    // (tests run in parallel and ports are reused): only the link whose
    // PSYNC says FAILOVER is the primary's.
    let (mut link, psync) = loop {
        let (socket, _) = target.accept().unwrap();
        let mut link = Raw::from_stream(socket);
        if let Some(psync) = handshake(&mut link) {
            if psync.len() == 4 && psync[3] == "FAILOVER" {
                break (link, psync);
            }
        }
    };
    assert_eq!(psync.len(), 4, "{psync:?}");
    assert_eq!((psync[1].as_str(), psync[3].as_str()), (replid.as_str(), "FAILOVER"));
    let offset: u64 = psync[2].parse().unwrap();
    assert_eq!(offset, field(&mut p, "master_repl_offset").parse::<u64>().unwrap() + 1);
    assert_eq!(field(&mut p, "master_failover_state"), "failover-in-progress");
    link.send(format!("+CONTINUE {}\r\n", "f".repeat(40)).as_bytes());
    until("the failover's end", || field(&mut p, "master_failover_state") == "no-failover");
    match writer.read() {
        Some(Value::Error(e)) => assert!(e.starts_with(b"READONLY"), "{}", String::from_utf8_lossy(&e)),
        other => panic!("the held write: {other:?}"),
    }
    assert_eq!(field(&mut p, "master_link_status"), "up");
    assert_eq!(field(&mut p, "master_replid"), "f".repeat(40));
}
