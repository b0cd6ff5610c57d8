//! Blocking pops on the real binary: the waiting and the pushing client on
//! different cores, many waiters on one key served first-come first-served,
//! timeouts, hang-ups, moves across shards, pipelines after a block, and the
//! sorted-set pops (BZPOPMIN, BZPOPMAX, BZMPOP), pushes from a script
//! holding every shard.

mod common;

use common::{Raw, Server};
use proxy::resp::Value;
use std::time::{Duration, Instant};

fn bulk(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec())
}

/// The shard a connection landed on (its client id's low bits).
fn shard_of_connection(raw: &mut Raw, shards: u64) -> u64 {
    match raw.cmd_str("CLIENT ID") {
        Value::Int(id) => (id as u64 - 1) % shards,
        other => panic!("CLIENT ID: {other:?}"),
    }
}

/// Opens connections until one lands on each of two different cores.
fn two_cores(server: &Server) -> (Raw, Raw) {
    let mut first = server.raw();
    let a = shard_of_connection(&mut first, 2);
    loop {
        let mut other = server.raw();
        if shard_of_connection(&mut other, 2) != a {
            return (first, other);
        }
    }
}

#[test]
fn waiter_and_pusher_on_different_cores() {
    let server = Server::shards(2);
    let (mut waiter, mut pusher) = two_cores(&server);
    for key in ["q", "other", "{x}1", "zz"] {
        waiter.send(&Raw::encode(&[b"BLPOP", key.as_bytes(), b"5"]));
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(pusher.cmd(&[b"RPUSH", key.as_bytes(), b"v1", b"v2"]), Value::Int(2));
        assert_eq!(waiter.read(), Some(Value::Array(vec![bulk(key), bulk("v1")])));
        assert_eq!(pusher.cmd(&[b"LRANGE", key.as_bytes(), b"0", b"-1"]), Value::Array(vec![bulk("v2")]));
    }
    let Value::Bulk(info) = pusher.cmd_str("INFO clients") else { panic!() };
    assert!(String::from_utf8_lossy(&info).contains("blocked_clients:0"));
}

#[test]
fn many_waiters_on_one_key_are_served_in_order() {
    let server = Server::shards(2);
    let mut waiters: Vec<Raw> = (0..12).map(|_| server.raw()).collect();
    let mut pusher = server.raw();
    for (i, w) in waiters.iter_mut().enumerate() {
        w.send(b"BRPOP jobs 10\r\n");
        pusher.wait_blocked(i + 1);
    }
    let Value::Bulk(info) = pusher.cmd_str("INFO clients") else { panic!() };
    assert!(String::from_utf8_lossy(&info).contains("blocked_clients:12"), "{}", String::from_utf8_lossy(&info));
    // One push of 12 elements: each waiter gets exactly one, oldest first.
    let items: Vec<String> = (0..12).map(|i| format!("job{i}")).collect();
    let mut cmd: Vec<&[u8]> = vec![b"LPUSH", b"jobs"];
    cmd.extend(items.iter().map(|s| s.as_bytes()));
    assert_eq!(pusher.cmd(&cmd), Value::Int(12));
    for (i, w) in waiters.iter_mut().enumerate() {
        assert_eq!(w.read(), Some(Value::Array(vec![bulk("jobs"), bulk(&items[i])])), "waiter {i}");
    }
    assert_eq!(pusher.cmd_str("EXISTS jobs"), Value::Int(0));
}

#[test]
fn timeouts_and_hang_ups() {
    let server = Server::shards(2);
    let mut c = server.raw();
    let start = Instant::now();
    assert_eq!(c.cmd_str("BLPOP nothing 0.3"), Value::NilArray);
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(290) && waited < Duration::from_secs(3), "{waited:?}");
    // A client that hangs up while blocked is never served: the next waiter
    // gets the element, nothing is lost.
    let mut gone = server.raw();
    gone.send(b"BLPOP q 10\r\n");
    std::thread::sleep(Duration::from_millis(100));
    let mut next = server.raw();
    next.send(b"BLPOP q 10\r\n");
    std::thread::sleep(Duration::from_millis(100));
    drop(gone);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(c.cmd_str("RPUSH q only"), Value::Int(1));
    assert_eq!(next.read(), Some(Value::Array(vec![bulk("q"), bulk("only")])));
    assert_eq!(c.cmd_str("LLEN q"), Value::Int(0));
}

