//! One logical database of one shard: the table of entries plus the
//! bookkeeping for expiry (lazy on access, plus an incremental sweep).

use crate::bytes::CompactBytes;
use crate::evict::{lfu_new, lfu_touch, Lfu};
use crate::snapshot::DbSnapshot;
use crate::table::{DashTable, Keyed};
use crate::value::Value;
use crate::watch::WatchTable;

pub struct Entry {
    pub key: CompactBytes,
    pub value: Value,
    /// Absolute unix time in ms; 0 means no expiry.
    expire_at: u64,
    /// Unix time in seconds of the last access (OBJECT IDLETIME, LRU); under
    /// an LFU policy Redis's LFU data instead: 16-bit minutes of the last
    /// decrement, 8-bit logarithmic counter (evict.rs).
    access: u32,
    /// The snapshot epoch this entry was last preserved for (or inserted
    /// during): equal to the running snapshot's epoch means "already written,
    /// or born after the cut". Lives in what was the entry's padding.
    pub(crate) snap: u32,
}

impl Keyed for Entry {
    #[inline]
    fn key(&self) -> &[u8] {
        &self.key
    }
}

impl Entry {
    #[inline]
    pub fn expire_at(&self) -> Option<u64> {
        (self.expire_at != 0).then_some(self.expire_at)
    }

    /// The raw access field: LRU seconds or LFU data, by the policy.
    #[inline]
    pub fn access(&self) -> u32 {
        self.access
    }

    /// Seconds since the last access.
    pub fn idle_seconds(&self, now: u64) -> u64 {
        (now / 1000).saturating_sub(self.access as u64)
    }

    /// Makes the key look unused for `seconds` (RESTORE IDLETIME, the
    /// IDLE opcode of an RDB file).
    pub fn set_idle_seconds(&mut self, now: u64, seconds: u64) {
        self.access = (now / 1000).saturating_sub(seconds).min(u32::MAX as u64) as u32;
    }

    /// Sets the LFU counter (RESTORE FREQ under an LFU policy).
    pub fn set_lfu(&mut self, now: u64, counter: u64) {
        self.access = (crate::evict::lfu_new(now) & !0xff) | counter.min(255) as u32;
    }

    /// Redis's objectSetLRUOrLFU (RDB load, RESTORE): the LFU counter under
    /// an LFU policy, else the idle time; each only under its own policy.
    pub fn restore_access(&mut self, now: u64, lfu: bool, idle: Option<u64>, freq: Option<u8>) {
        match (lfu, idle, freq) {
            (false, Some(idle), _) => self.set_idle_seconds(now, idle),
            (true, _, Some(freq)) => self.set_lfu(now, freq as u64),
            _ => {}
        }
    }

    /// Expired once the clock is past its time, not at it: Redis's
    /// keyIsExpired (`now > when`). A replica (real Redis among them)
    /// judges the same millisecond so, and must not see live what its
    /// primary already calls gone.
    #[inline]
    pub(crate) fn is_expired(&self, now: u64) -> bool {
        self.expire_at != 0 && self.expire_at < now
    }
}

/// What a write does to the key's time to live.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Ttl {
    /// Remove any expiry (plain SET).
    Clear,
    /// Keep the current expiry (SET KEEPTTL, INCR, APPEND...).
    Keep,
    /// Expire at this unix time in ms.
    At(u64),
}

