//! WATCH on the shard that owns the keys: which clients watch which keys of
//! one database, and which of them saw a watched key change since. A client
//! on any core watches here; its EXEC asks here (under the transaction's
//! locks) whether it is still clean, so no notification ever crosses cores.

use ahash::{AHashMap, AHashSet};

/// A watching client: its process-wide client id.
pub type Watcher = u64;

/// A client watching a key, and whether the key had run out of time
/// (expired, not yet deleted) when it did: Redis 7.0's `watchedKey.expired`.
struct Watch {
    who: Watcher,
    expired: bool,
}

#[derive(Default)]
pub struct WatchTable {
    keys: AHashMap<Vec<u8>, Vec<Watch>>,
    /// Watchers whose key changed since they watched it.
    touched: AHashSet<Watcher>,
}

impl WatchTable {
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.touched.is_empty()
    }

    /// `who` watches `key`, which had run out of time if `expired`.
    pub fn watch(&mut self, key: &[u8], who: Watcher, expired: bool) {
        let watchers = self.keys.entry(key.to_vec()).or_default();
        if !watchers.iter().any(|w| w.who == who) {
            watchers.push(Watch { who, expired });
        }
    }

    /// Forgets `who` on `keys` (UNWATCH, EXEC, DISCARD, a closed client).
    pub fn unwatch(&mut self, keys: &[Vec<u8>], who: Watcher) {
        for key in keys {
            if let Some(watchers) = self.keys.get_mut(key.as_slice()) {
                watchers.retain(|w| w.who != who);
                if watchers.is_empty() {
                    self.keys.remove(key.as_slice());
                }
            }
        }
        self.touched.remove(&who);
    }

    /// `key` changed: every client watching it is now dirty.
    #[inline]
    pub fn touch(&mut self, key: &[u8]) {
        if let Some(watchers) = self.keys.remove(key) {
            self.touched.extend(watchers.iter().map(|w| w.who));
        }
    }

    /// `key`'s entry was deleted. A client that watched it already expired
    /// saw no change (Redis 7.0's `touchWatchedKey`): the key was gone for
    /// it then and is now. Every other watcher is dirty.
    pub fn touch_deleted(&mut self, key: &[u8]) {
        let Some(watchers) = self.keys.get_mut(key) else { return };
        self.touched.extend(watchers.iter().filter(|w| !w.expired).map(|w| w.who));
        watchers.retain(|w| w.expired);
        if watchers.is_empty() {
            self.keys.remove(key);
        }
    }

    /// Every watched key for which `exists` holds changed (FLUSHDB).
    pub fn touch_existing(&mut self, mut exists: impl FnMut(&[u8]) -> bool) {
        let gone: Vec<Vec<u8>> = self.keys.keys().filter(|k| exists(k)).cloned().collect();
        for key in gone {
            self.touch(&key);
        }
    }

    pub fn is_touched(&self, who: Watcher) -> bool {
        self.touched.contains(&who)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_dirties_every_watcher_of_the_key_only() {
        let mut t = WatchTable::default();
        t.watch(b"a", 1, false);
        t.watch(b"a", 2, false);
        t.watch(b"b", 3, false);
        t.touch(b"a");
        t.touch(b"zzz");
        assert!(t.is_touched(1) && t.is_touched(2) && !t.is_touched(3));
        t.unwatch(&[b"a".to_vec()], 1);
        assert!(!t.is_touched(1));
        t.unwatch(&[b"b".to_vec()], 3);
        t.unwatch(&[b"a".to_vec()], 2);
        assert!(t.is_empty());
    }

    #[test]
    fn deleting_a_key_that_had_expired_when_watched_is_no_change() {
        let mut t = WatchTable::default();
        t.watch(b"a", 1, true);
        t.watch(b"a", 2, false);
        t.touch_deleted(b"a");
        assert!(!t.is_touched(1) && t.is_touched(2));
        // Set again afterwards, it changed for every watcher.
        t.touch(b"a");
        assert!(t.is_touched(1));
    }
}
