//! The keyspace table: extendible hashing over small segments (the shape of
//! Dragonfly's dashtable). A directory indexed by the top bits of the hash
//! points at segments; a full segment splits in two, so growth never rehashes
//! more than one segment at a time (no stop-the-world resize spike).
//!
//! Because a segment always covers a contiguous range of hash values, a scan
//! cursor can be a position in hash space: entries present for the whole scan
//! are returned at least once, whatever splits happen in between (the SCAN
//! guarantee), with no extra state kept per cursor.
//!
//! Memory: a segment keeps its entries densely packed in fixed-size chunks
//! and indexes them with a table of 4-byte slots (`index.rs`: position and
//! hash tag in one slot, one cache line per probe). Its empty slots then
//! cost 4 bytes rather than a whole entry, so the table stays compact at any
//! load factor, and a random entry is one index away.

mod index;

use index::Index;

/// Entries split a segment once it holds this many.
const SEGMENT_MAX: usize = 1024;

/// Entries per storage chunk: at most one partly used chunk per segment.
const CHUNK: usize = 64;

pub trait Keyed {
    fn key(&self) -> &[u8];
}

/// A segment's entries, densely packed in chunks of `CHUNK`.
struct Dense<E> {
    chunks: Vec<Vec<E>>,
    len: usize,
}

impl<E> Dense<E> {
    fn new() -> Self {
        Dense { chunks: Vec::new(), len: 0 }
    }

    #[inline]
    fn get(&self, i: u32) -> &E {
        &self.chunks[i as usize / CHUNK][i as usize % CHUNK]
    }

    #[inline]
    fn get_mut(&mut self, i: u32) -> &mut E {
        &mut self.chunks[i as usize / CHUNK][i as usize % CHUNK]
    }

    fn push(&mut self, e: E) -> u32 {
        if self.len.is_multiple_of(CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        if let Some(last) = self.chunks.last_mut() {
            last.push(e);
        }
        self.len += 1;
        (self.len - 1) as u32
    }

    fn pop(&mut self) -> Option<E> {
        let last = self.chunks.last_mut()?;
        let e = last.pop()?;
        if last.is_empty() {
            self.chunks.pop();
        }
        self.len -= 1;
        Some(e)
    }

    /// Removes entry `i`, moving the last entry into its place.
    fn swap_remove(&mut self, i: u32) -> Option<E> {
        let last = self.pop()?;
        if i as usize == self.len {
            return Some(last);
        }
        Some(std::mem::replace(self.get_mut(i), last))
    }

    fn iter(&self) -> impl Iterator<Item = &E> {
        self.chunks.iter().flatten()
    }

    fn take_all(&mut self) -> impl Iterator<Item = E> {
        self.len = 0;
        std::mem::take(&mut self.chunks).into_iter().flatten()
    }

    fn allocation_size(&self) -> usize {
        self.chunks.iter().map(|c| c.capacity() * std::mem::size_of::<E>()).sum::<usize>()
            + self.chunks.capacity() * std::mem::size_of::<Vec<E>>()
    }
}

struct Segment<E> {
    depth: u32,
    /// Positions in `entries`, keyed by the entries' hashes.
    index: Index,
    entries: Dense<E>,
}

impl<E: Keyed> Segment<E> {
    fn new(depth: u32, capacity: usize) -> Self {
        Segment { depth, index: Index::with_capacity(capacity), entries: Dense::new() }
    }

    #[inline]
    fn position(&self, hash: u64, key: &[u8]) -> Option<u32> {
        let entries = &self.entries;
        self.index.find(hash, |i| entries.get(i).key() == key)
    }

    fn push(&mut self, hash: u64, entry: E, hasher: &ahash::RandomState) -> u32 {
        let i = self.entries.push(entry);
        let entries = &self.entries;
        self.index.insert(hash, i, |j| hasher.hash_one(entries.get(j).key()));
        i
    }

