//! Keyspace notifications against redis-server: the same commands run on
//! both, with `notify-keyspace-events` set alike, and a subscriber on each
//! (PSUBSCRIBE `__key*__:*`) must see the same events. corekv runs with
//! two shards (or one and three: `compare_on`), so events raised on any
//! core reach a subscriber on one of them. Per step, events are compared per key, in order (events of
//! different keys raised on different cores may interleave differently).

mod common;

use common::{Raw, Redis, Server};
use proxy::resp::Value;
use std::collections::BTreeMap;
use std::time::Duration;

const MARKER: &str = "__keymarker__:end";

fn text(v: &Value) -> String {
    match v {
        Value::Bulk(b) | Value::Simple(b) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    }
}

/// (channel, message) of a pmessage push.
fn message(v: Value) -> (String, String) {
    match v {
        Value::Array(items) if items.len() == 4 && text(&items[0]) == "pmessage" => (text(&items[2]), text(&items[3])),
        other => panic!("not a pmessage: {other:?}"),
    }
}

struct Side {
    sub: Raw,
    cmd: Raw,
}

impl Side {
    fn new(port: u16, events: &str) -> Side {
        let mut cmd = Raw::connect(port);
        assert_eq!(text(&cmd.cmd(&[b"CONFIG", b"SET", b"notify-keyspace-events", events.as_bytes()])), "OK");
        let mut sub = Raw::connect(port);
        sub.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        sub.cmd_str("PSUBSCRIBE __key*__:*");
        Side { sub, cmd }
    }

    /// Events until the marker published after `line` (redis-server: its
    /// publishes are synchronous, so the marker comes last).
    fn until_marker(&mut self, line: &str) -> Vec<(String, String)> {
        self.run(line);
        self.cmd.cmd_str(&format!("PUBLISH {MARKER} x"));
        let mut got = Vec::new();
        loop {
            let m = message(self.sub.read().expect("subscriber open"));
            if m.0 == MARKER {
                return got;
            }
            got.push(m);
        }
    }

    /// Runs a step: commands separated by " ; " (a transaction is one step).
    fn run(&mut self, line: &str) -> Value {
        let mut last = Value::Nil;
        for command in line.split(" ; ").filter(|c| !c.is_empty()) {
            last = if let Some(script) = command.strip_prefix("EVAL ") {
                let (body, rest) = script.rsplit_once('|').expect("EVAL body|numkeys keys...");
                let mut words: Vec<&[u8]> = vec![b"EVAL", body.as_bytes()];
                words.extend(rest.split_whitespace().map(str::as_bytes));
                self.cmd.cmd(&words)
            } else {
                self.cmd.cmd_str(command)
            };
        }
        last
    }

    fn events(&mut self, n: usize) -> Vec<(String, String)> {
        (0..n).map(|_| message(self.sub.read().expect("subscriber open"))).collect()
    }
}

/// The key an event is about: the keyspace channel's tail or the keyevent
/// message.
fn key_of((channel, message): &(String, String)) -> String {
    match channel.strip_prefix("__keyspace@") {
        Some(rest) => format!("{}:{}", &rest[..rest.find("__:").unwrap()], &rest[rest.find("__:").unwrap() + 3..]),
        None => {
            let db = &channel["__keyevent@".len()..channel.find("__:").unwrap()];
            format!("{db}:{message}")
        }
    }
}

fn by_key(events: &[(String, String)]) -> BTreeMap<String, Vec<(String, String)>> {
    let mut map: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for e in events {
        map.entry(key_of(e)).or_default().push(e.clone());
    }
    map
}

/// Runs each line on both and compares the events it raised.
fn compare(events: &str, lines: &[&str]) {
    compare_on(2, events, lines)
}

/// `compare` against corekv with `shards` shards (the subscriber and the
/// commands' connection land on different cores when there are several).
fn compare_on(shards: usize, events: &str, lines: &[&str]) {
    let redis = Redis::start();
    let corekv = Server::shards(shards);
    let (mut r, mut c) = (Side::new(redis.port, events), Side::new(corekv.port, events));
    for line in lines {
        let want = r.until_marker(line);
        let reply = c.run(line);
        // Shown when a step's events do not come.
        eprintln!("{line} -> {reply:?}, {} events", want.len());
        let got = c.events(want.len());
        assert_eq!(by_key(&got), by_key(&want), "{line}\n got: {got:?}\nwant: {want:?}");
    }
    // Nothing more than Redis raised: the marker is next.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(c.until_marker(""), Vec::<(String, String)>::new(), "extra events");
}

