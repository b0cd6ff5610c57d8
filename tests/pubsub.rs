//! Pub/Sub end to end. The differential runner sends one command and reads
//! one reply, which cannot express a subscribed connection (several
//! replies per command, pushes to other connections, RESP3 push frames),
//! so `raw_matches_redis` runs a script over several raw connections
//! against redis-server and corekv (3 shards, subscribers spread over the
//! cores) and compares every byte each connection receives after each
//! step. `slow_subscriber_is_cut` checks the pubsub output buffer limit.

mod common;

use common::{Redis, Server};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// (connection, command line, compare the bytes?)
const SCRIPT: &[(usize, &str, bool)] = &[
    (0, "SUBSCRIBE news sport", true),
    (1, "PSUBSCRIBE n* s?ort", true),
    (2, "SSUBSCRIBE {x}a", true),
    (3, "HELLO 3", false),
    (3, "SUBSCRIBE news", true),
    (4, "PUBLISH news hello", true),
    (4, "PUBLISH sport x", true),
    (4, "SPUBLISH {x}a m", true),
    (4, "PUBLISH nothing y", true),
    (4, "EVAL return(redis.call('PUBLISH','news','lua')) 0", true),
    (4, "EVAL return(redis.call('PUBLISH','nx','lua')) 0", true),
    (4, "EVAL return(redis.call('SPUBLISH','{x}a','lua')) 0", true),
    (4, "EVAL_RO return(redis.call('PUBLISH','news','ro')) 0", true),
    (4, "EVAL return(redis.call('PUBLISH','nothing','lua')) 0", true),
    (0, "GET k", true),
    (0, "PING", true),
    (0, "PING hi", true),
    (0, "PING a b", true),
    (0, "CLIENT ID", true),
    (3, "PUBLISH news self", true),
    (3, "GET k", true),
    (3, "PING", true),
    (4, "PUBSUB NUMSUB news sport none", true),
    (4, "PUBSUB NUMPAT", true),
    (4, "PUBSUB CHANNELS n*", true),
    (4, "PUBSUB SHARDCHANNELS", true),
    (4, "PUBSUB SHARDNUMSUB {x}a {x}b", true),
    (4, "PUBSUB CHANNELS a b", true),
    (4, "PUBSUB FOO", true),
    (4, "PUBSUB HELP", true),
    (0, "SUBSCRIBE news", true),
    (0, "UNSUBSCRIBE news", true),
    (0, "UNSUBSCRIBE", true),
    (0, "UNSUBSCRIBE", true),
    (0, "GET k", true),
    (1, "PUNSUBSCRIBE nothing", true),
    (1, "PUNSUBSCRIBE", true),
    (1, "PUNSUBSCRIBE", true),
    (2, "SUNSUBSCRIBE", true),
    (2, "SUNSUBSCRIBE", true),
    (1, "SUBSCRIBE a", true),
    (1, "RESET", true),
    (1, "GET k", true),
    (4, "PUBLISH a z", true),
    (5, "MULTI", true),
    (5, "SUBSCRIBE q", true),
    (5, "EXEC", true),
    (5, "PING", true),
    (4, "PUBLISH q one", true),
    (5, "QUIT", true),
    (4, "PUBSUB NUMSUB q", true),
    (3, "UNSUBSCRIBE news", true),
    (3, "UNSUBSCRIBE", true),
    (3, "PSUBSCRIBE *", true),
    (4, "PUBLISH anything at-all", true),
    (3, "RESET", true),
    (3, "PING", true),
    (4, "PUBLISH anything again", true),
    (4, "PUBSUB NUMPAT", true),
];

fn encode(line: &str) -> Vec<u8> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut v = format!("*{}\r\n", words.len()).into_bytes();
    for w in words {
        v.extend_from_slice(format!("${}\r\n{w}\r\n", w.len()).as_bytes());
    }
    v
}

/// Whatever arrived on `conn` since the last call (nothing more for a
/// while), without blocking.
fn drain(conn: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        match conn.read(&mut chunk) {
            Ok(0) => {
                out.extend_from_slice(b"<closed>");
                return out;
            }
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(_) => return out,
        }
    }
}

/// Runs `SCRIPT` on `port`; per step, what every connection received.
fn run_script(port: u16) -> Vec<Vec<Vec<u8>>> {
    run(port, SCRIPT)
}

