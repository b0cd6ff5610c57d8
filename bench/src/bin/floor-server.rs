//! A yardstick, not a product: the leanest server this design allows, to
//! measure what the client path costs below corekv on the same kernel.
//!
//! One thread and one io_uring set up as corekv's shard ring is
//! (SINGLE_ISSUER | DEFER_TASKRUN, multishot accept, multishot receive
//! into a provided-buffer ring, sends gathered per loop pass, one
//! `io_uring_enter` per pass), and one hash table. It answers GET, SET
//! (no options), PING and nothing else: no executor, no tasks, no
//! statistics, no clock reads, no expiry, no cross-core anything. What it
//! costs per request is the floor corekv's runtime sits on; what Redis
//! costs beside it says how far under Redis an io_uring server can go on
//! this host (bench/RESULTS.md, "The floor under the client path").
//!
//!   floor-server --port P [--lifetime SECONDS] [--spin-us N]   (other
//!   flags are ignored, so scripts and the suites start it as they start
//!   corekv: `corekv-suite --corekv target/release/floor-server`)

use hashbrown::HashMap;
use io_uring::types::{BufRingEntry, Fd, SubmitArgs, Timespec};
use io_uring::{cqueue, opcode, IoUring};
use std::net::TcpListener;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

const ACCEPT: u64 = 1;
const RECV: u64 = 2;
const SEND: u64 = 3;
const GROUP: u16 = 0;
const BUFFERS: u16 = 256;
const BUFFER_SIZE: u32 = 4096;
/// Input held for an unfinished command past which the connection closes.
const MAX_PARTIAL: usize = 1 << 20;

fn user_data(kind: u64, key: usize) -> u64 {
    (key as u64) << 8 | kind
}

/// The provided buffers the kernel receives into.
struct Buffers {
    entries: *mut BufRingEntry,
    data: Vec<u8>,
    tail: u16,
}

impl Buffers {
    fn register(ring: &IoUring) -> std::io::Result<Buffers> {
        let len = BUFFERS as usize * std::mem::size_of::<BufRingEntry>();
        // SAFETY: an anonymous private mapping, checked below; never unmapped
        // (it lives as long as the process).
        let entries = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_ANONYMOUS | libc::MAP_PRIVATE,
                -1,
                0,
            )
        };
        if entries == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let mut bufs =
            Buffers { entries: entries.cast(), data: vec![0; BUFFERS as usize * BUFFER_SIZE as usize], tail: 0 };
        // SAFETY: the mapping and the buffers outlive the ring's use of them.
        unsafe { ring.submitter().register_buf_ring_with_flags(entries as u64, BUFFERS, GROUP, 0)? };
        for bid in 0..BUFFERS {
            bufs.give(bid);
        }
        Ok(bufs)
    }

    fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        let start = bid as usize * BUFFER_SIZE as usize;
        &self.data[start..start + len]
    }

    fn give(&mut self, bid: u16) {
        let slot = (self.tail & (BUFFERS - 1)) as usize;
        // SAFETY: `slot` < BUFFERS, inside the mapping.
        let entry = unsafe { &mut *self.entries.add(slot) };
        entry.set_addr(self.data.as_ptr() as u64 + bid as u64 * BUFFER_SIZE as u64);
        entry.set_len(BUFFER_SIZE);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail field the kernel reads, in the first entry.
        unsafe { (*(BufRingEntry::tail(self.entries) as *const AtomicU16)).store(self.tail, Ordering::Release) };
    }
}

#[derive(Default)]
struct Conn {
    fd: RawFd,
    /// Input that did not end on a command's end.
    partial: Vec<u8>,
    /// Replies of this pass, and the ones a send has in flight.
    out: Vec<u8>,
    sending: Vec<u8>,
    sent: usize,
    send_inflight: bool,
    recv_armed: bool,
    closing: bool,
    dirty: bool,
}

struct Server {
    ring: IoUring,
    bufs: Buffers,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    dirty: Vec<usize>,
    table: HashMap<Vec<u8>, Vec<u8>, ahash::RandomState>,
    listener: RawFd,
    /// This pass's completions (kept: no allocation per pass).
    done: Vec<(u64, i32, u32)>,
}

