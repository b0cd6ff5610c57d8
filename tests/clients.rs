//! End to end with the `redis` crate against the real binary, on one and on
//! several shards: every connection sees every key, multi-key commands span
//! shards, pipelines keep their order, expiry runs by itself.

mod common;

use common::Server;
use redis::Commands;
use std::collections::HashMap;
use std::time::Duration;

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("key:{i}")).collect()
}

#[test]
fn every_connection_sees_every_key() {
    for shards in [1, 2, 4] {
        let server = Server::shards(shards);
        let mut conns: Vec<redis::Connection> = (0..12).map(|_| server.client()).collect();
        for (i, conn) in conns.iter_mut().enumerate() {
            for k in 0..50 {
                let _: () = conn.set(format!("c{i}:k{k}"), format!("v{i}.{k}")).unwrap();
            }
        }
        for conn in conns.iter_mut() {
            for i in 0..12 {
                for k in (0..50).step_by(7) {
                    let v: String = conn.get(format!("c{i}:k{k}")).unwrap();
                    assert_eq!(v, format!("v{i}.{k}"));
                }
            }
            let size: usize = redis::cmd("DBSIZE").query(conn).unwrap();
            assert_eq!(size, 600, "{shards} shards");
        }
        let all: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conns[0]).unwrap();
        assert_eq!(all.len(), 600);
    }
}

#[test]
fn multi_key_commands_span_shards() {
    let server = Server::shards(3);
    let mut c = server.client();
    let ks = keys(40);
    let pairs: Vec<(String, String)> = ks.iter().map(|k| (k.clone(), format!("{k}=v"))).collect();
    let _: () = c.mset(&pairs).unwrap();
    let mut asked = ks.clone();
    asked.insert(5, "missing".into());
    asked.push(ks[0].clone());
    let got: Vec<Option<String>> = c.mget(&asked).unwrap();
    let want: Vec<Option<String>> = asked.iter().map(|k| (k != "missing").then(|| format!("{k}=v"))).collect();
    assert_eq!(got, want);
    let n: usize = redis::cmd("EXISTS").arg(&ks[..10]).arg(&ks[0]).arg("missing").query(&mut c).unwrap();
    assert_eq!(n, 11);
    let n: usize = redis::cmd("TOUCH").arg(&ks[..10]).query(&mut c).unwrap();
    assert_eq!(n, 10);
    let ok: bool =
        redis::cmd("MSETNX").arg("new:1").arg("a").arg("new:2").arg("b").arg(&ks[3]).arg("x").query(&mut c).unwrap();
    assert!(!ok, "MSETNX must fail when one key exists");
    let none: Vec<Option<String>> = c.mget(&["new:1", "new:2"]).unwrap();
    assert_eq!(none, vec![None, None], "MSETNX is all or nothing");
    let ok: bool =
        redis::cmd("MSETNX").arg("new:1").arg("a").arg("new:2").arg("b").arg("new:3").arg("c").query(&mut c).unwrap();
    assert!(ok);
    let got: Vec<String> = c.mget(&["new:1", "new:2", "new:3"]).unwrap();
    assert_eq!(got, vec!["a", "b", "c"]);
    let removed: usize = c.del(&ks).unwrap();
    assert_eq!(removed, 40);
    let info: String = redis::cmd("INFO").arg("stats").query(&mut c).unwrap();
    let hops: u64 = info.lines().find_map(|l| l.strip_prefix("cross_core_batches:")).unwrap().trim().parse().unwrap();
    assert!(hops > 0, "with three shards some commands must have crossed cores");
}

#[test]
fn rename_and_copy_across_shards_keep_value_and_ttl() {
    let server = Server::shards(4);
    let mut c = server.client();
    // Find two keys on different shards: slots of "a" and "b" differ, and
    // with four contiguous ranges most pairs of keys cross.
    for i in 0..20 {
        let (src, dst) = (format!("src{i}"), format!("dst{i}"));
        let _: () = redis::cmd("SET").arg(&src).arg(i).arg("EX").arg(1000).query(&mut c).unwrap();
        let _: () = redis::cmd("RENAME").arg(&src).arg(&dst).query(&mut c).unwrap();
        let v: i64 = c.get(&dst).unwrap();
        assert_eq!(v, i);
        let ttl: i64 = c.ttl(&dst).unwrap();
        assert!((990..=1000).contains(&ttl), "ttl {ttl}");
        let exists: bool = c.exists(&src).unwrap();
        assert!(!exists);
        let copied: bool = redis::cmd("COPY").arg(&dst).arg(format!("copy{i}")).query(&mut c).unwrap();
        assert!(copied);
        let again: bool = redis::cmd("COPY").arg(&dst).arg(format!("copy{i}")).query(&mut c).unwrap();
        assert!(!again);
        let moved: bool = redis::cmd("RENAMENX").arg(format!("copy{i}")).arg(&dst).query(&mut c).unwrap();
        assert!(!moved);
    }
    let err = redis::cmd("RENAME").arg("nope").arg("other").query::<()>(&mut c).unwrap_err();
    assert!(err.to_string().contains("no such key"), "{err}");
}