fn run(port: u16, script: &[(usize, &str, bool)]) -> Vec<Vec<Vec<u8>>> {
    let mut conns: Vec<TcpStream> = (0..6)
        .map(|_| {
            let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.set_nodelay(true).unwrap();
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect();
    let mut steps = Vec::new();
    for &(c, line, _) in script {
        conns[c].write_all(&encode(line)).unwrap();
        std::thread::sleep(Duration::from_millis(150));
        steps.push(conns.iter_mut().map(drain).collect());
    }
    steps
}

#[test]
fn raw_matches_redis() {
    let redis = Redis::start();
    let corekv = Server::start(&["--shards", "3"]);
    compare(run_script(redis.port), run_script(corekv.port), SCRIPT);
}

/// ACL channel rules: `&pattern`s, literal pattern subscriptions, NOPERM
/// and the ACL LOG's channel entries.
const ACL_SCRIPT: &[(usize, &str, bool)] = &[
    (0, "ACL SETUSER u on nopass +@all ~* resetchannels &news* &lit", true),
    (0, "AUTH u x", true),
    (0, "SUBSCRIBE news1 lit", true),
    (0, "SUBSCRIBE other", true),
    (0, "PSUBSCRIBE news*", true),
    (0, "PSUBSCRIBE ne*", true),
    (0, "SSUBSCRIBE other", true),
    (0, "SSUBSCRIBE news2", true),
    (0, "RESET", true),
    (0, "AUTH u x", true),
    (0, "PUBLISH other x", true),
    (0, "SPUBLISH other x", true),
    (0, "PUBLISH newsy x", true),
    (1, "ACL LOG RESET", true),
    (0, "PUBLISH nope x", true),
    (1, "ACL LOG", false),
    (0, "SUBSCRIBE a b news", true),
    (2, "AUTH u x", true),
    (2, "SUBSCRIBE news1", true),
    (3, "AUTH u x", true),
    (3, "SUBSCRIBE lit", true),
    (4, "AUTH u x", true),
    (4, "PSUBSCRIBE news*", true),
    // Revoked: the subscribers of news1 and news* are disconnected.
    (1, "ACL SETUSER u resetchannels &lit", true),
    (5, "PING", true),
];

#[test]
fn acl_channels_match_redis() {
    let redis = Redis::start();
    let corekv = Server::start(&["--shards", "2"]);
    compare(run(redis.port, ACL_SCRIPT), run(corekv.port, ACL_SCRIPT), ACL_SCRIPT);
    let mut c = corekv.raw();
    c.cmd_str("AUTH u x");
    c.cmd_str("PUBLISH nope2 x");
    let mut admin = corekv.raw();
    match admin.cmd_str("ACL LOG 1") {
        proxy::resp::Value::Array(entries) => {
            let fields = match &entries[0] {
                proxy::resp::Value::Array(f) => f.clone(),
                other => panic!("entry: {other:?}"),
            };
            let has = |w: &[u8]| fields.contains(&proxy::resp::Value::Bulk(w.to_vec()));
            assert!(has(b"channel") && has(b"nope2"), "{fields:?}");
        }
        other => panic!("ACL LOG: {other:?}"),
    }
}

fn compare(expected: Vec<Vec<Vec<u8>>>, got: Vec<Vec<Vec<u8>>>, script: &[(usize, &str, bool)]) {
    let show = |b: &[u8]| String::from_utf8_lossy(b).replace("\r\n", "\\r\\n");
    for (i, &(c, line, compare)) in script.iter().enumerate() {
        if !compare {
            continue;
        }
        for conn in 0..6 {
            let (e, g) = (&expected[i][conn], &got[i][conn]);
            // CLIENT ID differs by design; only its kind is compared.
            if line == "CLIENT ID" && conn == c {
                assert_eq!(e.first(), g.first(), "CLIENT ID's kind");
                continue;
            }
            assert_eq!(show(g), show(e), "step {i} (conn {c}: {line}), bytes on conn {conn}");
        }
    }
}

/// A subscriber that never reads is cut at the pubsub class's hard limit
/// (Redis's log line), the server's memory stays bounded, and the
/// publisher and a reading subscriber see every message.
#[test]
fn slow_subscriber_is_cut() {
    let server = Server::start(&["--shards", "2", "--client-output-buffer-limit", "pubsub 1mb 512kb 60"]);
    let port = server.port;
    // Several readers and sleepers, so both cores hold some of each.
    let mut sleepers = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(&encode("SUBSCRIBE feed")).unwrap();
        sleepers.push(s);
    }
    const MESSAGES: usize = 20_000;
    let payload = "x".repeat(1000);
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(&encode("SUBSCRIBE feed")).unwrap();
            std::thread::spawn(move || {
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                let needle = b"$7\r\nmessage\r\n";
                let (mut seen, mut buf, mut carry) = (0usize, vec![0u8; 1 << 16], Vec::new());
                while seen < MESSAGES {
                    let n = match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    carry.extend_from_slice(&buf[..n]);
                    let mut last = 0;
                    let mut i = 0;
                    while i + needle.len() <= carry.len() {
                        if &carry[i..i + needle.len()] == needle {
                            seen += 1;
                            i += needle.len();
                            last = i;
                        } else {
                            i += 1;
                        }
                    }
                    carry.drain(..last.max(carry.len().saturating_sub(needle.len())));
                }
                seen
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut publisher = server.raw();
    let started = Instant::now();
    let mut counts = Vec::new();
    for chunk in 0..MESSAGES / 100 {
        let mut batch = Vec::new();
        for _ in 0..100 {
            batch.extend_from_slice(&encode(&format!("PUBLISH feed {payload}")));
        }
        publisher.send(&batch);
        for _ in 0..100 {
            match publisher.read() {
                Some(proxy::resp::Value::Int(n)) => counts.push(n),
                other => panic!("PUBLISH #{chunk}: {other:?}"),
            }
        }
    }
    // Every reader got every message.
    for r in readers {
        assert_eq!(r.join().unwrap(), MESSAGES);
    }
    // The sleepers were cut once over 1 MB: later publishes count 4.
    assert_eq!(*counts.last().unwrap(), 4, "sleepers still counted at the end");
    assert!(counts[0] == 8, "all eight subscribers counted at first: {}", counts[0]);
    let log = server.log.lock().unwrap().join("\n");
    let cut = log.matches("scheduled to be closed ASAP for overcoming of output buffer limits").count();
    assert_eq!(cut, 4, "one log line per sleeper:\n{log}");
    assert!(log.contains("flags=P"), "the log line shows a subscriber: {log}");
    for s in &mut sleepers {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut sink = vec![0u8; 1 << 20];
        let mut total = 0;
        loop {
            match s.read(&mut sink) {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
        // What reached the socket before the cut: bounded by the limit
        // plus the kernel's buffers, far less than the 20 MB published.
        assert!(total < 12 << 20, "a sleeper received {total} bytes");
    }
    // Memory: the server holds nothing for the cut subscribers.
    match publisher.cmd(&[b"INFO", b"memory"]) {
        proxy::resp::Value::Bulk(b) => {
            let text = String::from_utf8_lossy(&b).into_owned();
            let used: u64 =
                text.lines().find_map(|l| l.strip_prefix("used_memory:")).and_then(|v| v.trim().parse().ok()).unwrap();
            assert!(used < 64 << 20, "used_memory {used} after the run");
        }
        other => panic!("INFO: {other:?}"),
    }
    println!("published {MESSAGES} in {:?}", started.elapsed());
}

/// PUBSUB and INFO count subscribers on every core; CLIENT LIST shows the
/// subscriptions.
#[test]
fn counts_over_cores() {
    let server = Server::start(&["--shards", "3"]);
    let mut subs: Vec<common::Raw> = (0..9).map(|_| server.raw()).collect();
    let mut cores = std::collections::HashSet::new();
    for s in &mut subs {
        if let proxy::resp::Value::Int(id) = s.cmd_str("CLIENT ID") {
            cores.insert((id - 1) % 3);
        }
        s.cmd_str("SUBSCRIBE c1 c2");
        s.read();
        s.cmd_str("PSUBSCRIBE p*");
    }
    assert!(cores.len() >= 2, "subscribers on one core only: {cores:?}");
    let mut c = server.raw();
    assert_eq!(c.cmd_str("PUBLISH c1 m"), proxy::resp::Value::Int(9));
    assert_eq!(c.cmd_str("PUBLISH pq m"), proxy::resp::Value::Int(9));
    assert_eq!(c.cmd_str("PUBSUB NUMPAT"), proxy::resp::Value::Int(1));
    let info = match c.cmd_str("INFO stats") {
        proxy::resp::Value::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("{other:?}"),
    };
    assert!(info.contains("pubsub_channels:2\r\n"), "{info}");
    assert!(info.contains("pubsub_patterns:1\r\n"), "{info}");
    assert!(info.contains("pubsubshard_channels:0\r\n"), "{info}");
    let list = match c.cmd_str("CLIENT LIST") {
        proxy::resp::Value::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("{other:?}"),
    };
    assert_eq!(list.matches("flags=P db=0 sub=2 psub=1 ssub=0").count(), 9, "{list}");
    let lines = |v: proxy::resp::Value| match v {
        proxy::resp::Value::Bulk(b) => String::from_utf8_lossy(&b).lines().count(),
        other => panic!("{other:?}"),
    };
    assert_eq!(lines(c.cmd_str("CLIENT LIST TYPE pubsub")), 9);
    assert_eq!(lines(c.cmd_str("CLIENT LIST TYPE normal")), 1);
    assert_eq!(c.cmd_str("CLIENT KILL TYPE normal"), proxy::resp::Value::Int(0));
    assert_eq!(c.cmd_str("CLIENT KILL TYPE pubsub"), proxy::resp::Value::Int(9));
    drop(subs);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(c.cmd_str("PUBLISH c1 m"), proxy::resp::Value::Int(0));
    assert_eq!(c.cmd_str("PUBSUB NUMPAT"), proxy::resp::Value::Int(0));
}

/// Sharded Pub/Sub in per-core cluster mode: a shard channel lives on its
/// slot's owner (MOVED elsewhere, CROSSSLOT across slots), SPUBLISH there
/// reaches its subscriber.
#[test]
fn shard_channels_follow_their_slot() {
    let base = loop {
        let base = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if base < 60000 && (0..2).all(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).is_ok()) {
            break base;
        }
    };
    let _server =
        Server::start(&["--shards", "2", "--cluster-mode", "per-core", "--cluster-port-base", &base.to_string()]);
    // "a" is slot 15495 (the second node), "b" slot 3300 (the first).
    let (mut first, mut second) = (common::Raw::connect(base), common::Raw::connect(base + 1));
    let err = |v: proxy::resp::Value| match v {
        proxy::resp::Value::Error(e) => String::from_utf8_lossy(&e).into_owned(),
        other => panic!("not an error: {other:?}"),
    };
    assert_eq!(err(first.cmd_str("SSUBSCRIBE a b")), "CROSSSLOT Keys in request don't hash to the same slot");
    assert_eq!(err(first.cmd_str("SSUBSCRIBE a")), format!("MOVED 15495 127.0.0.1:{}", base + 1));
    assert_eq!(err(first.cmd_str("SPUBLISH a m")), format!("MOVED 15495 127.0.0.1:{}", base + 1));
    let reply = second.cmd_str("SSUBSCRIBE a");
    assert_eq!(format!("{reply:?}"), format!("{:?}", first_array(&["ssubscribe", "a"], 1)));
    let mut publisher = common::Raw::connect(base + 1);
    assert_eq!(publisher.cmd_str("SPUBLISH a m"), proxy::resp::Value::Int(1));
    let message = second.read().unwrap();
    assert_eq!(format!("{message:?}"), format!("{:?}", bulks(&["smessage", "a", "m"])));
    // A channel of the first node's slot published there reaches nobody.
    assert_eq!(first.cmd_str("SPUBLISH b m"), proxy::resp::Value::Int(0));
}

fn bulks(words: &[&str]) -> proxy::resp::Value {
    proxy::resp::Value::Array(words.iter().map(|w| proxy::resp::Value::Bulk(w.as_bytes().to_vec())).collect())
}

fn first_array(words: &[&str], n: i64) -> proxy::resp::Value {
    let mut items: Vec<proxy::resp::Value> =
        words.iter().map(|w| proxy::resp::Value::Bulk(w.as_bytes().to_vec())).collect();
    items.push(proxy::resp::Value::Int(n));
    proxy::resp::Value::Array(items)
}