impl Server {
    fn push(&mut self, entry: io_uring::squeue::Entry) {
        // SAFETY: every buffer an entry points to lives in `self` until its
        // completion (a connection's `sending` is not touched while in flight).
        while unsafe { self.ring.submission().push(&entry) }.is_err() {
            self.ring.submit().expect("io_uring_enter");
        }
    }

    fn arm_accept(&mut self) {
        self.push(opcode::AcceptMulti::new(Fd(self.listener)).build().user_data(user_data(ACCEPT, 0)));
    }

    fn arm_recv(&mut self, key: usize) {
        let c = self.conns[key].as_mut().expect("live connection");
        c.recv_armed = true;
        let fd = c.fd;
        self.push(opcode::RecvMulti::new(Fd(fd), GROUP).build().user_data(user_data(RECV, key)));
    }

    fn accepted(&mut self, res: i32, flags: u32) {
        if !cqueue::more(flags) {
            self.arm_accept();
        }
        if res < 0 {
            return;
        }
        let one: libc::c_int = 1;
        // SAFETY: a socket we just accepted; TCP_NODELAY as Redis sets it.
        unsafe { libc::setsockopt(res, libc::IPPROTO_TCP, libc::TCP_NODELAY, (&one as *const libc::c_int).cast(), 4) };
        let conn = Conn { fd: res, ..Conn::default() };
        let key = match self.free.pop() {
            Some(key) => {
                self.conns[key] = Some(conn);
                key
            }
            None => {
                self.conns.push(Some(conn));
                self.conns.len() - 1
            }
        };
        self.arm_recv(key);
    }

    fn received(&mut self, key: usize, res: i32, flags: u32) {
        let bid = cqueue::buffer_select(flags);
        let Some(c) = self.conns[key].as_mut() else {
            if let Some(bid) = bid {
                self.bufs.give(bid);
            }
            return;
        };
        if !cqueue::more(flags) {
            c.recv_armed = false;
        }
        match (res, bid) {
            (n, Some(bid)) if n > 0 => {
                let input = self.bufs.bytes(bid, n as usize);
                if c.partial.is_empty() {
                    let used = execute(&mut self.table, input, &mut c.out);
                    c.partial.extend_from_slice(&input[used..]);
                } else {
                    c.partial.extend_from_slice(input);
                    let used = execute(&mut self.table, &c.partial, &mut c.out);
                    c.partial.drain(..used);
                }
                self.bufs.give(bid);
                if c.partial.len() > MAX_PARTIAL {
                    c.closing = true;
                }
            }
            (n, _) if n == -libc::ENOBUFS => {}
            _ => c.closing = true,
        }
        self.after_io(key);
    }

    fn sent(&mut self, key: usize, res: i32) {
        let Some(c) = self.conns[key].as_mut() else { return };
        c.send_inflight = false;
        if res < 0 {
            c.closing = true;
        } else {
            c.sent += res as usize;
            if c.sent == c.sending.len() {
                c.sending.clear();
                c.sent = 0;
            }
        }
        self.after_io(key);
    }

    /// Marks the connection for this pass's sends, or closes it.
    fn after_io(&mut self, key: usize) {
        let c = self.conns[key].as_mut().expect("live connection");
        if c.closing {
            if !c.send_inflight && !c.recv_armed {
                // SAFETY: our socket, closed once.
                unsafe { libc::close(c.fd) };
                self.conns[key] = None;
                self.free.push(key);
            } else if c.recv_armed {
                // The receive ends with the socket's shutdown.
                // SAFETY: our socket.
                unsafe { libc::shutdown(c.fd, libc::SHUT_RDWR) };
            }
            return;
        }
        if !c.dirty && (!c.out.is_empty() || !c.sending.is_empty() || !c.recv_armed) {
            c.dirty = true;
            self.dirty.push(key);
        }
    }

