//! A core's lock table: the keys of its shard that coordinator units hold.
//! A command touching a held key waits until the unit releases it, so no
//! client on any core sees part of a unit. Idle (nothing held), a command
//! pays one emptiness check.

use ahash::AHashMap;
use shard::{Args, CommandSpec, Route};
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// A coordinator unit: the core that runs it in the top 16 bits, then that
/// core's sequence number, so ids are unique without a shared counter.
pub type UnitId = u64;

/// A key of one database.
pub type DbKey = (u16, Vec<u8>);

#[derive(Default)]
pub struct LockTable {
    /// Held keys by database, so a check borrows the key (no copy).
    keys: AHashMap<u16, AHashMap<Vec<u8>, UnitId>>,
    /// A unit holding the whole shard (FLUSHALL in a transaction, a script
    /// whose keys are not known in advance).
    whole: Option<UnitId>,
    /// What each unit holds here, to release it.
    held: AHashMap<UnitId, Vec<DbKey>>,
    /// Tasks waiting for a release.
    waiters: Vec<Waker>,
    next_id: u64,
}

impl LockTable {
    #[inline]
    pub fn is_idle(&self) -> bool {
        self.held.is_empty()
    }

    pub fn new_unit(&mut self, core: usize) -> UnitId {
        self.next_id += 1;
        ((core as u64) << 48) | (self.next_id & ((1 << 48) - 1))
    }

    /// True when a unit other than `me` holds `key` (or the whole shard).
    pub fn blocks(&self, db: usize, key: &[u8], me: Option<UnitId>) -> bool {
        if self.held.is_empty() {
            return false;
        }
        if self.whole.is_some_and(|u| Some(u) != me) {
            return true;
        }
        self.holder(db as u16, key).is_some_and(|u| Some(u) != me)
    }

    fn holder(&self, db: u16, key: &[u8]) -> Option<UnitId> {
        self.keys.get(&db)?.get(key).copied()
    }

    /// True when a unit other than `me` holds anything here (a command over
    /// the whole shard: DBSIZE, FLUSHDB, KEYS).
    pub fn blocks_any(&self, me: Option<UnitId>) -> bool {
        self.held.keys().any(|&u| Some(u) != me)
    }

    /// Takes `keys` (or the whole shard) for `unit` if nothing else holds
    /// them; false means wait for a release and try again.
    pub fn try_lock(&mut self, unit: UnitId, keys: &[DbKey], whole: bool) -> bool {
        let others = |u: &UnitId| *u != unit;
        if self.whole.as_ref().is_some_and(others) {
            return false;
        }
        if whole {
            if self.held.keys().any(others) {
                return false;
            }
            self.whole = Some(unit);
        } else if keys.iter().any(|(db, k)| self.holder(*db, k).as_ref().is_some_and(others)) {
            return false;
        }
        let held = self.held.entry(unit).or_default();
        for k in keys {
            if self.keys.entry(k.0).or_default().insert(k.1.clone(), unit).is_none() {
                held.push(k.clone());
            }
        }
        true
    }

    /// Wakes `waker` at the next release.
    pub fn park(&mut self, waker: Waker) {
        self.waiters.push(waker);
    }

    /// Releases everything `unit` holds here; returns the keys, and wakes
    /// every waiter to look again.
    pub fn release(&mut self, unit: UnitId) -> Vec<DbKey> {
        if self.whole == Some(unit) {
            self.whole = None;
        }
        let keys = self.held.remove(&unit).unwrap_or_default();
        for k in &keys {
            if let Some(db) = self.keys.get_mut(&k.0) {
                db.remove(&k.1);
                if db.is_empty() {
                    self.keys.remove(&k.0);
                }
            }
        }
        for w in self.waiters.drain(..) {
            w.wake();
        }
        keys
    }
}

/// Resolves once `blocked` returns false for the lock table; re-checked after
/// every release on this core.
pub fn until<'a>(
    table: &'a RefCell<LockTable>,
    blocked: impl FnMut(&mut LockTable) -> bool + 'a,
) -> impl Future<Output = ()> + 'a {
    Until { table, blocked }
}

struct Until<'a, F> {
    table: &'a RefCell<LockTable>,
    blocked: F,
}

impl<F: FnMut(&mut LockTable) -> bool> Future for Until<'_, F> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // SAFETY: nothing here is structurally pinned.
        let this = unsafe { self.get_unchecked_mut() };
        let mut table = this.table.borrow_mut();
        if (this.blocked)(&mut table) {
            table.waiters.push(cx.waker().clone());
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> (u16, Vec<u8>) {
        (0, s.as_bytes().to_vec())
    }

    #[test]
    fn units_exclude_each_other_per_key_and_whole_shard() {
        let mut t = LockTable::default();
        assert!(t.try_lock(1, &[k("a"), k("b")], false));
        assert!(!t.try_lock(2, &[k("b")], false));
        assert!(t.try_lock(2, &[k("c")], false));
        assert!(t.blocks(0, b"a", None) && t.blocks(0, b"a", Some(2)) && !t.blocks(0, b"a", Some(1)));
        assert!(!t.blocks(1, b"a", None), "another database");
        assert!(!t.try_lock(3, &[], true), "whole shard while keys are held");
        assert_eq!(t.release(1).len(), 2);
        t.release(2);
        assert!(t.is_idle());
        assert!(t.try_lock(3, &[], true));
        assert!(t.blocks(0, b"zzz", None) && t.blocks_any(None) && !t.blocks_any(Some(3)));
        assert!(!t.try_lock(1, &[k("a")], false));
        t.release(3);
        assert!(t.is_idle() && !t.blocks(0, b"a", None));
    }
}
