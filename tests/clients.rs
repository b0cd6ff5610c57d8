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
                    text.lines().filter(|l| l.contains("cmd=client|list")).last().unwrap().to_string()
                } else {
                    own
                };
                seen.extend(line.split(' ').filter(|f| f.starts_with("qbuf=") || f.starts_with("argv-mem=")).map(String::from));
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
