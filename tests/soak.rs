//! Soak: 10k client connections with mixed traffic against `--shards 2`
//! for a bounded time, in two waves.
//!
//! Each connection runs rounds: a pipeline of GET/SET/INCR/LPUSH+LTRIM/
//! HSET/ZADD, or the same inside MULTI/EXEC; now and then it closes and
//! connects again. Two client threads drive all sockets, non-blocking, with
//! poll(2). Checked: every reply is the one expected (no errors at all),
//! every connection completes rounds and nothing stays unanswered, the INCR
//! totals are exact, the server answers at the end, and its RSS after the
//! second wave has left is within bounds of where the first wave left it
//! (no per-connection leak) and under an absolute ceiling.
//!
//! Knobs: `SOAK_SECONDS` (default 40, both waves together),
//! `SOAK_CONNECTIONS` (default 10000), `SOAK_MAX_RSS_MB` (default 1024: the
//! server's RSS once the clients have left). Seeded: the same traffic mix
//! each run (timing decides how much of it runs).

mod common;

use common::Server;
use proxy::resp::Value;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const CLIENT_THREADS: usize = 2;
const COUNTERS: usize = 64;
/// Keys per type: small enough that the data stays a few MB.
const KEYS_PER_TYPE: u32 = 1000;

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// What a reply must be.
#[derive(Debug)]
enum Expect {
    Ok,
    Queued,
    /// Any integer.
    Int,
    /// The reply of INCR on counter `n`: an integer, counted once seen.
    Incr(usize),
    /// A bulk string or nil.
    BulkOrNil,
    /// EXEC's array, one reply per queued command.
    Exec(Vec<Expect>),
}

#[derive(Default)]
struct Tally {
    replies: u64,
    rounds: u64,
    reconnects: u64,
    errors: Vec<String>,
    error_count: u64,
    /// Confirmed INCRs per counter.
    incrs: Vec<u64>,
}

impl Tally {
    fn error(&mut self, what: String) {
        self.error_count += 1;
        if self.errors.len() < 10 {
            self.errors.push(what);
        }
    }

    /// Checks one reply; counts INCRs.
    fn check(&mut self, expect: Expect, got: &Value) {
        if let Expect::Exec(inner) = expect {
            match got {
                Value::Array(items) if items.len() == inner.len() => {
                    inner.into_iter().zip(items).for_each(|(e, item)| self.check(e, item));
                }
                other => self.error(format!("EXEC of {} commands gave {other:?}", inner.len())),
            }
            return;
        }
        let ok = match (&expect, got) {
            (Expect::Ok, Value::Simple(s)) => s == b"OK",
            (Expect::Queued, Value::Simple(s)) => s == b"QUEUED",
            (Expect::Int, Value::Int(_)) => true,
            (Expect::Incr(n), Value::Int(_)) => {
                self.incrs[*n] += 1;
                true
            }
            (Expect::BulkOrNil, Value::Bulk(_) | Value::Nil) => true,
            _ => false,
        };
        if !ok {
            self.error(format!("expected {expect:?}, got {got:?}"));
        }
    }
}

fn encode(out: &mut Vec<u8>, words: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", words.len()).as_bytes());
    for w in words {
        out.extend_from_slice(format!("${}\r\n", w.len()).as_bytes());
        out.extend_from_slice(w);
        out.extend_from_slice(b"\r\n");
    }
}

struct Client {
    stream: TcpStream,
    out: Vec<u8>,
    sent: usize,
    input: Vec<u8>,
    pending: VecDeque<Expect>,
    rounds: u64,
    rng: StdRng,
}

fn connect(port: u16) -> TcpStream {
    let mut tries = 0;
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => {
                s.set_nodelay(true).unwrap();
                s.set_nonblocking(true).unwrap();
                // Closed with a reset: 10k client ports left in TIME_WAIT
                // would crowd later tests' port picks for a minute.
                let linger = libc::linger { l_onoff: 1, l_linger: 0 };
                // SAFETY: a valid socket and a correctly sized option value.
                unsafe {
                    libc::setsockopt(
                        s.as_raw_fd(),
                        libc::SOL_SOCKET,
                        libc::SO_LINGER,
                        (&linger as *const libc::linger).cast(),
                        std::mem::size_of::<libc::linger>() as libc::socklen_t,
                    );
                }
                return s;
            }
            // A full accept queue under 10k connects: try again.
            Err(e) if tries < 50 => {
                tries += 1;
                eprintln!("soak: connect: {e}; again");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("connect: {e}"),
        }
    }
}

