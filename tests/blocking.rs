//! Blocking pops on the real binary: the waiting and the pushing client on
//! different cores, many waiters on one key served first-come first-served,
//! timeouts, hang-ups, moves across shards, pipelines after a block, and the
//! sorted-set pops (BZPOPMIN, BZPOPMAX, BZMPOP), pushes from a script
//! holding every shard; against redis-server: blocked clients served only
//! after the whole transaction or script that readied their key, from what
//! it holds then (every placement of the clients over cores), tiny
//! timeouts, and a race of blocked pops against transactions and scripts.

mod blocked_diff;
mod common;

use blocked_diff::{conn_on_core, Case};
use common::{Raw, Redis, Server};
use proxy::resp::Value;
use proxy::slot::{key_slot, SLOTS};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
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

const NONE: &[blocked_diff::Cmd] = &[];

/// Redis's handleClientsBlockedOnKeys runs after a whole command: a
/// transaction or a script that pushes and then takes back (DEL, a type
/// change) wakes nobody, and one that pushes several times serves what the
/// key holds at its end. A pipeline's commands are each a whole command.
#[test]
fn blocked_clients_are_served_after_the_whole_transaction_or_script() {
    blocked_diff::check(&[
        Case {
            name: "BLPOP, MULTI LPUSH DEL EXEC",
            setup: &[&["DEL", "list"]],
            block: &["BLPOP", "list", "0"],
            steps: &[&["MULTI"], &["LPUSH", "list", "a"], &["DEL", "list"], &["EXEC"], &["DEL", "list"], &[
                "LPUSH", "list", "b",
            ]],
            pipelined: false,
            then: &[&["LRANGE", "list", "0", "-1"]],
        },
        Case {
            name: "BLPOP, MULTI LPUSH DEL SET EXEC",
            setup: &[&["DEL", "list"]],
            block: &["BLPOP", "list", "0"],
            steps: &[
                &["MULTI"],
                &["LPUSH", "list", "a"],
                &["DEL", "list"],
                &["SET", "list", "foo"],
                &["EXEC"],
                &["DEL", "list"],
                &["LPUSH", "list", "b"],
            ],
            pipelined: false,
            then: NONE,
        },
        Case {
            name: "BLPOP, MULTI LPUSH SET EXEC (type change)",
            setup: &[&["DEL", "list"]],
            block: &["BLPOP", "list", "0"],
            steps: &[&["MULTI"], &["LPUSH", "list", "a"], &["SET", "list", "x"], &["EXEC"], &["DEL", "list"], &[
                "LPUSH", "list", "b",
            ]],
            pipelined: false,
            then: NONE,
        },
        Case {
            name: "BLPOP, MULTI of three LPUSH is isolated",
            setup: &[&["DEL", "list"]],
            block: &["BLPOP", "list", "0"],
            steps: &[&["MULTI"], &["LPUSH", "list", "a"], &["LPUSH", "list", "b"], &["LPUSH", "list", "c"], &["EXEC"]],
            pipelined: false,
            then: &[&["LRANGE", "list", "0", "-1"]],
        },
        Case {
            name: "BLMPOP, MULTI LPUSH DEL EXEC",
            setup: &[&["DEL", "list"]],
            block: &["BLMPOP", "0", "1", "list", "LEFT", "COUNT", "2"],
            steps: &[&["MULTI"], &["LPUSH", "list", "a"], &["DEL", "list"], &["EXEC"], &["RPUSH", "list", "b", "c", "d"]],
            pipelined: false,
            then: &[&["LRANGE", "list", "0", "-1"]],
        },
        Case {
            name: "BLMOVE, MULTI LPUSH DEL EXEC",
            setup: &[&["DEL", "list", "{list}dst"]],
            block: &["BLMOVE", "list", "{list}dst", "LEFT", "RIGHT", "0"],
            steps: &[&["MULTI"], &["LPUSH", "list", "a"], &["DEL", "list"], &["EXEC"], &["LPUSH", "list", "b"]],
            pipelined: false,
            then: &[&["LRANGE", "{list}dst", "0", "-1"], &["EXISTS", "list"]],
        },
        Case {
            name: "BRPOPLPUSH to another shard's list, MULTI RPUSH SET EXEC",
            setup: &[&["DEL", "list", "elsewhere"]],
            block: &["BRPOPLPUSH", "list", "elsewhere", "0"],
            steps: &[&["MULTI"], &["RPUSH", "list", "a"], &["SET", "list", "x"], &["EXEC"], &["DEL", "list"], &[
                "RPUSH", "list", "b",
            ]],
            pipelined: false,
            then: &[&["LRANGE", "elsewhere", "0", "-1"]],
        },
        Case {
            name: "BZPOPMIN, MULTI ZADD DEL EXEC",
            setup: &[&["DEL", "zs"]],
            block: &["BZPOPMIN", "zs", "0"],
            steps: &[&["MULTI"], &["ZADD", "zs", "1", "a"], &["DEL", "zs"], &["EXEC"], &["ZADD", "zs", "2", "b"]],
            pipelined: false,
            then: NONE,
        },
        Case {
            name: "BZMPOP, MULTI ZADD SET EXEC (type change)",
            setup: &[&["DEL", "zs"]],
            block: &["BZMPOP", "0", "1", "zs", "MAX", "COUNT", "5"],
            steps: &[&["MULTI"], &["ZADD", "zs", "1", "a"], &["SET", "zs", "x"], &["EXEC"], &["DEL", "zs"], &[
                "ZADD", "zs", "2", "b", "3", "c",
            ]],
            pipelined: false,
            then: NONE,
        },
        Case {
            name: "BLPOP, EVAL LPUSH DEL on its key",
            setup: &[&["DEL", "list"]],
            block: &["BLPOP", "list", "0"],
            steps: &[
                &["EVAL", "redis.call('LPUSH', KEYS[1], 'a') redis.call('DEL', KEYS[1])", "1", "list"],
                &["LPUSH", "list", "b"],
            ],
            pipelined: false,
            then: NONE,
        },
        Case {
            name: "BLPOP, EVAL with no keys LPUSH DEL (every shard held)",
            setup: &[&["DEL", "list"]],
            block: &["BLPOP", "list", "0"],
            steps: &[&["EVAL", "redis.call('LPUSH', 'list', 'a') redis.call('DEL', 'list')", "0"], &["LPUSH", "list", "b"]],
            pipelined: false,
            then: NONE,
        },
        Case {
            name: "BZPOPMAX, EVAL ZADD ZADD ZREM",
            setup: &[&["DEL", "zs"]],
            block: &["BZPOPMAX", "zs", "0"],
            steps: &[&[
                "EVAL",
                "redis.call('ZADD', KEYS[1], 9, 'top') redis.call('ZADD', KEYS[1], 1, 'low') redis.call('ZREM', KEYS[1], 'top')",
                "1",
                "zs",
            ]],
            pipelined: false,
            then: &[&["ZCARD", "zs"]],
        },
        Case {
            name: "BLPOP, FCALL LPUSH DEL",
            setup: &[
                &["DEL", "list"],
                &[
                    "FUNCTION",
                    "LOAD",
                    "REPLACE",
                    "#!lua name=blockedtest\nredis.register_function('pushdel', function(keys, args) redis.call('LPUSH', keys[1], args[1]) redis.call('DEL', keys[1]) end)",
                ],
            ],
            block: &["BLPOP", "list", "0"],
            steps: &[&["FCALL", "pushdel", "1", "list", "a"], &["LPUSH", "list", "b"]],
            pipelined: false,
            then: &[&["FUNCTION", "DELETE", "blockedtest"]],
        },
        Case {
            name: "BLPOP, pipelined LPUSH DEL (each a whole command)",
            setup: &[&["DEL", "list"]],
            block: &["BLPOP", "list", "0"],
            steps: &[&["LPUSH", "list", "a"], &["DEL", "list"], &["LPUSH", "list", "b"]],
            pipelined: true,
            then: &[&["LRANGE", "list", "0", "-1"]],
        },
    ]);
}

