//! One worker thread: a mio event loop driving its clients' connections.
//!
//! Closed loop: each client keeps up to `pipeline` requests in flight,
//! refilling the pipeline once it drains (or after every reply with
//! `--refill eager`); latency runs from the actual send.
//! Open loop: each client sends on a fixed schedule regardless of replies
//! (up to `max_inflight` outstanding); latency runs from the *scheduled*
//! send time, so a server stall delays every request due during it and shows
//! up in the tail instead of silently slowing the client down.

use crate::cluster::{self, RedirectKind, SlotMap};
use crate::conn::{Conn, Pending, KNOWN, MEASURED, SETUP};
use crate::phase::{Phase, Shared};
use crate::protocol;
use crate::stats::Stats;
use crate::timer::Timer;
use crate::workload::{ClientGen, Kind, Request};
use mio::event::Event;
use mio::{Events, Interest, Poll, Token};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

mod replies;

const TIMER: Token = Token(usize::MAX);
const NO_CONN: usize = usize::MAX;
/// Marks an AUTH reply among SETUP replies (its failure is fatal).
const AUTH: u8 = 8;
/// A client following more redirects than this for one request gives up.
const MAX_REDIRECTS: u8 = 5;
/// Scheduled sends closer than this are made by spinning, not sleeping.
const SPIN: Duration = Duration::from_micros(20);
/// How long to wait for all connections to be established.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

struct Client {
    gen: ClientGen,
    /// Connection index per cluster node (NO_CONN until first used).
    conns: Vec<usize>,
    remaining: u64,
    inflight: usize,
    failed: bool,
    /// Open loop: the k-th send is due at `first_due + k * interval`.
    first_due: Instant,
    sent: u64,
    next_due: Instant,
    /// Round-robin node for keyless commands in cluster mode.
    rr: usize,
}

struct Redirect {
    client: usize,
    pending: Pending,
    kind: RedirectKind,
    slot: u16,
    host: String,
    port: u16,
}

pub struct Worker<'a> {
    shared: &'a Shared,
    phase: &'a Phase,
    thread: usize,
    poll: Poll,
    timer: Option<Timer>,
    map: SlotMap,
    /// Nodes owning slots, for keyless commands in cluster mode.
    masters: Vec<usize>,
    conns: Vec<Conn>,
    clients: Vec<Client>,
    stats: Stats,
    key_buf: Vec<u8>,
    redirects: Vec<Redirect>,
    refresh_from: Option<(String, u16)>,
    last_refresh: Option<Instant>,
    measure_start: Instant,
    deadline: Option<Instant>,
    interval: Duration,
    last_activity: Instant,
    completed: u64,
    /// False while connecting: no workload requests yet.
    running: bool,
}

/// Runs one worker thread of a phase to completion.
pub fn run(shared: &Shared, phase: &Phase, thread: usize) -> Result<Stats, String> {
    let ready = Worker::new(shared, phase, thread).and_then(|mut w| w.connect_all().map(|()| w));
    if ready.is_err() {
        shared.abort.store(true, Relaxed);
    }
    let start = phase.sync.wait_start();
    let mut w = ready?;
    if shared.abort.load(Relaxed) {
        return Err("aborted: another thread failed to connect".into());
    }
    w.run(start);
    Ok(w.stats)
}

impl<'a> Worker<'a> {
    fn new(shared: &'a Shared, phase: &'a Phase, thread: usize) -> Result<Self, String> {
        let poll = Poll::new().map_err(|e| format!("epoll: {e}"))?;
        let timer = match phase.rate {
            Some(_) => Some(Timer::new(poll.registry(), TIMER).map_err(|e| format!("timerfd: {e}"))?),
            None => None,
        };
        let now = Instant::now();
        let per = phase.clients_per_thread;
        let clients = phase.clients[thread * per..(thread + 1) * per]
            .iter()
            .map(|spec| Client {
                gen: ClientGen { rng: SmallRng::seed_from_u64(spec.seed), keys: spec.keys.clone(), pos: 0 },
                conns: Vec::new(),
                remaining: spec.requests,
                inflight: 0,
                failed: false,
                first_due: now,
                sent: 0,
                next_due: now,
                rr: thread,
            })
            .collect();
        Ok(Worker {
            shared,
            phase,
            thread,
            poll,
            timer,
            map: shared.map.clone(),
            masters: shared.map.masters(),
            conns: Vec::new(),
            clients,
            stats: Stats::new(phase.workload.command_names().len()),
            key_buf: Vec::with_capacity(64),
            redirects: Vec::new(),
            refresh_from: None,
            last_refresh: None,
            measure_start: now,
            deadline: None,
            interval: Duration::ZERO,
            last_activity: now,
            completed: 0,
            running: false,
        })
    }

