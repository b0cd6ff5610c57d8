//! The connections of one core, for CLIENT LIST/INFO/KILL and INFO clients.
//! Each core lists its own; the server-wide views are gathered over the mesh.

use shard::config::{OutputBufferLimit, OutputBufferLimits};
use slab::Slab;
use std::cell::Cell;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::task::Waker;
use std::time::Instant;

pub struct ClientInfo {
    pub id: u64,
    pub addr: SocketAddr,
    pub laddr: SocketAddr,
    pub fd: RawFd,
    pub name: Vec<u8>,
    pub db: usize,
    pub resp: u8,
    pub created: Instant,
    pub last_active: Instant,
    pub last_cmd: &'static str,
    /// Bytes waiting in the query buffer at the last read.
    pub qbuf: usize,
    /// Free bytes of the query buffer (0 while idle: it is pooled).
    pub qbuf_free: usize,
    /// Replies held by the connection beyond the socket layer's queue
    /// (while a write waits on a slow reader).
    pub omem: usize,
    /// The socket layer's queued reply bytes, read live (the ring's queue;
    /// `None` when the socket is written directly).
    pub output: Option<Box<dyn Fn() -> usize>>,
    /// The reply buffer's capacity and the bytes of the last batch of
    /// replies written (rbs=, rbp=).
    pub rbs: usize,
    pub rbp: usize,
    /// Bytes of the arguments of the command running or waiting (a
    /// blocked or paused one, CLIENT LIST/INFO itself): argv-mem=.
    pub argv_mem: usize,
    /// Commands queued since MULTI (-1 outside MULTI) and their bytes.
    pub multi: (i64, usize),
    /// A replica's link (flags=S; CLIENT KILL TYPE replica).
    pub replica: bool,
    /// The ACL user the connection is authenticated as.
    pub user: Vec<u8>,
    /// Channels, patterns and shard channels subscribed to (sub= psub=
    /// ssub=; flags=P while any).
    pub subscriptions: [usize; 3],
    /// CLIENT TRACKING on: its mode (read by invalidations arriving from
    /// any shard, CLIENT LIST and TRACKINGINFO).
    pub tracking: Option<Box<Tracking>>,
    /// In MONITOR mode (flags=O).
    pub monitor: bool,
    /// CLIENT NO-EVICT on (flags=e).
    pub no_evict: bool,
    /// Blocked in a pop or held by CLIENT PAUSE (flags=b).
    pub blocked: bool,
    /// A blocked pop's door for CLIENT UNBLOCK.
    pub unblock: Option<Rc<Unblock>>,
    /// CLIENT KILL closed it: a connection held by a pause gives up.
    pub killed: Cell<bool>,
    /// The unix second its output was first seen over its soft
    /// `client-output-buffer-limit` (Redis's obuf_soft_limit_reached_time),
    /// shared by every check: the connection's writes, pushes, the cron.
    pub soft_limit_since: Option<u64>,
    /// Its memory as last counted into its core's total for
    /// `maxmemory-clients` (Redis's last_memory_usage; client_evict.rs).
    pub counted_memory: u64,
}

/// CLIENT UNBLOCK's word to a connection blocked in a pop (from any core).
#[derive(Default)]
pub struct Unblock {
    /// What to answer: `None` until asked.
    pub how: Cell<Option<UnblockHow>>,
    pub waker: Cell<Option<Waker>>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum UnblockHow {
    /// The pop's timeout reply.
    Timeout,
    /// `-UNBLOCKED client unblocked via CLIENT UNBLOCK`.
    Error,
}

impl Unblock {
    pub fn signal(&self, how: UnblockHow) {
        self.how.set(Some(how));
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }
}

/// A client's CLIENT TRACKING mode.
#[derive(Clone, Default, Debug)]
pub struct Tracking {
    /// The client invalidations go to instead (REDIRECT), 0 for itself.
    pub redirect: u64,
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
    /// CLIENT CACHING yes/no given for the next command (or transaction).
    pub caching: bool,
    /// The redirect target was gone when an invalidation was due.
    pub broken_redirect: bool,
    /// BCAST prefixes, in Redis's (sorted) order.
    pub prefixes: Vec<Vec<u8>>,
}

impl ClientInfo {
    /// The `client-output-buffer-limit` class it is held to here (Redis's
    /// getClientType: pubsub while subscribed); a replica's link is held to
    /// its own by the replication feed.
    pub fn output_limit(&self, limits: &OutputBufferLimits) -> Option<OutputBufferLimit> {
        match (self.replica, self.pubsub()) {
            (true, _) => None,
            (false, true) => Some(limits.pubsub),
            (false, false) => Some(limits.normal),
        }
    }

