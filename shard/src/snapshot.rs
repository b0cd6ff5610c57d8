//! Fork-less point-in-time serialization of one shard (see ARCHITECTURE.md,
//! "Persistence: snapshots").
//!
//! At the cut every database gets a [`DbSnapshot`] carrying a new epoch.
//! A walk then visits each table in hash-position order and writes every
//! entry whose mark is not the epoch, marking it. Copy-on-write at entry
//! level keeps the cut exact while writes go on: before any mutation or
//! removal, `Db` calls [`EntryWriter::preserve`], which writes the entry's
//! old state first when the walk has not reached it; entries inserted after
//! the cut are born with the epoch, so the walk skips them. The mark alone
//! says whether an entry is done, so the walk's order only matters for
//! covering every hash position once (segments split but never merge).
//! A FLUSHDB during the walk hands the old table over to the walk.

use crate::db::{Db, Entry};
use crate::evict::lfu_counter;
use crate::rdb::{self, Access, SaveOptions};
use crate::shard::Shard;
use crate::table::DashTable;
use std::time::Instant;

/// Writes one database's entries for one snapshot.
pub(crate) struct EntryWriter {
    pub(crate) epoch: u32,
    cut_ms: u64,
    opts: SaveOptions,
    /// What each key carries of its last access, by the policy at the cut.
    access: SaveAccess,
    /// Serialized entries not yet handed to the part file.
    pub(crate) out: Vec<u8>,
    /// Keys written so far (INFO's current_save_keys_processed).
    written: u64,
}

impl EntryWriter {
    /// Writes `entry` unless this snapshot already holds it (or it was born
    /// after the cut). Called before every change to an entry.
    #[inline]
    pub(crate) fn preserve(&mut self, entry: &mut Entry) {
        if entry.snap != self.epoch {
            entry.snap = self.epoch;
            // A key whose time had run out at the cut was already gone.
            if !entry.is_expired(self.cut_ms) {
                let access = match self.access {
                    SaveAccess::Nothing => Access::None,
                    SaveAccess::Idle => Access::Idle(entry.idle_seconds(self.cut_ms)),
                    SaveAccess::Freq(decay) => Access::Freq(lfu_counter(entry.access(), self.cut_ms, decay) as u8),
                };
                rdb::write_entry(&mut self.out, &entry.key, &entry.value, entry.expire_at(), access, &self.opts);
                self.written += 1;
            }
        }
    }
}

/// Redis saves the LRU idle time under an LRU policy, the LFU counter
/// (decayed to the cut) under an LFU one, neither otherwise.
#[derive(Clone, Copy)]
enum SaveAccess {
    Nothing,
    Idle,
    Freq(u32),
}

pub(crate) struct DbSnapshot {
    pub(crate) writer: EntryWriter,
    /// The table as it was at the cut, when a flush replaced it mid-walk.
    pub(crate) frozen: Option<DashTable<Entry>>,
    /// Next hash position to walk; `None` once walked.
    cursor: Option<u64>,
    /// Database number at the cut.
    index: usize,
    /// (keys, keys with an expiry) at the cut, for RESIZEDB.
    at_cut: (u64, u64),
}

impl DbSnapshot {
    pub(crate) fn walked(&self) -> bool {
        self.cursor.is_none()
    }
}

impl Db {
    /// Walks segments until `max_bytes` are pending or `deadline` passed.
    /// Returns true once the whole table was walked.
    fn walk_snapshot(&mut self, max_bytes: usize, deadline: Instant) -> bool {
        let Some(s) = self.snap.as_deref_mut() else {
            return true;
        };
        let DbSnapshot { writer, frozen, cursor, .. } = s;
        let table = frozen.as_mut().unwrap_or(&mut self.table);
        while let Some(pos) = *cursor {
            *cursor = table.visit_segment_mut(pos, |e| writer.preserve(e));
            if writer.out.len() >= max_bytes || Instant::now() >= deadline {
                break;
            }
        }
        cursor.is_none()
    }
}

