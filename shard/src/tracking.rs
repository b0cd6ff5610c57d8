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

/// What a client is told: a key it read changed, or (`key: None`) the
/// keyspace was flushed (`client` 0: every tracking client but `current`).
#[derive(Clone, Debug, PartialEq)]
pub struct Invalidation {
    pub client: u64,
    pub key: Option<Vec<u8>>,
    /// The client whose command was running (Redis's `current_client`),
    /// 0 for none: NOLOOP skips what a client's own command invalidates
    /// for it, and Redis sends that after the command's reply.
    pub current: u64,
    /// Raised by the eviction ahead of `current`'s command: Redis sends it
    /// at once, ahead of that command's reply.
    pub before: bool,
}

/// A BCAST change: the key and the client that changed it (0: expiry,
/// eviction).
pub type Changed = (Vec<u8>, u64);

/// What an owner hands back with a reply for the caller's core (the
/// proxy's `tracking.rs` places it): BCAST
/// changes to gather in the caller's pass, and the caller's own
/// invalidations with the index of the batch command that raised them.
#[derive(Default, Debug)]
pub struct Returned {
    pub changed: Vec<Changed>,
    pub own: Vec<(u32, Invalidation)>,
}

impl Returned {
    pub fn boxed(self) -> Option<Box<Returned>> {
        (!self.changed.is_empty() || !self.own.is_empty()).then(|| Box::new(self))
    }
}

impl Invalidation {
    /// Raised by the command of the client it is for.
    pub fn own(&self) -> bool {
        self.current != 0 && self.client == self.current
    }
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
    /// Keys changed under some BCAST prefix, each with the client that
    /// changed it (0 for expiry and eviction; NOLOOP), in order: the proxy
    /// sends them once per pass, per prefix (Redis's bcastState keys,
    /// broadcast from beforeSleep).
    pub changed: Vec<(Vec<u8>, u64)>,
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

    /// Invalidations or BCAST changes wait for the proxy.
    pub fn pending(&self) -> bool {
        !self.out.is_empty() || !self.changed.is_empty()
    }

    /// `key` changed by client `writer`'s command (Redis's
    /// signalModifiedKey): every client that read it is told once and
    /// forgotten; a key under some BCAST prefix waits in `changed`.
    pub fn invalidate(&mut self, key: &[u8], writer: u64) {
        self.modified(key, writer, writer, false);
    }

    /// `key` expired while client `current`'s command ran (0: the cron).
    /// Redis signals it with no client: BCAST's NOLOOP does not skip it.
    pub fn expired(&mut self, key: &[u8], current: u64) {
        self.modified(key, 0, current, false);
    }

    /// `key` evicted to make room for client `current`'s command (0: the
    /// cron): its readers hear before that command's reply.
    pub fn evicted(&mut self, key: &[u8], current: u64) {
        self.modified(key, 0, current, current != 0);
    }

    fn modified(&mut self, key: &[u8], writer: u64, current: u64, before: bool) {
        if self.prefixes.iter().any(|(prefix, _)| key.starts_with(prefix)) {
            self.changed.push((key.to_vec(), writer));
        }
        self.tell_readers(key, current, before);
    }

    /// Tells (and forgets) the clients that read `key`.
    fn tell_readers(&mut self, key: &[u8], current: u64, before: bool) {
        if let Some(ids) = self.keys.remove(key) {
            self.items -= ids.len() as u64;
            for client in ids {
                self.out.push(Invalidation { client, key: Some(key.to_vec()), current, before });
            }
        }
    }

    /// The own invalidations (`Invalidation::own`) of client `current`
    /// among `out[from..]`, taken out in order (the proxy places them among
    /// that client's replies).
    pub fn take_own(&mut self, from: usize, current: u64) -> Vec<Invalidation> {
        if current == 0 || from >= self.out.len() || !self.out[from..].iter().any(|i| i.current == current && i.own()) {
            return Vec::new();
        }
        let rest = self.out.split_off(from);
        let (own, others): (Vec<_>, Vec<_>) = rest.into_iter().partition(|i| i.current == current && i.own());
        self.out.extend(others);
        own
    }