#[test]
fn every_family_raises_redis_events() {
    compare(
        "KEA",
        &[
            "SET s1 1",
            "SET s1 2 EX 100",
            "SET s1 3 NX",
            "SETEX s2 100 v",
            "SETNX s2 v",
            "GETSET s2 w",
            "MSET a 1 b 2 c 3",
            "MSETNX d 1 e 2",
            "INCR a",
            "DECRBY b 3",
            "INCRBYFLOAT c 1.5",
            "APPEND d xyz",
            "SETRANGE d 5 q",
            "SETBIT bits 7 1",
            "BITFIELD bits SET u8 0 200",
            "BITOP OR dest bits d",
            "PFADD hll x y z",
            "PFMERGE hll2 hll",
            "GETEX s1 PERSIST",
            "GETEX s2 PX 50000",
            "GETDEL s2",
            "EXPIRE a 100",
            "PERSIST a",
            "EXPIRE a 0",
            "DEL b c missing",
            "UNLINK d",
            "RENAME e e2",
            "RENAME e2 x{e2}",
            "COPY x{e2} y",
            "COPY x{e2} y REPLACE",
            "COPY y y1 DB 1",
            "LPUSH l a b c d e",
            "RPUSHX l f",
            "LPOP l",
            "RPOP l 2",
            "LSET l 0 z",
            "LINSERT l BEFORE z y",
            "LREM l 0 y",
            "LTRIM l 0 5",
            "LMOVE l l2 LEFT RIGHT",
            "RPOPLPUSH l l2",
            "LMPOP 2 l l2 LEFT COUNT 10",
            "RPUSH l3 1 2",
            "LMOVE l3 l4 LEFT LEFT",
            "HSET h f 1 g 2",
            "HSETNX h f 1",
            "HINCRBY h f 5",
            "HINCRBYFLOAT h g 0.5",
            "HDEL h f g",
            "SADD s a b c d",
            "SREM s a",
            "SMOVE s s2 b",
            "SMOVE s s3 c",
            "SPOP s",
            "SADD t 1 2 3",
            "SPOP t 5",
            "SADD u 1 2",
            "SINTERSTORE st u s2",
            "SUNIONSTORE st u s2",
            "SDIFFSTORE st u",
            "ZADD z 1 a 2 b 3 c 4 d",
            "ZADD z XX CH 10 a",
            "ZINCRBY z 1 b",
            "ZREM z c",
            "ZRANGESTORE zr z 0 -1",
            "ZUNIONSTORE zu 2 z zr",
            "ZINTERSTORE zu 2 z missing",
            "ZDIFFSTORE zd 1 z",
            "ZPOPMIN z",
            "ZPOPMAX z 1",
            "ZREMRANGEBYSCORE zr 0 2",
            "ZREMRANGEBYRANK zr 0 0",
            "ZREMRANGEBYLEX zd - +",
            "ZMPOP 2 zr zu MAX COUNT 10",
            "FLUSHALL",
        ],
    );
}

#[test]
fn classes_new_keys_and_transactions() {
    compare("Kgn", &["SET a 1", "DEL a", "LPUSH l x", "RENAME l m", "DEL m"]);
    compare("E$l", &["SET a 1", "DEL a", "LPUSH l x", "LPOP l", "INCR n"]);
    compare("Km", &["GET a", "MGET a b", "SET a 1", "GET a", "HGET h f", "ZSCORE z m", "SMEMBERS s"]);
    compare(
        "KEA",
        &[
            "MULTI ; SET a 1 ; LPUSH b x ; RENAME a c ; SET d 1 ; EXEC",
            "EVAL redis.call('set',KEYS[1],1) redis.call('del',KEYS[1])|1 k",
            "EVAL redis.call('set',KEYS[1],1) redis.call('rename',KEYS[1],KEYS[2])|2 k other",
        ],
    );
}

