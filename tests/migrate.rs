//! MIGRATE end to end: corekv (1 and 3 shards) to redis-server, redis-server
//! to corekv, corekv to corekv; every type, TTLs, COPY, REPLACE, BUSYKEY,
//! NOKEY, destination databases, AUTH and AUTH2; unreachable and silent
//! targets; the keys held while a migration waits on the network; the
//! cached connection; and every reply compared with redis-server's for the
//! same calls (a redis-server source next to a corekv source).

mod common;

use common::{Raw, Redis, Server};
use proxy::resp::Value;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

fn cmd(r: &mut Raw, parts: &[&str]) -> Value {
    let parts: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
    r.cmd(&parts)
}

fn ok() -> Value {
    Value::Simple(b"OK".to_vec())
}

fn err(text: &str) -> Value {
    Value::Error(text.as_bytes().to_vec())
}

/// Keys of every type, in several encodings, spread over the shards.
fn populate(r: &mut Raw) -> Vec<String> {
    let mut keys = Vec::new();
    for i in 0..4 {
        let big: Vec<String> = (0..300).map(|j| format!("e{j}")).collect();
        let mut setup: Vec<Vec<String>> = vec![
            vec!["SET".into(), format!("str:{i}"), format!("value {i}")],
            vec!["RPUSH".into(), format!("list:{i}"), "a".into(), "1".into(), "b".into()],
            vec!["HSET".into(), format!("hash:{i}"), "f1".into(), "v1".into(), "f2".into(), "2".into()],
            vec!["SADD".into(), format!("set:{i}"), "x".into(), "y".into(), "7".into()],
            vec!["ZADD".into(), format!("zset:{i}"), "1".into(), "a".into(), "2.5".into(), "b".into()],
            vec!["XADD".into(), format!("stream:{i}"), "1-1".into(), "f".into(), "v".into()],
        ];
        let mut list = vec!["RPUSH".to_string(), format!("biglist:{i}")];
        list.extend(big.iter().cloned());
        let mut set = vec!["SADD".to_string(), format!("bigset:{i}")];
        set.extend(big.iter().cloned());
        setup.push(list);
        setup.push(set);
        for c in setup {
            let parts: Vec<&str> = c.iter().map(String::as_str).collect();
            assert!(!matches!(cmd(r, &parts), Value::Error(_)), "{c:?}");
            keys.push(c[1].clone());
        }
        let xadd = format!("stream:{i}");
        cmd(r, &["XADD", &xadd, "2-1", "g", "w"]);
    }
    for k in ["str:1", "list:2", "hash:3", "zset:0", "stream:1", "bigset:2"] {
        assert_eq!(cmd(r, &["PEXPIRE", k, "100000000"]), Value::Int(1));
    }
    keys
}

fn sorted(v: Value, pairs: bool) -> Value {
    let Value::Array(items) = v else { return v };
    let mut items = items;
    if pairs {
        let mut p: Vec<Vec<Value>> = items.chunks(2).map(|c| c.to_vec()).collect();
        p.sort_by_key(|c| format!("{c:?}"));
        items = p.concat();
    } else {
        items.sort_by_key(|v| format!("{v:?}"));
    }
    Value::Array(items)
}

/// A key's type and whole content, comparable across servers.
fn view(r: &mut Raw, key: &str) -> Value {
    let Value::Simple(t) = cmd(r, &["TYPE", key]) else { panic!("TYPE") };
    let content = match &t[..] {
        b"string" => cmd(r, &["GET", key]),
        b"list" => cmd(r, &["LRANGE", key, "0", "-1"]),
        b"hash" => sorted(cmd(r, &["HGETALL", key]), true),
        b"set" => sorted(cmd(r, &["SMEMBERS", key]), false),
        b"zset" => cmd(r, &["ZRANGE", key, "0", "-1", "WITHSCORES"]),
        b"stream" => cmd(r, &["XRANGE", key, "-", "+"]),
        _ => Value::Nil,
    };
    Value::Array(vec![Value::Simple(t), content])
}