/// A timeout of 0.001 s (or less, above zero) waits at least a millisecond
/// (Redis rounds up: ceill), not for ever; while it waits the client is a
/// blocked client like any other.
#[test]
fn tiny_timeouts_time_out() {
    let redis = Redis::start();
    let corekv = Server::shards(3);
    let cmds: [&[&str]; 6] = [
        &["BLPOP", "none", "0.001"],
        &["BRPOP", "none", "0.0001"],
        &["BLMPOP", "0.001", "1", "none", "LEFT"],
        &["BLMOVE", "none", "dst", "LEFT", "LEFT", "0.0009"],
        &["BZPOPMIN", "none", "0.001"],
        &["BZMPOP", "0.001", "1", "none", "MIN"],
    ];
    let replies = |port: u16| -> Vec<Option<Value>> {
        let mut admin = Raw::connect(port);
        cmds.iter()
            .map(|cmd| {
                let mut c = Raw::connect(port);
                c.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let words: Vec<&[u8]> = cmd.iter().map(|w| w.as_bytes()).collect();
                c.send(&Raw::encode(&words));
                admin.wait_blocked(0);
                c.read()
            })
            .collect()
    };
    let want = replies(redis.port);
    assert!(want.iter().all(|r| *r == Some(Value::NilArray)), "{want:?}");
    assert_eq!(replies(corekv.port), want);
}

