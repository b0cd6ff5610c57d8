//! Replication, Redis's PSYNC protocol both ways (ARCHITECTURE.md,
//! "Replication").
//!
//! As a primary: every shard's effects (`shard::propagate`'s feed) travel
//! as blocks (`block.rs`, compressed while a replica waits for its
//! snapshot) to core 0's hub (`hub.rs`), which merges them into the one
//! ordered stream (`merge.rs`) and keeps it in the backlog every replica
//! reads from (`backlog.rs`, `primary.rs`); `sync.rs` runs a replica's
//! full or partial resync (replicas asking together share one snapshot:
//! `snapshot_group.rs`), `feeder.rs` feeds it the stream, `wait.rs` is
//! WAIT, `info.rs` INFO replication and ROLE, `role.rs` role changes
//! (REPLICAOF), `failover.rs` FAILOVER. As a replica (`replica/`):
//! the link to the primary, the RDB it sends loaded into every shard in
//! parallel, and the command stream applied on the owning cores.

pub mod backlog;
pub mod block;
pub mod failover;
pub mod feeder;
pub mod handoff;
pub mod hub;
pub mod info;
pub mod merge;
pub mod primary;
pub mod replica;
pub mod role;
pub mod snapshot_group;
pub mod state;
pub mod sync;
pub mod wait;