fn views(r: &mut Raw, keys: &[String]) -> Vec<(String, Value, bool)> {
    keys.iter()
        .map(|k| {
            let Value::Int(ttl) = cmd(r, &["PTTL", k]) else { panic!("PTTL") };
            (k.clone(), view(r, k), ttl > 0)
        })
        .collect()
}

fn migrate_keys(port: u16, db: &str, extra: &[&str], keys: &[String]) -> Vec<String> {
    let mut line: Vec<String> = ["MIGRATE", "127.0.0.1", &port.to_string(), "", db, "5000"].map(String::from).to_vec();
    line.extend(extra.iter().map(|s| s.to_string()));
    line.push("KEYS".into());
    line.extend(keys.iter().cloned());
    line
}

fn run(r: &mut Raw, line: &[String]) -> Value {
    let parts: Vec<&str> = line.iter().map(String::as_str).collect();
    cmd(r, &parts)
}

/// Every value moves with its TTL; the source keeps nothing.
fn moves_everything(source: &mut Raw, target: &mut Raw, target_port: u16) {
    let keys = populate(source);
    let before = views(source, &keys);
    let port = target_port.to_string();
    // The one-key form, then the rest (and a missing key) with KEYS.
    assert_eq!(cmd(source, &["MIGRATE", "127.0.0.1", &port, &keys[0], "0", "5000"]), ok());
    let mut rest = keys[1..].to_vec();
    rest.push("no-such-key".into());
    assert_eq!(run(source, &migrate_keys(target_port, "0", &[], &rest)), ok());
    assert_eq!(views(target, &keys), before);
    assert_eq!(cmd(source, &["DBSIZE"]), Value::Int(0));
    assert_eq!(cmd(target, &["DBSIZE"]), Value::Int(keys.len() as i64));
}