#[derive(Default)]
pub struct Db {
    pub(crate) table: DashTable<Entry>,
    /// Entries with an expiry, for `INFO keyspace` and to skip idle sweeps.
    volatile: usize,
    /// Where the active-expiry sweep resumes.
    sweep_pos: u64,
    /// Keys removed because their time ran out (lazily or by the sweep).
    pub expired_keys: u64,
    /// Set while effects are propagated (AOF, replicas): expired keys are
    /// collected in `expired_log` to go out as `DEL`s before the next effect.
    pub log_expired: bool,
    pub expired_log: Vec<CompactBytes>,
    /// The running snapshot, if any. Every mutation goes through
    /// [`preserve`] first: one branch when no snapshot runs.
    pub(crate) snap: Option<Box<DbSnapshot>>,
    /// Clients WATCHing keys of this database, if any: every way a key
    /// changes or goes away here touches it (one branch when none).
    pub watch: Option<Box<WatchTable>>,
    /// A replica's expiry (Redis 7.0's expireIfNeeded on a replica): keys
    /// whose time ran out are hidden from reads but stay until the
    /// primary's DEL arrives; no active expiry.
    pub keep_expired: bool,
    /// Set while a replica runs a write (only its primary sends those):
    /// expired keys are live to it, as to Redis's master client.
    pub obey_master: bool,
    /// Under an LFU policy: accesses count in the LFU counter instead of
    /// stamping the LRU clock (set by `Shard::apply_config`).
    pub(crate) lfu: Option<Lfu>,
    /// Randomness for LFU's probabilistic increments.
    rng: u64,
    /// Keyspace notifications this database raises itself (`new`,
    /// `expired`), for the shard's outbox.
    pub notes: crate::notify::DbNotes,
}

#[inline(always)]
fn touch(watch: &mut Option<Box<WatchTable>>, key: &[u8]) {
    if let Some(w) = watch {
        w.touch(key);
    }
}

/// The key's entry was deleted (see [`WatchTable::touch_deleted`]).
#[inline(always)]
fn touch_deleted(watch: &mut Option<Box<WatchTable>>, key: &[u8]) {
    if let Some(w) = watch {
        w.touch_deleted(key);
    }
}

/// Copy-on-write hook: before `entry` changes or goes away, a running
/// snapshot writes it out if its walk has not reached it yet.
#[inline(always)]
fn preserve(snap: &mut Option<Box<DbSnapshot>>, entry: &mut Entry) {
    if let Some(s) = snap {
        s.writer.preserve(entry);
    }
}

/// The epoch a newly inserted entry carries: a running snapshot's, so its
/// walk skips what was born after the cut.
#[inline(always)]
fn birth_epoch(snap: &Option<Box<DbSnapshot>>) -> u32 {
    snap.as_ref().map_or(0, |s| s.writer.epoch)
}

/// What `Db::put` stores: a value already built, or a string's bytes,
/// which may go into the old value's block.
enum NewValue<'a> {
    Built(Value),
    String(&'a [u8]),
}

impl NewValue<'_> {
    fn build(self) -> Value {
        match self {
            NewValue::Built(value) => value,
            NewValue::String(bytes) => Value::from_bytes_encoded(bytes),
        }
    }
}

impl Db {
    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    pub fn volatile(&self) -> usize {
        self.volatile
    }

    /// The time expiry is judged by: none runs out for the master client.
    #[inline(always)]
    fn expiry_clock(&self, now: u64) -> u64 {
        if self.obey_master {
            0
        } else {
            now
        }
    }

    pub fn hash(&self, key: &[u8]) -> u64 {
        self.table.hash(key)
    }

    /// The live entry for `key`, marked as accessed now; an entry whose time
    /// has run out is removed instead.
    #[inline]
    pub fn get(&mut self, key: &[u8], now: u64) -> Option<&mut Entry> {
        let lfu = self.lfu;
        let random = if lfu.is_some() { self.next_random() } else { 0 };
        let entry = self.peek(key, now)?;
        entry.access = match lfu {
            None => (now / 1000) as u32,
            Some(lfu) => lfu_touch(entry.access, now, lfu, random),
        };
        Some(entry)
    }