    /// Removes the entry at position `i` (whose hash is `hash`).
    fn remove_at(&mut self, i: u32, hash: u64, hasher: &ahash::RandomState) -> Option<E> {
        self.index.remove(hash, i);
        let last = (self.entries.len - 1) as u32;
        if i != last {
            // The last entry moves into the hole: point its index there.
            let moved = hasher.hash_one(self.entries.get(last).key());
            self.index.moved(moved, last, i);
        }
        self.entries.swap_remove(i)
    }
}

pub struct DashTable<E> {
    dir: Vec<u32>,
    segments: Vec<Segment<E>>,
    global_depth: u32,
    len: usize,
    hasher: ahash::RandomState,
}

impl<E: Keyed> Default for DashTable<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: Keyed> DashTable<E> {
    pub fn new() -> Self {
        DashTable {
            dir: vec![0],
            segments: vec![Segment::new(0, 0)],
            global_depth: 0,
            len: 0,
            // Fixed seeds: cursors and sampling stay meaningful for the life of
            // the process; per-process randomness is not needed against
            // collision flooding because segments are small and bounded.
            hasher: ahash::RandomState::with_seeds(
                0x243f_6a88_85a3_08d3,
                0x1319_8a2e_0370_7344,
                0xa409_3822_299f_31d0,
                0x082e_fa98_ec4e_6c89,
            ),
        }
    }

    #[inline]
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn segment_of(&self, hash: u64) -> usize {
        let index = hash.checked_shr(64 - self.global_depth).unwrap_or(0) as usize;
        self.dir[index] as usize
    }

    #[inline]
    pub fn find(&self, hash: u64, key: &[u8]) -> Option<&E> {
        let seg = &self.segments[self.segment_of(hash)];
        seg.position(hash, key).map(|i| seg.entries.get(i))
    }

    #[inline]
    pub fn find_mut(&mut self, hash: u64, key: &[u8]) -> Option<&mut E> {
        let s = self.segment_of(hash);
        let seg = &mut self.segments[s];
        let i = seg.position(hash, key)?;
        Some(seg.entries.get_mut(i))
    }

    /// A prefetch's first stage for a batch of keys: the index line the
    /// lookup of `hash` reads first. Known from the hash alone, so every
    /// key's line is on its way at once.
    #[inline]
    pub fn prefetch_index(&self, hash: u64) {
        self.segments[self.segment_of(hash)].index.prefetch(hash);
    }

    /// Its second stage, once the index line is in: the entry the index
    /// names for `hash` (a guess: the key is not compared).
    #[inline]
    pub fn prefetch_entry(&self, hash: u64) {
        let seg = &self.segments[self.segment_of(hash)];
        if let Some(i) = seg.index.guess(hash) {
            crate::prefetch::line(seg.entries.get(i));
        }
    }

    /// Inserts an entry whose key is known to be absent.
    pub fn insert_unique(&mut self, hash: u64, entry: E) -> &mut E {
        if self.segments[self.segment_of(hash)].entries.len >= SEGMENT_MAX {
            self.split(hash);
        }
        let s = self.segment_of(hash);
        self.len += 1;
        let seg = &mut self.segments[s];
        let i = seg.push(hash, entry, &self.hasher);
        seg.entries.get_mut(i)
    }

    pub fn remove(&mut self, hash: u64, key: &[u8]) -> Option<E> {
        let s = self.segment_of(hash);
        let seg = &mut self.segments[s];
        let i = seg.position(hash, key)?;
        let removed = seg.remove_at(i, hash, &self.hasher);
        self.len -= removed.is_some() as usize;
        removed
    }

    /// Splits the segment that `hash` maps to, doubling the directory first
    /// when that segment is already as deep as the directory.
    fn split(&mut self, hash: u64) {
        let seg = self.segment_of(hash);
        let depth = self.segments[seg].depth;
        if depth == 63 {
            return; // cannot happen with a real hash; let the segment grow
        }
        if depth == self.global_depth {
            let doubled: Vec<u32> = (0..self.dir.len() * 2).map(|i| self.dir[i >> 1]).collect();
            self.dir = doubled;
            self.global_depth += 1;
        }
        let moved_bit = 1u64 << (63 - depth);
        let half = self.segments[seg].entries.len / 2 + 16;
        let mut lower = Segment::new(depth + 1, half);
        let mut upper = Segment::new(depth + 1, half);
        for e in self.segments[seg].entries.take_all() {
            let h = self.hasher.hash_one(e.key());
            let target = if h & moved_bit != 0 { &mut upper } else { &mut lower };
            target.push(h, e, &self.hasher);
        }
        self.segments[seg] = lower;
        let new_index = self.segments.len() as u32;
        self.segments.push(upper);
        let span = 1usize << (self.global_depth - depth);
        let first = (hash >> (64 - self.global_depth)) as usize & !(span - 1);
        for slot in &mut self.dir[first + span / 2..first + span] {
            *slot = new_index;
        }
    }