/// COPY, REPLACE, BUSYKEY, NOKEY and the destination database.
fn options(source: &mut Raw, target: &mut Raw, target_port: u16) {
    let port = target_port.to_string();
    let m = |key: &str, db: &str, extra: &[&str]| -> Vec<String> {
        let mut l: Vec<String> = ["MIGRATE", "127.0.0.1", &port, key, db, "5000"].map(String::from).to_vec();
        l.extend(extra.iter().map(|s| s.to_string()));
        l
    };
    cmd(source, &["SET", "c", "v1"]);
    assert_eq!(run(source, &m("c", "0", &["COPY"])), ok());
    assert_eq!(cmd(source, &["GET", "c"]), Value::Bulk(b"v1".to_vec()));
    assert_eq!(cmd(target, &["GET", "c"]), Value::Bulk(b"v1".to_vec()));
    let busy = err("ERR Target instance replied with error: BUSYKEY Target key name already exists.");
    assert_eq!(run(source, &m("c", "0", &[])), busy);
    assert_eq!(cmd(source, &["GET", "c"]), Value::Bulk(b"v1".to_vec()));
    cmd(source, &["SET", "c", "v2"]);
    assert_eq!(run(source, &m("c", "0", &["REPLACE"])), ok());
    assert_eq!(cmd(source, &["EXISTS", "c"]), Value::Int(0));
    assert_eq!(cmd(target, &["GET", "c"]), Value::Bulk(b"v2".to_vec()));
    assert_eq!(run(source, &m("c", "0", &[])), Value::Simple(b"NOKEY".to_vec()));
    assert_eq!(
        run(source, &migrate_keys(target_port, "0", &[], &["c".into(), "d".into()])),
        Value::Simple(b"NOKEY".to_vec())
    );
    // A value far larger than one 64 KiB write.
    let big: String = (0..3_000_000u32).map(|i| char::from(b'a' + (i % 23) as u8)).collect();
    cmd(source, &["SET", "big", &big]);
    assert_eq!(run(source, &m("big", "0", &[])), ok());
    assert_eq!(cmd(target, &["GET", "big"]), Value::Bulk(big.into_bytes()));
    // Expired keys are skipped like missing ones.
    cmd(source, &["SET", "gone", "x", "PX", "1"]);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(run(source, &m("gone", "0", &[])), Value::Simple(b"NOKEY".to_vec()));
    cmd(source, &["SET", "gone", "x", "PX", "1"]);
    cmd(source, &["SET", "kept", "y"]);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(run(source, &migrate_keys(target_port, "0", &[], &["gone".into(), "kept".into()])), ok());
    assert_eq!(cmd(target, &["EXISTS", "gone", "kept"]), Value::Int(1));
    cmd(source, &["SET", "in3", "x"]);
    assert_eq!(run(source, &m("in3", "3", &[])), ok());
    assert_eq!(cmd(target, &["EXISTS", "in3"]), Value::Int(0));
    cmd(target, &["SELECT", "3"]);
    assert_eq!(cmd(target, &["GET", "in3"]), Value::Bulk(b"x".to_vec()));
    cmd(target, &["SELECT", "0"]);
    // Back to db 0 on the cached connection: SELECT is sent again.
    cmd(source, &["SET", "in0", "y"]);
    assert_eq!(run(source, &m("in0", "0", &[])), ok());
    assert_eq!(cmd(target, &["GET", "in0"]), Value::Bulk(b"y".to_vec()));
    // A target that refuses one key of several: the others are moved.
    cmd(source, &["MSET", "e1", "1", "e2", "2", "e3", "3"]);
    cmd(target, &["SET", "e2", "there"]);
    let keys: Vec<String> = ["e1", "e2", "e3"].map(String::from).to_vec();
    assert_eq!(run(source, &migrate_keys(target_port, "0", &[], &keys)), busy);
    assert_eq!(cmd(source, &["EXISTS", "e1", "e2", "e3"]), Value::Int(1));
    assert_eq!(cmd(source, &["GET", "e2"]), Value::Bulk(b"2".to_vec()));
}

fn corekv_to_redis(shards: usize) {
    let server = Server::shards(shards);
    let redis = Redis::start();
    moves_everything(&mut server.raw(), &mut redis.raw(), redis.port);
    options(&mut server.raw(), &mut redis.raw(), redis.port);
}

#[test]
fn corekv_to_redis_one_shard() {
    corekv_to_redis(1);
}

#[test]
fn corekv_to_redis_three_shards() {
    corekv_to_redis(3);
}

#[test]
fn redis_to_corekv_three_shards() {
    let server = Server::shards(3);
    let redis = Redis::start();
    moves_everything(&mut redis.raw(), &mut server.raw(), server.port);
    options(&mut redis.raw(), &mut server.raw(), server.port);
}

#[test]
fn corekv_to_corekv() {
    let source = Server::shards(3);
    let target = Server::shards(2);
    moves_everything(&mut source.raw(), &mut target.raw(), target.port);
    options(&mut source.raw(), &mut target.raw(), target.port);
}

