//! Client-side caching (CLIENT TRACKING) on the shard that owns the keys:
//! which clients read which keys (Redis's TrackingTable, keyed by name in
//! every database), the BCAST prefixes, and the invalidations a write owes.
//! Clients are process-wide ids; the proxy delivers each invalidation on
//! the client's own core, which knows whether it still tracks (and how).

use crate::args::Args;
use crate::commands::{flags, CommandSpec};
use ahash::AHashMap;

/// The client whose command runs, as the shard sees it: its id while it
/// has tracking on (0: none), and whether the command's reads are to be
/// remembered (not BCAST, and OPTIN/OPTOUT with CLIENT CACHING allow it).
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub struct Caller(pub u64);

impl Caller {
    const REMEMBER: u64 = 1 << 63;

    pub fn new(id: u64, remember_reads: bool) -> Caller {
        Caller(id | if remember_reads { Self::REMEMBER } else { 0 })
    }

    pub fn id(self) -> u64 {
        self.0 & !Self::REMEMBER
    }

    pub fn remembers(self) -> bool {
        self.0 & Self::REMEMBER != 0
    }
}

/// What a client is told: a key it read (or one under its BCAST prefix)
/// changed, or (`key: None`) the keyspace was flushed.
#[derive(Clone, Debug, PartialEq)]
pub struct Invalidation {
    pub client: u64,
    pub key: Option<Vec<u8>>,
    /// The client whose write caused it (NOLOOP), 0 for none.
    pub writer: u64,
    /// Matched a BCAST prefix (sent in one array per delivery).
    pub bcast: bool,
}

#[derive(Default)]
pub struct TrackingTable {
    keys: AHashMap<Vec<u8>, Vec<u64>>,
    /// Client ids over all keys (INFO's tracking_total_items).
    items: u64,
    /// BCAST prefixes and their clients (every shard holds them all).
    prefixes: Vec<(Vec<u8>, Vec<u64>)>,
    /// Invalidations not yet handed to the proxy.
    pub out: Vec<Invalidation>,
    /// Rounds the key limit stayed exceeded (Redis's effort grows with it).
    over_limit_rounds: u32,
}

impl TrackingTable {
    pub fn keys(&self) -> usize {
        self.keys.len()
    }

    pub fn items(&self) -> u64 {
        self.items
    }

    pub fn prefixes(&self) -> usize {
        self.prefixes.len()
    }

    /// `who` read `key`: tell it when the key changes.
    pub fn remember(&mut self, key: &[u8], who: u64) {
        let ids = match self.keys.get_mut(key) {
            Some(ids) => ids,
            None => self.keys.entry(key.to_vec()).or_default(),
        };
        if !ids.contains(&who) {
            ids.push(who);
            self.items += 1;
        }
    }

    /// `key` changed (by `writer`): every client that read it is told once
    /// and forgotten; BCAST clients of a matching prefix are told too.
    pub fn invalidate(&mut self, key: &[u8], writer: u64) {
        if let Some(ids) = self.keys.remove(key) {
            self.items -= ids.len() as u64;
            for client in ids {
                self.out.push(Invalidation { client, key: Some(key.to_vec()), writer, bcast: false });
            }
        }
        for (prefix, clients) in &self.prefixes {
            if key.starts_with(prefix) {
                for &client in clients {
                    self.out.push(Invalidation { client, key: Some(key.to_vec()), writer, bcast: true });
                }
            }
        }
    }

    /// FLUSHALL / FLUSHDB: Redis forgets every tracked key (the null
    /// invalidation goes to every tracking client from the proxy).
    pub fn flush(&mut self) {
        self.keys = AHashMap::new();
        self.items = 0;
    }

    /// BCAST: `who` hears about changes to keys under each of `prefixes`.
    pub fn add_prefixes(&mut self, who: u64, prefixes: &[Vec<u8>]) {
        for p in prefixes {
            match self.prefixes.iter_mut().find(|(q, _)| q == p) {
                Some((_, clients)) if clients.contains(&who) => {}
                Some((_, clients)) => clients.push(who),
                None => self.prefixes.push((p.clone(), vec![who])),
            }
        }
    }

    /// Tracking off (or the client gone): its prefixes go; the keys it read
    /// stay until they change, as in Redis (the proxy drops what is no
    /// longer wanted).
    pub fn remove_client(&mut self, who: u64) {
        for (_, clients) in &mut self.prefixes {
            clients.retain(|&c| c != who);
        }
        self.prefixes.retain(|(_, clients)| !clients.is_empty());
    }

    /// tracking-table-max-keys (Redis's trackingLimitUsedSlots): over the
    /// limit, keys are invalidated (their readers told) until under it,
    /// with an effort of 100 keys per round it stayed over.
    pub fn limit_keys(&mut self, max: usize) {
        if max == 0 || self.keys.len() <= max {
            self.over_limit_rounds = 0;
            return;
        }
        let effort = 100 * (self.over_limit_rounds as usize + 1);
        let victims: Vec<Vec<u8>> = self.keys.keys().take(effort.min(self.keys.len() - max)).cloned().collect();
        for key in victims {
            self.invalidate_tracked_only(&key);
        }
        if self.keys.len() > max {
            self.over_limit_rounds += 1;
        } else {
            self.over_limit_rounds = 0;
        }
    }