/// One command of the mix, with what it must answer.
fn command(rng: &mut StdRng, out: &mut Vec<u8>) -> Vec<Expect> {
    let key = rng.gen_range(0..KEYS_PER_TYPE);
    match rng.gen_range(0..6) {
        0 => {
            encode(out, &[b"GET", format!("soak:str:{key}").as_bytes()]);
            vec![Expect::BulkOrNil]
        }
        1 => {
            let value = vec![b'v'; rng.gen_range(1..200)];
            encode(out, &[b"SET", format!("soak:str:{key}").as_bytes(), &value]);
            vec![Expect::Ok]
        }
        2 => {
            let n = rng.gen_range(0..COUNTERS);
            encode(out, &[b"INCR", format!("soak:counter:{n}").as_bytes()]);
            vec![Expect::Incr(n)]
        }
        3 => {
            let list = format!("soak:list:{key}");
            encode(out, &[b"LPUSH", list.as_bytes(), b"item"]);
            encode(out, &[b"LTRIM", list.as_bytes(), b"0", b"49"]);
            vec![Expect::Int, Expect::Ok]
        }
        4 => {
            let field = format!("f{}", rng.gen_range(0..50));
            encode(out, &[b"HSET", format!("soak:hash:{key}").as_bytes(), field.as_bytes(), b"value"]);
            vec![Expect::Int]
        }
        _ => {
            let member = format!("m{}", rng.gen_range(0..50));
            let score = rng.gen_range(0..1000).to_string();
            encode(out, &[b"ZADD", format!("soak:zset:{key}").as_bytes(), score.as_bytes(), member.as_bytes()]);
            vec![Expect::Int]
        }
    }
}

impl Client {
    fn new(port: u16, seed: u64) -> Client {
        Client {
            stream: connect(port),
            out: Vec::new(),
            sent: 0,
            input: Vec::new(),
            pending: VecDeque::new(),
            rounds: 0,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// Queues the next round: a pipeline or a transaction.
    fn start_round(&mut self) {
        let commands = self.rng.gen_range(1..6);
        if self.rng.gen_ratio(1, 4) {
            encode(&mut self.out, &[b"MULTI"]);
            self.pending.push_back(Expect::Ok);
            let mut inner = Vec::new();
            for _ in 0..commands {
                for e in command(&mut self.rng, &mut self.out) {
                    self.pending.push_back(Expect::Queued);
                    inner.push(e);
                }
            }
            encode(&mut self.out, &[b"EXEC"]);
            self.pending.push_back(Expect::Exec(inner));
        } else {
            for _ in 0..commands {
                let expects = command(&mut self.rng, &mut self.out);
                self.pending.extend(expects);
            }
        }
    }

    /// Writes what it can; false when the connection failed.
    fn flush(&mut self) -> bool {
        while self.sent < self.out.len() {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(_) => return false,
            }
        }
        self.out.clear();
        self.sent = 0;
        true
    }

    /// Reads and checks what arrived; false when the connection failed or
    /// the server closed it.
    fn receive(&mut self, tally: &mut Tally) -> bool {
        let mut chunk = [0u8; 16384];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return false,
                Ok(n) => self.input.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(_) => return false,
            }
        }
        let mut used = 0;
        loop {
            match Value::decode(&self.input[used..]) {
                Ok(Some((v, n))) => {
                    used += n;
                    tally.replies += 1;
                    match self.pending.pop_front() {
                        Some(expect) => tally.check(expect, &v),
                        None => tally.error(format!("a reply nobody asked for: {v:?}")),
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tally.error(format!("malformed reply: {e}"));
                    return false;
                }
            }
        }
        self.input.drain(..used);
        if self.pending.is_empty() && !self.input.is_empty() {
            tally.error("bytes after the last reply".into());
        }
        true
    }
}

