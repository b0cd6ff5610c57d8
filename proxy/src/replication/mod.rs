//! Replication, Redis's PSYNC protocol both ways (ARCHITECTURE.md,
//! "Replication").
//!
//! As a primary: every shard's effects (`shard::propagate`) travel as
//! blocks (`block.rs`, compressed while a replica waits for its snapshot)
//! to core 0's hub (`hub.rs`), which merges them into the one ordered
//! stream, keeps the backlog every replica reads from (`backlog.rs`) and
//! feeds each replica connection (`feed.rs`); `sync.rs` runs full and
//! partial resyncs, `wait.rs` WAIT. As a replica (`replica/`): the link to
//! the primary, the RDB it sends loaded into every shard in parallel, and
//! the command stream applied on the owning cores.

pub mod block;
pub mod replica;
pub mod state;