/// Three keys on each of corekv's three shards.
fn keys_per_shard(prefix: &str, per_shard: usize) -> Vec<String> {
    let mut by_shard = vec![Vec::new(); 3];
    let mut i = 0;
    while by_shard.iter().any(|k: &Vec<String>| k.len() < per_shard) {
        let key = format!("{prefix}:{i}");
        let keys = &mut by_shard[key_slot(key.as_bytes()) as usize * 3 / SLOTS];
        if keys.len() < per_shard {
            keys.push(key);
        }
        i += 1;
    }
    (0..per_shard).flat_map(|n| by_shard.iter().map(move |k| k[n].clone())).collect()
}

fn text(v: &Value) -> String {
    match v {
        Value::Bulk(b) | Value::Simple(b) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    }
}

/// What a race saw.
#[derive(Default)]
struct RaceOutcome {
    rounds: usize,
    violations: Vec<String>,
}

const PUSH_POP: &str = "redis.call('RPUSH', KEYS[1], ARGV[1]) local gone = redis.call('RPOP', KEYS[1]) \
                        redis.call('RPUSH', KEYS[1], ARGV[2]) return gone";
const PUSH_POP_NO_KEYS: &str = "redis.call('RPUSH', ARGV[3], ARGV[1]) local gone = redis.call('RPOP', ARGV[3]) \
                                redis.call('RPUSH', ARGV[3], ARGV[2]) return gone";