/// Connects `count` clients, drives them for `run` once all are connected,
/// then waits (up to a grace period) for every reply still owed.
fn drive(port: u16, first_seed: u64, count: usize, run: Duration) -> Tally {
    let mut tally = Tally { incrs: vec![0; COUNTERS], ..Tally::default() };
    let mut clients: Vec<Client> = (0..count).map(|i| Client::new(port, first_seed + i as u64)).collect();
    let until = Instant::now() + run;
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(count);
    let grace = until + Duration::from_secs(30);
    let mut draining = false;
    loop {
        let now = Instant::now();
        draining |= now >= until;
        fds.clear();
        for c in &mut clients {
            if c.pending.is_empty() && !draining {
                c.rounds += 1;
                tally.rounds += 1;
                // Some connections leave and come back between rounds.
                if c.rng.gen_ratio(1, 40) {
                    c.stream = connect(port);
                    c.input.clear();
                    tally.reconnects += 1;
                }
                c.start_round();
                if !c.flush() {
                    tally.error("write failed".into());
                }
            }
            let mut events = 0;
            if !c.pending.is_empty() {
                events |= libc::POLLIN;
            }
            if c.sent < c.out.len() {
                events |= libc::POLLOUT;
            }
            fds.push(libc::pollfd { fd: c.stream.as_raw_fd(), events, revents: 0 });
        }
        if draining && clients.iter().all(|c| c.pending.is_empty()) {
            break;
        }
        if now >= grace {
            let owed: Vec<&Client> = clients.iter().filter(|c| !c.pending.is_empty()).collect();
            tally.error(format!("{} connections still owed replies 30 s after the end", owed.len()));
            // What the server says of them, for whoever debugs it.
            let mut status = TcpStream::connect(("127.0.0.1", port)).unwrap();
            status.write_all(b"CLIENT LIST\r\n").unwrap();
            // The whole list (MBs with 10k clients): read until it pauses.
            status.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let (mut list, mut chunk) = (Vec::new(), vec![0u8; 1 << 16]);
            while let Ok(n @ 1..) = status.read(&mut chunk) {
                list.extend_from_slice(&chunk[..n]);
            }
            let list = String::from_utf8_lossy(&list);
            for c in owed {
                let at = c.stream.local_addr().unwrap();
                let line = list.lines().find(|l| l.contains(&format!("addr={at} "))).unwrap_or("not listed");
                // Both ends' kernel queues: bytes stuck in the server's
                // user space show as empty Send-Q/Recv-Q.
                let ss = std::process::Command::new("ss")
                    .args(["-tni", &format!("( sport = :{} or dport = :{} )", at.port(), at.port())])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default();
                tally.error(ss);
                tally.error(format!(
                    "{at}: {} replies owed, {} of {} bytes sent, {} bytes of input: {line}",
                    c.pending.len(),
                    c.sent,
                    c.out.len(),
                    c.input.len()
                ));
            }
            break;
        }
        // SAFETY: `fds` is a valid array of pollfd for the call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 100) };
        assert!(ready >= 0, "poll: {}", std::io::Error::last_os_error());
        for (c, fd) in clients.iter_mut().zip(&fds) {
            if fd.revents == 0 {
                continue;
            }
            if fd.revents & libc::POLLOUT != 0 && !c.flush() {
                tally.error("write failed".into());
            }
            if fd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 && !c.receive(&mut tally) {
                tally.error(format!("connection lost with {} replies owed", c.pending.len()));
                c.pending.clear();
                c.stream = connect(port);
                c.input.clear();
                c.out.clear();
                c.sent = 0;
            }
        }
    }
    let idle = clients.iter().filter(|c| c.rounds == 0).count();
    if idle > 0 {
        tally.error(format!("{idle} connections completed no round"));
    }
    tally
}

/// Lets this process (and the server it starts, which inherits it) open
/// `want` files.
fn raise_nofile(want: u64) -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain getrlimit/setrlimit on our own process.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        if lim.rlim_cur >= want {
            return lim.rlim_cur;
        }
        let raised = libc::rlimit { rlim_cur: want, rlim_max: lim.rlim_max.max(want) };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
            return want;
        }
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur
    }
}

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Runs one wave: `connections` over the client threads for `seconds`.
fn wave(port: u16, wave: u64, connections: usize, seconds: u64) -> Vec<Tally> {
    let run = Duration::from_secs(seconds);
    let per_thread = connections.div_ceil(CLIENT_THREADS);
    let threads: Vec<_> = (0..CLIENT_THREADS)
        .map(|t| {
            let count = per_thread.min(connections - t * per_thread);
            let seed = wave * 1_000_000 + (t * per_thread) as u64;
            std::thread::spawn(move || drive(port, seed, count, run))
        })
        .collect();
    threads.into_iter().map(|t| t.join().expect("client thread")).collect()
}

