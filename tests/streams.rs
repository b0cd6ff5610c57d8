//! Streams on the real binary: XREAD/XREADGROUP BLOCK across cores and
//! shards (against redis-server: served after the whole transaction or
//! script, XREADGROUP answered when its key or group goes), and stream
//! values through SAVE/restart, redis-server loading corekv's file (and
//! the other way), DUMP/RESTORE and the AOF.

mod blocked_diff;
mod common;

use blocked_diff::{Case, Cmd};
use common::{Raw, Redis, Server, TempDir};
use proxy::resp::Value;
use std::time::{Duration, Instant};

fn bulk(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec())
}

fn arr(v: Vec<Value>) -> Value {
    Value::Array(v)
}

/// `[[key, [[id, [f, v]]]]]`.
fn one_entry(key: &str, id: &str, f: &str, v: &str) -> Value {
    arr(vec![arr(vec![bulk(key), arr(vec![arr(vec![bulk(id), arr(vec![bulk(f), bulk(v)])])])])])
}

#[test]
fn xread_block_is_served_by_a_later_xadd() {
    for shards in [1, 3] {
        let server = Server::shards(shards);
        let mut waiter = server.raw();
        let mut writer = server.raw();
        writer.cmd_str("XADD s1 1-0 a 1");
        // `$` is resolved when the read blocks: the old entry is not sent.
        waiter.send(b"XREAD BLOCK 5000 STREAMS s1 $\r\n");
        writer.wait_blocked(1);
        writer.cmd_str("XADD s1 2-0 b 2");
        assert_eq!(waiter.read(), Some(one_entry("s1", "2-0", "b", "2")));
        // Keys on several shards: whichever gets data first answers.
        waiter.send(b"XREAD BLOCK 5000 STREAMS s1 s2 s3 $ $ $\r\n");
        writer.wait_blocked(1);
        writer.cmd_str("XADD s3 7-0 c 3");
        assert_eq!(waiter.read(), Some(one_entry("s3", "7-0", "c", "3")));
        // A timeout is a null array.
        let started = Instant::now();
        assert_eq!(waiter.cmd_str("XREAD BLOCK 100 STREAMS s1 s2 $ $"), Value::NilArray);
        assert!(started.elapsed() >= Duration::from_millis(90));
        assert!(writer.cmd_str("INFO clients").to_string_lossy().contains("blocked_clients:0"));
    }
}

trait Lossy {
    fn to_string_lossy(&self) -> String;
}

impl Lossy for Value {
    fn to_string_lossy(&self) -> String {
        match self {
            Value::Bulk(b) | Value::Verbatim(b) => String::from_utf8_lossy(b).into_owned(),
            other => format!("{other:?}"),
        }
    }
}