    /// One send per connection with output, and receives re-armed.
    fn prepare(&mut self) {
        for key in std::mem::take(&mut self.dirty) {
            let Some(c) = self.conns[key].as_mut() else { continue };
            c.dirty = false;
            if !c.send_inflight && (c.sent < c.sending.len() || !c.out.is_empty()) {
                if c.sending.is_empty() {
                    std::mem::swap(&mut c.out, &mut c.sending);
                }
                let rest = &c.sending[c.sent..];
                let send = opcode::Send::new(Fd(c.fd), rest.as_ptr(), rest.len() as u32).flags(libc::MSG_NOSIGNAL);
                c.send_inflight = true;
                self.push(send.build().user_data(user_data(SEND, key)));
            }
            let c = self.conns[key].as_ref().expect("live connection");
            if !c.recv_armed && !c.closing {
                self.arm_recv(key);
            }
        }
    }

    /// Up to `spin` for work to show in the shared rings before a blocking
    /// enter (the kernel flags deferred completions there).
    fn spin_for_work(&mut self, spin: Duration) {
        if spin.is_zero() {
            return;
        }
        // What this pass queued goes first, and the kernel's deferred work runs.
        let _ = self.ring.submit();
        if !self.ring.completion().is_empty() {
            return;
        }
        let until = Instant::now() + spin;
        while !self.ring.submission().taskrun() && self.ring.completion().is_empty() && Instant::now() < until {
            std::hint::spin_loop();
        }
    }

    fn run(&mut self, lifetime: Duration, spin: Duration) {
        let started = Instant::now();
        let timeout = Timespec::new().sec(1);
        let args = SubmitArgs::new().timespec(&timeout);
        self.arm_accept();
        while started.elapsed() < lifetime {
            self.prepare();
            self.spin_for_work(spin);
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY)) => {}
                Err(e) => panic!("io_uring_enter: {e}"),
            }
            let mut done = std::mem::take(&mut self.done);
            done.extend(self.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
            for &(data, res, flags) in &done {
                let key = (data >> 8) as usize;
                match data & 0xff {
                    ACCEPT => self.accepted(res, flags),
                    RECV => self.received(key, res, flags),
                    SEND => self.sent(key, res),
                    _ => {}
                }
            }
            done.clear();
            self.done = done;
        }
    }
}

/// Runs every whole command in `input`, replies into `out`; returns the
/// bytes used.
fn execute(table: &mut HashMap<Vec<u8>, Vec<u8>, ahash::RandomState>, input: &[u8], out: &mut Vec<u8>) -> usize {
    let mut at = 0;
    let mut args: [&[u8]; 3] = [&[]; 3];
    while let Some((n, used)) = parse(&input[at..], &mut args) {
        at += used;
        let cmd = args[0];
        if n == 2 && cmd.eq_ignore_ascii_case(b"GET") {
            match table.get(args[1]) {
                Some(v) => {
                    out.push(b'$');
                    out.extend_from_slice(itoa::Buffer::new().format(v.len()).as_bytes());
                    out.extend_from_slice(b"\r\n");
                    out.extend_from_slice(v);
                    out.extend_from_slice(b"\r\n");
                }
                None => out.extend_from_slice(b"$-1\r\n"),
            }
        } else if n == 3 && cmd.eq_ignore_ascii_case(b"SET") {
            match table.get_mut(args[1]) {
                Some(v) => {
                    v.clear();
                    v.extend_from_slice(args[2]);
                }
                None => {
                    table.insert(args[1].to_vec(), args[2].to_vec());
                }
            }
            out.extend_from_slice(b"+OK\r\n");
        } else if n == 1 && cmd.eq_ignore_ascii_case(b"PING") {
            out.extend_from_slice(b"+PONG\r\n");
        } else {
            out.extend_from_slice(b"-ERR unknown command\r\n");
        }
    }
    at
}

/// One RESP array of up to 3 bulk strings (more are counted, not kept):
/// (argument count, bytes used), or None when incomplete.
fn parse<'a>(input: &'a [u8], args: &mut [&'a [u8]; 3]) -> Option<(usize, usize)> {
    if input.first() != Some(&b'*') {
        // Not RESP: skip a line (inline commands are not served).
        return input.iter().position(|&b| b == b'\n').map(|i| (0, i + 1));
    }
    let (count, mut at) = number(input, 1)?;
    for i in 0..count {
        if input.get(at) != Some(&b'$') {
            return None;
        }
        let (len, start) = number(input, at + 1)?;
        let end = start.saturating_add(len);
        if input.len() < end.saturating_add(2) {
            return None;
        }
        if let Some(arg) = args.get_mut(i) {
            *arg = &input[start..end];
        }
        at = end + 2;
    }
    Some((count, at))
}