/// The server's connected clients, as INFO reports them.
fn connected_clients(c: &mut common::Raw) -> u64 {
    let Value::Bulk(info) = c.cmd_str("INFO clients") else { panic!("INFO") };
    let info = String::from_utf8_lossy(&info).into_owned();
    let line = info.lines().find(|l| l.starts_with("connected_clients:")).expect("connected_clients");
    line["connected_clients:".len()..].trim().parse().unwrap()
}

fn wait_for_clients_to_leave(c: &mut common::Raw) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while connected_clients(c) > 1 {
        assert!(Instant::now() < deadline, "clients still connected 30 s after they left");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn ten_thousand_connections_with_mixed_traffic() {
    let seconds = knob("SOAK_SECONDS", 40);
    let wanted = knob("SOAK_CONNECTIONS", 10_000) as usize;
    let max_rss_mb = knob("SOAK_MAX_RSS_MB", 1024);
    // Each connection is one fd here and one in the server (which inherits
    // this limit). A reconnecting client may be accepted before the server
    // has seen its old socket close: maxclients leaves room for that.
    let room = wanted / 4 + 100;
    let limit = raise_nofile((wanted + room) as u64 + 1024);
    let connections = wanted.min(limit.saturating_sub(room as u64 + 1024) as usize);
    if connections < wanted {
        eprintln!("soak: RLIMIT_NOFILE is {limit}: {connections} connections instead of {wanted}");
    }
    let maxclients = (connections + room).to_string();
    let server = Server::start(&["--shards", "2", "--maxclients", &maxclients]);
    let pid = server.child.id();
    let mut control = server.raw();
    let rss_start = rss_kb(pid);

    let mut totals = vec![0u64; COUNTERS];
    let mut rss_after = Vec::new();
    for n in 0..2 {
        let tallies = wave(server.port, n, connections, seconds / 2);
        let (mut rounds, mut replies, mut reconnects) = (0, 0, 0);
        for t in &tallies {
            assert!(t.error_count == 0, "wave {n}: {} errors, first: {:#?}", t.error_count, t.errors);
            for (total, n) in totals.iter_mut().zip(&t.incrs) {
                *total += n;
            }
            rounds += t.rounds;
            replies += t.replies;
            reconnects += t.reconnects;
        }
        let rss_busy = rss_kb(pid);
        wait_for_clients_to_leave(&mut control);
        // Let the server's cron return what it frees.
        std::thread::sleep(Duration::from_secs(2));
        rss_after.push(rss_kb(pid));
        eprintln!(
            "soak wave {n}: {connections} connections, {rounds} rounds, {replies} replies, {reconnects} reconnects; \
             server RSS {} MB at start, {} MB at the end of the wave, {} MB after the clients left",
            rss_start / 1024,
            rss_busy / 1024,
            rss_after[n as usize] / 1024
        );
    }

    for (i, expected) in totals.iter().enumerate() {
        let got = match control.cmd_str(&format!("GET soak:counter:{i}")) {
            Value::Bulk(b) => String::from_utf8(b).unwrap().parse::<u64>().unwrap(),
            Value::Nil => 0,
            other => panic!("GET counter: {other:?}"),
        };
        assert_eq!(got, *expected, "counter {i}: INCR totals");
    }
    assert_eq!(control.cmd_str("PING"), Value::Simple(b"PONG".to_vec()));
    let mut fresh = server.raw();
    assert_eq!(fresh.cmd_str("PING"), Value::Simple(b"PONG".to_vec()));

    // The second wave leaves the server where the first left it: what
    // connections take is given back (or reused), not kept per connection.
    let (first, second) = (rss_after[0], rss_after[1]);
    assert!(
        second <= first + first / 5 + 32 * 1024,
        "RSS after the second wave {} MB, after the first {} MB",
        second / 1024,
        first / 1024
    );
    assert!(second / 1024 <= max_rss_mb, "RSS after the clients left: {} MB > {max_rss_mb} MB", second / 1024);
}