#[test]
fn xreadgroup_block_takes_new_entries_into_the_pel() {
    for shards in [1, 3] {
        let server = Server::shards(shards);
        let mut alice = server.raw();
        let mut bob = server.raw();
        let mut writer = server.raw();
        writer.cmd_str("XGROUP CREATE q grp $ MKSTREAM");
        alice.send(b"XREADGROUP GROUP grp alice BLOCK 5000 STREAMS q >\r\n");
        writer.wait_blocked(1);
        bob.send(b"XREADGROUP GROUP grp bob BLOCK 5000 STREAMS q >\r\n");
        writer.wait_blocked(2);
        // One entry each, in the order they blocked.
        writer.cmd_str("XADD q 1-0 job 1");
        assert_eq!(alice.read(), Some(one_entry("q", "1-0", "job", "1")));
        writer.cmd_str("XADD q 2-0 job 2");
        assert_eq!(bob.read(), Some(one_entry("q", "2-0", "job", "2")));
        let pending = writer.cmd_str("XPENDING q grp");
        assert_eq!(
            pending,
            arr(vec![
                Value::Int(2),
                bulk("1-0"),
                bulk("2-0"),
                arr(vec![arr(vec![bulk("alice"), bulk("1")]), arr(vec![bulk("bob"), bulk("1")])])
            ])
        );
        // The group going away answers a blocked reader with NOGROUP.
        alice.send(b"XREADGROUP GROUP grp alice BLOCK 5000 STREAMS q >\r\n");
        writer.wait_blocked(1);
        assert_eq!(writer.cmd_str("XGROUP DESTROY q grp"), Value::Int(1));
        match alice.read() {
            Some(Value::Error(e)) => {
                assert_eq!(
                    String::from_utf8_lossy(&e),
                    "NOGROUP the consumer group this client was blocked on no longer exists"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}

/// A stream with tombstones, several nodes, groups, consumers and PELs.
fn populate(c: &mut Raw) {
    c.cmd_str("CONFIG SET stream-node-max-entries 4");
    for i in 1..=20 {
        c.cmd(&[
            b"XADD",
            b"st",
            format!("{i}-1").as_bytes(),
            b"field",
            format!("value{i}").as_bytes(),
            b"n",
            i.to_string().as_bytes(),
        ]);
    }
    c.cmd_str("XADD st 21-0 other x");
    c.cmd_str("XDEL st 3-1 10-1");
    c.cmd_str("XGROUP CREATE st g1 0");
    c.cmd_str("XGROUP CREATE st g2 15-1 ENTRIESREAD 12");
    c.cmd_str("XREADGROUP GROUP g1 alice COUNT 5 STREAMS st >");
    c.cmd_str("XREADGROUP GROUP g1 bob COUNT 3 STREAMS st >");
    c.cmd_str("XACK st g1 2-1");
    c.cmd_str("XCLAIM st g1 carol 0 5-1 TIME 1000 RETRYCOUNT 7 JUSTID");
    c.cmd_str("XGROUP CREATECONSUMER st g2 idle");
    c.cmd_str("XADD empty 5-5 a 1");
    c.cmd_str("XDEL empty 5-5");
    c.cmd_str("CONFIG SET stream-node-max-entries 100");
}

fn state(c: &mut Raw) -> Vec<Value> {
    vec![
        c.cmd_str("XINFO STREAM st FULL"),
        c.cmd_str("XINFO STREAM empty FULL"),
        c.cmd_str("XRANGE st - +"),
        c.cmd_str("XINFO GROUPS st"),
    ]
}

#[test]
fn streams_survive_save_restart_and_move_to_and_from_redis() {
    common::ensure_test_deps();
    let dir = TempDir::new("streams-rdb");
    let server = Server::start(&["--shards", "3", "--dir", dir.path()]);
    let mut c = server.raw();
    populate(&mut c);
    let before = state(&mut c);
    assert_eq!(c.cmd_str("SAVE"), Value::Simple(b"OK".to_vec()));
    drop(server);
    // corekv again, on 1 and 3 shards.
    for shards in ["1", "3"] {
        let server = Server::start(&["--shards", shards, "--dir", dir.path()]);
        assert_eq!(state(&mut server.raw()), before, "{shards} shard(s)");
    }
    // redis-server reads corekv's file.
    let redis = Redis::start_with(&["--dir", dir.path(), "--dbfilename", "dump.rdb"]);
    let mut r = redis.raw();
    assert_eq!(state(&mut r), before);
    // DUMP from either side restores on the other.
    let Value::Bulk(from_redis) = r.cmd_str("DUMP st") else { panic!("DUMP") };
    let server = Server::start(&["--shards", "1", "--dir", dir.path()]);
    let mut c = server.raw();
    let Value::Bulk(from_corekv) = c.cmd_str("DUMP st") else { panic!("DUMP") };
    assert_eq!(from_corekv, from_redis, "the same bytes");
    c.cmd(&[b"RESTORE", b"copy", b"0", &from_redis]);
    r.cmd(&[b"RESTORE", b"copy", b"0", &from_corekv]);
    assert_eq!(c.cmd_str("XINFO STREAM copy FULL"), r.cmd_str("XINFO STREAM copy FULL"));
    // And corekv reads redis-server's own file.
    r.cmd_str("SAVE");
    drop(redis);
    drop(server);
    let server = Server::start(&["--shards", "2", "--dir", dir.path()]);
    assert_eq!(state(&mut server.raw()), before);
}

#[test]
fn stream_writes_replay_from_the_aof() {
    let dir = TempDir::new("streams-aof");
    let args = ["--shards", "2", "--appendonly", "yes", "--appendfsync", "always"];
    let server = Server::start_in(Some(&dir.0), &args);
    let mut c = server.raw();
    populate(&mut c);
    // Generated IDs, approximate trims and NOACK reads replay exactly.
    for _ in 0..30 {
        c.cmd_str("XADD auto MAXLEN ~ 5 * f v");
    }
    c.cmd_str("XGROUP CREATE auto g 0");
    c.cmd_str("XREADGROUP GROUP g a NOACK COUNT 2 STREAMS auto >");
    c.cmd_str("XAUTOCLAIM st g1 dave 0 0 COUNT 2");
    let observe = |c: &mut Raw| {
        vec![
            c.cmd_str("XRANGE st - +"),
            c.cmd_str("XINFO GROUPS st"),
            c.cmd_str("XPENDING st g1"),
            c.cmd_str("XRANGE auto - +"),
            c.cmd_str("XINFO GROUPS auto"),
            c.cmd_str("XINFO STREAM auto"),
        ]
    };
    let before = observe(&mut c);
    drop(server);
    let server = Server::start_in(Some(&dir.0), &args);
    assert_eq!(observe(&mut server.raw()), before);
    // And after a rewrite of the AOF (the commands that rebuild each stream).
    let mut c = server.raw();
    c.cmd_str("BGREWRITEAOF");
    std::thread::sleep(Duration::from_millis(1500));
    drop(server);
    let server = Server::start_in(Some(&dir.0), &args);
    assert_eq!(observe(&mut server.raw()), before);
}

const STREAM: &[Cmd] = &[&["DEL", "s"], &["XADD", "s", "1-1", "f", "v"]];
const GROUP: &[Cmd] =
    &[&["DEL", "s", "{s}t", "t"], &["XADD", "s", "1-1", "f", "v"], &["XGROUP", "CREATE", "s", "g", "$"]];
const XREAD: Cmd = &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"];
const XREADGROUP: Cmd = &["XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">"];
const NONE: &[Cmd] = &[];

/// Blocked XREAD/XREADGROUP, as Redis 7.0 serves them: after the whole
/// transaction or script (an entry added and the key deleted inside one
/// wakes nobody; one added and XDELed answers an empty entry list, as the
/// stream's last ID moved), after each command of a pipeline; and an
/// XREADGROUP whose key is deleted, overwritten, flushed or renamed, or
/// whose group is destroyed, is answered an error instead of waiting for
/// ever. `s` and `t` live on different shards of three.
#[test]
fn blocked_stream_reads_are_served_as_redis_serves_them() {
    blocked_diff::check(&[
        Case {
            name: "XREAD, MULTI XADD DEL EXEC",
            setup: STREAM,
            block: XREAD,
            steps: &[
                &["MULTI"],
                &["XADD", "s", "2-1", "f", "old"],
                &["DEL", "s"],
                &["EXEC"],
                &["XADD", "s", "3-1", "f", "new"],
            ],
            pipelined: false,
            then: NONE,
        },
        Case {
            name: "XREAD, MULTI XADD DEL LPUSH EXEC",
            setup: STREAM,
            block: XREAD,
            steps: &[
                &["MULTI"],
                &["XADD", "s", "2-1", "f", "old"],
                &["DEL", "s"],
                &["LPUSH", "s", "foo", "bar"],
                &["EXEC"],
                &["DEL", "s"],
                &["XADD", "s", "3-1", "f", "new"],
            ],
            pipelined: false,
            then: NONE,
        },
        Case {
            name: "XREAD, MULTI XADD XDEL EXEC",
            setup: STREAM,
            block: XREAD,
            steps: &[&["MULTI"], &["XADD", "s", "2-1", "f", "old"], &["XDEL", "s", "2-1"], &["EXEC"]],
            pipelined: false,
            then: NONE,
        },
        Case {
            name: "XREAD, pipelined XADD XDEL (each a whole command)",
            setup: STREAM,
            block: XREAD,
            steps: &[&["XADD", "s", "2-1", "f", "v"], &["XDEL", "s", "2-1"]],
            pipelined: true,
            then: NONE,
        },
        Case {
            name: "XREAD, EVAL XADD DEL",
            setup: STREAM,
            block: XREAD,
            steps: &[
                &["EVAL", "redis.call('XADD', KEYS[1], '2-1', 'f', 'old') redis.call('DEL', KEYS[1])", "1", "s"],
                &["XADD", "s", "3-1", "f", "new"],
            ],
            pipelined: false,
            then: NONE,
        },
        Case {
            name: "XREADGROUP, MULTI XADD XDEL EXEC",
            setup: GROUP,
            block: XREADGROUP,
            steps: &[&["MULTI"], &["XADD", "s", "2-1", "f", "old"], &["XDEL", "s", "2-1"], &["EXEC"]],
            pipelined: false,
            then: &[&["XPENDING", "s", "g"]],
        },
        Case {
            name: "XREADGROUP, DEL",
            setup: GROUP,
            block: XREADGROUP,
            steps: &[&["DEL", "s"]],
            pipelined: false,
            then: NONE,
        },
        Case {
            name: "XREADGROUP, SET (type change)",
            setup: GROUP,
            block: XREADGROUP,
            steps: &[&["SET", "s", "val1"]],
            pipelined: false,
            then: NONE,
        },
        Case {
            name: "XREADGROUP, MULTI DEL SADD EXEC",
            setup: GROUP,
            block: XREADGROUP,
            steps: &[&["MULTI"], &["DEL", "s"], &["SADD", "s", "e1"], &["EXEC"]],
            pipelined: false,
            then: NONE,
        },
        Case {
            name: "XREADGROUP, FLUSHALL",
            setup: GROUP,
            block: XREADGROUP,
            steps: &[&["FLUSHALL"]],
            pipelined: false,
            then: NONE,
        },
        Case {
            name: "XREADGROUP, FLUSHDB",
            setup: GROUP,
            block: XREADGROUP,
            steps: &[&["FLUSHDB"]],
            pipelined: false,
            then: NONE,
        },
        Case {
            name: "XREADGROUP, XGROUP DESTROY",
            setup: GROUP,
            block: XREADGROUP,
            steps: &[&["XGROUP", "DESTROY", "s", "g"]],
            pipelined: false,
            then: NONE,
        },
        Case {
            name: "XREADGROUP, RENAME within the slot",
            setup: GROUP,
            block: XREADGROUP,
            steps: &[&["RENAME", "s", "{s}t"]],
            pipelined: false,
            then: NONE,
        },
        Case {
            name: "XREADGROUP, RENAME to another shard",
            setup: GROUP,
            block: XREADGROUP,
            steps: &[&["RENAME", "s", "t"]],
            pipelined: false,
            then: NONE,
        },
        Case {
            name: "XREADGROUP over two shards, one key deleted",
            setup: &[
                &["DEL", "s", "t"],
                &["XADD", "s", "1-1", "f", "v"],
                &["XADD", "t", "1-1", "f", "v"],
                &["XGROUP", "CREATE", "s", "g", "$"],
                &["XGROUP", "CREATE", "t", "g", "$"],
            ],
            block: &["XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", "t", ">", ">"],
            steps: &[&["DEL", "t"]],
            pipelined: false,
            then: NONE,
        },
        Case {
            name: "XREADGROUP, EVAL XADD DEL",
            setup: GROUP,
            block: XREADGROUP,
            steps: &[&["EVAL", "redis.call('XADD', KEYS[1], '2-1', 'f', 'v') redis.call('DEL', KEYS[1])", "1", "s"]],
            pipelined: false,
            then: NONE,
        },
    ]);
}