#[test]
fn pipelines_return_replies_in_request_order() {
    let server = Server::shards(3);
    let mut c = server.client();
    let mut pipe = redis::pipe();
    let mut model: HashMap<String, i64> = HashMap::new();
    let mut expected = Vec::new();
    for i in 0..2000 {
        let key = format!("p{}", i % 37);
        match i % 4 {
            0 => {
                pipe.cmd("INCRBY").arg(&key).arg(i);
                let v = model.entry(key).or_insert(0);
                *v += i;
                expected.push(redis::Value::Int(*v));
            }
            1 => {
                pipe.cmd("GET").arg(&key);
                expected.push(match model.get(&key) {
                    Some(v) => redis::Value::BulkString(v.to_string().into_bytes()),
                    None => redis::Value::Nil,
                });
            }
            2 => {
                pipe.cmd("SET").arg(&key).arg(i);
                model.insert(key, i);
                expected.push(redis::Value::Okay);
            }
            _ => {
                let other = format!("p{}", (i + 5) % 37);
                pipe.cmd("MGET").arg(&key).arg(&other);
                let get = |k: &String| match model.get(k) {
                    Some(v) => redis::Value::BulkString(v.to_string().into_bytes()),
                    None => redis::Value::Nil,
                };
                expected.push(redis::Value::Array(vec![get(&key), get(&other)]));
            }
        }
    }
    let got: Vec<redis::Value> = pipe.query(&mut c).unwrap();
    assert_eq!(got, expected);
}

#[test]
fn keys_expire_without_being_touched() {
    let server = Server::shards(2);
    let mut c = server.client();
    for i in 0..300 {
        let _: () = redis::cmd("SET").arg(format!("t{i}")).arg(1).arg("PX").arg(100).query(&mut c).unwrap();
    }
    let _: () = c.set("stays", 1).unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    let info: String = redis::cmd("INFO").arg("keyspace").query(&mut c).unwrap();
    assert!(info.contains("db0:keys=1,expires=0"), "active expiry did not run: {info}");
    let stats: String = redis::cmd("INFO").arg("stats").query(&mut c).unwrap();
    assert!(stats.contains("expired_keys:300"), "{stats}");
}

#[test]
fn scan_walks_every_shard() {
    let server = Server::shards(3);
    let mut c = server.client();
    let ks = keys(1000);
    let pairs: Vec<(String, i32)> = ks.iter().map(|k| (k.clone(), 1)).collect();
    let _: () = c.mset(&pairs).unwrap();
    let mut seen = std::collections::HashSet::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) =
            redis::cmd("SCAN").arg(cursor).arg("COUNT").arg(7).query(&mut c).unwrap();
        seen.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    assert_eq!(seen.len(), 1000);
    let matched: Vec<String> = c.scan_match("key:99*").unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(matched.len(), 11);
}

#[test]
fn databases_are_per_connection() {
    let server = Server::shards(2);
    let mut a = server.client();
    let mut b = server.client();
    let _: () = redis::cmd("SELECT").arg(3).query(&mut a).unwrap();
    let _: () = a.set("k", "in3").unwrap();
    let v: Option<String> = b.get("k").unwrap();
    assert_eq!(v, None);
    let _: () = redis::cmd("SELECT").arg(3).query(&mut b).unwrap();
    let v: String = b.get("k").unwrap();
    assert_eq!(v, "in3");
    let _: () = redis::cmd("FLUSHALL").query(&mut b).unwrap();
    let size: usize = redis::cmd("DBSIZE").query(&mut a).unwrap();
    assert_eq!(size, 0);
}

