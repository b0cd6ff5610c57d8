//! The coordinator: the one way any command reaches other shards. Calls
//! run closures on other cores (`dispatch.rs`), the owner executes what
//! its peers send (`serve.rs`), and work over several shards runs as one
//! atomic unit (`unit.rs`, `locks.rs`: a multi-key command over several
//! shards, EXEC, a script).
//!
//! A unit takes per-key locks on every shard it touches, shard by shard in
//! shard order, runs its commands (any mix of local, batched and
//! multi-phase work, each carrying the unit's id so its own locks do not
//! stop it), then releases. Every command on every core checks the lock
//! table of the shard it runs on before it runs: a held key makes it wait
//! (the rest of its connection's batch waits behind it, so a client's
//! commands never reorder). Work confined to one shard never takes a lock:
//! a shard runs one thing at a time, so it is atomic already, and the check
//! costs one emptiness test while no unit holds anything there.

// Lower layers name `locks` itself (a leaf), never this module.
pub mod dispatch;
pub mod locks;
pub mod serve;
pub mod unit;

pub use locks::{blocked, LockTable, UnitId};
pub use unit::{footprint_of, wait_for_release, wait_until_free, Footprint, Unit};