/// Blocked pops on lists and sorted sets of every core (one key each, and
/// keys of several shards at once) while writers on every core run
/// transactions, scripts and functions that push an element `g:…`, take
/// it back (RPOP, ZREM, DEL) and push `p:…`. Nobody may ever receive a
/// `g:…` (it was gone before the transaction or script ended), every
/// writer's own take-back must find its `g:…`, and every `p:…` ends up
/// exactly once: popped by a waiter, removed by a writer's DEL (which
/// lists what it removes first) or left at the end.
fn race(port: u16, cores: usize) -> RaceOutcome {
    let lists = keys_per_shard("rq", 2);
    let zsets = keys_per_shard("rz", 1);
    let stop = Arc::new(AtomicBool::new(false));
    let mut admin = Raw::connect(port);
    admin.cmd_str("FLUSHALL");
    let lib = "#!lua name=racetest\nredis.register_function('pushpop', function(keys, args) \
               redis.call('RPUSH', keys[1], args[1]) local gone = redis.call('RPOP', keys[1]) \
               redis.call('RPUSH', keys[1], args[2]) return gone end)";
    admin.cmd(&[b"FUNCTION", b"LOAD", b"REPLACE", lib.as_bytes()]);
    // Waiters: one per list, one per sorted set, and two over the lists of
    // several shards at once.
    let mut waits: Vec<Vec<String>> = lists.iter().map(|k| vec!["BLPOP".into(), k.clone()]).collect();
    waits.extend(zsets.iter().map(|k| vec!["BZPOPMIN".into(), k.clone()]));
    waits.push(["BLPOP"].iter().map(|s| s.to_string()).chain(lists[..3].iter().cloned()).collect());
    waits.push(["BRPOP"].iter().map(|s| s.to_string()).chain(lists[3..].iter().cloned()).collect());
    let consumers: Vec<_> = waits
        .into_iter()
        .enumerate()
        .map(|(i, mut cmd)| {
            let stop = stop.clone();
            cmd.push("0.2".into());
            std::thread::spawn(move || {
                let mut c = conn_on_core(port, i % cores, cores);
                let words: Vec<&[u8]> = cmd.iter().map(|w| w.as_bytes()).collect();
                let mut got: Vec<(String, String)> = Vec::new();
                loop {
                    match c.cmd(&words) {
                        Value::Array(v) if v.len() >= 2 => got.push((text(&v[0]), text(&v[1]))),
                        Value::NilArray if stop.load(Relaxed) => return got,
                        Value::NilArray => {}
                        other => panic!("{cmd:?}: {other:?}"),
                    }
                }
            })
        })
        .collect();
    let started = Instant::now();
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let (lists, zsets) = (lists.clone(), zsets.clone());
            std::thread::spawn(move || {
                let mut c = conn_on_core(port, w % cores, cores);
                let mut violations = Vec::new();
                let mut pushed = Vec::new();
                let mut removed = Vec::new();
                let mut rounds = 0;
                for r in 0..300usize {
                    if started.elapsed() > Duration::from_secs(15) {
                        break;
                    }
                    rounds += 1;
                    let (g, p) = (format!("g:{w}:{r}"), format!("p:{w}:{r}"));
                    let k = &lists[(w + r) % lists.len()];
                    let expect_gone = |violations: &mut Vec<String>, what: &str, v: &Value, gone: &str| {
                        if text(v) != gone {
                            violations.push(format!("{what} took back {} instead of {gone}", text(v)));
                        }
                    };
                    match r % 7 {
                        0 => {
                            c.cmd_str("MULTI");
                            c.cmd(&[b"RPUSH", k.as_bytes(), g.as_bytes()]);
                            c.cmd(&[b"RPOP", k.as_bytes()]);
                            c.cmd(&[b"RPUSH", k.as_bytes(), p.as_bytes()]);
                            match c.cmd_str("EXEC") {
                                Value::Array(v) if v.len() == 3 => expect_gone(&mut violations, "MULTI", &v[1], &g),
                                other => violations.push(format!("EXEC: {other:?}")),
                            }
                            pushed.push(p);
                        }
                        1 | 2 => {
                            let v = if r % 7 == 1 {
                                c.cmd(&[b"EVAL", PUSH_POP.as_bytes(), b"1", k.as_bytes(), g.as_bytes(), p.as_bytes()])
                            } else {
                                let args = [b"EVAL", PUSH_POP_NO_KEYS.as_bytes(), b"0", g.as_bytes(), p.as_bytes()];
                                let mut args: Vec<&[u8]> = args.to_vec();
                                args.push(k.as_bytes());
                                c.cmd(&args)
                            };
                            expect_gone(&mut violations, "EVAL", &v, &g);
                            pushed.push(p);
                        }
                        3 => {
                            let v = c.cmd(&[b"FCALL", b"pushpop", b"1", k.as_bytes(), g.as_bytes(), p.as_bytes()]);
                            expect_gone(&mut violations, "FCALL", &v, &g);
                            pushed.push(p);
                        }
                        4 => {
                            // Two lists of different shards: a unit.
                            let k2 = &lists[(w + r + 1) % lists.len()];
                            let (g2, p2) = (format!("{g}b"), format!("{p}b"));
                            c.cmd_str("MULTI");
                            c.cmd(&[b"RPUSH", k.as_bytes(), g.as_bytes()]);
                            c.cmd(&[b"RPUSH", k2.as_bytes(), g2.as_bytes()]);
                            c.cmd(&[b"RPOP", k.as_bytes()]);
                            c.cmd(&[b"RPOP", k2.as_bytes()]);
                            c.cmd(&[b"RPUSH", k.as_bytes(), p.as_bytes()]);
                            c.cmd(&[b"RPUSH", k2.as_bytes(), p2.as_bytes()]);
                            match c.cmd_str("EXEC") {
                                Value::Array(v) if v.len() == 6 => {
                                    expect_gone(&mut violations, "MULTI", &v[2], &g);
                                    expect_gone(&mut violations, "MULTI", &v[3], &g2);
                                }
                                other => violations.push(format!("EXEC: {other:?}")),
                            }
                            pushed.push(p);
                            pushed.push(p2);
                        }
                        5 => {
                            let z = &zsets[(w + r) % zsets.len()];
                            let score = r.to_string();
                            c.cmd_str("MULTI");
                            c.cmd(&[b"ZADD", z.as_bytes(), b"-1", g.as_bytes()]);
                            c.cmd(&[b"ZREM", z.as_bytes(), g.as_bytes()]);
                            c.cmd(&[b"ZADD", z.as_bytes(), score.as_bytes(), p.as_bytes()]);
                            match c.cmd_str("EXEC") {
                                Value::Array(v) if v.len() == 3 => {
                                    if v[1] != Value::Int(1) {
                                        violations.push(format!("ZREM of {g} removed {:?}", v[1]));
                                    }
                                }
                                other => violations.push(format!("EXEC: {other:?}")),
                            }
                            pushed.push(p);
                        }
                        _ => {
                            // DEL: what it removes is listed just before.
                            c.cmd_str("MULTI");
                            c.cmd(&[b"RPUSH", k.as_bytes(), g.as_bytes()]);
                            c.cmd(&[b"LRANGE", k.as_bytes(), b"0", b"-1"]);
                            c.cmd(&[b"DEL", k.as_bytes()]);
                            c.cmd(&[b"RPUSH", k.as_bytes(), p.as_bytes()]);
                            match c.cmd_str("EXEC") {
                                Value::Array(v) if v.len() == 4 => match &v[1] {
                                    Value::Array(items) if items.last().map(text) == Some(g.clone()) => {
                                        removed.extend(items[..items.len() - 1].iter().map(text));
                                    }
                                    other => violations.push(format!("DEL's list lacks {g} at its end: {other:?}")),
                                },
                                other => violations.push(format!("EXEC: {other:?}")),
                            }
                            pushed.push(p);
                        }
                    }
                }
                (rounds, violations, pushed, removed)
            })
        })
        .collect();
    let mut outcome = RaceOutcome::default();
    let mut pushed = Vec::new();
    let mut seen: Vec<(String, String)> = Vec::new();
    for h in writers {
        let (rounds, violations, p, removed) = h.join().unwrap();
        outcome.rounds += rounds;
        outcome.violations.extend(violations);
        pushed.extend(p);
        seen.extend(removed.into_iter().map(|e| ("removed by DEL".to_string(), e)));
    }
    stop.store(true, Relaxed);
    for h in consumers {
        seen.extend(h.join().unwrap());
    }
    for k in &lists {
        if let Value::Array(v) = admin.cmd(&[b"LRANGE", k.as_bytes(), b"0", b"-1"]) {
            seen.extend(v.iter().map(|e| (format!("left in {k}"), text(e))));
        }
    }
    for z in &zsets {
        if let Value::Array(v) = admin.cmd(&[b"ZRANGE", z.as_bytes(), b"0", b"-1"]) {
            seen.extend(v.iter().map(|e| (format!("left in {z}"), text(e))));
        }
    }
    let mut count: HashMap<&str, usize> = HashMap::new();
    for (where_, e) in &seen {
        if e.starts_with("g:") {
            outcome.violations.push(format!("{e} was taken back, yet reached {where_}"));
        }
        *count.entry(e.as_str()).or_default() += 1;
    }
    for p in &pushed {
        match count.get(p.as_str()) {
            Some(1) => {}
            n => outcome.violations.push(format!("{p} seen {} times", n.copied().unwrap_or(0))),
        }
    }
    admin.cmd_str("FUNCTION DELETE racetest");
    outcome
}

