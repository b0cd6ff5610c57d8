//! Client-side caching (CLIENT TRACKING) and MONITOR end to end, on two
//! shards: a key read through one core and written through another
//! invalidates; RESP3 pushes, RESP2 through REDIRECT to a subscriber
//! (raw and with redis-py), BCAST, OPTIN, NOLOOP, FLUSHALL's null; MONITOR's
//! lines against redis-server's for the same commands.

mod common;

use common::{Redis, Server};
use proxy::resp::skip_value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A connection reading whole RESP frames as raw bytes (push frames too).
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn new(port: u16) -> Conn {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Conn { stream, buf: Vec::new() }
    }

    fn send(&mut self, args: &[&str]) {
        self.send_all(&[args]);
    }

    /// Several commands in one write: they reach the server together.
    fn send_all(&mut self, commands: &[&[&str]]) {
        let mut v = Vec::new();
        for args in commands {
            v.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
            for a in *args {
                v.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
            }
        }
        self.stream.write_all(&v).unwrap();
    }

    /// The next frame; `None` when nothing comes within `wait`.
    fn frame_within(&mut self, wait: Duration) -> Option<String> {
        self.stream.set_read_timeout(Some(wait)).unwrap();
        loop {
            if let Some(n) = (!self.buf.is_empty()).then(|| skip_value(&self.buf)).flatten() {
                let f: Vec<u8> = self.buf.drain(..n).collect();
                return Some(String::from_utf8_lossy(&f).into_owned());
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => panic!("closed"),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    return None
                }
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    fn frame(&mut self) -> String {
        self.frame_within(Duration::from_secs(10)).expect("a frame")
    }

    fn cmd(&mut self, args: &[&str]) -> String {
        self.send(args);
        self.frame()
    }

    fn id(&mut self) -> u64 {
        let r = self.cmd(&["CLIENT", "ID"]);
        r.trim().trim_start_matches(':').parse().unwrap()
    }

    /// Nothing pushed: a PING's reply comes first.
    fn nothing_pushed(&mut self) {
        assert_eq!(self.cmd(&["PING"]), "+PONG\r\n", "unexpected push");
    }
}

fn invalidate(keys: &[&str]) -> String {
    let mut s = format!(">2\r\n$10\r\ninvalidate\r\n*{}\r\n", keys.len());
    for k in keys {
        s.push_str(&format!("${}\r\n{k}\r\n", k.len()));
    }
    s
}

/// A connection accepted by core `core` (ids interleave the cores').
fn conn_on_core(port: u16, core: u64, cores: u64) -> Conn {
    for _ in 0..200 {
        let mut c = Conn::new(port);
        let id = c.id();
        if (id - 1) % cores == core {
            return c;
        }
    }
    panic!("no connection landed on core {core}");
}

/// The shard owning `key`, from INFO shards' key counts.
fn owner(admin: &mut Conn, key: &str) -> usize {
    let counts = |c: &mut Conn| -> Vec<u64> {
        let info = c.cmd(&["INFO", "shards"]);
        info.lines()
            .filter(|l| l.starts_with("shard"))
            .map(|l| l.split(",keys=").nth(1).unwrap().split(',').next().unwrap().parse().unwrap())
            .collect()
    };
    admin.cmd(&["DEL", key]);
    let before = counts(admin);
    admin.cmd(&["SET", key, "x"]);
    let after = counts(admin);
    admin.cmd(&["DEL", key]);
    (0..before.len()).find(|&i| after[i] > before[i]).unwrap()
}

/// A key owned by shard `shard`.
fn key_on(admin: &mut Conn, shard: usize, prefix: &str) -> String {
    (0..100).map(|i| format!("{prefix}{i}")).find(|k| owner(admin, k) == shard).unwrap()
}

#[test]
fn resp3_invalidation_for_a_key_owned_by_the_other_core() {
    let server = Server::shards(2);
    let mut admin = Conn::new(server.port);
    let mut c = conn_on_core(server.port, 0, 2);
    let key = key_on(&mut admin, 1, "k");
    let mut writer = conn_on_core(server.port, 1, 2);
    assert!(c.cmd(&["HELLO", "3"]).starts_with('%'));
    assert_eq!(c.cmd(&["CLIENT", "TRACKING", "on"]), "+OK\r\n");
    writer.cmd(&["SET", &key, "1"]);
    assert_eq!(c.cmd(&["GET", &key]), "$1\r\n1\r\n");
    assert_eq!(writer.cmd(&["SET", &key, "2"]), "+OK\r\n");
    assert_eq!(c.frame(), invalidate(&[&key]));
    // Told once: the key is forgotten until read again.
    writer.cmd(&["SET", &key, "3"]);
    c.nothing_pushed();
    // Its own write: the reply, then the invalidation.
    c.cmd(&["GET", &key]);
    c.send(&["SET", &key, "4"]);
    assert_eq!(c.frame(), "+OK\r\n");
    assert_eq!(c.frame(), invalidate(&[&key]));
    let info = admin.cmd(&["INFO", "clients"]);
    assert!(info.contains("tracking_clients:1\r\n"), "{info}");
    c.cmd(&["GET", &key]);
    let stats = admin.cmd(&["INFO", "stats"]);
    assert!(stats.contains("tracking_total_keys:1\r\n"), "{stats}");
    assert!(stats.contains("tracking_total_items:1\r\n"), "{stats}");
    let list = admin.cmd(&["CLIENT", "LIST"]);
    assert!(list.contains(" flags=t "), "{list}");
    // FLUSHALL: a null to every tracking client.
    writer.cmd(&["FLUSHALL"]);
    assert_eq!(c.frame(), ">2\r\n$10\r\ninvalidate\r\n_\r\n");
}

#[test]
fn bcast_noloop_and_optin() {
    let server = Server::shards(2);
    let mut admin = Conn::new(server.port);
    let mut c = Conn::new(server.port);
    let mut writer = Conn::new(server.port);
    c.cmd(&["HELLO", "3"]);
    assert_eq!(c.cmd(&["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "user:", "NOLOOP"]), "+OK\r\n");
    let list = admin.cmd(&["CLIENT", "LIST"]);
    assert!(list.contains(" flags=tB "), "{list}");
    assert!(admin.cmd(&["INFO", "stats"]).contains("tracking_total_prefixes:1\r\n"));
    // Keys on both shards, written by another client: all announced.
    for i in 0..6 {
        writer.cmd(&["SET", &format!("user:{i}"), "v"]);
        assert_eq!(c.frame(), invalidate(&[&format!("user:{i}")]));
    }
    writer.cmd(&["SET", "item:1", "v"]);
    // NOLOOP: its own writes are not announced to it.
    c.cmd(&["SET", "user:0", "mine"]);
    c.nothing_pushed();
    c.cmd(&["CLIENT", "TRACKING", "off"]);
    assert!(admin.cmd(&["INFO", "stats"]).contains("tracking_total_prefixes:0\r\n"));

    // OPTIN: only reads after CLIENT CACHING yes are remembered.
    c.cmd(&["CLIENT", "TRACKING", "on", "OPTIN"]);
    c.cmd(&["GET", "a"]);
    writer.cmd(&["SET", "a", "1"]);
    c.nothing_pushed();
    assert_eq!(c.cmd(&["CLIENT", "CACHING", "yes"]), "+OK\r\n");
    c.cmd(&["GET", "a"]);
    c.cmd(&["GET", "b"]);
    writer.cmd(&["SET", "b", "1"]);
    writer.cmd(&["SET", "a", "2"]);
    assert_eq!(c.frame(), invalidate(&["a"]));
    c.nothing_pushed();
}

#[test]
fn resp2_redirect_to_a_subscriber() {
    let server = Server::shards(2);
    let mut sub = Conn::new(server.port);
    let sub_id = sub.id();
    sub.cmd(&["SUBSCRIBE", "__redis__:invalidate"]);
    let mut tracker = Conn::new(server.port);
    let mut writer = Conn::new(server.port);
    assert_eq!(tracker.cmd(&["CLIENT", "TRACKING", "on", "REDIRECT", &sub_id.to_string()]), "+OK\r\n");
    assert_eq!(tracker.cmd(&["CLIENT", "GETREDIR"]), format!(":{sub_id}\r\n"));
    let keys: Vec<String> = (0..6).map(|i| format!("r{i}")).collect();
    for k in &keys {
        tracker.cmd(&["GET", k]);
    }
    for k in &keys {
        writer.cmd(&["SET", k, "v"]);
    }
    let mut got: Vec<String> = (0..keys.len()).map(|_| sub.frame()).collect();
    got.sort();
    let mut want: Vec<String> = keys
        .iter()
        .map(|k| format!("*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n${}\r\n{k}\r\n", k.len()))
        .collect();
    want.sort();
    assert_eq!(got, want);
    writer.cmd(&["FLUSHDB"]);
    assert_eq!(sub.frame(), "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n$-1\r\n");
    // The target goes away: the tracking client is flagged R.
    drop(sub);
    std::thread::sleep(Duration::from_millis(200));
    tracker.cmd(&["GET", "r0"]);
    writer.cmd(&["SET", "r0", "w"]);
    for _ in 0..50 {
        if tracker.cmd(&["CLIENT", "TRACKINGINFO"]).contains("broken_redirect") {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("broken redirect not flagged");
}

/// MONITOR's lines, timestamps and client ports masked, sorted (lines
/// from different shards may interleave differently).
fn monitor_lines(port: u16, script: &[&[&str]]) -> Vec<String> {
    let mut m = Conn::new(port);
    assert_eq!(m.cmd(&["MONITOR"]), "+OK\r\n");
    let mut a = Conn::new(port);
    let mut b = Conn::new(port);
    for (i, cmd) in script.iter().enumerate() {
        let c = if i % 2 == 0 { &mut a } else { &mut b };
        c.cmd(cmd);
    }
    let mut lines = Vec::new();
    while let Some(f) = m.frame_within(Duration::from_millis(500)) {
        lines.push(f);
    }
    let mut masked: Vec<String> = lines
        .iter()
        .map(|l| {
            let (ts, rest) = l.split_once(' ').unwrap();
            assert!(ts.starts_with('+') && ts[1..].split_once('.').is_some_and(|(_, us)| us.len() == 6), "{l}");
            let (addr, rest) = rest.split_once("] ").unwrap();
            let addr = match addr.rsplit_once(':') {
                Some((ip, _)) if !addr.ends_with("lua") => format!("{ip}:PORT"),
                _ => addr.to_string(),
            };
            format!("+TS {addr}] {rest}")
        })
        .collect();
    masked.sort();
    masked
}

#[test]
fn monitor_lines_match_redis() {
    let script: &[&[&str]] = &[
        &["SET", "a", "1"],
        &["SET", "b", "with space \"quoted\"\n"],
        &["GET", "c"],
        &["MSET", "x1", "1", "x2", "2", "x3", "3"],
        &["SELECT", "2"],
        &["INCR", "n"],
        &["CONFIG", "GET", "maxmemory"],
        &["AUTH", "secret"],
        &["EVAL", "return redis.call('set', KEYS[1], ARGV[1])", "1", "lk", "9"],
        &["PING"],
        &["DEL", "a", "b", "c"],
    ];
    let redis = Redis::start();
    let want = monitor_lines(redis.port, script);
    let server = Server::shards(2);
    let got = monitor_lines(server.port, script);
    assert_eq!(got, want);
}

#[test]
fn monitor_sees_both_cores_and_ends_with_reset() {
    let server = Server::shards(2);
    let mut admin = Conn::new(server.port);
    let k0 = key_on(&mut admin, 0, "m");
    let k1 = key_on(&mut admin, 1, "m");
    let mut m = Conn::new(server.port);
    assert_eq!(m.cmd(&["MONITOR"]), "+OK\r\n");
    assert!(admin.cmd(&["CLIENT", "LIST"]).contains(" flags=O "));
    let mut a = conn_on_core(server.port, 0, 2);
    let mut b = conn_on_core(server.port, 1, 2);
    for i in 0..5 {
        a.cmd(&["SET", &k1, &i.to_string()]);
        b.cmd(&["SET", &k0, &i.to_string()]);
    }
    let mut per_key: std::collections::HashMap<String, Vec<String>> = Default::default();
    while per_key.values().map(Vec::len).sum::<usize>() < 10 {
        let line = m.frame();
        if !line.contains("\"SET\"") {
            continue;
        }
        let args: Vec<&str> = line.split("] ").nth(1).unwrap().trim_end().split(' ').collect();
        per_key.entry(args[1].trim_matches('"').to_string()).or_default().push(args[2].to_string());
    }
    let order: Vec<String> = (0..5).map(|i| format!("\"{i}\"")).collect();
    assert_eq!(per_key[&k0], order);
    assert_eq!(per_key[&k1], order);
    assert_eq!(m.cmd(&["RESET"]), "+RESET\r\n");
    a.cmd(&["SET", &k0, "after"]);
    m.nothing_pushed();
}

/// Redis signals a key as modified when it expires (lazily or by the
/// cron) and when it is evicted: its tracking readers hear, whichever core
/// owns it.
#[test]
fn expired_and_evicted_keys_invalidate() {
    let server = Server::shards(2);
    let mut admin = Conn::new(server.port);
    let mut c = conn_on_core(server.port, 0, 2);
    assert!(c.cmd(&["HELLO", "3"]).starts_with('%'));
    assert_eq!(c.cmd(&["CLIENT", "TRACKING", "on"]), "+OK\r\n");
    // Expired by the cron (nobody touches it again).
    for shard in 0..2 {
        let key = key_on(&mut admin, shard, &format!("ttl{shard}-"));
        admin.cmd(&["SET", &key, "v", "PX", "50"]);
        assert_eq!(c.cmd(&["GET", &key]), "$1\r\nv\r\n");
        assert_eq!(c.frame(), invalidate(&[&key]), "expired key on shard {shard}");
    }
    // Expired lazily: found expired by another client's read.
    let key = key_on(&mut admin, 1, "lazy");
    admin.cmd(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    admin.cmd(&["SET", &key, "v", "PX", "30"]);
    c.cmd(&["GET", &key]);
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(admin.cmd(&["GET", &key]), "$-1\r\n");
    assert_eq!(c.frame(), invalidate(&[&key]), "lazily expired key");
    admin.cmd(&["DEBUG", "SET-ACTIVE-EXPIRE", "1"]);
    // Evicted: a small maxmemory and a flood of other keys.
    let key = key_on(&mut admin, 1, "big");
    admin.cmd(&["SET", &key, &"x".repeat(1000)]);
    c.cmd(&["GET", &key]);
    admin.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-random"]);
    let used: u64 = {
        let info = admin.cmd(&["INFO", "memory"]);
        let line = info.lines().find(|l| l.starts_with("used_memory:")).unwrap();
        line["used_memory:".len()..].trim().parse().unwrap()
    };
    admin.cmd(&["CONFIG", "SET", "maxmemory", &(used + (4 << 20)).to_string()]);
    let value = "y".repeat(1000);
    let mut told = None;
    for i in 0..50_000 {
        admin.cmd(&["SET", &format!("flood{i}"), &value]);
        if i % 500 == 499 {
            if let Some(f) = c.frame_within(Duration::from_millis(1)) {
                told = Some(f);
                break;
            }
        }
    }
    admin.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
    assert_eq!(told.or_else(|| c.frame_within(Duration::from_secs(2))), Some(invalidate(&[&key])), "evicted key");
}

/// Redis 7.0 remembers a script's declared keys for the client that ran
/// it, each time the script runs a read-only command (the keys of the
/// EVAL, not of the command): a declared key read or not, on the script's
/// shard or (no single shard) on others; an undeclared key read is not
/// remembered. Checked against redis-server 7.0.15 by hand.
#[test]
fn keys_declared_by_scripts_are_tracked() {
    let server = Server::shards(2);
    let mut admin = Conn::new(server.port);
    let mut c = conn_on_core(server.port, 0, 2);
    assert!(c.cmd(&["HELLO", "3"]).starts_with('%'));
    assert_eq!(c.cmd(&["CLIENT", "TRACKING", "on"]), "+OK\r\n");
    let read = key_on(&mut admin, 1, "sr");
    let unread = key_on(&mut admin, 1, "su");
    let undeclared = key_on(&mut admin, 1, "sx");
    let elsewhere = key_on(&mut admin, 0, "se");
    for k in [&read, &unread, &undeclared, &elsewhere] {
        admin.cmd(&["SET", k, "1"]);
    }
    let get_first = "return redis.call('GET', KEYS[1])";
    assert_eq!(c.cmd(&["EVAL", get_first, "2", &read, &unread]), "$1\r\n1\r\n");
    assert_eq!(c.cmd(&["EVAL", "return redis.call('GET', ARGV[1])", "0", &undeclared]), "$1\r\n1\r\n");
    // Keys on both shards: the script holds every shard.
    assert_eq!(c.cmd(&["EVAL", get_first, "2", &elsewhere, &read]), "$1\r\n1\r\n");
    for k in [&read, &unread, &undeclared, &elsewhere] {
        admin.cmd(&["SET", k, "2"]);
    }
    let mut got = vec![c.frame(), c.frame(), c.frame()];
    got.sort();
    let mut want = vec![invalidate(&[&read]), invalidate(&[&unread]), invalidate(&[&elsewhere])];
    want.sort();
    assert_eq!(got, want);
    c.nothing_pushed();
    // NOLOOP: the script's own write is the client's.
    assert_eq!(c.cmd(&["CLIENT", "TRACKING", "on", "NOLOOP"]), "+OK\r\n");
    c.cmd(&["GET", &read]);
    assert_eq!(c.cmd(&["EVAL", "return redis.call('SET', KEYS[1], '3')", "1", &read]), "+OK\r\n");
    c.nothing_pushed();
}

// ---------------------------------------------------------------------------
// The same steps against redis-server 7.0 and corekv (one shard, and three
// shards with the connections on one core or spread over the cores): what
// each connection receives, replies and pushes in order, must be the same.

/// A key owned by shard `shard` of three (the same name on every server).
fn key3(shard: u16, prefix: &str) -> String {
    (0..1000)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| proxy::slot::key_slot(k.as_bytes()) as usize * 3 / proxy::slot::SLOTS == shard as usize)
        .unwrap()
}

/// A scenario's connections ("roles") on one server, an admin connection
/// beside them, and every frame each role received.
struct Play {
    conns: Vec<Option<Conn>>,
    ids: Vec<u64>,
    got: Vec<Vec<String>>,
    admin: Conn,
}

fn is_push(frame: &str) -> bool {
    frame.starts_with('>') || frame.starts_with("*3\r\n$7\r\nmessage\r\n")
}

impl Play {
    fn open(port: u16, cores: &[u64], shards: u64) -> Play {
        let mut admin = Conn::new(port);
        assert_eq!(admin.cmd(&["FLUSHALL"]), "+OK\r\n");
        assert_eq!(admin.cmd(&["CONFIG", "SET", "maxmemory", "0"]), "+OK\r\n");
        let mut conns: Vec<Conn> = cores.iter().map(|&c| conn_on_core(port, c % shards, shards)).collect();
        let ids = conns.iter_mut().map(Conn::id).collect();
        Play { got: vec![Vec::new(); conns.len()], conns: conns.into_iter().map(Some).collect(), ids, admin }
    }

    fn id(&self, role: usize) -> String {
        self.ids[role].to_string()
    }

    fn conn(&mut self, role: usize) -> &mut Conn {
        self.conns[role].as_mut().expect("an open role")
    }

    fn send(&mut self, role: usize, args: &[&str]) {
        self.conn(role).send(args);
    }

    /// Reads `role`'s frames up to its next `n` replies (pushes before
    /// them too).
    fn replies(&mut self, role: usize, n: usize) {
        let mut seen = 0;
        while seen < n {
            let frame = self.conn(role).frame();
            seen += usize::from(!is_push(&frame));
            self.got[role].push(frame);
        }
    }

    fn cmd(&mut self, role: usize, args: &[&str]) {
        self.send(role, args);
        self.replies(role, 1);
    }

    /// CLIENT GETREDIR, its reply marked for masking (a client id).
    fn getredir(&mut self, role: usize) {
        self.cmd(role, &["CLIENT", "GETREDIR"]);
        let last = self.got[role].last_mut().unwrap();
        *last = format!("GETREDIR {last}");
    }

    /// Sends `commands` at once (one write, so one read on the server: a
    /// write per command could be read, and run, in several passes on
    /// either server) and reads their replies.
    fn pipeline(&mut self, role: usize, commands: &[&[&str]]) {
        self.conn(role).send_all(commands);
        self.replies(role, commands.len());
    }

    /// Reads what every role receives until all have been quiet a while.
    fn settle(&mut self) {
        let mut quiet_rounds = 0;
        while quiet_rounds < 3 {
            let mut any = false;
            for role in 0..self.conns.len() {
                let Some(conn) = self.conns[role].as_mut() else { continue };
                while let Some(frame) = conn.frame_within(Duration::from_millis(30)) {
                    self.got[role].push(frame);
                    any = true;
                }
            }
            quiet_rounds = if any { 0 } else { quiet_rounds + 1 };
        }
    }

    /// Closes `role`'s connection and waits until the server has seen it go.
    fn close(&mut self, role: usize) {
        self.conns[role] = None;
        let gone = format!("id={} ", self.ids[role]);
        for _ in 0..200 {
            if !self.admin.cmd(&["CLIENT", "LIST"]).contains(&gone) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("role {role} not closed");
    }

    /// Each role's frames, client ids shown as roles, and each run of
    /// pushes between two replies in sorted order: separate messages from
    /// different cores may arrive in either order (their contents, number
    /// and place among the replies are compared).
    fn transcripts(self) -> Vec<Vec<String>> {
        let ids = self.ids;
        let mask = |frame: &String| {
            let mut f = frame.clone();
            for (role, id) in ids.iter().enumerate() {
                for context in ["tracking-redir-broken\r\n", "$8\r\nredirect\r\n", "$2\r\nid\r\n", "GETREDIR "] {
                    f = f.replace(&format!("{context}:{id}\r\n"), &format!("{context}<role {role}>\r\n"));
                }
            }
            f
        };
        self.got
            .into_iter()
            .map(|frames| {
                let mut out: Vec<String> = Vec::new();
                let mut run: Vec<String> = Vec::new();
                for f in frames.iter().map(mask) {
                    if is_push(&f) {
                        run.push(f);
                    } else {
                        run.sort();
                        out.append(&mut run);
                        out.push(f);
                    }
                }
                run.sort();
                out.append(&mut run);
                out
            })
            .collect()
    }
}

/// Runs `scenario` with `roles` connections against redis-server and
/// corekv (one and three shards, the roles on one core, then spread over
/// the cores two ways) and compares what each role received.
fn same_as_redis(roles: usize, scenario: impl Fn(&mut Play)) {
    let play = |port: u16, shards: u64, cores: &[u64]| {
        let mut play = Play::open(port, cores, shards);
        scenario(&mut play);
        play.settle();
        play.transcripts()
    };
    let redis = Redis::start();
    let want = play(redis.port, 1, &vec![0; roles]);
    for shards in [1u64, 3] {
        let server = Server::shards(shards as usize);
        let mut placements = vec![vec![0; roles]];
        if shards == 3 {
            placements.push((0..roles as u64).map(|i| i % 3).collect());
            placements.push((0..roles as u64).map(|i| (i + 1) % 3).collect());
        }
        for cores in placements {
            let got = play(server.port, shards, &cores);
            for role in 0..roles {
                assert_eq!(got[role], want[role], "role {role}, {shards} shard(s), roles on cores {cores:?}");
            }
        }
    }
}

/// BCAST: Redis gathers the keys changed in one event-loop pass and sends
/// each prefix's once, sorted (trackingBroadcastInvalidationMessages from
/// beforeSleep): one message for MSET's keys on three shards, one for a
/// pipeline's writes, NOLOOP by each key's last writer, through REDIRECT
/// (RESP2 Pub/Sub) one message per prefix.
#[test]
fn bcast_sends_one_message_per_pass_as_redis() {
    let (a0, a1, b2, b0) = (key3(0, "a:"), key3(1, "a:"), key3(2, "b:"), key3(0, "b:"));
    let (t, w, r, n) = (0, 1, 2, 3);
    same_as_redis(4, |p| {
        p.cmd(r, &["SUBSCRIBE", "__redis__:invalidate"]);
        p.cmd(t, &["HELLO", "3"]);
        p.cmd(t, &["CLIENT", "TRACKING", "on", "BCAST"]);
        let redirect = p.id(r);
        p.cmd(
            n,
            &["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "b:", "PREFIX", "a:", "REDIRECT", &redirect, "NOLOOP"],
        );
        p.cmd(w, &["MSET", &b2, "1", &a0, "1", &a1, "1"]);
        p.settle();
        p.pipeline(w, &[&["SET", &a1, "2"], &["SET", &b2, "2"], &["SET", &a1, "3"], &["DEL", "nothing"]]);
        p.settle();
        // NOLOOP: the writer's own keys are left out of its messages.
        p.pipeline(n, &[&["SET", &a0, "4"], &["SET", &b0, "4"]]);
        p.settle();
        // Its own writes reach a BCAST client after the pass's replies.
        p.pipeline(t, &[&["SET", &b2, "5"], &["GET", &b2], &["SET", &a0, "5"]]);
        p.settle();
        p.cmd(w, &["DEL", &a0, &a1, &b2, &b0]);
        p.settle();
        p.cmd(w, &["FLUSHALL"]);
    });
}

/// REDIRECT to a client of any core: a RESP2 subscriber gets Pub/Sub
/// messages, a RESP3 client pushes whether subscribed or not; the
/// tracking client's own writes and a flush go there too.
#[test]
fn redirect_reaches_a_client_of_any_core_as_redis() {
    let (k0, k1, k2) = (key3(0, "k"), key3(1, "k"), key3(2, "k"));
    let (t, r2, r3, w) = (0, 1, 2, 3);
    same_as_redis(4, |p| {
        p.cmd(r2, &["SUBSCRIBE", "__redis__:invalidate"]);
        p.cmd(r3, &["HELLO", "3"]);
        let (to_r2, to_r3) = (p.id(r2), p.id(r3));
        p.cmd(t, &["CLIENT", "TRACKING", "on", "REDIRECT", &to_r2]);
        p.getredir(t);
        for k in [&k0, &k1, &k2] {
            p.cmd(t, &["GET", k]);
        }
        p.cmd(w, &["MSET", &k0, "1", &k1, "1"]);
        p.settle();
        p.cmd(t, &["CLIENT", "TRACKING", "on", "REDIRECT", &to_r3]);
        p.cmd(t, &["CLIENT", "TRACKINGINFO"]);
        p.cmd(t, &["GET", &k0]);
        p.cmd(w, &["SET", &k0, "2"]);
        p.settle();
        p.pipeline(t, &[&["SET", &k2, "3"], &["PING"]]);
        p.settle();
        p.cmd(w, &["FLUSHALL"]);
        p.settle();
        // Tracking on again without REDIRECT: back to none.
        p.cmd(t, &["CLIENT", "TRACKING", "on"]);
        p.getredir(t);
    });
}

/// OPTIN / OPTOUT with REDIRECT: CLIENT CACHING applies to the next
/// command, or the next transaction; a command refused before running
/// spends it too (Redis's resetClient), but not a refused CLIENT command.
#[test]
fn optin_optout_with_redirect_as_redis() {
    let (k0, k1) = (key3(0, "o"), key3(1, "o"));
    let (t, r, w) = (0, 1, 2);
    same_as_redis(3, |p| {
        p.cmd(r, &["SUBSCRIBE", "__redis__:invalidate"]);
        let redirect = p.id(r);
        p.cmd(t, &["CLIENT", "TRACKING", "on", "REDIRECT", &redirect, "OPTIN"]);
        let round = |p: &mut Play, steps: &[&[&str]]| {
            p.pipeline(t, steps);
            p.pipeline(w, &[&["SET", &k0, "x"], &["SET", &k1, "x"]]);
            p.settle();
        };
        round(p, &[&["GET", &k0]]);
        round(p, &[&["CLIENT", "CACHING", "yes"], &["GET", &k0]]);
        round(p, &[&["CLIENT", "CACHING", "yes"], &["NOSUCHCOMMAND", &k0], &["GET", &k0]]);
        round(p, &[&["CLIENT", "CACHING", "yes"], &["GET"], &["GET", &k0]]);
        round(p, &[&["CLIENT", "CACHING", "yes"], &["CLIENT", "NOSUCH"], &["GET", &k0]]);
        round(p, &[&["CLIENT", "CACHING", "yes"], &["CLIENT", "CACHING"], &["GET", &k0]]);
        round(p, &[&["CLIENT", "CACHING", "yes"], &["CLIENT", "GETNAME"], &["GET", &k1]]);
        round(p, &[&["CLIENT", "CACHING", "yes"], &["MULTI"], &["GET", &k0], &["GET", &k1], &["EXEC"], &["GET", &k0]]);
        round(p, &[&["CLIENT", "CACHING", "yes"], &["PING"], &["GET", &k0]]);
        p.cmd(t, &["CLIENT", "TRACKING", "off"]);
        p.cmd(t, &["CLIENT", "TRACKING", "on", "REDIRECT", &redirect, "OPTOUT"]);
        round(p, &[&["GET", &k0], &["CLIENT", "CACHING", "no"], &["GET", &k1]]);
        round(p, &[&["CLIENT", "CACHING", "no"], &["NOSUCHCOMMAND"], &["GET", &k1]]);
        round(p, &[&["CLIENT", "CACHING", "no"], &["MULTI"], &["GET", &k0], &["EXEC"], &["GET", &k1]]);
        p.cmd(t, &["CLIENT", "TRACKINGINFO"]);
    });
}

/// The REDIRECT target goes away: nothing is sent then; each message due
/// afterwards becomes a tracking-redir-broken push to a RESP3 tracking
/// client (after its own command's reply), the client is flagged; a RESP2
/// one only flagged; a BCAST one told once per message.
#[test]
fn broken_redirect_as_redis() {
    let (k0, k1, k2) = (key3(0, "r"), key3(1, "r"), key3(2, "r"));
    let (t, r, w, t2, b) = (0, 1, 2, 3, 4);
    same_as_redis(5, |p| {
        p.cmd(r, &["SUBSCRIBE", "__redis__:invalidate"]);
        let redirect = p.id(r);
        p.cmd(t, &["HELLO", "3"]);
        p.cmd(t, &["CLIENT", "TRACKING", "on", "REDIRECT", &redirect]);
        p.cmd(t2, &["CLIENT", "TRACKING", "on", "REDIRECT", &redirect]);
        p.cmd(b, &["HELLO", "3"]);
        p.cmd(b, &["CLIENT", "TRACKING", "on", "BCAST", "REDIRECT", &redirect]);
        for k in [&k0, &k1, &k2] {
            p.cmd(t, &["GET", k]);
        }
        p.cmd(t2, &["GET", &k0]);
        p.close(r);
        p.settle();
        p.cmd(w, &["MSET", &k0, "1", &k1, "1"]);
        p.settle();
        p.cmd(t, &["CLIENT", "TRACKINGINFO"]);
        p.cmd(t2, &["CLIENT", "TRACKINGINFO"]);
        p.pipeline(t, &[&["SET", &k2, "2"], &["PING"]]);
        p.settle();
        // Tracking on again clears the flag.
        p.cmd(t, &["CLIENT", "TRACKING", "on"]);
        p.cmd(t, &["CLIENT", "TRACKINGINFO"]);
    });
}

/// A client's own writes invalidate after the command's reply and before
/// the next one's (Redis's tracking_pending_keys): in a pipeline, after
/// EXEC's whole reply, after a script's, after FLUSHALL's; NOLOOP skips
/// them.
#[test]
fn own_invalidations_follow_the_reply_as_redis() {
    let (k0, k1, k2) = (key3(0, "p"), key3(1, "p"), key3(2, "p"));
    let (t, w) = (0, 1);
    same_as_redis(2, |p| {
        p.cmd(t, &["HELLO", "3"]);
        p.cmd(t, &["CLIENT", "TRACKING", "on"]);
        let read_all = |p: &mut Play| {
            for k in [&k0, &k1, &k2] {
                p.cmd(t, &["GET", k]);
            }
        };
        read_all(p);
        p.pipeline(t, &[&["SET", &k0, "1"], &["GET", &k0], &["SET", &k1, "1"], &["INCR", &k2], &["PING"]]);
        p.settle();
        read_all(p);
        p.pipeline(
            t,
            &[&["MULTI"], &["SET", &k0, "2"], &["GET", &k0], &["SET", &k1, "2"], &["EXEC"], &["GET", &k2], &["PING"]],
        );
        p.cmd(w, &["SET", &k0, "w"]);
        p.settle();
        read_all(p);
        let script = "redis.call('SET', KEYS[1], 'e'); return redis.call('GET', KEYS[1])";
        p.pipeline(t, &[&["EVAL", script, "1", &k2], &["PING"]]);
        p.settle();
        p.pipeline(t, &[&["MSET", &k0, "3", &k1, "3"], &["PING"]]);
        p.settle();
        p.pipeline(t, &[&["FLUSHALL"], &["PING"]]);
        p.settle();
        p.cmd(t, &["CLIENT", "TRACKING", "on", "NOLOOP"]);
        read_all(p);
        p.pipeline(t, &[&["SET", &k0, "4"], &["SET", &k1, "4"], &["PING"]]);
        p.cmd(w, &["SET", &k2, "w"]);
        p.settle();
    });
}

/// maxmemory: what the eviction ahead of a write invalidates for the
/// writing client itself comes before that write's reply (Redis sends it
/// at once), whichever core owns the keys.
#[test]
fn eviction_invalidates_ahead_of_the_reply_as_redis() {
    let (t, admin) = (0, 1);
    same_as_redis(2, |p| {
        p.cmd(t, &["HELLO", "3"]);
        p.cmd(t, &["CLIENT", "TRACKING", "on"]);
        // The one key with a TTL: volatile-lru's only victim.
        p.cmd(admin, &["SETRANGE", "{e}old", "200000", "x"]);
        p.cmd(admin, &["EXPIRE", "{e}old", "1000"]);
        p.cmd(t, &["STRLEN", "{e}old"]);
        p.cmd(admin, &["CONFIG", "SET", "maxmemory-policy", "volatile-lru"]);
        let info = p.admin.cmd(&["INFO", "memory"]);
        let used: u64 = info.lines().find_map(|l| l.strip_prefix("used_memory:")).unwrap().trim().parse().unwrap();
        p.admin.cmd(&["CONFIG", "SET", "maxmemory", &(used + 50_000).to_string()]);
        // A small request that makes a large value: over the limit after
        // it, so the next write evicts first.
        p.pipeline(t, &[&["SETRANGE", "{e}big", "100000", "x"], &["SET", "{e}new", "1"], &["PING"]]);
        p.admin.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
        p.cmd(admin, &["EXISTS", "{e}old", "{e}big", "{e}new"]);
        p.settle();
    });
}