    /// Redis's checkClientOutputBufferLimits for `held` bytes of output at
    /// unix second `now`: true at the hard limit, or when the output has
    /// been over the soft limit for more than its seconds (whole seconds,
    /// as Redis's server.unixtime). Seen under the soft limit, the time
    /// over it starts again.
    pub fn output_limit_reached(&mut self, held: u64, limit: OutputBufferLimit, now: u64) -> bool {
        let hard = limit.hard > 0 && held >= limit.hard;
        let mut soft = limit.soft > 0 && held >= limit.soft;
        if soft {
            match self.soft_limit_since {
                None => {
                    self.soft_limit_since = Some(now);
                    soft = false;
                }
                Some(since) => soft = now.saturating_sub(since) > limit.soft_seconds,
            }
        } else {
            self.soft_limit_since = None;
        }
        hard || soft
    }

    /// The unix millisecond from which output still over the soft limit
    /// is over it for too long.
    pub fn soft_limit_deadline_ms(&self, limit: OutputBufferLimit) -> Option<u64> {
        self.soft_limit_since.map(|since| (since + limit.soft_seconds + 1) * 1000)
    }

    /// What the connection holds: its query buffer, pending output, queued
    /// MULTI commands and the fixed cost of its state.
    pub fn total_memory(&self) -> usize {
        const FIXED: usize = 1024;
        FIXED + self.qbuf + self.qbuf_free + self.argv_mem + self.rbs + self.output_memory() + self.multi.1
    }

    /// Reply bytes not sent yet (omem=).
    pub fn output_memory(&self) -> usize {
        self.omem + self.output.as_ref().map_or(0, |queued| queued())
    }

    /// Subscribed to anything (flags=P; CLIENT KILL TYPE pubsub).
    pub fn pubsub(&self) -> bool {
        self.subscriptions.iter().any(|&n| n > 0)
    }

    /// CLIENT LIST's flags, in Redis's order (getClientInfoString).
    fn flags(&self) -> String {
        let mut f = String::new();
        if self.monitor {
            f.push('O');
        } else if self.replica {
            f.push('S');
        }
        if self.pubsub() {
            f.push('P');
        }
        if self.multi.0 >= 0 {
            f.push('x');
        }
        if self.blocked {
            f.push('b');
        }
        if let Some(t) = &self.tracking {
            f.push('t');
            if t.broken_redirect {
                f.push('R');
            }
            if t.bcast {
                f.push('B');
            }
        }
        if self.no_evict {
            f.push('e');
        }
        if f.is_empty() {
            f.push('N');
        }
        f
    }

    /// One line of CLIENT LIST in Redis 7.0's field order
    /// (catClientInfoString).
    pub fn line(&self, now: Instant) -> String {
        let omem = self.output_memory();
        format!(
            "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={} db={} sub={} psub={} ssub={} multi={} qbuf={} qbuf-free={} argv-mem={} multi-mem={} rbs={} rbp={} obl=0 oll={} omem={} tot-mem={} events={} cmd={} user={} redir={} resp={}",
            self.id,
            self.addr,
            self.laddr,
            self.fd,
            String::from_utf8_lossy(&self.name),
            now.duration_since(self.created).as_secs(),
            now.duration_since(self.last_active).as_secs(),
            self.flags(),
            self.db,
            self.subscriptions[0],
            self.subscriptions[1],
            self.subscriptions[2],
            self.multi.0,
            self.qbuf,
            self.qbuf_free,
            self.argv_mem,
            self.multi.1,
            self.rbs,
            self.rbp,
            usize::from(omem > 0),
            omem,
            self.total_memory(),
            if omem > 0 { "rw" } else { "r" },
            self.last_cmd,
            String::from_utf8_lossy(&self.user),
            self.tracking.as_ref().map_or(-1, |t| t.redirect as i64),
            self.resp,
        )
    }
}

#[derive(Default)]
pub struct Clients {
    /// Boxed: a slab keeps its peak capacity, so after a burst of
    /// connections only a pointer per slot stays allocated.
    pub list: Slab<Box<ClientInfo>>,
    next_seq: u64,
}

impl Clients {
    /// A server-wide unique id: this core's sequence interleaved with the
    /// other cores' (no shared counter).
    pub fn next_id(&mut self, core: usize, cores: usize) -> u64 {
        self.next_seq += 1;
        (self.next_seq - 1) * cores as u64 + core as u64 + 1
    }

    /// Closes a connection from outside its task: its pending read returns
    /// and the task ends as if the peer had hung up (one held by CLIENT
    /// PAUSE sees `killed` once the pause's waiters are woken).
    pub fn kill(&self, key: usize) {
        if let Some(c) = self.list.get(key) {
            c.killed.set(true);
            // SAFETY: `fd` is the open socket of a live connection (removed
            // from the registry before it is closed).
            unsafe {
                libc::shutdown(c.fd, libc::SHUT_RDWR);
            }
        }
    }
}