#[test]
fn blocking_moves_and_multi_key_waits_across_shards() {
    let server = Server::shards(3);
    let mut waiter = server.raw();
    let mut pusher = server.raw();
    waiter.send(b"BLMOVE src dst LEFT RIGHT 5\r\n");
    std::thread::sleep(Duration::from_millis(100));
    pusher.cmd_str("RPUSH src a b");
    assert_eq!(waiter.read(), Some(bulk("a")));
    assert_eq!(pusher.cmd_str("LRANGE dst 0 -1"), Value::Array(vec![bulk("a")]));
    // Keys on several shards: whichever gets data first serves.
    waiter.send(b"BLPOP k1 k2 k3 k4 k5 5\r\n");
    std::thread::sleep(Duration::from_millis(100));
    pusher.cmd_str("RPUSH k4 x");
    assert_eq!(waiter.read(), Some(Value::Array(vec![bulk("k4"), bulk("x")])));
    waiter.send(b"BLMPOP 5 2 m1 m2 RIGHT COUNT 2\r\n");
    std::thread::sleep(Duration::from_millis(100));
    pusher.cmd_str("RPUSH m2 1 2 3");
    assert_eq!(waiter.read(), Some(Value::Array(vec![bulk("m2"), Value::Array(vec![bulk("3"), bulk("2")])])));
}

#[test]
fn commands_pipelined_after_a_block_run_after_it() {
    let server = Server::shards(2);
    let mut waiter = server.raw();
    let mut pusher = server.raw();
    waiter.send(b"BLPOP pq 5\r\nSET after 1\r\nGET after\r\n");
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(pusher.cmd_str("EXISTS after"), Value::Int(0), "SET must wait for the BLPOP before it");
    pusher.cmd_str("RPUSH pq v");
    assert_eq!(waiter.read(), Some(Value::Array(vec![bulk("pq"), bulk("v")])));
    assert_eq!(waiter.read(), Some(Value::Simple(b"OK".to_vec())));
    assert_eq!(waiter.read(), Some(bulk("1")));
}

#[test]
fn nothing_is_lost_or_duplicated_under_contention() {
    let server = Server::shards(2);
    let port = server.port;
    let consumers: Vec<_> = (0..6)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Raw::connect(port);
                let mut got = Vec::new();
                loop {
                    match c.cmd_str("BLPOP work 1") {
                        Value::Array(v) => got.push(v[1].as_bytes().unwrap().to_vec()),
                        _ => return got,
                    }
                }
            })
        })
        .collect();
    let mut p = server.raw();
    for i in 0..600 {
        p.cmd(&[b"RPUSH", b"work", format!("{i}").as_bytes()]);
    }
    let mut all: Vec<Vec<u8>> = consumers.into_iter().flat_map(|h| h.join().unwrap()).collect();
    all.sort();
    let mut want: Vec<Vec<u8>> = (0..600).map(|i| format!("{i}").into_bytes()).collect();
    want.sort();
    assert_eq!(all, want);
}