    /// Hash range `[lo, hi)` covered by the segment holding `hash` (hi as u128
    /// so the last segment's end, 2^64, is representable).
    fn range_of(&self, hash: u64) -> (u64, u128) {
        let depth = self.segments[self.segment_of(hash)].depth;
        if depth == 0 {
            return (0, 1u128 << 64);
        }
        let lo = hash & !(u64::MAX >> depth);
        (lo, lo as u128 + (1u128 << (64 - depth)))
    }

    /// Visits entries whose `hash >> shift` is at least `pos`, lowest hashes
    /// first, stopping once `count` were visited (never splitting a group of
    /// equal hashes). Returns the position to resume from, or `None` when the
    /// table is done. `shift` lets the caller keep a few cursor bits for
    /// itself. Cost: one pass over the segments touched, no sorting.
    pub fn scan(&self, pos: u64, shift: u32, count: usize, mut visit: impl FnMut(&E)) -> Option<u64> {
        let mut pos = pos;
        let mut visited = 0usize;
        let mut group: Vec<(u64, &E)> = Vec::new();
        loop {
            let full = pos << shift;
            let seg = &self.segments[self.segment_of(full)];
            group.clear();
            group.extend(seg.entries.iter().map(|e| (self.hash(e.key()) >> shift, e)).filter(|(h, _)| *h >= pos));
            let need = count.saturating_sub(visited).max(1);
            if group.len() > need {
                // The `need` lowest hashes (and any equal to the last of them),
                // then resume at the next hash above.
                group.select_nth_unstable_by_key(need - 1, |(h, _)| *h);
                let cut = group[need - 1].0;
                let mut next = None;
                for &(h, e) in &group {
                    if h <= cut {
                        visit(e);
                        visited += 1;
                    } else {
                        next = Some(next.map_or(h, |n: u64| n.min(h)));
                    }
                }
                if next.is_some() {
                    return next;
                }
            } else {
                group.iter().for_each(|(_, e)| visit(e));
                visited += group.len();
            }
            let (_, hi) = self.range_of(full);
            if hi >= 1u128 << 64 {
                return None;
            }
            pos = (hi >> shift) as u64;
            if visited >= count {
                return Some(pos);
            }
        }
    }

    /// A pseudo-random entry, every entry equally likely (allkeys-random,
    /// RANDOMKEY): a directory slot kept with probability 1 / (the slots its
    /// segment spans), so each segment is equally likely, then a position
    /// among a full segment's, tried again when past the segment's entries.
    /// Picking the segment's own entries instead favoured the entries of
    /// emptier segments (a just-split one holds half of a full one's) up to
    /// twice. A mostly empty table (after deletes) falls back to that after
    /// 64 tries.
    pub fn random(&self, mut rnd: impl FnMut() -> u64) -> Option<&E> {
        if self.len == 0 {
            return None;
        }
        for _ in 0..64 {
            let seg = &self.segments[self.dir[(rnd() % self.dir.len() as u64) as usize] as usize];
            let spans = self.global_depth - seg.depth;
            if spans > 0 && rnd() & ((1u64 << spans.min(63)) - 1) != 0 {
                continue;
            }
            let i = rnd() % SEGMENT_MAX.max(seg.entries.len) as u64;
            if i < seg.entries.len as u64 {
                return Some(seg.entries.get(i as u32));
            }
        }
        for _ in 0..16 {
            let seg = &self.segments[self.dir[(rnd() % self.dir.len() as u64) as usize] as usize];
            if seg.entries.len > 0 {
                return Some(seg.entries.get((rnd() % seg.entries.len as u64) as u32));
            }
        }
        let nonempty: Vec<&Segment<E>> = self.segments.iter().filter(|s| s.entries.len > 0).collect();
        let seg = nonempty[(rnd() % nonempty.len() as u64) as usize];
        Some(seg.entries.get((rnd() % seg.entries.len as u64) as u32))
    }

