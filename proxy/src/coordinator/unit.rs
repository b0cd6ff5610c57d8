//! A coordinator unit: locks on every shard it touches, taken in shard
//! order, held while its work runs, then released (strict two-phase
//! locking). Taking shards in one global order means two units never wait
//! on each other in a circle; holding every lock until the end means no
//! client on any core sees part of the unit.

use super::dispatch::call_task;
use super::locks::{until, DbKey, UnitId};
use crate::core::Core;
use crate::mesh::Request;
use shard::{Args, CommandSpec};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// The last shard of a unit, locked by the unit's first batch there:
/// (shard, keys, whole).
pub type LastShard = (usize, Vec<DbKey>, bool);

/// What a unit locks: keys per shard (db, key), or every shard whole.
#[derive(Default)]
pub struct Footprint {
    pub keys: Vec<(usize, Vec<DbKey>)>,
    pub whole: bool,
}

impl Footprint {
    pub fn add(&mut self, shard: usize, db: usize, key: &[u8]) {
        let k = (db as u16, key.to_vec());
        match self.keys.iter_mut().find(|(s, _)| *s == shard) {
            Some((_, keys)) if keys.contains(&k) => {}
            Some((_, keys)) => keys.push(k),
            None => self.keys.push((shard, vec![k])),
        }
    }

    /// The shards touched, in locking order.
    pub fn shards(&self, count: usize) -> Vec<usize> {
        if self.whole {
            return (0..count).collect();
        }
        let mut shards: Vec<usize> = self.keys.iter().map(|(s, _)| *s).collect();
        shards.sort_unstable();
        shards
    }

    pub fn keys_on(&self, shard: usize) -> Vec<DbKey> {
        self.keys.iter().find(|(s, _)| *s == shard).map(|(_, k)| k.clone()).unwrap_or_default()
    }
}

pub struct Unit {
    core: Rc<Core>,
    pub id: UnitId,
    shards: Vec<usize>,
    /// It may write: its release is marked in the replication stream
    /// (a read-only unit's is not, sparing the hub).
    pub writes: bool,
}

impl Unit {
    /// Takes every lock of `footprint`, one shard after the other in shard
    /// order (one mesh round trip per other shard).
    pub async fn acquire(core: &Rc<Core>, footprint: &Footprint) -> Unit {
        Unit::acquire_shards(core, footprint, &footprint.shards(core.count)).await
    }

    /// Takes the locks of `footprint` on `shards`, in that order.
    async fn acquire_shards(core: &Rc<Core>, footprint: &Footprint, shards: &[usize]) -> Unit {
        let id = core.locks.borrow_mut().new_unit(core.index);
        let mut unit = Unit { core: core.clone(), id, shards: Vec::with_capacity(shards.len()), writes: true };
        for &shard in shards {
            let (keys, whole) = (footprint.keys_on(shard), footprint.whole);
            if call_task(core, shard, move |c| lock_here(c, id, keys, whole)).await.is_none() {
                continue;
            }
            unit.shards.push(shard);
        }
        unit
    }

    /// Like `acquire`, but when the last shard in locking order is another
    /// core's, its locks are left for the unit's first batch to take there
    /// (`Batch::lock`, via `Pipeline::lock_with`): for units whose only
    /// traffic to that shard is batches, it saves a round trip.
    pub async fn acquire_but_last(core: &Rc<Core>, footprint: &Footprint) -> (Unit, Option<LastShard>) {
        let shards = footprint.shards(core.count);
        match shards.split_last() {
            Some((&last, rest)) if last != core.index => {
                let mut unit = Unit::acquire_shards(core, footprint, rest).await;
                unit.shards.push(last);
                (unit, Some((last, footprint.keys_on(last), footprint.whole)))
            }
            _ => (Unit::acquire(core, footprint).await, None),
        }
    }

    /// Releases every lock (the unit's work on each shard is done: its
    /// replies are in, and the release travels behind it on each channel).
    pub async fn release(self) {
        self.release_touching(false).await
    }

    /// Releases, and with `touch` marks every key it held as changed for
    /// WATCH: multi-phase writes change values in place, out of sight of
    /// the command executor that touches keys.
    pub async fn release_touching(mut self, touch: bool) {
        // 0: no release marker (nothing of it is in the stream).
        let count = if self.writes { self.shards.len() as u16 } else { 0 };
        for shard in std::mem::take(&mut self.shards) {
            if shard == self.core.index {
                release_here(&self.core, self.id, touch, count);
            } else {
                self.core.mesh.post(shard, Request::Release(self.id, touch, count)).await;
            }
        }
    }
}

impl Drop for Unit {
    /// A unit dropped before `release` (its connection's task ended) still
    /// lets go of its locks.
    fn drop(&mut self) {
        if self.shards.is_empty() {
            return;
        }
        let rest = Unit {
            core: self.core.clone(),
            id: self.id,
            shards: std::mem::take(&mut self.shards),
            writes: self.writes,
        };
        glommio::spawn_local(rest.release()).detach();
    }
}

async fn lock_here(core: Rc<Core>, id: UnitId, keys: Vec<DbKey>, whole: bool) {
    until(&core.locks, |table| !table.try_lock(id, &keys, whole)).await;
    locked_here(&core, id, &keys, whole);
}

/// `id` took `keys` (or the whole shard) here: the replication feed, when
/// there is one, learns whose work the effects on them are.
pub fn locked_here(core: &Core, id: UnitId, keys: &[DbKey], whole: bool) {
    if let Some(feed) = core.shard.borrow_mut().repl_feed() {
        feed.hold(id, keys.iter().map(|(db, k)| (*db as usize, k.clone())), whole);
    }
}

/// Lets go of `id`'s locks on this core; clients blocked on those keys get
/// their chance now (a push inside the unit did not serve them), and on
/// any key pushed to while a unit held it (a whole shard's keys).
pub fn release_here(core: &Rc<Core>, id: UnitId, touch: bool, shards: u16) {
    let keys = core.locks.borrow_mut().release(id);
    let held = std::mem::take(&mut core.blocked.borrow_mut().held);
    let mut shard = core.shard.borrow_mut();
    if let Some(feed) = shard.repl_feed() {
        feed.release(id, shards);
    }
    for (db, key) in &held {
        shard.signal_ready(*db, key);
    }
    for (db, key) in &keys {
        shard.signal_ready(*db as usize, key);
        if let (true, Some(watch)) = (touch, &mut shard.dbs[*db as usize].watch) {
            watch.touch(key);
        }
    }
    let ready = !shard.ready.is_empty();
    drop(shard);
    if ready {
        core.serve_ready();
    }
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
    until(&core.locks, |t| keys.iter().any(|(db, k)| t.blocks(*db as usize, k, None))).await
}

/// The footprint of one command: its keys, by owning shard.
pub fn footprint_of(core: &Core, spec: &CommandSpec, db: usize, args: &Args) -> Footprint {
    let mut f = Footprint::default();
    for i in spec.key_indexes(args) {
        f.add(core.shard_of(args.get(i)), db, args.get(i));
    }
    f
}