#[test]
fn auth_and_auth2() {
    let server = Server::shards(3);
    let redis = Redis::start();
    let mut t = redis.raw();
    assert_eq!(cmd(&mut t, &["CONFIG", "SET", "requirepass", "secret"]), ok());
    assert_eq!(cmd(&mut t, &["ACL", "SETUSER", "mover", "on", ">pw", "~*", "+@all"]), ok());
    let mut s = server.raw();
    let port = redis.port.to_string();
    cmd(&mut s, &["MSET", "a", "1", "b", "2", "c", "3"]);
    let m = |key: &str, extra: &[&str]| -> Vec<String> {
        let mut l: Vec<String> = ["MIGRATE", "127.0.0.1", &port, key, "0", "5000"].map(String::from).to_vec();
        l.extend(extra.iter().map(|s| s.to_string()));
        l
    };
    assert_eq!(
        run(&mut s, &m("a", &[])),
        err("ERR Target instance replied with error: NOAUTH Authentication required.")
    );
    assert_eq!(
        run(&mut s, &m("a", &["AUTH", "wrong"])),
        err("ERR Target instance replied with error: WRONGPASS invalid username-password pair or user is disabled.")
    );
    assert_eq!(cmd(&mut s, &["EXISTS", "a"]), Value::Int(1));
    assert_eq!(run(&mut s, &m("a", &["AUTH", "secret"])), ok());
    assert_eq!(run(&mut s, &m("b", &["AUTH2", "mover", "pw"])), ok());
    assert_eq!(run(&mut s, &m("", &["AUTH2", "mover", "pw", "KEYS", "c"])), ok());
    assert_eq!(cmd(&mut s, &["EXISTS", "a", "b", "c"]), Value::Int(0));
    let values = ["1", "2", "3"].map(|v| Value::Bulk(v.as_bytes().to_vec())).to_vec();
    assert_eq!(cmd(&mut t, &["MGET", "a", "b", "c"]), Value::Array(values));
}

