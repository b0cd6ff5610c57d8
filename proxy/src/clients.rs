//! The connections of one core, for CLIENT LIST/INFO/KILL and INFO clients.
//! Each core lists its own; the server-wide views are gathered over the mesh.

use slab::Slab;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::Instant;

pub struct ClientInfo {
    pub id: u64,
    pub addr: SocketAddr,
    pub laddr: SocketAddr,
    pub fd: RawFd,
    pub name: Vec<u8>,
    pub lib_name: Vec<u8>,
    pub lib_ver: Vec<u8>,
    pub db: usize,
    pub resp: u8,
    pub created: Instant,
    pub last_active: Instant,
    pub last_cmd: &'static str,
    /// Bytes waiting in the query buffer at the last read.
    pub qbuf: usize,
    /// Free bytes of the query buffer (0 while idle: it is pooled).
    pub qbuf_free: usize,
    /// Replies not yet sent: the ring's queue and, while the connection
    /// waits on it, its pipeline's (as of the connection's last write).
    pub omem: usize,
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
    /// What the connection holds: its query buffer, pending output, queued
    /// MULTI commands and the fixed cost of its state.
    pub fn total_memory(&self) -> usize {
        const FIXED: usize = 1024;
        FIXED + self.qbuf + self.qbuf_free + self.omem + self.multi.1
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
        if let Some(t) = &self.tracking {
            f.push('t');
            if t.broken_redirect {
                f.push('R');
            }
            if t.bcast {
                f.push('B');
            }
        }
        if f.is_empty() {
            f.push('N');
        }
        f
    }

    /// One line of CLIENT LIST in Redis 7's field order.
    pub fn line(&self, now: Instant) -> String {
        format!(
            "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={} db={} sub={} psub={} ssub={} multi={} qbuf={} qbuf-free={} argv-mem=0 multi-mem={} rbs={} rbp=0 obl=0 oll={} omem={} tot-mem={} events=r cmd={} user={} redir={} resp={} lib-name={} lib-ver={}",
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
            self.multi.1,
            self.qbuf + self.qbuf_free,
            usize::from(self.omem > 0),
            self.omem,
            self.total_memory(),
            self.last_cmd,
            String::from_utf8_lossy(&self.user),
            self.tracking.as_ref().map_or(-1, |t| t.redirect as i64),
            self.resp,
            String::from_utf8_lossy(&self.lib_name),
            String::from_utf8_lossy(&self.lib_ver),
        )
    }
}

#[derive(Default)]
pub struct Clients {
    pub list: Slab<ClientInfo>,
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
    /// and the task ends as if the peer had hung up.
    pub fn kill(&self, key: usize) {
        if let Some(c) = self.list.get(key) {
            // SAFETY: `fd` is the open socket of a live connection (removed
            // from the registry before it is closed).
            unsafe {
                libc::shutdown(c.fd, libc::SHUT_RDWR);
            }
        }
    }
}