    fn next_random(&mut self) -> u64 {
        if self.rng == 0 {
            self.rng = 0x9e37_79b9_7f4a_7c15 ^ crate::shard::unix_ms();
        }
        let x = &mut self.rng;
        *x ^= *x >> 12;
        *x ^= *x << 25;
        *x ^= *x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// The access field of a key written now: the LRU clock, or under LFU
    /// the old counter touched once (a new key starts at LFU_INIT_VAL).
    fn access_now(&mut self, old: Option<u32>, now: u64) -> u32 {
        match (self.lfu, old) {
            (None, _) => (now / 1000) as u32,
            (Some(_), None) => lfu_new(now),
            (Some(lfu), Some(old)) => lfu_touch(old, now, lfu, self.next_random()),
        }
    }

    /// Like `get` without marking an access (TTL, TYPE, EXISTS, OBJECT).
    #[inline]
    pub fn peek(&mut self, key: &[u8], now: u64) -> Option<&mut Entry> {
        let hash = self.table.hash(key);
        let entry: *mut Entry = self.table.find_mut(hash, key)?;
        // SAFETY: `entry` points into the table, which is not touched again
        // before the reference is returned; this only sidesteps the borrow
        // checker's conditional-return limitation (NLL problem case #3).
        let live = unsafe { !(*entry).is_expired(self.expiry_clock(now)) };
        if live {
            let entry = unsafe { &mut *entry };
            // The caller may change it: a snapshot keeps the old state.
            preserve(&mut self.snap, entry);
            return Some(entry);
        }
        if !self.keep_expired {
            self.remove_expired(hash, key);
        }
        None
    }

    fn remove_expired(&mut self, hash: u64, key: &[u8]) {
        touch_deleted(&mut self.watch, key);
        if let Some(mut entry) = self.table.remove(hash, key) {
            preserve(&mut self.snap, &mut entry);
            self.volatile -= 1;
            self.expired_keys += 1;
            self.notes.expired(key);
            if self.log_expired {
                self.expired_log.push(CompactBytes::new(key));
            }
        }
    }

    /// The live entry for `key`, read-only and untouched, so several can be
    /// held at once (multi-key set operations).
    pub fn find(&self, key: &[u8], now: u64) -> Option<&Entry> {
        let entry = self.table.find(self.table.hash(key), key)?;
        (!entry.is_expired(self.expiry_clock(now))).then_some(entry)
    }

    /// Brings the entries of `keys` and the first bytes of their string
    /// values into the cache ahead of the commands that will read them
    /// (`proxy`'s `prefetch`). In three passes, each asking for the lines
    /// the next one reads: the index lines (known from the hashes), the
    /// entries they name, the values; so the misses of all the keys
    /// overlap where one lookup's come one after another. (Passes a few
    /// keys apart, each stage later by a distance, measured the same: the
    /// line fill buffers, not the distance, are the limit.)
    pub fn prefetch(&self, keys: &[&[u8]]) {
        const BATCH: usize = 16;
        let mut hashes = [0u64; BATCH];
        for keys in keys.chunks(BATCH) {
            let hashes = &mut hashes[..keys.len()];
            for (h, key) in hashes.iter_mut().zip(keys) {
                *h = self.table.hash(key);
                self.table.prefetch_index(*h);
            }
            for &h in hashes.iter() {
                self.table.prefetch_entry(h);
            }
            for (&h, key) in hashes.iter().zip(keys) {
                match self.table.find(h, key).map(|e| &e.value) {
                    Some(Value::Long(b)) => crate::prefetch::bytes(b),
                    Some(Value::Raw(v)) => crate::prefetch::bytes(v),
                    _ => {}
                }
            }
        }
    }

    /// True while a snapshot of this database is being written.
    pub fn snapshot_running(&self) -> bool {
        self.snap.is_some()
    }

    /// True when the table holds `key`, live or expired but not yet removed.
    pub fn has_entry(&self, key: &[u8]) -> bool {
        self.table.find(self.table.hash(key), key).is_some()
    }

    pub fn contains(&mut self, key: &[u8], now: u64) -> bool {
        self.peek(key, now).is_some()
    }

    /// Sets `key` to `value`, creating it or replacing its value, and applies
    /// `ttl`. Returns the entry.
    pub fn set(&mut self, key: &[u8], value: Value, ttl: Ttl, now: u64) -> &mut Entry {
        self.put(key, NewValue::Built(value), ttl, now)
    }

    /// `set` of a string value as SET stores it (`Value::from_bytes_encoded`),
    /// overwriting a same-length "raw" string in place: a cache of
    /// fixed-size values rewrites its keys without an allocation and a
    /// free each time (the allocator's slow paths were a quarter of a
    /// shard's user time under pipelined SETs of random keys).
    pub fn set_string(&mut self, key: &[u8], bytes: &[u8], ttl: Ttl, now: u64) -> &mut Entry {
        self.put(key, NewValue::String(bytes), ttl, now)
    }

    fn put(&mut self, key: &[u8], value: NewValue, ttl: Ttl, now: u64) -> &mut Entry {
        touch(&mut self.watch, key);
        let hash = self.table.hash(key);
        if let Some(entry) = self.table.find_mut(hash, key) {
            let entry: *mut Entry = entry;
            // SAFETY: as in `get`.
            let entry = unsafe { &mut *entry };
            let access = self.access_now(Some(entry.access), now);
            preserve(&mut self.snap, entry);
            let old_volatile = entry.expire_at != 0;
            // An expired key is replaced as if absent: KEEPTTL keeps nothing.
            let expired = entry.is_expired(if self.obey_master { 0 } else { now });
            let ttl = if ttl == Ttl::Keep && expired { Ttl::Clear } else { ttl };
            match value {
                NewValue::String(bytes) if entry.value.overwrite(bytes) => {}
                value => entry.value = value.build(),
            }
            entry.access = access;
            match ttl {
                Ttl::Clear => entry.expire_at = 0,
                Ttl::Keep => {}
                Ttl::At(t) => entry.expire_at = t.max(1),
            }
            self.volatile = self.volatile + (entry.expire_at != 0) as usize - old_volatile as usize;
            return entry;
        }
        let expire_at = match ttl {
            Ttl::At(t) => t.max(1),
            _ => 0,
        };
        self.volatile += (expire_at != 0) as usize;
        let access = self.access_now(None, now);
        let snap = birth_epoch(&self.snap);
        let entry = Entry { key: CompactBytes::new(key), value: value.build(), expire_at, access, snap };
        self.notes.new_key(key);
        self.table.insert_unique(hash, entry)
    }

    /// Removes the live entry for `key`.
    pub fn remove(&mut self, key: &[u8], now: u64) -> Option<Entry> {
        let hash = self.table.hash(key);
        let mut entry = self.table.remove(hash, key)?;
        touch_deleted(&mut self.watch, key);
        preserve(&mut self.snap, &mut entry);
        if entry.expire_at != 0 {
            self.volatile -= 1;
            if entry.is_expired(self.expiry_clock(now)) {
                self.expired_keys += 1;
                self.notes.expired(&entry.key);
                if self.log_expired {
                    self.expired_log.push(entry.key);
                }
                return None;
            }
        }
        Some(entry)
    }

    /// Sets or clears the expiry of an existing live key. Returns false when
    /// the key does not exist.
    pub fn set_expire(&mut self, key: &[u8], at: Option<u64>, now: u64) -> bool {
        if self.watch.is_some() && self.find(key, now).is_some() {
            touch(&mut self.watch, key);
        }
        let Some(entry) = self.peek(key, now) else {
            return false;
        };
        let was = entry.expire_at != 0;
        entry.expire_at = at.map_or(0, |t| t.max(1));
        let is = entry.expire_at != 0;
        self.volatile = self.volatile + is as usize - was as usize;
        true
    }

    /// Calls `visit` for live keys from scan position `pos`; see
    /// [`DashTable::scan`].
    pub fn scan(&self, pos: u64, shift: u32, count: usize, now: u64, mut visit: impl FnMut(&Entry)) -> Option<u64> {
        let now = self.expiry_clock(now);
        self.table.scan(pos, shift, count, |e| {
            if !e.is_expired(now) {
                visit(e)
            }
        })
    }

    pub fn iter_live(&self, now: u64) -> impl Iterator<Item = &Entry> {
        let now = self.expiry_clock(now);
        self.table.iter().filter(move |e| !e.is_expired(now))
    }

    /// A random live key (expired picks are removed and retried a few times,
    /// as Redis's `dbRandomKey` does).
    pub fn random_key(&mut self, now: u64, mut rnd: impl FnMut() -> u64) -> Option<CompactBytes> {
        let now = self.expiry_clock(now);
        for _ in 0..100 {
            let entry = self.table.random(&mut rnd)?;
            if !entry.is_expired(now) {
                return Some(entry.key.clone());
            }
            let key = entry.key.clone();
            if !self.keep_expired {
                self.remove_expired(self.table.hash(&key), &key);
            }
        }
        None
    }

    pub fn clear(&mut self) {
        if let Some(w) = &mut self.watch {
            let (table, now) = (&self.table, crate::shard::unix_ms());
            w.touch_existing(|k| table.find(table.hash(k), k).is_some_and(|e| !e.is_expired(now)));
        }
        if let Some(s) = &mut self.snap {
            // The walk goes on over the old table; the new one only ever
            // holds entries born after the cut. A second flush during the
            // same snapshot finds the old table already handed over.
            if s.frozen.is_none() && !s.walked() {
                s.frozen = Some(std::mem::take(&mut self.table));
            }
        }
        self.table.clear();
        self.volatile = 0;
        self.sweep_pos = 0;
    }

    /// One step of active expiry: sweeps segments until about `budget`
    /// entries were examined or the table was swept once. Returns the number
    /// of keys expired.
    pub fn expire_step(&mut self, now: u64, budget: usize) -> usize {
        if self.volatile == 0 || self.keep_expired {
            return 0;
        }
        let mut examined = 0;
        let mut expired = 0;
        let start = self.sweep_pos;
        let mut wrapped = false;
        let mut log = if self.log_expired { Some(&mut self.expired_log) } else { None };
        while examined < budget {
            let mut seen = 0;
            let (snap, watch, notes) = (&mut self.snap, &mut self.watch, &mut self.notes);
            let (removed, next) = self.table.sweep_segment(self.sweep_pos, |e| {
                seen += 1;
                let expired = e.is_expired(now);
                if expired {
                    preserve(snap, e);
                    touch_deleted(watch, &e.key);
                    notes.expired(&e.key);
                    if let Some(log) = log.as_deref_mut() {
                        log.push(e.key.clone());
                    }
                }
                !expired
            });
            examined += seen.max(1);
            expired += removed;
            self.sweep_pos = next.unwrap_or(0);
            if next.is_none() {
                wrapped = true;
            }
            if wrapped && self.sweep_pos >= start {
                break;
            }
        }
        self.volatile -= expired;
        self.expired_keys += expired as u64;
        expired
    }

    /// Bytes used by this database: table arrays plus keys' and values' heap.
    pub fn memory_estimate(&self) -> usize {
        self.table.allocation_size() + self.table.iter().map(|e| e.key.heap_size() + e.value.heap_size()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_string_overwrites_a_same_length_raw_string_in_place() {
        let mut db = Db::default();
        let (a, b) = (vec![b'a'; 100], vec![b'b'; 100]);
        db.set_string(b"k", &a, Ttl::Clear, 0);
        let before = match &db.find(b"k", 0).unwrap().value {
            Value::Long(v) => v.as_ptr(),
            _ => panic!("not raw"),
        };
        db.set_string(b"k", &b, Ttl::At(500), 0);
        let e = db.find(b"k", 0).unwrap();
        assert!(matches!(&e.value, Value::Long(v) if v.as_ptr() == before && **v == b[..]));
        assert_eq!((e.expire_at(), db.volatile()), (Some(500), 1));
        // Another length, an integer, a short string: built as SET builds them.
        for (bytes, encoding) in [(&b"c".repeat(60)[..], "raw"), (b"12", "int"), (b"short", "embstr")] {
            db.set_string(b"k", bytes, Ttl::Clear, 0);
            let e = db.find(b"k", 0).unwrap();
            assert_eq!(e.value.encoding(), encoding);
            assert_eq!(e.value.string_bytes(&mut itoa::Buffer::new()), Some(bytes));
        }
    }

    #[test]
    fn lazy_and_active_expiry() {
        let mut db = Db::default();
        for i in 0..2000u32 {
            let ttl = if i % 2 == 0 { Ttl::At(100) } else { Ttl::Clear };
            db.set(&i.to_be_bytes(), Value::Int(i as i64), ttl, 0);
        }
        assert_eq!(db.volatile(), 1000);
        assert!(db.get(&0u32.to_be_bytes(), 50).is_some());
        assert!(db.get(&0u32.to_be_bytes(), 101).is_none());
        assert_eq!(db.expired_keys, 1);
        let mut total = 1;
        for _ in 0..100 {
            total += db.expire_step(200, 500);
        }
        assert_eq!(total, 1000);
        assert_eq!(db.volatile(), 0);
        assert_eq!(db.len(), 1000);
    }

    /// WATCH: deleting a key that had expired when watched is no change,
    /// however it goes (active expiry, a read, DEL); deleting a live one is.
    #[test]
    fn deleting_an_expired_key_leaves_those_who_watched_it_expired_clean() {
        let mut db = Db::default();
        for (i, k) in [&b"swept"[..], b"read", b"deleted"].into_iter().enumerate() {
            db.set(k, Value::Int(1), Ttl::At(100), 0);
            db.watch.get_or_insert_with(Default::default).watch(k, i as u64, true);
        }
        db.set(b"live", Value::Int(1), Ttl::Clear, 0);
        db.watch.get_or_insert_with(Default::default).watch(b"live", 3, false);
        assert!(db.get(b"read", 200).is_none());
        assert!(db.remove(b"deleted", 200).is_none());
        while db.volatile() > 0 {
            db.expire_step(200, 100);
        }
        assert!(db.remove(b"live", 200).is_some());
        assert_eq!(db.len(), 0);
        let watch = db.watch.as_ref().unwrap();
        assert!((0..3).all(|who| !watch.is_touched(who)));
        assert!(watch.is_touched(3));
    }

    #[test]
    fn a_key_is_live_through_its_expiry_millisecond() {
        let mut db = Db::default();
        db.set(b"k", Value::Int(1), Ttl::At(100), 0);
        assert!(db.get(b"k", 100).is_some(), "Redis: expired when now > when");
        assert!(db.get(b"k", 101).is_none());
    }

    #[test]
    fn replica_expiry_hides_without_deleting() {
        let mut db = Db { keep_expired: true, ..Db::default() };
        db.set(b"k", Value::Int(1), Ttl::At(100), 0);
        assert!(db.get(b"k", 200).is_none());
        assert!(db.find(b"k", 200).is_none());
        assert_eq!(db.expire_step(200, 100), 0);
        assert!(db.has_entry(b"k"), "only the primary's DEL removes it");
        // The master client sees it live (INCR, PERSIST... act on it).
        db.obey_master = true;
        assert!(db.get(b"k", 200).is_some());
        assert!(db.remove(b"k", 200).is_some());
        assert_eq!(db.expired_keys, 0);
    }

    #[test]
    fn keep_ttl_and_overwrite() {
        let mut db = Db::default();
        db.set(b"k", Value::Int(1), Ttl::At(1000), 0);
        db.set(b"k", Value::Int(2), Ttl::Keep, 0);
        assert_eq!(db.get(b"k", 0).unwrap().expire_at(), Some(1000));
        db.set(b"k", Value::Int(3), Ttl::Clear, 0);
        assert_eq!(db.get(b"k", 0).unwrap().expire_at(), None);
        assert_eq!(db.volatile(), 0);
    }
}