#[test]
fn requirepass_guards_every_command() {
    let server = Server::start(&["--shards", "2", "--requirepass", "s3cret"]);
    let mut raw = server.raw();
    assert_eq!(raw.cmd_str("GET k"), proxy::resp::Value::Error(b"NOAUTH Authentication required.".to_vec()));
    assert_eq!(
        raw.cmd_str("AUTH wrong"),
        proxy::resp::Value::Error(b"WRONGPASS invalid username-password pair or user is disabled.".to_vec())
    );
    assert_eq!(raw.cmd_str("AUTH s3cret"), proxy::resp::Value::Simple(b"OK".to_vec()));
    assert_eq!(raw.cmd_str("SET k v"), proxy::resp::Value::Simple(b"OK".to_vec()));
    let mut c =
        redis::Client::open(format!("redis://:s3cret@127.0.0.1:{}/", server.port)).unwrap().get_connection().unwrap();
    let v: String = c.get("k").unwrap();
    assert_eq!(v, "v");
    assert!(redis::Client::open(format!("redis://:nope@127.0.0.1:{}/", server.port))
        .unwrap()
        .get_connection()
        .is_err());
    let mut resp3 = server.raw();
    let hello = resp3.cmd_str("HELLO 3 AUTH default s3cret");
    assert!(matches!(hello, proxy::resp::Value::Map(_)), "{hello:?}");
}

#[test]
fn maxclients_rejects_the_extra_client() {
    let server = Server::start(&["--shards", "2", "--maxclients", "3"]);
    let mut held: Vec<common::Raw> = (0..3).map(|_| server.raw()).collect();
    for r in held.iter_mut() {
        assert_eq!(r.cmd_str("PING"), proxy::resp::Value::Simple(b"PONG".to_vec()));
    }
    let mut extra = server.raw();
    assert_eq!(extra.read(), Some(proxy::resp::Value::Error(b"ERR max number of clients reached".to_vec())));
    assert!(extra.closed());
    drop(held.pop());
    std::thread::sleep(Duration::from_millis(100));
    let mut again = server.raw();
    assert_eq!(again.cmd_str("PING"), proxy::resp::Value::Simple(b"PONG".to_vec()));
}

#[test]
fn client_list_and_kill_reach_every_core() {
    let server = Server::shards(2);
    let mut conns: Vec<redis::Connection> = (0..6).map(|_| server.client()).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        let _: () = redis::cmd("CLIENT").arg("SETNAME").arg(format!("worker{i}")).query(c).unwrap();
    }
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut conns[0]).unwrap();
    for i in 0..6 {
        assert!(list.contains(&format!("name=worker{i} ")), "{list}");
    }
    let victim: u64 = redis::cmd("CLIENT").arg("ID").query(&mut conns[5]).unwrap();
    let killed: u64 = redis::cmd("CLIENT").arg("KILL").arg("ID").arg(victim).query(&mut conns[0]).unwrap();
    assert_eq!(killed, 1);
    assert!(redis::cmd("PING").query::<String>(&mut conns[5]).is_err(), "killed connection must be closed");
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut conns[0]).unwrap();
    assert!(!list.contains("name=worker5 "));
}

#[test]
fn command_info_gives_key_positions_to_clients() {
    let server = Server::shards(1);
    let mut c = server.client();
    let info: Vec<redis::Value> = redis::cmd("COMMAND").query(&mut c).unwrap();
    let count: usize = redis::cmd("COMMAND").arg("COUNT").query(&mut c).unwrap();
    assert_eq!(info.len(), count);
    let keys: Vec<String> =
        redis::cmd("COMMAND").arg("GETKEYS").arg("MSET").arg("a").arg("1").arg("b").arg("2").query(&mut c).unwrap();
    assert_eq!(keys, vec!["a", "b"]);
}

#[test]
fn idle_clients_are_closed_after_timeout() {
    let server = Server::start(&["--shards", "2", "--timeout", "1"]);
    let mut idle = server.raw();
    assert_eq!(idle.cmd_str("PING"), proxy::resp::Value::Simple(b"PONG".to_vec()));
    let mut busy = server.raw();
    for _ in 0..12 {
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(busy.cmd_str("PING"), proxy::resp::Value::Simple(b"PONG".to_vec()));
    }
    assert!(idle.closed(), "a client idle past `timeout` must be closed");
}

