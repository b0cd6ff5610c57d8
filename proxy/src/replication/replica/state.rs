//! What a core knows of its primary while this process is a replica: a
//! leaf. Every core holds the `mode` bits its router checks (one `Cell`
//! read per command while this process is a primary); core 0, which runs
//! the link, holds the link's state (`Link`) and the wake-up of the link's
//! supervisor.

use shard::commands::flags;
use shard::CommandSpec;
use std::cell::{Cell, RefCell};
use std::task::Waker;
use std::time::Instant;

/// `mode` bit: this process is a replica (writes refused when read-only).
pub const REPLICA: u8 = 1;
/// `mode` bit: the link is not up (`replica-serve-stale-data no` refuses).
pub const LINK_DOWN: u8 = 2;
/// `mode` bit: an RDB from the primary is being loaded.
pub const LOADING: u8 = 4;

pub const READONLY_ERR: &str = "READONLY You can't write against a read only replica.";
pub const MASTERDOWN_ERR: &str = "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.";
pub const LOADING_ERR: &str = "LOADING Redis is loading the dataset in memory";

/// Per-core replica state (held by `core::Core`).
#[derive(Default)]
pub struct ReplicaState {
    /// `REPLICA | LINK_DOWN | LOADING` bits, the same on every core.
    pub mode: Cell<u8>,
    /// Core 0: the last mode published; other cores: the newest taken.
    pub mode_seq: Cell<u64>,
    pub mode_seen: Cell<u64>,
    /// Core 0 only: the link to the primary.
    pub link: RefCell<Link>,
    /// Core 0 only: wakes the link's supervisor when the target changes.
    pub wake: Signal,
}

/// Where the link stands (ROLE's words).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum LinkStatus {
    /// Not connected; the supervisor connects next.
    #[default]
    Connect,
    /// Connecting or in the handshake.
    Connecting,
    /// Receiving or loading the RDB.
    Sync,
    /// Streaming commands.
    Connected,
}

impl LinkStatus {
    pub fn word(self) -> &'static str {
        match self {
            LinkStatus::Connect => "connect",
            LinkStatus::Connecting => "connecting",
            LinkStatus::Sync => "sync",
            LinkStatus::Connected => "connected",
        }
    }
}

/// Core 0's view of the primary.
#[derive(Default)]
pub struct Link {
    /// `REPLICAOF host port`; `None`: a primary.
    pub master: Option<(String, u16)>,
    /// Bumped on every REPLICAOF: a link of an older generation quits.
    pub generation: u64,
    pub status: LinkStatus,
    /// The primary's replication id and the offset applied so far (Redis's
    /// `master->reploff`); kept across disconnections for PSYNC.
    pub replid: String,
    pub offset: u64,
    /// Bytes read from the stream (Redis's `read_reploff`).
    pub read_offset: u64,
    /// `replid`/`offset` name a dataset this process holds (PSYNC can ask
    /// to continue it).
    pub synced: bool,
    pub last_io: Option<Instant>,
    pub down_since: Option<Instant>,
    /// The RDB being received: total (-1 for the EOF-marker format), read.
    pub transfer_size: i64,
    pub transfer_read: u64,
    pub transfer_last_io: Option<Instant>,
    /// The received RDB is being loaded into the shards.
    pub loading: bool,
}

/// A one-waiter wake-up (core 0's supervisor waits on it).
#[derive(Default)]
pub struct Signal {
    raised: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Signal {
    pub fn raise(&self) {
        self.raised.set(true);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// True (and lowered) when raised since the last look.
    pub fn take(&self) -> bool {
        self.raised.replace(false)
    }

    /// Waits until raised, then lowers it.
    pub async fn wait(&self) {
        std::future::poll_fn(|cx| {
            if self.raised.replace(false) {
                return std::task::Poll::Ready(());
            }
            *self.waker.borrow_mut() = Some(cx.waker().clone());
            std::task::Poll::Pending
        })
        .await
    }
}

/// What a replica refuses to a client (never to its primary), in Redis's
/// processCommand order: READONLY, MASTERDOWN, LOADING. `mode` is not 0.
pub fn refusal(mode: u8, spec: &CommandSpec, read_only: bool, serve_stale: bool) -> Option<&'static str> {
    if mode & REPLICA != 0 && read_only && spec.has_flag(flags::WRITE) {
        return Some(READONLY_ERR);
    }
    if mode & LINK_DOWN != 0 && !serve_stale && !spec.has_flag(flags::STALE) {
        return Some(MASTERDOWN_ERR);
    }
    if mode & LOADING != 0 && !spec.has_flag(flags::LOADING) {
        return Some(LOADING_ERR);
    }
    None
}
