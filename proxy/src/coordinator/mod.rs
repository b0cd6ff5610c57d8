//! The transaction coordinator: the one way work reaches several shards as
//! one atomic unit (a multi-key command over several shards, EXEC, a
//! script).
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

mod locks;
mod unit;

pub use locks::{LockTable, UnitId};
pub use unit::{Footprint, Unit};

use crate::core::Core;
use shard::{Args, CommandSpec, Route};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// True when a unit other than `me` holds a key `spec` touches on this
/// shard (any key of it, for commands over the whole shard).
pub fn blocked(locks: &LockTable, spec: &CommandSpec, db: usize, args: &Args, me: Option<UnitId>) -> bool {
    if locks.is_idle() {
        return false;
    }
    if matches!(spec.route, Route::AllShards(_)) {
        return locks.blocks_any(me);
    }
    spec.key_indexes(args).any(|i| locks.blocks(db, args.get(i), me))
}

/// Resolves after the next release of any lock on this core.
pub fn wait_for_release(core: &Rc<Core>) -> impl Future<Output = ()> + '_ {
    NextRelease { core, parked: false }
}

struct NextRelease<'a> {
    core: &'a Rc<Core>,
    parked: bool,
}

impl Future for NextRelease<'_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.parked {
            return Poll::Ready(());
        }
        self.parked = true;
        self.core.locks.borrow_mut().park(cx.waker().clone());
        Poll::Pending
    }
}

/// Waits until no unit holds a key of `f` on this core.
pub async fn wait_until_free(core: &Rc<Core>, f: &Footprint) {
    let keys = f.keys_on(core.index);
    locks::until(&core.locks, |t| keys.iter().any(|(db, k)| t.blocks(*db as usize, k, None))).await
}

/// The footprint of one command: its keys, by owning shard.
pub fn footprint_of(core: &Core, spec: &CommandSpec, db: usize, args: &Args) -> Footprint {
    let mut f = Footprint::default();
    for i in spec.key_indexes(args) {
        f.add(core.shard_of(args.get(i)), db, args.get(i));
    }
    f
}