/// A shard's snapshot bookkeeping.
#[derive(Default)]
pub struct SnapshotState {
    /// The epoch of the latest snapshot (entries marked with older ones are
    /// simply unwritten for the next).
    epoch: u32,
    running: bool,
    /// The database the walk is in.
    walking: usize,
    /// The database the part's last SELECTDB named.
    selected: Option<usize>,
    /// Databases whose RESIZEDB was written.
    resized: Vec<bool>,
}

impl Shard {
    /// Takes the cut: from now on every change preserves the old state
    /// first. `cut_ms`: keys expired at this time are left out.
    pub fn begin_snapshot(&mut self, cut_ms: u64, compress: bool) {
        let st = &mut self.snapshot;
        // Epoch 0 is what entries carry when no snapshot ever touched them.
        st.epoch = st.epoch.checked_add(1).unwrap_or(1);
        st.running = true;
        st.walking = 0;
        st.selected = None;
        st.resized = vec![false; self.dbs.len()];
        let epoch = st.epoch;
        let policy = self.config.maxmemory_policy;
        let access = if policy.is_lfu() {
            SaveAccess::Freq(self.config.lfu_decay_time.min(u32::MAX as u64) as u32)
        } else if policy.is_lru() {
            SaveAccess::Idle
        } else {
            SaveAccess::Nothing
        };
        for (index, db) in self.dbs.iter_mut().enumerate() {
            let opts = SaveOptions { compress };
            let writer = EntryWriter { epoch, cut_ms, opts, access, out: Vec::new(), written: 0 };
            let at_cut = (db.len() as u64, db.volatile() as u64);
            db.snap = Some(Box::new(DbSnapshot { writer, frozen: None, cursor: Some(0), index, at_cut }));
        }
    }

    pub fn snapshot_running(&self) -> bool {
        self.snapshot.running
    }

    /// (keys written, keys at the cut) of the running snapshot.
    pub fn snapshot_progress(&self) -> (u64, u64) {
        self.dbs
            .iter()
            .filter_map(|db| db.snap.as_deref())
            .fold((0, 0), |(done, total), s| (done + s.writer.written, total + s.at_cut.0))
    }

    /// One cooperative step of the walk: appends this shard's next part
    /// bytes (SELECTDB + entries) to `out`, stopping near `max_bytes` or at
    /// `deadline`. Returns true when the part is complete; the snapshot has
    /// then ended and writes cost one branch again.
    pub fn snapshot_step(&mut self, out: &mut Vec<u8>, max_bytes: usize, deadline: Instant) -> bool {
        if !self.snapshot.running {
            return true;
        }
        loop {
            let walking = self.snapshot.walking;
            if walking < self.dbs.len() && self.dbs[walking].walk_snapshot(max_bytes, deadline) {
                self.snapshot.walking += 1;
            }
            self.drain_snapshot(out);
            if self.snapshot.walking == self.dbs.len() {
                self.end_snapshot();
                return true;
            }
            if out.len() >= max_bytes || Instant::now() >= deadline {
                return false;
            }
        }
    }

    /// Moves every database's pending entries into `out`, each run behind a
    /// SELECTDB when the database changes.
    fn drain_snapshot(&mut self, out: &mut Vec<u8>) {
        let st = &mut self.snapshot;
        for db in &mut self.dbs {
            let Some(s) = db.snap.as_deref_mut() else { continue };
            if s.writer.out.is_empty() {
                continue;
            }
            if st.selected != Some(s.index) {
                rdb::write_select_db(out, s.index);
                if !std::mem::replace(&mut st.resized[s.index], true) {
                    rdb::write_resize_db(out, s.at_cut.0, s.at_cut.1);
                }
                st.selected = Some(s.index);
            }
            out.extend_from_slice(&s.writer.out);
            s.writer.out.clear();
            // A burst of copy-on-write should not pin its buffer for good.
            if s.writer.out.capacity() > 4 << 20 {
                s.writer.out = Vec::new();
            }
        }
    }

