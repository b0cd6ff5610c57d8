//! A core's replication state, held by `core::Core`: a leaf.

use super::primary::Primary;
use super::replica::state::ReplicaState;
use std::cell::{Cell, RefCell};

#[derive(Default)]
pub struct ReplState {
    /// This process as a primary, on core 0 only: the stream, the backlog
    /// and the replicas' links. `None` until the first replica arrives.
    pub primary: RefCell<Option<Primary>>,
    /// This shard's feed task runs (replicas take its effects).
    pub feeding: Cell<bool>,
    /// Feed items this shard's hub has taken in (WAIT waits for them).
    pub acked: Cell<u64>,
    /// Replicas that acknowledged within min-replicas-max-lag (the hub
    /// tells every core when it changes).
    pub good_replicas: Cell<u64>,
    /// Compress the blocks this shard ships (a replica waits for its
    /// snapshot and a codec is configured).
    pub compress: Cell<bool>,
    /// This process as a replica (the link to its primary).
    pub replica: ReplicaState,
    /// Core 0: the replication id, made on first use (INFO shows it before
    /// any replica, as Redis's); DEBUG CHANGE-REPL-ID and a promotion make
    /// a new one.
    pub replid: RefCell<Option<String>>,
    /// Core 0: FAILOVER's state (`failover.rs` drives it).
    pub failover: RefCell<Failover>,
}

/// Redis's failover_state, as INFO names it.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Phase {
    #[default]
    None,
    /// Writes paused until a replica acknowledged the whole stream.
    WaitForSync,
    /// A replica of the target, whose PSYNC carries FAILOVER.
    InProgress,
}

impl Phase {
    pub fn word(self) -> &'static str {
        match self {
            Phase::None => "no-failover",
            Phase::WaitForSync => "waiting-for-sync",
            Phase::InProgress => "failover-in-progress",
        }
    }
}

#[derive(Default)]
pub struct Failover {
    pub phase: Phase,
    /// The replica named (TO) or the first found synced.
    pub target: Option<(String, u16)>,
    /// Unix ms when it times out (0: never), and whether it then fails
    /// over anyway.
    pub end_ms: u64,
    pub force: bool,
    /// Numbers every change of the write pause sent to the cores.
    pub pause_seq: u64,
}