/// CLIENT INFO's qbuf= for the connection running it: Redis counts the
/// whole read still in its query buffer (the command being run, those
/// before it in the same read and any partial one after it), byte for
/// byte, inline and multibulk; 1 and 3 shards, connections on every core.
#[test]
fn client_info_counts_the_running_command_in_qbuf() {
    use common::{Raw, Redis};
    use proxy::resp::Value;
    use std::io::Write;
    let requests: &[&[u8]] = &[
        b"*2\r\n$6\r\nCLIENT\r\n$4\r\nINFO\r\n",
        b"CLIENT INFO\r\n",
        b"client   info   \r\n",
        b"CLIENT INFO\n",
        b"PING\r\n*2\r\n$6\r\nCLIENT\r\n$4\r\nINFO\r\n",
        b"*2\r\n$6\r\nCLIENT\r\n$4\r\nINFO\r\n*1\r\n$4\r\nPI",
        b"*2\r\n$6\r\nCLIENT\r\n$4\r\nINFO\r\n*2\r\n$6\r\nCLIENT\r\n$4\r\nINFO\r\n",
        b"*2\r\n$6\r\nCLIENT\r\n$4\r\nLIST\r\n",
    ];
    // Each request in one write on a fresh connection: one read serves it.
    let qbufs = |port: u16, request: &[u8]| -> Vec<String> {
        let mut raw = Raw::connect(port);
        raw.stream.write_all(request).unwrap();
        let mut seen = Vec::new();
        let infos = request.windows(4).filter(|w| w.eq_ignore_ascii_case(b"info") || w == b"LIST").count();
        for _ in 0..infos + request.windows(4).filter(|w| *w == b"PING").count() {
            if let Some(Value::Bulk(text) | Value::Verbatim(text)) = raw.read() {
                let text = String::from_utf8(text).unwrap();
                let own = text.lines().last().unwrap_or_default().to_string();
                let line = if request.ends_with(b"LIST\r\n") {
                    // The newest connection running CLIENT LIST: this one.
                    text.lines().rfind(|l| l.contains("cmd=client|list")).unwrap().to_string()
                } else {
                    own
                };
                seen.extend(
                    line.split(' ').filter(|f| f.starts_with("qbuf=") || f.starts_with("argv-mem=")).map(String::from),
                );
            }
        }
        seen
    };
    let redis = Redis::start();
    for shards in [1, 3] {
        let corekv = Server::shards(shards);
        for request in requests {
            let want = qbufs(redis.port, request);
            assert!(!want.is_empty(), "{}", String::from_utf8_lossy(request));
            // Connections land on the cores in turn: one per core.
            for _ in 0..shards {
                let got = qbufs(corekv.port, request);
                assert_eq!(want, got, "{shards} shard(s): {:?}", String::from_utf8_lossy(request));
            }
        }
    }
}