    /// Opens every client's connections (one per master) and waits until
    /// they are established.
    fn connect_all(&mut self) -> Result<(), String> {
        let masters = self.masters.clone();
        for ci in 0..self.clients.len() {
            for &node in &masters {
                self.conn_for(ci, node)?;
            }
        }
        let give_up = Instant::now() + CONNECT_TIMEOUT;
        let mut events = Events::with_capacity(1024);
        while self.conns.iter().any(|c| !c.connected && !c.dead) {
            let now = Instant::now();
            if now >= give_up {
                return Err("timed out connecting to the server".into());
            }
            self.poll.poll(&mut events, Some(give_up - now)).map_err(|e| format!("epoll: {e}"))?;
            for ev in events.iter() {
                self.handle_event(ev, Instant::now());
            }
        }
        match self.stats.first_error.take() {
            Some(e) if self.stats.connection_errors > 0 => Err(e),
            e => {
                self.stats.first_error = e;
                Ok(())
            }
        }
    }

    fn run(&mut self, start: Instant) {
        let phase = self.phase;
        self.measure_start = start + phase.warmup;
        self.deadline = phase.duration.map(|d| self.measure_start + d);
        self.last_activity = start;
        self.running = true;
        if let Some(rate) = phase.rate {
            // Stagger clients evenly over one interval so the aggregate
            // schedule is uniform, not bursts of one request per client.
            let total = phase.clients.len() as f64;
            self.interval = Duration::from_secs_f64(total / rate).max(Duration::from_nanos(1));
            for (i, c) in self.clients.iter_mut().enumerate() {
                let global = self.thread * phase.clients_per_thread + i;
                c.first_due = start + self.interval.mul_f64(global as f64 / total);
                c.next_due = c.first_due;
            }
        }
        let mut events = Events::with_capacity(1024);
        let mut now = Instant::now();
        for ci in 0..self.clients.len() {
            self.pump(ci, now);
        }
        loop {
            if phase.rate.is_some() {
                for ci in 0..self.clients.len() {
                    self.pump(ci, now);
                }
            }
            if self.finished(now) {
                break;
            }
            let timeout = self.poll_timeout(now);
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    self.stats.note_error(|| format!("epoll: {e}"));
                    break;
                }
            }
            now = Instant::now();
            for ev in events.iter() {
                self.handle_event(ev, now);
            }
            if self.refresh_from.is_some() {
                self.refresh_map(now);
            }
            self.phase.progress[self.thread].store(self.completed, Relaxed);
        }
        // Whatever is still outstanding was given up on.
        for c in &self.conns {
            self.stats.unanswered += c.pending.iter().filter(|p| p.flags & SETUP == 0).count() as u64;
        }
        self.phase.progress[self.thread].store(self.completed, Relaxed);
    }

    /// True once no client will send anything more and nothing is awaited
    /// (or the server has been silent for the drain timeout).
    fn finished(&self, now: Instant) -> bool {
        let inflight = self.clients.iter().any(|c| c.inflight > 0);
        if inflight && now.duration_since(self.last_activity) >= self.phase.drain_timeout {
            return true;
        }
        !inflight && self.clients.iter().all(|c| !self.may_issue(c, now))
    }

    /// Whether `c` has anything left to send now or later.
    fn may_issue(&self, c: &Client, now: Instant) -> bool {
        if c.failed || c.remaining == 0 {
            return false;
        }
        match (self.phase.rate, self.deadline) {
            (_, None) => true,
            (None, Some(d)) => now < d,
            (Some(_), Some(d)) => c.next_due < d,
        }
    }

    fn poll_timeout(&mut self, now: Instant) -> Option<Duration> {
        let mut timeout: Option<Duration> = None;
        let mut at = |t: Instant| {
            let d = t.saturating_duration_since(now);
            timeout = Some(timeout.map_or(d, |cur| cur.min(d)));
        };
        if let Some(d) = self.deadline.filter(|&d| d > now) {
            at(d);
        }
        if self.clients.iter().any(|c| c.inflight > 0) {
            at(self.last_activity + self.phase.drain_timeout);
        }
        if self.phase.rate.is_some() {
            let next = self
                .clients
                .iter()
                .filter(|c| c.inflight < self.phase.max_inflight && self.may_issue(c, now))
                .map(|c| c.next_due)
                .min();
            if let Some(due) = next {
                if due <= now + SPIN {
                    return Some(Duration::ZERO);
                }
                if let Some(t) = self.timer.as_mut() {
                    if let Err(e) = t.arm(due, now) {
                        self.stats.note_error(|| format!("timerfd: {e}"));
                        at(due);
                    }
                }
            }
        }
        timeout
    }

    /// Sends everything client `ci` may send at `now`, then flushes.
    fn pump(&mut self, ci: usize, now: Instant) {
        // Batch refill (the default) only starts sending once every reply of
        // the previous batch is in, so each batch reaches the server whole.
        let refill = self.phase.eager_refill || self.clients[ci].inflight == 0;
        loop {
            let c = &self.clients[ci];
            if !self.may_issue(c, now) {
                break;
            }
            let t0 = match self.phase.rate {
                None if refill && c.inflight < self.phase.pipeline => now,
                Some(_) if c.inflight < self.phase.max_inflight && c.next_due <= now => {
                    let c = &mut self.clients[ci];
                    let t0 = c.next_due;
                    c.sent += 1;
                    c.next_due = c.first_due + self.interval.mul_f64(c.sent as f64);
                    t0
                }
                _ => break,
            };
            if self.phase.rate.is_some() && t0 >= self.measure_start {
                self.stats.send_lag.saturating_record(crate::stats::micros(now - t0));
            }
            self.issue(ci, t0);
        }
        self.flush_client(ci);
    }

    fn issue(&mut self, ci: usize, t0: Instant) {
        let c = &mut self.clients[ci];
        let req = self.phase.workload.next_request(&mut c.gen);
        c.remaining = c.remaining.saturating_sub(1);
        c.inflight += 1;
        let mut flags = 0;
        if t0 >= self.measure_start && self.deadline.is_none_or(|d| t0 < d) {
            flags |= MEASURED;
        }
        if req.kind == Kind::Get && self.shared.known.is_known(req.key) {
            flags |= KNOWN;
        }
        self.send(ci, Pending { t0, req, req_bytes: 0, flags, redirects: 0 }, None, false);
    }

    /// Encodes `p` onto the connection that owns its key (or onto `node`).
    fn send(&mut self, ci: usize, mut p: Pending, node: Option<usize>, asking: bool) {
        let workload = &self.phase.workload;
        self.key_buf.clear();
        workload.write_key(&mut self.key_buf, &p.req);
        let node = node.unwrap_or_else(|| {
            if !self.shared.cluster {
                0
            } else if workload.keyed() {
                let slot = cluster::key_slot(&self.key_buf);
                self.map.owner(slot).unwrap_or(0) // unowned: let the server redirect
            } else {
                let c = &mut self.clients[ci];
                c.rr = c.rr.wrapping_add(1);
                self.masters.get(c.rr % self.masters.len().max(1)).copied().unwrap_or(0)
            }
        });
        let idx = match self.conn_for(ci, node) {
            Ok(idx) => idx,
            Err(e) => {
                self.stats.note_error(|| e);
                self.give_up(ci);
                return;
            }
        };
        let conn = &mut self.conns[idx];
        if conn.dead {
            self.give_up(ci);
            return;
        }
        if asking {
            conn.out().extend_from_slice(b"*1\r\n$6\r\nASKING\r\n");
            conn.pending.push_back(Pending { flags: SETUP, ..p });
        }
        let out = conn.out();
        let before = out.len();
        workload.encode(out, &p.req, &self.key_buf);
        p.req_bytes = (out.len() - before) as u32;
        conn.pending.push_back(p);
    }

    /// Drops a request that can't be sent.
    fn give_up(&mut self, ci: usize) {
        let c = &mut self.clients[ci];
        c.inflight -= 1;
        c.failed = true;
        self.stats.unanswered += 1;
    }

    /// Index of client `ci`'s connection to `node`, connecting on first use.
    fn conn_for(&mut self, ci: usize, node: usize) -> Result<usize, String> {
        let c = &mut self.clients[ci];
        if c.conns.len() <= node {
            c.conns.resize(node + 1, NO_CONN);
        }
        if c.conns[node] != NO_CONN {
            return Ok(c.conns[node]);
        }
        let n = &self.map.nodes[node];
        let mut conn = Conn::connect(n.addr, ci, node).map_err(|e| format!("connect {}:{}: {e}", n.host, n.port))?;
        let idx = self.conns.len();
        self.poll
            .registry()
            .register(&mut conn.stream, Token(idx), Interest::READABLE | Interest::WRITABLE)
            .map_err(|e| format!("epoll register: {e}"))?;
        if let Some(pw) = &self.shared.auth {
            protocol::encode_command(conn.out(), &[b"AUTH", pw.as_bytes()]);
            let req = Request { kind: Kind::Custom, key: 0, size: 0, nonce: 0 };
            conn.pending.push_back(Pending {
                t0: Instant::now(),
                req,
                req_bytes: 0,
                flags: SETUP | AUTH,
                redirects: 0,
            });
        }
        self.conns.push(conn);
        self.clients[ci].conns[node] = idx;
        Ok(idx)
    }

    fn handle_event(&mut self, ev: &Event, now: Instant) {
        if ev.token() == TIMER {
            if let Some(t) = self.timer.as_mut() {
                t.acknowledge();
            }
            return;
        }
        let idx = ev.token().0;
        if self.conns[idx].dead {
            return;
        }
        if ev.is_error() {
            let err = self.conns[idx].stream.take_error().ok().flatten();
            let msg = err.map_or_else(|| "socket error".to_string(), |e| e.to_string());
            return self.fail_conn(idx, msg);
        }
        if ev.is_writable() && !self.conns[idx].connected {
            match self.conns[idx].stream.peer_addr() {
                Ok(_) => self.conns[idx].connected = true,
                Err(e) if e.kind() == std::io::ErrorKind::NotConnected => {}
                Err(e) => return self.fail_conn(idx, e.to_string()),
            }
        }
        if ev.is_readable() || ev.is_read_closed() {
            self.on_readable(idx, now);
        }
        let ci = self.conns[idx].client;
        if self.running && self.phase.rate.is_none() {
            self.pump(ci, now);
        } else {
            self.flush_client(ci);
        }
    }

    fn flush_client(&mut self, ci: usize) {
        for n in 0..self.clients[ci].conns.len() {
            let idx = self.clients[ci].conns[n];
            if idx != NO_CONN && !self.conns[idx].dead && self.conns[idx].has_output() {
                if let Err(e) = self.conns[idx].flush() {
                    self.fail_conn(idx, e.to_string());
                }
            }
        }
    }

    fn on_readable(&mut self, idx: usize, now: Instant) {
        let result = loop {
            match self.conns[idx].read_some() {
                Err(e) => break Err(e.to_string()),
                Ok(drained) => {
                    if let Err(e) = self.process_replies(idx, now) {
                        break Err(e);
                    }
                    if drained {
                        break Ok(());
                    }
                }
            }
        };
        self.last_activity = now;
        if let Err(e) = result {
            self.fail_conn(idx, e);
        }
        // Even after a failure: redirected requests parsed before it still
        // count as in flight and must be re-sent.
        if !self.redirects.is_empty() {
            self.follow_redirects();
        }
    }

    fn fail_conn(&mut self, idx: usize, msg: String) {
        let conn = &mut self.conns[idx];
        if conn.dead {
            return;
        }
        conn.dead = true;
        let _ = self.poll.registry().deregister(&mut conn.stream);
        let node = &self.map.nodes[conn.node];
        let lost = conn.pending.iter().filter(|p| p.flags & SETUP == 0).count();
        conn.pending.clear();
        self.stats.connection_errors += 1;
        self.stats.unanswered += lost as u64;
        self.stats.note_error(|| format!("connection to {}:{}: {msg}", node.host, node.port));
        let c = &mut self.clients[conn.client];
        c.inflight -= lost;
        c.failed = true;
    }
}
