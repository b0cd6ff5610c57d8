//! Blocking pops (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN,
//! BZPOPMAX, BZMPOP): the waiters are kept by the core that owns the keys. A blocking request that finds
//! nothing to pop is registered there with its mesh ticket left unanswered;
//! a write to one of its keys marks the key ready on the shard
//! (`Shard::signal_ready`), and right after the command that wrote (the
//! whole command: a transaction or a script holds serving back until it
//! ends, `owner::ServingHold`, and a unit's keys wait for its release) the
//! owner serves the key's waiters of the key's type in the order they
//! blocked (as Redis, a waiter for a list ignores a key now holding a
//! sorted set, and the other way round; an XREADGROUP whose key is gone
//! or of another type is answered an error), answering their
//! tickets with the reply. A waiter that times out or whose client hangs up
//! is withdrawn (`Unblock`); if it had just been served, the served reply is
//! already on its ticket and wins, so nothing is lost or given twice.
//!
//! Keys spread over several shards (possible only outside cluster modes)
//! block in "notify" mode: each owner only says that a key got data, and the
//! client's core retries the pop itself. So does a BLMOVE whose destination
//! is on another shard than its source: its retry moves the element as a
//! coordinator unit holding both keys (`across.rs`), so the move is whole
//! before anyone, its client included, can see either list.

pub mod across;
pub mod client;
pub mod owner;
pub mod request;

pub use client::{give_up, parse_timeout, start, wait, BlockWait};
pub use owner::{put_logged, ServingHold};
pub use request::{BlockOp, BlockRequest, Waiters};