    /// Eviction's sample: up to `count` entries that pass `wanted`, each
    /// picked as `random` picks one, looking at `max_visits` at most.
    /// Independent picks, not a run of neighbours: entries sit in a segment
    /// in insertion order, so a run would be all old or all new keys.
    pub fn sample(
        &self,
        mut rnd: impl FnMut() -> u64,
        count: usize,
        max_visits: usize,
        wanted: impl Fn(&E) -> bool,
        mut visit: impl FnMut(&E),
    ) {
        let mut taken = 0;
        for _ in 0..max_visits {
            let Some(e) = self.random(&mut rnd) else { return };
            if wanted(e) {
                visit(e);
                taken += 1;
                if taken >= count {
                    return;
                }
            }
        }
    }

    /// Runs `keep` over one segment (the one covering hash position `pos`),
    /// dropping entries it rejects. Returns how many were dropped and the
    /// position of the next segment (`None` after the last): an incremental
    /// sweep for active expiry.
    pub fn sweep_segment(&mut self, pos: u64, mut keep: impl FnMut(&mut E) -> bool) -> (usize, Option<u64>) {
        let s = self.segment_of(pos);
        let seg = &mut self.segments[s];
        let rejected: Vec<u32> = (0..seg.entries.len as u32).filter(|&i| !keep(seg.entries.get_mut(i))).collect();
        // Highest first: each removal moves the last entry, which is never
        // one still to be removed.
        for &i in rejected.iter().rev() {
            let h = self.hasher.hash_one(seg.entries.get(i).key());
            seg.remove_at(i, h, &self.hasher);
        }
        self.len -= rejected.len();
        let (_, hi) = self.range_of(pos);
        (rejected.len(), if hi >= 1u128 << 64 { None } else { Some(hi as u64) })
    }

    /// Calls `visit` on every entry of the segment covering hash position
    /// `pos`; returns the next segment's position (`None` after the last).
    /// Splits only ever divide a segment, so a walk that resumes from the
    /// returned position covers every hash position exactly once.
    pub fn visit_segment_mut(&mut self, pos: u64, mut visit: impl FnMut(&mut E)) -> Option<u64> {
        let s = self.segment_of(pos);
        let seg = &mut self.segments[s];
        for chunk in &mut seg.entries.chunks {
            chunk.iter_mut().for_each(&mut visit);
        }
        let (_, hi) = self.range_of(pos);
        (hi < 1u128 << 64).then_some(hi as u64)
    }

    pub fn iter(&self) -> impl Iterator<Item = &E> {
        self.segments.iter().flat_map(|s| s.entries.iter())
    }

    pub fn clear(&mut self) {
        *self = DashTable { hasher: self.hasher.clone(), ..Self::new() };
    }

    /// Bytes held by the table's own arrays (not by what entries point to).
    pub fn allocation_size(&self) -> usize {
        self.segments.iter().map(|s| s.index.allocation_size() + s.entries.allocation_size()).sum::<usize>()
            + self.dir.capacity() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashSet};

    struct K(Vec<u8>);
    impl Keyed for K {
        fn key(&self) -> &[u8] {
            &self.0
        }
    }

    fn insert(t: &mut DashTable<K>, k: &[u8]) {
        let h = t.hash(k);
        if t.find(h, k).is_none() {
            t.insert_unique(h, K(k.to_vec()));
        }
    }

    #[test]
    fn grows_by_splitting_and_finds_everything() {
        let mut t = DashTable::new();
        for i in 0..20_000u32 {
            insert(&mut t, &i.to_be_bytes());
        }
        assert_eq!(t.len(), 20_000);
        assert!(t.segments.len() > 8);
        for i in 0..20_000u32 {
            let k = i.to_be_bytes();
            assert!(t.find(t.hash(&k), &k).is_some());
        }
        for i in (0..20_000u32).step_by(2) {
            let k = i.to_be_bytes();
            assert!(t.remove(t.hash(&k), &k).is_some());
        }
        assert_eq!(t.len(), 10_000);
        assert_eq!(t.iter().count(), 10_000);
    }