/// The decimal number at `from` up to its CRLF, and where the next field starts.
fn number(input: &[u8], from: usize) -> Option<(usize, usize)> {
    let mut n = 0usize;
    for (i, &b) in input.get(from..)?.iter().enumerate() {
        match b {
            b'0'..=b'9' => n = n.saturating_mul(10).saturating_add((b - b'0') as usize),
            b'\r' => return (input.len() > from + i + 1).then_some((n, from + i + 2)),
            _ => return Some((0, from + i + 1)),
        }
    }
    None
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--version") {
        // The suites record each server's version.
        println!("floor-server {} (bench/src/bin/floor-server.rs)", env!("CARGO_PKG_VERSION"));
        return;
    }
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1));
    let port: u16 = flag("--port").and_then(|p| p.parse().ok()).unwrap_or(6399);
    let lifetime = Duration::from_secs(flag("--lifetime").and_then(|s| s.parse().ok()).unwrap_or(3600));
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind");
    let ring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_taskrun_flag()
        .setup_cqsize(4096)
        .build(1024)
        .expect("io_uring with SINGLE_ISSUER | DEFER_TASKRUN");
    let bufs = Buffers::register(&ring).expect("provided buffer ring");
    let mut server = Server {
        ring,
        bufs,
        conns: Vec::new(),
        free: Vec::new(),
        dirty: Vec::new(),
        table: HashMap::with_hasher(ahash::RandomState::new()),
        listener: listener.as_raw_fd(),
        done: Vec::with_capacity(4096),
    };
    let spin = Duration::from_micros(flag("--spin-us").and_then(|s| s.parse().ok()).unwrap_or(0));
    server.run(lifetime, spin);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode(args: &[&[u8]]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    /// Feeds `input` in pieces cut at `cuts`, as receives would deliver it.
    fn serve(pieces: &[&[u8]]) -> Vec<u8> {
        let mut table = HashMap::with_hasher(ahash::RandomState::new());
        let (mut partial, mut out) = (Vec::new(), Vec::new());
        for piece in pieces {
            partial.extend_from_slice(piece);
            let used = execute(&mut table, &partial, &mut out);
            assert!(used <= partial.len());
            partial.drain(..used);
        }
        out
    }

    #[test]
    fn get_set_ping() {
        let mut input = encode(&[b"SET", b"k", b"v"]);
        input.extend(encode(&[b"get", b"k"]));
        input.extend(encode(&[b"GET", b"missing"]));
        input.extend(encode(&[b"PING"]));
        input.extend(encode(&[b"DEL", b"k"]));
        assert_eq!(serve(&[&input]), b"+OK\r\n$1\r\nv\r\n$-1\r\n+PONG\r\n-ERR unknown command\r\n");
    }

    proptest! {
        /// Commands cut anywhere get the replies they get whole.
        #[test]
        fn cuts_do_not_change_replies(
            cmds in prop::collection::vec((any::<bool>(), "[a-c]{1,3}", prop::collection::vec(any::<u8>(), 0..40)), 1..20),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let mut input = Vec::new();
            for (set, key, value) in &cmds {
                input.extend(if *set { encode(&[b"SET", key.as_bytes(), value]) } else { encode(&[b"GET", key.as_bytes()]) });
            }
            let mut at: Vec<usize> = cuts.iter().map(|i| i.index(input.len() + 1)).collect();
            at.extend([0, input.len()]);
            at.sort();
            let pieces: Vec<&[u8]> = at.windows(2).map(|w| &input[w[0]..w[1]]).collect();
            prop_assert_eq!(serve(&pieces), serve(&[&input]));
        }

        /// Any bytes: no panic, never more used than given.
        #[test]
        fn arbitrary_input_is_safe(input in prop::collection::vec(any::<u8>(), 0..200)) {
            serve(&[&input]);
        }
    }
}
