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
    /// any replica, as Redis's); DEBUG CHANGE-REPL-ID makes a new one.
    pub replid: RefCell<Option<String>>,
}