/// INFO memory's `lazyfree_pending_objects` and `lazyfreed_objects`, as
/// Redis counts them: UNLINK of a value costing more than 64 allocations
/// to free, FLUSHDB/FLUSHALL ASYNC's keys; DEL and small values not.
/// corekv frees at once, so nothing is ever pending (a test waiting for
/// `lazyfree_pending_objects:0` after FLUSHDB ASYNC goes on at once).
#[test]
fn info_counts_lazy_freed_objects_as_redis() {
    use common::{Raw, Redis};
    use proxy::resp::Value;
    fn info_field(raw: &mut Raw, name: &str) -> Option<i64> {
        let (Value::Bulk(text) | Value::Verbatim(text)) = raw.cmd_str("INFO memory") else { panic!("INFO") };
        let text = String::from_utf8(text).unwrap();
        text.lines().find_map(|l| l.strip_prefix(&format!("{name}:"))).map(|v| v.trim().parse().unwrap())
    }
    /// Redis frees in a background thread: wait until nothing is pending.
    fn settled(raw: &mut Raw) -> (Option<i64>, Option<i64>) {
        for _ in 0..500 {
            if info_field(raw, "lazyfree_pending_objects") == Some(0) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        (info_field(raw, "lazyfree_pending_objects"), info_field(raw, "lazyfreed_objects"))
    }
    let big_set: Vec<String> = (0..200).map(|i| format!("m{i}")).collect();
    let steps: Vec<Vec<String>> = {
        let words = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let mut sadd = words("SADD big");
        sadd.extend(big_set.iter().cloned());
        let mut sadd2 = words("SADD big2");
        sadd2.extend(big_set.iter().cloned());
        let mut steps = vec![words("CONFIG RESETSTAT"), sadd, words("UNLINK big"), sadd2, words("DEL big2")];
        steps.push(words("SADD small a b c"));
        steps.push(words("UNLINK small"));
        steps.push(words("CONFIG SET stream-node-max-entries 5"));
        for i in 0..400 {
            steps.push(words(&format!("XADD stream * f {i}")));
        }
        steps.push(words("XGROUP CREATE stream g 0"));
        steps.push(words("XREADGROUP GROUP g alice COUNT 2 STREAMS stream >"));
        steps.push(words("UNLINK stream"));
        steps.push(words("CONFIG SET stream-node-max-entries 100"));
        for i in 0..30 {
            steps.push(words(&format!("SET key{i} v")));
        }
        steps.push(words("FLUSHDB ASYNC"));
        steps.push(words("SET again v"));
        steps.push(words("FLUSHALL ASYNC"));
        steps.push(words("FLUSHALL"));
        steps
    };
    let redis = Redis::start();
    for shards in [1, 3] {
        let corekv = Server::shards(shards);
        let (mut a, mut b) = (redis.raw(), corekv.raw());
        for step in &steps {
            let args: Vec<&[u8]> = step.iter().map(|s| s.as_bytes()).collect();
            let (x, y) = (a.cmd(&args), b.cmd(&args));
            if !step[0].starts_with('X') {
                assert_eq!(x, y, "{step:?}");
            }
            if ["UNLINK", "DEL", "FLUSHDB", "FLUSHALL"].contains(&step[0].as_str()) {
                let (want, got) = (settled(&mut a), settled(&mut b));
                assert!(want.0.is_some() && want.1.is_some());
                assert_eq!(want, got, "{shards} shard(s), after {:?}", &step[..step.len().min(2)]);
            }
        }
    }
}

/// `--bind "127.0.0.1 ::1"` as one argument is two addresses, as
/// redis-server splits a multi-value setting given in one argument; both
/// servers answer on each and report the same `bind`.
#[test]
fn bind_given_as_one_argument_listens_on_each_address() {
    use common::{Raw, Redis};
    use proxy::resp::Value;
    let redis = Redis::start_with(&["--bind", "127.0.0.1 ::1"]);
    let corekv = Server::start(&["--shards", "2", "--bind", "127.0.0.1 ::1"]);
    for port in [redis.port, corekv.port] {
        let v6 = std::net::TcpStream::connect(("::1", port)).expect("listening on ::1");
        assert_eq!(Raw::from_stream(v6).cmd_str("PING"), Value::Simple(b"PONG".to_vec()));
    }
    assert_eq!(redis.raw().cmd_str("CONFIG GET bind"), corekv.raw().cmd_str("CONFIG GET bind"));
}

/// `daemonize yes` with a `pidfile`: the command returns at once, the
/// server runs in the background with its pid in the file, CONFIG GET
/// shows both settings as Redis does, and the file goes at shutdown.
#[test]
fn daemonize_writes_and_removes_the_pid_file_as_redis() {
    use common::Raw;
    use proxy::resp::Value;
    let dir = common::TempDir::new("daemonize");
    let run = |program: &str, name: &str| -> (Value, Value) {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let pidfile = format!("{}/{name}.pid", dir.path());
        let logfile = format!("{}/{name}.log", dir.path());
        let status = std::process::Command::new(program)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--daemonize", "yes"])
            .args(["--pidfile", &pidfile, "--logfile", &logfile])
            .status()
            .expect("start");
        assert!(status.success(), "{program} daemonizing");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut conn = loop {
            if let Ok(stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                break Raw::from_stream(stream);
            }
            assert!(std::time::Instant::now() < deadline, "{program} did not come up");
            std::thread::sleep(Duration::from_millis(20));
        };
        let pid: i32 = std::fs::read_to_string(&pidfile).expect("the pid file").trim().parse().unwrap();
        // SAFETY: signal 0 only checks that the process exists.
        assert_eq!(unsafe { libc::kill(pid, 0) }, 0, "{program}'s pid file names a live process");
        let shown = (conn.cmd_str("CONFIG GET daemonize"), conn.cmd_str("CONFIG GET pidfile"));
        conn.send(b"SHUTDOWN NOSAVE\r\n");
        let _ = conn.read();
        while std::path::Path::new(&pidfile).exists() || unsafe { libc::kill(pid, 0) } == 0 {
            assert!(std::time::Instant::now() < deadline, "{program} left its pid file or kept running");
            std::thread::sleep(Duration::from_millis(20));
        }
        let Value::Array(mut pair) = shown.1 else { panic!("CONFIG GET pidfile") };
        // The paths differ by name only.
        pair[1] = Value::Bulk(b"(pidfile)".to_vec());
        (shown.0, Value::Array(pair))
    };
    common::ensure_test_deps();
    assert_eq!(run("redis-server", "redis"), run(env!("CARGO_BIN_EXE_corekv"), "corekv"));
}