/// A port with nothing listening.
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A target that accepts and reads but never answers, for as long as the
/// test holds it.
fn silent_target() -> (u16, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let handle = std::thread::spawn(move || {
        let mut held = Vec::new();
        let until = Instant::now() + Duration::from_secs(15);
        while Instant::now() < until {
            if let Ok((s, _)) = listener.accept() {
                held.push(s);
            }
            for s in &mut held {
                s.set_nonblocking(true).unwrap();
                let mut b = [0u8; 4096];
                let _ = s.read(&mut b);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    (port, handle)
}

/// Unreachable and silent targets: Redis's IOERR texts, and the source
/// keeps every key (keys over several shards).
#[test]
fn failed_targets_delete_nothing() {
    let server = Server::shards(3);
    let mut s = server.raw();
    let keys: Vec<String> = (0..12).map(|i| format!("key:{i}")).collect();
    for k in &keys {
        cmd(&mut s, &["SET", k, "v"]);
    }
    let (silent, _held) = silent_target();
    let cases = [
        // Redis's blocking connect reports a refused one as connected: its
        // first write fails.
        (closed_port(), "IOERR error or timeout writing to target instance"),
        (silent, "IOERR error or timeout reading to target instance"),
    ];
    for (port, text) in cases {
        let mut line = migrate_keys(port, "0", &[], &keys);
        line[5] = "300".into();
        assert_eq!(run(&mut s, &line), err(text));
        let one = ["MIGRATE", "127.0.0.1", &port.to_string(), "key:0", "0", "300"].map(String::from);
        assert_eq!(run(&mut s, &one), err(text));
        assert_eq!(cmd(&mut s, &["DBSIZE"]), Value::Int(keys.len() as i64));
    }
    let unresolved = ["MIGRATE", "", "6379", "key:0", "0", "300"].map(String::from);
    assert_eq!(run(&mut s, &unresolved), err("IOERR error or timeout connecting to the client"));
    assert_eq!(cmd(&mut s, &["DBSIZE"]), Value::Int(keys.len() as i64));
}

/// AUTH and AUTH2 credentials are redacted in the slow log as Redis does.
#[test]
fn credentials_are_redacted() {
    let (corekv, redis) = (Server::shards(2), Redis::start());
    let port = closed_port().to_string();
    let lines: &[&[&str]] = &[
        &["MIGRATE", "127.0.0.1", &port, "nokey", "0", "100", "AUTH", "pw", "COPY"],
        &["MIGRATE", "127.0.0.1", &port, "", "0", "100", "AUTH2", "u", "pw", "KEYS", "a", "auth", "b"],
        &["MIGRATE", "127.0.0.1", &port, "nokey", "0", "100", "AUTH", "pw", "BOGUS", "AUTH", "x"],
        &["MIGRATE", "127.0.0.1", &port, "nokey", "0", "100", "AUTH2", "u"],
    ];
    // All but the last (a syntax error before any credential) hide some.
    for line in lines {
        let mut got = Vec::new();
        for mut r in [redis.raw(), corekv.raw()] {
            cmd(&mut r, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
            cmd(&mut r, &["SLOWLOG", "RESET"]);
            cmd(&mut r, line);
            let Value::Array(entries) = cmd(&mut r, &["SLOWLOG", "GET", "2"]) else { panic!("SLOWLOG") };
            let args = entries.iter().find_map(|e| match e {
                Value::Array(f) if f[3].to_string_lossy().starts_with("MIGRATE") => Some(f[3].clone()),
                _ => None,
            });
            got.push(args);
        }
        let redacted = got[0].as_ref().map(|a| a.to_string_lossy().contains("(redacted)"));
        assert_eq!(redacted, Some(line.len() > 8), "{got:?}");
        assert_eq!(got[0], got[1], "{line:?}");
    }
}

/// In a cluster mode the target gets RESTORE-ASKING, as Redis Cluster sends.
#[test]
fn cluster_mode_sends_restore_asking() {
    let server = Server::start(&["--shards", "2", "--cluster-mode", "emulated"]);
    let redis = Redis::start();
    let (mut s, mut t) = (server.raw(), redis.raw());
    cmd(&mut s, &["SET", "{t}a", "1"]);
    cmd(&mut s, &["SET", "{t}b", "2"]);
    let line = migrate_keys(redis.port, "0", &[], &["{t}a".into(), "{t}b".into()]);
    assert_eq!(run(&mut s, &line), ok());
    let Value::Bulk(info) = cmd(&mut t, &["INFO", "commandstats"]) else { panic!("INFO") };
    let info = String::from_utf8_lossy(&info).into_owned();
    assert!(info.contains("cmdstat_restore-asking:calls=2,"), "{info}");
    assert!(!info.contains("cmdstat_restore:"), "{info}");
    assert_eq!(cmd(&mut t, &["MGET", "{t}a", "{t}b"]).to_string_lossy(), "1 2");
}

/// The same calls on a redis-server source and a corekv source (each with
/// its own redis-server target, both starting equal): the same replies.
#[test]
fn replies_match_redis() {
    let corekv = Server::shards(3);
    let (redis_src, t1, t2) = (Redis::start(), Redis::start(), Redis::start());
    let closed = closed_port().to_string();
    let (silent, _held) = silent_target();
    let silent = silent.to_string();
    let setup = ["MSET k 1 k2 2 k3 3 k4 4 k5 5 e1 1 e2 2 q1 1 q2 2", "RPUSH l a b", "PEXPIRE k3 100000"];
    let calls: &[&[&str]] = &[
        &["MIGRATE", "127.0.0.1", "$P", "k", "0"],
        &["MIGRATE", "127.0.0.1", "$P", "k", "0", "1000", "BOGUS"],
        &["MIGRATE", "127.0.0.1", "$P", "k", "0", "1000", "AUTH"],
        &["MIGRATE", "127.0.0.1", "$P", "k", "0", "1000", "AUTH2", "u"],
        &["MIGRATE", "127.0.0.1", "$P", "k", "0", "1000", "KEYS", "a"],
        &["MIGRATE", "127.0.0.1", "$P", "k", "x", "1000"],
        &["MIGRATE", "127.0.0.1", "$P", "k", "0", "x"],
        &["MIGRATE", "127.0.0.1", "$P", "k", "x", "x", "COPY", "REPLACE"],
        &["MIGRATE", "127.0.0.1", "$P", "missing", "0", "1000"],
        &["MIGRATE", "127.0.0.1", "$P", "", "0", "1000", "KEYS", "m1", "m2"],
        &["MIGRATE", "127.0.0.1", "$P", "", "0", "1000", "KEYS"],
        &["MIGRATE", "127.0.0.1", "$P", "k", "0", "1000"],
        &["MIGRATE", "127.0.0.1", "$P", "k2", "0", "0", "COPY"],
        &["MIGRATE", "127.0.0.1", "$P", "k2", "0", "-5", "COPY"],
        &["MIGRATE", "127.0.0.1", "$P", "k2", "0", "1000", "COPY", "REPLACE"],
        &["MIGRATE", "127.0.0.1", "$P", "k3", "0", "1000", "replace", "copy"],
        &["MIGRATE", "127.0.0.1", "$P", "", "0", "1000", "REPLACE", "KEYS", "l", "k3", "m1"],
        &["MIGRATE", "127.0.0.1", "$P", "k4", "99999", "1000"],
        &["MIGRATE", "127.0.0.1", "$P", "k4", "-1", "1000"],
        &["MIGRATE", "127.0.0.1", "$P", "k4", "1", "1000", "AUTH", "nopass"],
        &["MIGRATE", "127.0.0.1", "$P", "k4", "1", "1000", "AUTH2", "default", "nopass"],
        &["MIGRATE", "127.0.0.1", &closed, "k5", "0", "200"],
        &["MIGRATE", "127.0.0.1", &silent, "k5", "0", "200"],
        &["MIGRATE", "127.0.0.1", &silent, "", "0", "200", "KEYS", "q1", "q2"],
        &["MIGRATE", "127.0.0.1", "notaport", "k5", "0", "200"],
        &["MIGRATE", "", "$P", "k5", "0", "200"],
        &["MIGRATE", "", "$P", "", "0", "200", "KEYS", "k5", "q1"],
        &["EXISTS", "k", "k2", "k3", "k4", "k5", "l", "e1", "e2", "q1", "q2"],
    ];
    let mut replies = Vec::new();
    for (source, target) in [(redis_src.raw(), &t1), (corekv.raw(), &t2)] {
        let mut source = source;
        for line in setup {
            let parts: Vec<&str> = line.split(' ').collect();
            assert!(!matches!(cmd(&mut source, &parts), Value::Error(_)));
        }
        let mut t = target.raw();
        cmd(&mut t, &["SET", "e2", "there"]);
        let mut got = Vec::new();
        let port = target.port.to_string();
        for call in calls {
            let line: Vec<&str> = call.iter().map(|&w| if w == "$P" { port.as_str() } else { w }).collect();
            got.push((line.join(" ").replace(&port, "$P"), cmd(&mut source, &line)));
        }
        let keys = ["k", "k2", "k3", "l", "e1", "e2"];
        for k in keys {
            got.push((format!("target {k}"), view(&mut t, k)));
        }
        let Value::Int(ttl) = cmd(&mut t, &["PTTL", "k3"]) else { panic!() };
        got.push(("k3 ttl kept".into(), Value::Int((ttl > 0 && ttl <= 100000) as i64)));
        replies.push(got);
    }
    for (r, c) in replies[0].iter().zip(&replies[1]) {
        assert_eq!(r, c, "redis-server vs corekv");
    }
}

/// COMMAND GETKEYS / GETKEYSANDFLAGS as redis-server answers them.
#[test]
fn getkeys_match_redis() {
    let (corekv, redis) = (Server::shards(2), Redis::start());
    let lines: &[&[&str]] = &[
        &["MIGRATE", "h", "1", "k", "0", "10"],
        &["MIGRATE", "h", "1", "", "0", "10"],
        &["MIGRATE", "h", "1", "", "0", "10", "COPY", "KEYS", "a", "b", "c"],
        &["MIGRATE", "h", "1", "", "0", "10", "AUTH", "keys", "KEYS", "a"],
        &["MIGRATE", "h", "1", "", "0", "10", "AUTH2", "keys", "keys", "REPLACE", "KEYS", "a", "b"],
        &["MIGRATE", "h", "1", "k", "0", "10", "KEYS", "a"],
        &["MIGRATE", "h", "1", "k", "0"],
    ];
    let info = ["COMMAND", "INFO", "MIGRATE"];
    assert_eq!(cmd(&mut corekv.raw(), &info), cmd(&mut redis.raw(), &info));
    let Value::Array(dangerous) = cmd(&mut corekv.raw(), &["ACL", "CAT", "dangerous"]) else { panic!("ACL CAT") };
    assert!(dangerous.contains(&Value::Bulk(b"migrate".to_vec())));
    for sub in ["GETKEYS", "GETKEYSANDFLAGS"] {
        for line in lines {
            let mut full = vec!["COMMAND", sub];
            full.extend_from_slice(line);
            assert_eq!(cmd(&mut corekv.raw(), &full), cmd(&mut redis.raw(), &full), "{full:?}");
        }
    }
}

/// A WATCHed key migrated away dooms the transaction; a COPY does not
/// (Redis signals only the keys it deletes).
#[test]
fn watch_sees_migrated_keys() {
    let (server, redis) = (Server::shards(3), Redis::start());
    let port = redis.port.to_string();
    for (key, extra) in [("w1", None), ("w2", Some("COPY"))] {
        let (mut a, mut b) = (server.raw(), server.raw());
        cmd(&mut a, &["SET", key, "v"]);
        cmd(&mut a, &["WATCH", key]);
        let mut line = vec!["MIGRATE", "127.0.0.1", &port, key, "0", "5000"];
        line.extend(extra);
        assert_eq!(cmd(&mut b, &line), ok());
        cmd(&mut a, &["MULTI"]);
        cmd(&mut a, &["PING"]);
        let exec = cmd(&mut a, &["EXEC"]);
        match extra {
            None => assert_eq!(exec, Value::NilArray),
            Some(_) => assert_eq!(exec, Value::Array(vec![Value::Simple(b"PONG".to_vec())])),
        }
    }
}

/// A target that answers only after the test says so, to see what a
/// client of the source meets meanwhile.
#[test]
fn keys_are_held_until_the_target_answered() {
    let server = Server::shards(3);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (got_tx, got_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let target = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut seen = Vec::new();
        // SELECT and two RESTOREs.
        while seen.windows(7).filter(|w| w == b"RESTORE").count() < 2 || !seen.ends_with(b"\r\n") {
            let mut b = [0u8; 4096];
            let n = s.read(&mut b).unwrap();
            assert!(n > 0);
            seen.extend_from_slice(&b[..n]);
        }
        got_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        s.write_all(b"+OK\r\n+OK\r\n+OK\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(200));
    });
    let mut a = server.raw();
    cmd(&mut a, &["MSET", "x", "old", "y", "old", "free", "1"]);
    let line = migrate_keys(port, "0", &[], &["x".into(), "y".into()]);
    a.send(&Raw::encode(&line.iter().map(|s| s.as_bytes()).collect::<Vec<_>>()));
    got_rx.recv().unwrap();
    // The migration waits on the target: its keys are held, others are not.
    let mut b = server.raw();
    assert_eq!(cmd(&mut b, &["GET", "free"]), Value::Bulk(b"1".to_vec()));
    b.send(&Raw::encode(&[b"SET", b"x", b"new"]));
    std::thread::sleep(Duration::from_millis(100));
    go_tx.send(()).unwrap();
    assert_eq!(a.read(), Some(ok()));
    assert_eq!(b.read(), Some(ok()));
    // The SET ran after the delete, not before it.
    assert_eq!(cmd(&mut b, &["GET", "x"]), Value::Bulk(b"new".to_vec()));
    assert_eq!(cmd(&mut b, &["EXISTS", "y"]), Value::Int(0));
    target.join().unwrap();
}

fn connections_received(r: &mut Raw) -> i64 {
    let Value::Bulk(info) = cmd(r, &["INFO", "stats"]) else { panic!("INFO") };
    let info = String::from_utf8_lossy(&info).into_owned();
    let line = info.lines().find(|l| l.starts_with("total_connections_received:")).expect("field");
    line.split(':').nth(1).unwrap().trim().parse().unwrap()
}

fn connected_clients(r: &mut Raw) -> i64 {
    let Value::Bulk(info) = cmd(r, &["INFO", "clients"]) else { panic!("INFO") };
    let info = String::from_utf8_lossy(&info).into_owned();
    let line = info.lines().find(|l| l.starts_with("connected_clients:")).expect("field");
    line.split(':').nth(1).unwrap().trim().parse().unwrap()
}

/// One connection per target is kept and reused; one the target closed is
/// replaced at once; an unused one is closed after 10 s.
#[test]
fn target_connection_is_cached() {
    let server = Server::shards(1);
    let redis = Redis::start();
    let (mut s, mut t) = (server.raw(), redis.raw());
    let port = redis.port.to_string();
    cmd(&mut s, &["MSET", "a", "1", "b", "2", "c", "3"]);
    let before = connections_received(&mut t);
    assert_eq!(cmd(&mut s, &["MIGRATE", "127.0.0.1", &port, "a", "0", "5000"]), ok());
    assert_eq!(cmd(&mut s, &["MIGRATE", "127.0.0.1", &port, "b", "0", "5000"]), ok());
    assert_eq!(connections_received(&mut t), before + 1);
    assert_eq!(cmd(&mut t, &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]), Value::Int(1));
    assert_eq!(cmd(&mut s, &["MIGRATE", "127.0.0.1", &port, "c", "0", "5000"]), ok());
    assert_eq!(connections_received(&mut t), before + 2);
    assert_eq!(cmd(&mut t, &["MGET", "a", "b", "c"]).to_string_lossy(), "1 2 3");
    let until = Instant::now() + Duration::from_secs(30);
    while connected_clients(&mut t) > 1 {
        assert!(Instant::now() < until, "the cached connection was never closed");
        std::thread::sleep(Duration::from_millis(200));
    }
}

trait Lossy {
    fn to_string_lossy(&self) -> String;
}

impl Lossy for Value {
    fn to_string_lossy(&self) -> String {
        match self {
            Value::Array(items) => items.iter().map(|v| v.to_string_lossy()).collect::<Vec<_>>().join(" "),
            Value::Bulk(b) | Value::Simple(b) => String::from_utf8_lossy(b).into_owned(),
            other => format!("{other:?}"),
        }
    }
}

/// INFO stats' migrate_cached_sockets counts the connections MIGRATE keeps
/// (one per target), as redis-server's does.
#[test]
fn info_counts_migrates_cached_sockets() {
    let target = Redis::start();
    let port = target.port.to_string();
    let cached = |r: &mut Raw| -> Vec<String> {
        let mut seen = Vec::new();
        for key in ["m1", "m2"] {
            cmd(r, &["SET", key, "v"]);
            assert_eq!(cmd(r, &["MIGRATE", "127.0.0.1", &port, key, "0", "5000", "REPLACE"]), ok());
            let Value::Bulk(info) = cmd(r, &["INFO", "stats"]) else { panic!("INFO") };
            let info = String::from_utf8_lossy(&info).into_owned();
            seen.extend(info.lines().filter(|l| l.starts_with("migrate_cached_sockets:")).map(String::from));
        }
        seen
    };
    let redis = Redis::start();
    let want = cached(&mut redis.raw());
    assert_eq!(want, ["migrate_cached_sockets:1", "migrate_cached_sockets:1"]);
    for shards in [1, 3] {
        let server = Server::shards(shards);
        assert_eq!(cached(&mut server.raw()), want, "{shards} shards");
    }
}