    /// Stops a snapshot (finished or abandoned): hooks off, old tables freed.
    pub fn end_snapshot(&mut self) {
        self.snapshot.running = false;
        for db in &mut self.dbs {
            db.snap = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Ttl;
    use crate::value::Value;
    use std::collections::BTreeMap;
    use std::time::Duration;

    /// Decodes the string entries of a part back into (db, key) -> value.
    fn decode(part: &[u8]) -> BTreeMap<(usize, Vec<u8>), Vec<u8>> {
        let mut file = Vec::new();
        rdb::write_header(&mut file, &[]);
        file.extend_from_slice(part);
        rdb::write_eof(&mut file);
        file.extend_from_slice(&[0; 8]);
        let mut reader = rdb::Reader::new(&file).unwrap();
        let mut map = BTreeMap::new();
        while let Some(item) = reader.next().unwrap() {
            if let rdb::Item::Entry { db, key, value, .. } = item {
                let mut scratch = itoa::Buffer::new();
                let bytes = value.string_bytes(&mut scratch).unwrap().to_vec();
                assert!(map.insert((db, key.into_owned()), bytes).is_none(), "an entry written twice");
            }
        }
        map
    }

    fn key(i: u32) -> Vec<u8> {
        format!("k{i}").into_bytes()
    }

    /// Random writes, removals, flushes and expiries interleaved with a walk
    /// in tiny steps: the part holds exactly the state at the cut.
    #[test]
    fn the_part_is_the_state_at_the_cut() {
        for seed in 1..6u64 {
            let mut shard = Shard::new(0, 1, crate::Config::default());
            let mut x = seed;
            let mut rnd = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            for i in 0..20_000u32 {
                let ttl = if i % 7 == 0 { Ttl::At(1000 + (i as u64 % 3) * 1000) } else { Ttl::Clear };
                shard.dbs[(i % 3) as usize].set(&key(i), Value::Int(i as i64), ttl, 0);
            }
            // At the cut (t=1500) the keys expiring at 1000 are gone.
            let cut = 1500;
            let mut expect = BTreeMap::new();
            for (d, db) in shard.dbs.iter().enumerate() {
                for e in db.iter_live(cut) {
                    let mut s = itoa::Buffer::new();
                    expect.insert((d, e.key.to_vec()), e.value.string_bytes(&mut s).unwrap().to_vec());
                }
            }
            shard.begin_snapshot(cut, false);
            let mut part = Vec::new();
            let mut now = cut;
            loop {
                let deadline = Instant::now() + Duration::from_secs(1);
                if shard.snapshot_step(&mut part, 64, deadline) {
                    break;
                }
                for _ in 0..20 {
                    let r = rnd();
                    let (d, k) = ((r % 3) as usize, key((r >> 8) as u32 % 24_000));
                    let db = &mut shard.dbs[d];
                    match (r >> 40) % 10 {
                        0..=3 => {
                            db.set(&k, Value::Int(-1), Ttl::Keep, now);
                        }
                        4..=5 => {
                            db.remove(&k, now);
                        }
                        6 => {
                            if let Some(e) = db.get(&k, now) {
                                e.value = Value::Int(-2);
                            }
                        }
                        7 => {
                            db.set_expire(&k, Some(now + 1), now);
                        }
                        8 => {
                            now += 700;
                            db.expire_step(now, 100);
                        }
                        _ => {
                            if r % 97 == 0 {
                                db.clear();
                            }
                        }
                    }
                }
            }
            assert!(!shard.snapshot_running());
            assert_eq!(decode(&part), expect, "seed {seed}");
        }
    }

    #[test]
    fn no_snapshot_no_marks_needed() {
        let mut db = Db::default();
        db.set(b"a", Value::Int(1), Ttl::Clear, 0);
        assert!(db.snap.is_none());
        assert_eq!(db.get(b"a", 0).unwrap().snap, 0);
    }
}