#[test]
fn expired_lazily_and_by_the_sweep() {
    let redis = Redis::start();
    let corekv = Server::shards(2);
    let (mut r, mut c) = (Side::new(redis.port, "KEx"), Side::new(corekv.port, "KEx"));
    for side in [&mut r, &mut c] {
        side.cmd.cmd_str("SET lazy 1 PX 30");
        side.cmd.cmd_str("SET swept 1 PX 30");
        for i in 0..20 {
            side.cmd.cmd_str(&format!("SET k{i} 1 PX 30"));
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    r.cmd.cmd_str("GET lazy");
    c.cmd.cmd_str("GET lazy");
    // The sweep (or a lazy read) expires the rest: 22 keys, 2 events each.
    std::thread::sleep(Duration::from_millis(1500));
    let mut want = r.until_marker("");
    let mut got = c.events(want.len());
    want.sort();
    got.sort();
    assert_eq!(want.len(), 44, "{want:?}");
    assert_eq!(got, want);
}

#[test]
fn evicted_keys_are_announced() {
    let redis = Redis::start();
    let corekv = Server::shards(2);
    let (mut r, mut c) = (Side::new(redis.port, "Ee"), Side::new(corekv.port, "Ee"));
    let value = "v".repeat(10_000);
    for side in [&mut r, &mut c] {
        side.cmd.cmd_str("CONFIG SET maxmemory-policy allkeys-random");
        for i in 0..50 {
            side.cmd.cmd(&[b"SET", format!("big{i}").as_bytes(), value.as_bytes()]);
        }
        side.cmd.cmd_str("CONFIG SET maxmemory 1");
        side.cmd.cmd_str("SET trigger 1");
    }
    // Each corekv shard evicts its part (the cron finishes what writes
    // started): every key goes, each with its `evicted`.
    for _ in 0..100 {
        if matches!(c.cmd.cmd_str("DBSIZE"), Value::Int(0)) {
            break;
        }
        c.cmd.cmd_str("SET trigger 1");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut want = r.until_marker("");
    want.sort();
    assert_eq!(want.len(), 50);
    // corekv may also evict the keys its retries wrote.
    let mut got = Vec::new();
    while got.len() < want.len() {
        let m = c.events(1).remove(0);
        if m.1.starts_with("big") {
            got.push(m);
        }
    }
    got.sort();
    assert_eq!(got, want);
}

#[test]
fn config_get_and_errors_match_redis() {
    let redis = Redis::start();
    let corekv = Server::shards(2);
    let (mut r, mut c) = (redis.raw(), corekv.raw());
    for line in [
        "CONFIG SET notify-keyspace-events Kg$lshzxetd",
        "CONFIG GET notify-keyspace-events",
        "CONFIG SET notify-keyspace-events EnmA",
        "CONFIG GET notify-keyspace-events",
        "CONFIG SET notify-keyspace-events Q",
        "CONFIG SET notify-keyspace-events nx",
        "CONFIG GET notify-keyspace-events",
    ] {
        assert_eq!(format!("{:?}", c.cmd_str(line)), format!("{:?}", r.cmd_str(line)), "{line}");
    }
}

/// t_stream.c's events: what each stream command raises, only when it
/// changed something, consumers created implicitly included.
const STREAM_STEPS: &[&str] = &[
    "XADD st 1-1 a 1",
    "XADD st MAXLEN 1 2-1 b 2",
    "XADD st MAXLEN 5 3-1 c 3",
    "XADD nost NOMKSTREAM * a 1",
    "XADD st 3-1 c 3",
    "XTRIM st MAXLEN 5",
    "XTRIM st MAXLEN 1",
    "XTRIM nost MAXLEN 1",
    "XADD st 4-1 d 4",
    "XDEL st 9-9",
    "XDEL st 4-1 3-1",
    "XSETID st 10-0",
    "XSETID st 1-0",
    "XGROUP CREATE st g 0",
    "XGROUP CREATE st g 0",
    "XGROUP CREATE st2 g $ MKSTREAM",
    "XGROUP SETID st g 0",
    "XGROUP CREATECONSUMER st g c1",
    "XGROUP CREATECONSUMER st g c1",
    "XADD st 11-0 f v",
    "XADD st 12-0 f v",
    "XREADGROUP GROUP g c2 COUNT 1 STREAMS st >",
    "XREADGROUP GROUP g c2 STREAMS st >",
    "XREADGROUP GROUP g c9 STREAMS st >",
    "XREADGROUP GROUP g c3 STREAMS st 0",
    "XCLAIM st g c4 0 11-0",
    "XCLAIM st g c5 99999999 12-0",
    "XCLAIM st g c5 0 99-0",
    "XAUTOCLAIM st g c6 0 0",
    "XAUTOCLAIM st g c7 99999999 0",
    "XGROUP CREATE st2 h 0",
    "XADD st2 1-0 f v",
    "XREADGROUP GROUP h n1 NOACK STREAMS st2 >",
    "XREADGROUP GROUP g n2 STREAMS st st2 > >",
    "XACK st g 11-0",
    "XGROUP DELCONSUMER st g c4",
    "XGROUP DELCONSUMER st g nosuch",
    "XGROUP DESTROY st g",
    "XGROUP DESTROY st g",
    "MULTI ; XADD {t}a 1-0 f v ; XGROUP CREATE {t}a g 0 ; XREADGROUP GROUP g c STREAMS {t}a > ; XDEL {t}a 1-0 ; EXEC",
    "EVAL redis.call('xadd',KEYS[1],'1-0','f','v') redis.call('xtrim',KEYS[1],'MAXLEN',0)|1 sc",
    "DEL st st2 {t}a sc",
];

#[test]
fn stream_commands_raise_redis_events() {
    for shards in [1, 3] {
        compare_on(shards, "KEA", STREAM_STEPS);
        compare_on(shards, "Ktn", STREAM_STEPS);
    }
}

/// SMOVE: `srem` (and `del` for an emptied source) on the source, `sadd`
/// on the destination only when the member was not already there.
#[test]
fn smove_raises_sadd_only_for_a_new_member() {
    let steps = [
        "SADD s a b c",
        "SADD d a",
        "SMOVE s d a",
        "SMOVE s d nosuch",
        "SMOVE s s b",
        "SMOVE s e b",
        "SADD d c",
        "SMOVE s d c",
        "SADD {t}s x y",
        "SADD {t}d x",
        "SMOVE {t}s {t}d x",
        "SMOVE {t}s {t}d y",
        "SADD s2 m",
        "MULTI ; SMOVE s2 d m ; SADD s2 m ; SMOVE s2 d m ; EXEC",
        "SADD s3 q",
        "SADD s4 q",
        "EVAL redis.call('smove',KEYS[1],KEYS[2],'q')|2 s3 s4",
    ];
    for shards in [1, 3] {
        compare_on(shards, "KEAn", &steps);
    }
}

/// A consumer XREADGROUP creates when its blocked read is served: `xadd`
/// from the writer, then `xgroup-createconsumer` when the waiter is served.
#[test]
fn blocked_xreadgroup_creates_its_consumer_when_served() {
    for shards in [1, 3] {
        let redis = Redis::start();
        let corekv = Server::shards(shards);
        for (port, is_redis) in [(redis.port, true), (corekv.port, false)] {
            let mut side = Side::new(port, "KEA");
            side.cmd.cmd_str("XGROUP CREATE bs g $ MKSTREAM");
            assert_eq!(side.events(2).len(), 2);
            // The waiter on another connection (another core when there are several).
            let mut waiter = Raw::connect(port);
            waiter.send(&Raw::encode(&[b"XREADGROUP", b"GROUP", b"g", b"w", b"BLOCK", b"0", b"STREAMS", b"bs", b">"]));
            std::thread::sleep(Duration::from_millis(200));
            side.cmd.cmd_str("XADD bs 1-0 f v");
            assert!(matches!(waiter.read(), Some(Value::Array(_))), "served");
            let got = side.events(4);
            let want = vec![
                ("__keyspace@0__:bs".to_string(), "xadd".to_string()),
                ("__keyevent@0__:xadd".to_string(), "bs".to_string()),
                ("__keyspace@0__:bs".to_string(), "xgroup-createconsumer".to_string()),
                ("__keyevent@0__:xgroup-createconsumer".to_string(), "bs".to_string()),
            ];
            assert_eq!(got, want, "redis: {is_redis}, {shards} shard(s)");
        }
    }
}

/// SETBIT and BITFIELD raise `setbit` only when a bit changed or the
/// string was created or grown (bitops.c).
#[test]
fn bit_writes_that_change_nothing_raise_nothing() {
    let steps = [
        "SETBIT b 7 1",
        "SETBIT b 7 1",
        "SETBIT b 7 0",
        "SETBIT b 100 0",
        "SETBIT b 100 0",
        "BITFIELD b SET u8 0 1",
        "BITFIELD b SET u8 0 1 INCRBY u8 0 0",
        "BITFIELD b GET u8 0",
        "BITFIELD b OVERFLOW FAIL INCRBY u8 0 300",
        "BITFIELD b SET u8 400 0",
        "BITFIELD nb SET u8 0 0",
        "SETBIT nb2 0 0",
        "MULTI ; SETBIT b 7 1 ; SETBIT b 7 1 ; EXEC",
    ];
    for shards in [1, 3] {
        compare_on(shards, "KEA", &steps);
    }
}