    #[test]
    fn scan_returns_every_stable_key_despite_splits() {
        for shift in [0u32, 3] {
            let mut t = DashTable::new();
            for i in 0..3000u32 {
                insert(&mut t, format!("stable{i}").as_bytes());
            }
            let mut seen = HashSet::new();
            let mut pos = 0;
            let mut extra = 0u32;
            loop {
                let next = t.scan(pos, shift, 10, |e| {
                    seen.insert(e.0.clone());
                });
                // Grow the table between calls to force splits mid-scan.
                for _ in 0..50 {
                    insert(&mut t, format!("extra{extra}").as_bytes());
                    extra += 1;
                }
                match next {
                    Some(p) => {
                        assert!(p > pos || pos == 0);
                        pos = p;
                    }
                    None => break,
                }
            }
            for i in 0..3000u32 {
                assert!(seen.contains(format!("stable{i}").as_bytes()), "missed stable{i}");
            }
        }
    }

    #[test]
    fn random_inserts_and_removes_agree_with_a_set() {
        let mut t = DashTable::new();
        let mut model = HashSet::new();
        let mut x: u64 = 42;
        for _ in 0..60_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = (x % 5000).to_be_bytes();
            let h = t.hash(&k);
            if x.is_multiple_of(3) {
                assert_eq!(t.remove(h, &k).is_some(), model.remove(k.as_slice()));
            } else if model.insert(k.to_vec()) {
                t.insert_unique(h, K(k.to_vec()));
            }
        }
        assert_eq!(t.len(), model.len());
        for k in &model {
            assert!(t.find(t.hash(k), k).is_some());
        }
        let mut seen: Vec<Vec<u8>> = t.iter().map(|e| e.0.clone()).collect();
        seen.sort();
        let mut want: Vec<Vec<u8>> = model.into_iter().collect();
        want.sort();
        assert_eq!(seen, want);
        let (dropped, _) = t.sweep_segment(0, |e| e.0[7] % 2 == 0);
        assert!(dropped > 0);
        for e in t.iter() {
            assert!(t.find(t.hash(&e.0), &e.0).is_some(), "index still points at every entry after a sweep");
        }
    }

    #[test]
    fn random_picks_every_entry_equally() {
        let mut t = DashTable::new();
        for i in 0u64..262_000 {
            let k = i.to_be_bytes();
            t.insert_unique(t.hash(&k), K(k.to_vec()));
        }
        let mut x: u64 = 7;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        // Picks per entry, by how full the entry's segment is.
        let mut picks: std::collections::HashMap<Vec<u8>, u64> = std::collections::HashMap::new();
        for _ in 0..4_000_000 {
            *picks.entry(t.random(&mut rnd).unwrap().0.clone()).or_default() += 1;
        }
        let (mut emptier, mut fuller) = ((0u64, 0u64), (0u64, 0u64));
        for seg in &t.segments {
            let n = seg.entries.len;
            let side = match n {
                _ if n < SEGMENT_MAX * 5 / 8 => &mut emptier,
                _ if n > SEGMENT_MAX * 7 / 8 => &mut fuller,
                _ => continue,
            };
            for e in seg.entries.iter() {
                side.0 += picks.get(&e.0).copied().unwrap_or(0);
                side.1 += 1;
            }
        }
        let rate = |(p, n): (u64, u64)| p as f64 / n as f64;
        let ratio = rate(emptier) / rate(fuller);
        assert!(emptier.1 > 1000 && fuller.1 > 1000, "{emptier:?} {fuller:?}");
        // The segment-then-entry pick gave 0.952 here.
        assert!((0.98..1.02).contains(&ratio), "picks per entry, emptier / fuller segments: {ratio}");
    }

    #[test]
    fn scan_of_empty_table_ends_at_once() {
        let t: DashTable<K> = DashTable::new();
        assert_eq!(t.scan(0, 0, 10, |_| panic!()), None);
    }

    #[test]
    fn sweep_visits_each_segment_once() {
        let mut t = DashTable::new();
        for i in 0..5000u32 {
            insert(&mut t, &i.to_le_bytes());
        }
        let mut pos = Some(0);
        let mut kept = BTreeSet::new();
        while let Some(p) = pos {
            let (_, next) = t.sweep_segment(p, |e| {
                assert!(kept.insert(e.0.clone()), "visited twice");
                true
            });
            pos = next;
        }
        assert_eq!(kept.len(), 5000);
    }
}