#[test]
fn sorted_set_pops_wake_across_cores_in_order() {
    let server = Server::shards(2);
    let (mut waiter, mut writer) = two_cores(&server);
    for key in ["zq", "other", "{x}z"] {
        waiter.send(&Raw::encode(&[b"BZPOPMIN", key.as_bytes(), b"5"]));
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(writer.cmd(&[b"ZADD", key.as_bytes(), b"2", b"b", b"1.5", b"a"]), Value::Int(2));
        assert_eq!(waiter.read(), Some(Value::Array(vec![bulk(key), bulk("a"), bulk("1.5")])));
        assert_eq!(writer.cmd(&[b"ZCARD", key.as_bytes()]), Value::Int(1));
    }
    // Many waiters, one ZADD: the oldest first, each its own member.
    let mut waiters: Vec<Raw> = (0..6).map(|_| server.raw()).collect();
    for (i, w) in waiters.iter_mut().enumerate() {
        w.send(b"BZPOPMAX board 10\r\n");
        writer.wait_blocked(i + 1);
    }
    assert_eq!(writer.cmd_str("ZADD board 1 m1 2 m2 3 m3 4 m4 5 m5 6 m6"), Value::Int(6));
    for (i, w) in waiters.iter_mut().enumerate() {
        let top = 6 - i;
        let want = Value::Array(vec![bulk("board"), bulk(&format!("m{top}")), bulk(&top.to_string())]);
        assert_eq!(w.read(), Some(want), "waiter {i}");
    }
    assert_eq!(writer.cmd_str("EXISTS board"), Value::Int(0));
    // BZMPOP over keys on several shards; a ZUNIONSTORE result wakes it too.
    waiter.send(b"BZMPOP 5 3 s1 s2 s3 MIN COUNT 2\r\n");
    std::thread::sleep(Duration::from_millis(100));
    writer.cmd_str("ZADD src 3 c 1 a 2 b");
    assert_eq!(writer.cmd_str("ZUNIONSTORE s3 1 src"), Value::Int(3));
    let pair = |m: &str, s: &str| Value::Array(vec![bulk(m), bulk(s)]);
    assert_eq!(waiter.read(), Some(Value::Array(vec![bulk("s3"), Value::Array(vec![pair("a", "1"), pair("b", "2")])])));
}

#[test]
fn a_waiter_ignores_keys_of_the_other_type() {
    let server = Server::shards(1);
    let mut list_waiter = server.raw();
    let mut zset_waiter = server.raw();
    let mut writer = server.raw();
    list_waiter.send(b"BLPOP k 5\r\n");
    std::thread::sleep(Duration::from_millis(50));
    zset_waiter.send(b"BZPOPMIN k 5\r\n");
    std::thread::sleep(Duration::from_millis(50));
    // The list waiter came first but a sorted set is not for it, as in Redis.
    assert_eq!(writer.cmd_str("ZADD k 1 m"), Value::Int(1));
    assert_eq!(zset_waiter.read(), Some(Value::Array(vec![bulk("k"), bulk("m"), bulk("1")])));
    assert_eq!(writer.cmd_str("RPUSH k v"), Value::Int(1));
    assert_eq!(list_waiter.read(), Some(Value::Array(vec![bulk("k"), bulk("v")])));
}

/// A script that declares no keys runs holding every shard (BullMQ's,
/// Celery's, RQ's scripts push to lists, sorted sets and streams that way):
/// the waiters on what it pushed to, on every shard, are served once it
/// ends, not left to their timeouts.
#[test]
fn pushes_from_a_script_holding_every_shard_wake_waiters() {
    let server = Server::shards(3);
    let mut pusher = server.raw();
    let keys = ["q1", "q2", "q3", "q4"];
    let mut lists: Vec<Raw> = keys.iter().map(|_| server.raw()).collect();
    for (key, w) in keys.iter().zip(&mut lists) {
        w.send(&Raw::encode(&[b"BLPOP", key.as_bytes(), b"5"]));
    }
    let mut marker = server.raw();
    marker.send(b"BZPOPMIN marker 5\r\n");
    let mut events = server.raw();
    events.send(b"XREAD BLOCK 5000 STREAMS events $\r\n");
    pusher.wait_blocked(keys.len() + 2);
    let script = "for _, k in ipairs({'q1', 'q2', 'q3', 'q4'}) do redis.call('RPUSH', k, k) end \
                  redis.call('ZADD', 'marker', 0, 'm') \
                  return redis.call('XADD', 'events', '1-1', 'job', '7')";
    assert_eq!(pusher.cmd(&[b"EVAL", script.as_bytes(), b"0"]), bulk("1-1"));
    for (key, w) in keys.iter().zip(&mut lists) {
        assert_eq!(w.read(), Some(Value::Array(vec![bulk(key), bulk(key)])));
    }
    assert_eq!(marker.read(), Some(Value::Array(vec![bulk("marker"), bulk("m"), bulk("0")])));
    let entry = Value::Array(vec![bulk("1-1"), Value::Array(vec![bulk("job"), bulk("7")])]);
    let stream = Value::Array(vec![bulk("events"), Value::Array(vec![entry])]);
    // (Left to their timeouts, each would have answered null.)
    assert_eq!(events.read(), Some(Value::Array(vec![stream])));
}