    /// An eviction from the table: only its readers hear (no writer, no
    /// BCAST prefix: the key itself did not change).
    fn invalidate_tracked_only(&mut self, key: &[u8]) {
        if let Some(ids) = self.keys.remove(key) {
            self.items -= ids.len() as u64;
            for client in ids {
                self.out.push(Invalidation { client, key: Some(key.to_vec()), writer: 0, bcast: false });
            }
        }
    }
}

impl crate::shard::Shard {
    /// The tracking table, made on first use; from then on the databases
    /// keep their expired keys for it (`notify::TRACKED`).
    pub fn tracking_table(&mut self) -> &mut TrackingTable {
        if self.tracking.is_none() {
            for db in &mut self.dbs {
                db.notes.mask |= crate::notify::TRACKED;
            }
        }
        self.tracking.get_or_insert_with(Default::default)
    }

    /// This shard's part of tracking-table-max-keys (0: no limit).
    pub fn tracking_max_keys(&self) -> usize {
        match self.config.tracking_table_max_keys {
            0 => 0,
            max => (max as usize).div_ceil(self.count).max(1),
        }
    }

    /// `who` read `key` (a script's declared key, remembered as Redis does
    /// for the client that ran the script).
    pub fn remember_read(&mut self, key: &[u8], who: u64) {
        let max = self.tracking_max_keys();
        let table = self.tracking_table();
        table.remember(key, who);
        table.limit_keys(max);
    }
}

/// After a command on the shard: remember what a tracking client read,
/// invalidate what a write changed (`changed`: the reply says it did).
/// A flush is announced once, as an invalidation for client 0.
pub fn after_command(
    table: &mut TrackingTable,
    caller: Caller,
    spec: &CommandSpec,
    args: &Args,
    changed: bool,
    max_keys: usize,
    shard_index: usize,
) {
    if spec.has_flag(flags::WRITE) {
        if matches!(spec.name, "flushall" | "flushdb") {
            if changed {
                table.flush();
                // Every shard flushes; the first one announces it.
                if shard_index == 0 {
                    table.out.push(Invalidation { client: 0, key: None, writer: caller.id(), bcast: false });
                }
            }
            return;
        }
        if changed {
            for i in spec.key_indexes(args) {
                table.invalidate(args.get(i), caller.id());
            }
        }
    } else if spec.has_flag(flags::READONLY)
        && caller.remembers()
        && !matches!(spec.name, "eval_ro" | "evalsha_ro" | "fcall_ro")
    {
        for i in spec.key_indexes(args) {
            table.remember(args.get(i), caller.id());
        }
        table.limit_keys(max_keys);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(out: &[Invalidation]) -> Vec<(u64, Option<&[u8]>, bool)> {
        out.iter().map(|i| (i.client, i.key.as_deref(), i.bcast)).collect()
    }

    #[test]
    fn a_change_tells_each_reader_once_then_forgets() {
        let mut t = TrackingTable::default();
        t.remember(b"a", 1);
        t.remember(b"a", 1);
        t.remember(b"a", 2);
        t.remember(b"b", 3);
        assert_eq!((t.keys(), t.items()), (2, 3));
        t.invalidate(b"a", 9);
        assert_eq!(keys(&t.out), vec![(1, Some(&b"a"[..]), false), (2, Some(&b"a"[..]), false)]);
        assert_eq!(t.out[0].writer, 9);
        t.out.clear();
        t.invalidate(b"a", 9);
        assert!(t.out.is_empty());
        assert_eq!((t.keys(), t.items()), (1, 1));
    }

    #[test]
    fn bcast_prefixes_match_every_change() {
        let mut t = TrackingTable::default();
        t.add_prefixes(5, &[b"user:".to_vec(), b"".to_vec()]);
        t.add_prefixes(6, &[b"user:".to_vec()]);
        assert_eq!(t.prefixes(), 2);
        t.invalidate(b"user:1", 0);
        assert_eq!(t.out.len(), 3);
        t.out.clear();
        t.invalidate(b"item", 0);
        assert_eq!(keys(&t.out), vec![(5, Some(&b"item"[..]), true)]);
        t.remove_client(5);
        t.remove_client(6);
        assert_eq!(t.prefixes(), 0);
    }

    #[test]
    fn the_key_limit_invalidates_until_under_it() {
        let mut t = TrackingTable::default();
        for i in 0..10u8 {
            t.remember(&[i], 1);
        }
        t.limit_keys(4);
        assert_eq!(t.keys(), 4);
        assert_eq!(t.out.len(), 6);
        assert!(t.out.iter().all(|i| i.writer == 0 && !i.bcast));
        t.flush();
        assert_eq!((t.keys(), t.items()), (0, 0));
    }

    #[test]
    fn caller_packs_id_and_remember_bit() {
        let c = Caller::new(42, true);
        assert_eq!((c.id(), c.remembers()), (42, true));
        assert!(!Caller::new(42, false).remembers());
    }
}