    /// BCAST: the prefixes and their clients, in Redis's (sorted) order.
    pub fn prefix_clients(&self) -> impl Iterator<Item = (&[u8], &[u64])> {
        self.prefixes.iter().map(|(p, c)| (p.as_slice(), c.as_slice()))
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
                None => {
                    let at = self.prefixes.partition_point(|(q, _)| q < p);
                    self.prefixes.insert(at, (p.clone(), vec![who]));
                }
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
    pub fn limit_keys(&mut self, max: usize, current: u64) {
        if max == 0 || self.keys.len() <= max {
            self.over_limit_rounds = 0;
            return;
        }
        let effort = 100 * (self.over_limit_rounds as usize + 1);
        let victims: Vec<Vec<u8>> = self.keys.keys().take(effort.min(self.keys.len() - max)).cloned().collect();
        for key in victims {
            // Only its readers hear: the key itself did not change.
            self.tell_readers(&key, current, false);
        }
        if self.keys.len() > max {
            self.over_limit_rounds += 1;
        } else {
            self.over_limit_rounds = 0;
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
        table.limit_keys(max, who);
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
                // Every shard flushes; the first one announces it: to every
                // tracking client (client 0), the flushing one's own apart
                // (it follows the reply).
                if shard_index == 0 {
                    let current = caller.id();
                    table.out.push(Invalidation { client: 0, key: None, current, before: false });
                    if current != 0 {
                        table.out.push(Invalidation { client: current, key: None, current, before: false });
                    }
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
        table.limit_keys(max_keys, caller.id());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(out: &[Invalidation]) -> Vec<(u64, Option<&[u8]>)> {
        out.iter().map(|i| (i.client, i.key.as_deref())).collect()
    }

    #[test]
    fn a_change_tells_each_reader_once_then_forgets() {
        let mut t = TrackingTable::default();
        t.remember(b"a", 1);
        t.remember(b"a", 1);
        t.remember(b"a", 2);
        t.remember(b"b", 3);
        assert_eq!((t.keys(), t.items()), (2, 3));
        t.invalidate(b"a", 2);
        assert_eq!(keys(&t.out), vec![(1, Some(&b"a"[..])), (2, Some(&b"a"[..]))]);
        assert_eq!(t.out.iter().map(Invalidation::own).collect::<Vec<_>>(), vec![false, true]);
        t.out.clear();
        t.invalidate(b"a", 9);
        assert!(t.out.is_empty());
        assert_eq!((t.keys(), t.items()), (1, 1));
        assert!(t.changed.is_empty(), "no BCAST prefix");
    }

    #[test]
    fn bcast_changes_wait_with_their_writer() {
        let mut t = TrackingTable::default();
        t.add_prefixes(5, &[b"user:".to_vec(), b"".to_vec()]);
        t.add_prefixes(6, &[b"user:".to_vec()]);
        assert_eq!(t.prefixes(), 2);
        assert_eq!(t.prefix_clients().map(|(p, _)| p).collect::<Vec<_>>(), vec![&b""[..], &b"user:"[..]]);
        t.invalidate(b"user:1", 6);
        t.expired(b"item", 6);
        t.invalidate(b"user:1", 5);
        assert_eq!(t.changed, vec![(b"user:1".to_vec(), 6), (b"item".to_vec(), 0), (b"user:1".to_vec(), 5)]);
        assert!(t.out.is_empty() && t.pending());
        t.remove_client(5);
        t.remove_client(6);
        assert_eq!(t.prefixes(), 0);
    }

    #[test]
    fn own_invalidations_are_taken_out_in_order() {
        let mut t = TrackingTable::default();
        for k in [b"a", b"b", b"c"] {
            t.remember(k, 1);
            t.remember(k, 2);
        }
        t.invalidate(b"a", 1);
        let from = t.out.len();
        t.evicted(b"b", 1);
        t.invalidate(b"c", 1);
        let own = t.take_own(from, 1);
        assert_eq!(keys(&own), vec![(1, Some(&b"b"[..])), (1, Some(&b"c"[..]))]);
        assert_eq!(own.iter().map(|i| i.before).collect::<Vec<_>>(), vec![true, false]);
        assert_eq!(
            keys(&t.out),
            vec![(1, Some(&b"a"[..])), (2, Some(&b"a"[..])), (2, Some(&b"b"[..])), (2, Some(&b"c"[..]))]
        );
        assert!(t.take_own(0, 0).is_empty());
    }

    #[test]
    fn the_key_limit_invalidates_until_under_it() {
        let mut t = TrackingTable::default();
        for i in 0..10u8 {
            t.remember(&[i], 1);
        }
        t.limit_keys(4, 0);
        assert_eq!(t.keys(), 4);
        assert_eq!(t.out.len(), 6);
        assert!(t.out.iter().all(|i| i.current == 0 && !i.before));
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