/// Blocked pops against transactions, scripts and functions on other
/// cores (and on their own): redis-server proves the test, corekv with 3
/// shards must show no violation either.
#[test]
fn blocked_pops_race_transactions_and_scripts() {
    let redis = Redis::start();
    let corekv = Server::shards(3);
    for (name, port, cores) in [("redis", redis.port, 1), ("corekv", corekv.port, 3)] {
        let outcome = race(port, cores);
        println!("{name}: {} rounds, {} violations", outcome.rounds, outcome.violations.len());
        assert!(outcome.rounds >= 300, "{name}: only {} rounds", outcome.rounds);
        assert!(
            outcome.violations.is_empty(),
            "{name}: {} violations in {} rounds, first: {:?}",
            outcome.violations.len(),
            outcome.rounds,
            &outcome.violations[..outcome.violations.len().min(8)]
        );
    }
}

/// A script holding every shard runs for a while; a blocking pop on a key
/// that already has data arrives meanwhile from a connection on any core.
/// Redis runs the pop after the script, at once; corekv registers it on
/// the key's owner while the unit holds the key, and must look at the key
/// when the unit lets go (a unit over the whole shard releases no keys of
/// its own), not leave the pop to its timeout.
#[test]
fn a_pop_arriving_during_a_script_holding_every_shard_is_served_when_it_ends() {
    let slow = "local s = redis.call('TIME') repeat local n = redis.call('TIME') \
                until (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > 300000 return 1";
    let run = |port: u16, cores: usize, runner: usize, waiter: usize| -> (Value, Duration) {
        let mut admin = Raw::connect(port);
        admin.cmd_str("DEL list");
        admin.cmd_str("RPUSH list a");
        let mut script = conn_on_core(port, runner, cores);
        let mut popper = conn_on_core(port, waiter, cores);
        script.send(&Raw::encode(&[b"EVAL", slow.as_bytes(), b"0"]));
        std::thread::sleep(Duration::from_millis(100));
        let started = Instant::now();
        popper.send(b"BLPOP list 3\r\n");
        assert_eq!(script.read(), Some(Value::Int(1)));
        let reply = popper.read().expect("a reply");
        (reply, started.elapsed())
    };
    let redis = Redis::start();
    let (want, _) = run(redis.port, 1, 0, 0);
    assert_eq!(want, Value::Array(vec![bulk("list"), bulk("a")]));
    let corekv = Server::shards(3);
    for runner in 0..3 {
        for waiter in 0..3 {
            let (got, took) = run(corekv.port, 3, runner, waiter);
            let placement = format!("script on core {runner}, blocked client on core {waiter}");
            assert_eq!(got, want, "{placement}");
            assert!(took < Duration::from_millis(2500), "{placement}: served after {took:?} (its timeout is 3 s)");
        }
    }
}
