//! `SegMap`: the "hashtable" encoding of hashes and sets. Extendible hashing
//! as in the keyspace's `DashTable` (a directory over small segments, a full
//! segment splits in two, so growth never rehashes more than one segment and
//! a SCAN cursor is a position in hash space), but each segment packs its
//! records into byte chunks and indexes them by 4-byte offsets: about 5
//! bytes of index per element plus the encoded bytes, where Redis spends a
//! 24-byte dictEntry, one or two sds allocations and a bucket pointer.
//!
//! A record is one encoded element (a set member) or two (field, value).
//! Chunks have one size (only a segment's first chunk grows, so small maps
//! stay small): freed chunks fit any segment, which keeps the allocator from
//! fragmenting as thousands of segments grow side by side. Records longer
//! than `SPILL` live in their own allocation.

use super::pack::{decode, elem_len, Enc, Item};
use hashbrown::HashTable;

/// A segment splits when it holds this many records (7/8 of 1024 buckets).
const SEGMENT_MAX: usize = 896;
/// Bytes per arena chunk; records never straddle two.
const CHUNK: usize = 2048;
/// Records above this size are allocated on their own.
const SPILL: usize = 1024;
/// Index entries with this bit point into `Segment::big`.
const BIG: u32 = 1 << 31;
/// Deepest split, which bounds the directory (2^24 slots); past it a
/// segment just grows. Natural growth stays far below (depth 18 at 100M
/// elements); colliding hashes are unlikely, the seeds being random per map.
const MAX_DEPTH: u32 = 24;

/// A segment's record bytes: chunks of `CHUNK` bytes, the first of which
/// grows exactly until full. Offsets are `chunk * CHUNK + position`.
#[derive(Clone, Default)]
struct Arena {
    chunks: Vec<Vec<u8>>,
}

impl Arena {
    /// An arena expecting about `bytes` of records.
    fn for_bytes(bytes: usize) -> Arena {
        Arena { chunks: if bytes == 0 { Vec::new() } else { vec![Vec::with_capacity(bytes.min(CHUNK))] } }
    }

    /// The bytes from `at` to the end of its chunk.
    #[inline]
    fn from(&self, at: u32) -> &[u8] {
        let (c, off) = (at as usize / CHUNK, at as usize % CHUNK);
        self.chunks.get(c).and_then(|c| c.get(off..)).unwrap_or_default()
    }

    /// Appends `len` bytes written by `write`; returns their offset.
    fn push(&mut self, len: usize, write: impl FnOnce(&mut Vec<u8>)) -> u32 {
        if self.chunks.last().is_none_or(|c| c.len() + len > CHUNK) {
            let cap = if self.chunks.is_empty() { len } else { CHUNK };
            self.chunks.push(Vec::with_capacity(cap));
        }
        let i = self.chunks.len() - 1;
        let c = &mut self.chunks[i];
        if c.capacity() - c.len() < len {
            c.reserve_exact(len);
        }
        let at = i * CHUNK + c.len();
        write(c);
        at as u32
    }

    fn slice_mut(&mut self, at: usize, len: usize) -> Option<&mut [u8]> {
        let (c, off) = (at / CHUNK, at % CHUNK);
        self.chunks.get_mut(c)?.get_mut(off..off + len)
    }

    fn len(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum()
    }

    fn heap_size(&self) -> usize {
        self.chunks.capacity() * std::mem::size_of::<Vec<u8>>() + self.chunks.iter().map(Vec::capacity).sum::<usize>()
    }
}

#[derive(Clone)]
struct Segment {
    depth: u32,
    /// Records are (field, value) pairs rather than single members.
    pairs: bool,
    index: HashTable<u32>,
    arena: Arena,
    /// Bytes of the arena no longer referenced.
    dead: usize,
    big: Vec<Box<[u8]>>,
}

#[derive(Clone)]
pub struct SegMap {
    dir: Vec<u32>,
    segs: Vec<Segment>,
    depth: u32,
    len: usize,
    pairs: bool,
    hasher: ahash::RandomState,
}

/// A record: its key and, in a pair map, its value.
#[derive(Clone, Copy, Debug)]
pub struct Rec<'a> {
    pub key: Item<'a>,
    pub value: Item<'a>,
}

/// Hash of an element's string form (what a command argument hashes to).
#[inline]
fn hash_elem(hasher: &ahash::RandomState, raw: &[u8]) -> u64 {
    match decode(raw) {
        Item::Str(s) => hasher.hash_one(s),
        Item::Int(n) => hasher.hash_one(itoa::Buffer::new().format(n).as_bytes()),
    }
}

/// The bytes from the start of the record in `slot` (to its chunk's end).
#[inline]
fn record<'a>(arena: &'a Arena, big: &'a [Box<[u8]>], slot: u32) -> &'a [u8] {
    if slot & BIG != 0 {
        big.get((slot & !BIG) as usize).map_or(&[][..], |b| b)
    } else {
        arena.from(slot)
    }
}

/// The key element of the record in `slot` (a record starts with its key).
#[inline]
fn key_of<'a>(arena: &'a Arena, big: &'a [Box<[u8]>], slot: u32) -> &'a [u8] {
    let r = record(arena, big, slot);
    &r[..elem_len(r).unwrap_or(0)]
}

/// Length of the record starting `r`.
fn record_len(r: &[u8], pairs: bool) -> usize {
    let k = elem_len(r).unwrap_or(0);
    if pairs {
        k + r.get(k..).and_then(elem_len).unwrap_or(0)
    } else {
        k
    }
}

impl Segment {
    fn new(depth: u32, pairs: bool, capacity: usize) -> Segment {
        Segment {
            depth,
            pairs,
            index: HashTable::with_capacity(capacity),
            arena: Arena::default(),
            dead: 0,
            big: Vec::new(),
        }
    }

    #[inline]
    fn key(&self, slot: u32) -> &[u8] {
        key_of(&self.arena, &self.big, slot)
    }

    #[inline]
    fn record(&self, slot: u32) -> &[u8] {
        let r = record(&self.arena, &self.big, slot);
        &r[..record_len(r, self.pairs)]
    }

    fn find(&self, h: u64, e: &Enc) -> Option<u32> {
        self.index.find(h, |&slot| e.matches(self.key(slot))).copied()
    }

    /// Stores a record's bytes (not yet indexed); returns its slot.
    fn store(&mut self, parts: &[&Enc]) -> u32 {
        let len: usize = parts.iter().map(|e| e.len()).sum();
        if len > SPILL {
            let mut b = Vec::with_capacity(len);
            for e in parts {
                e.write_to(&mut b);
            }
            self.big.push(b.into_boxed_slice());
            return BIG | (self.big.len() - 1) as u32;
        }
        self.arena.push(len, |out| {
            for e in parts {
                e.write_to(out);
            }
        })
    }

    /// Copies a whole record in while building a segment; returns its slot.
    fn copy_in(&mut self, r: &[u8]) -> u32 {
        if r.len() > SPILL {
            self.big.push(r.into());
            return BIG | (self.big.len() - 1) as u32;
        }
        self.arena.push(r.len(), |out| out.extend_from_slice(r))
    }

    /// Forgets the bytes of a record no longer indexed. A spilled record's
    /// place is refilled with the last spilled one, whose index entry is
    /// updated.
    fn release(&mut self, slot: u32, hasher: &ahash::RandomState) {
        if slot & BIG == 0 {
            self.dead += self.record(slot).len();
            if self.dead > CHUNK && self.dead > self.arena.len() / 2 {
                self.compact();
            }
            return;
        }
        let i = (slot & !BIG) as usize;
        let Some(last) = self.big.len().checked_sub(1) else { return };
        if i > last {
            return;
        }
        self.big.swap_remove(i);
        if i != last {
            let h = hash_elem(hasher, self.key(slot));
            if let Some(entry) = self.index.find_mut(h, |&o| o == BIG | last as u32) {
                *entry = slot;
            }
        }
    }

    /// Rewrites the arena without dead bytes.
    fn compact(&mut self) {
        let live = self.arena.len().saturating_sub(self.dead);
        let mut fresh = Arena::for_bytes(live);
        let pairs = self.pairs;
        for slot in self.index.iter_mut() {
            if *slot & BIG == 0 {
                let r = self.arena.from(*slot);
                let n = record_len(r, pairs);
                *slot = fresh.push(n, |out| out.extend_from_slice(&r[..n]));
            }
        }
        self.arena = fresh;
        self.dead = 0;
    }

    fn index_insert(&mut self, h: u64, slot: u32, hasher: &ahash::RandomState) {
        let (arena, big) = (&self.arena, &self.big);
        self.index.insert_unique(h, slot, |&o| hash_elem(hasher, key_of(arena, big, o)));
    }

    fn heap_size(&self) -> usize {
        self.index.allocation_size()
            + self.arena.heap_size()
            + self.big.capacity() * std::mem::size_of::<Box<[u8]>>()
            + self.big.iter().map(|b| b.len()).sum::<usize>()
    }
}
impl SegMap {
    pub fn new(pairs: bool) -> SegMap {
        SegMap {
            dir: vec![0],
            segs: vec![Segment::new(0, pairs, 0)],
            depth: 0,
            len: 0,
            pairs,
            hasher: ahash::RandomState::new(),
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn seg_of(&self, hash: u64) -> usize {
        let i = hash.checked_shr(64 - self.depth).unwrap_or(0) as usize;
        self.dir.get(i).copied().unwrap_or(0) as usize
    }

    fn rec<'a>(&self, seg: &'a Segment, slot: u32) -> Rec<'a> {
        let r = seg.record(slot);
        let k = elem_len(r).unwrap_or(r.len());
        let value = if self.pairs { decode(&r[k..]) } else { Item::Str(&[]) };
        Rec { key: decode(&r[..k]), value }
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        let h = self.hasher.hash_one(key);
        self.segs.get(self.seg_of(h)).and_then(|seg| seg.find(h, &Enc::new(key))).is_some()
    }

    /// The value stored under `key` (pair maps).
    pub fn get(&self, key: &[u8]) -> Option<Item<'_>> {
        let h = self.hasher.hash_one(key);
        let seg = self.segs.get(self.seg_of(h))?;
        let slot = seg.find(h, &Enc::new(key))?;
        Some(self.rec(seg, slot).value)
    }

    /// Adds a member (`value` is `None`) or sets a field; true when the key
    /// is new.
    pub fn insert(&mut self, key: &[u8], value: Option<&[u8]>) -> bool {
        let (ek, ev) = (Enc::new(key), value.map(Enc::new));
        let h = self.hasher.hash_one(key);
        let mut s = self.seg_of(h);
        if let Some(slot) = self.segs[s].find(h, &ek) {
            if let Some(ev) = ev {
                self.replace_value(s, h, slot, &ek, &ev);
            }
            return false;
        }
        if self.segs[s].index.len() >= SEGMENT_MAX && self.segs[s].depth < MAX_DEPTH {
            self.split(s);
            s = self.seg_of(h);
        }
        let seg = &mut self.segs[s];
        let slot = match &ev {
            Some(ev) => seg.store(&[&ek, ev]),
            None => seg.store(&[&ek]),
        };
        seg.index_insert(h, slot, &self.hasher);
        self.len += 1;
        true
    }

    fn replace_value(&mut self, s: usize, h: u64, slot: u32, ek: &Enc, ev: &Enc) {
        let seg = &mut self.segs[s];
        let k = ek.len();
        let old_len = seg.record(slot).len() - k;
        if slot & BIG == 0 && old_len == ev.len() && k + old_len <= SPILL {
            let at = slot as usize + k;
            if let Some(dst) = seg.arena.slice_mut(at, old_len) {
                ev.write_at(dst);
                return;
            }
        }
        let fresh = seg.store(&[ek, ev]);
        let (arena, big) = (&seg.arena, &seg.big);
        let Some(entry) = seg.index.find_mut(h, |&o| ek.matches(key_of(arena, big, o))) else {
            return;
        };
        let old = std::mem::replace(entry, fresh);
        seg.release(old, &self.hasher);
    }

    /// Removes `key`; true when it was present.
    pub fn remove(&mut self, key: &[u8]) -> bool {
        let e = Enc::new(key);
        let h = self.hasher.hash_one(key);
        let s = self.seg_of(h);
        let seg = &mut self.segs[s];
        let (arena, big) = (&seg.arena, &seg.big);
        let Ok(entry) = seg.index.find_entry(h, |&o| e.matches(key_of(arena, big, o))) else {
            return false;
        };
        let (slot, _) = entry.remove();
        seg.release(slot, &self.hasher);
        self.len -= 1;
        if seg.index.is_empty() {
            *seg = Segment::new(seg.depth, seg.pairs, 0);
        }
        if seg.index.capacity() > 64 && seg.index.len() < seg.index.capacity() / 4 {
            let (arena, big, hasher) = (&seg.arena, &seg.big, &self.hasher);
            seg.index.shrink_to_fit(|&o| hash_elem(hasher, key_of(arena, big, o)));
        }
        true
    }

    /// Splits segment `s` by its next hash bit, doubling the directory when
    /// the segment is as deep as it.
    fn split(&mut self, s: usize) {
        let (depth, pairs) = (self.segs[s].depth, self.pairs);
        if depth == self.depth {
            let doubled: Vec<u32> = (0..self.dir.len() * 2).map(|i| self.dir[i >> 1]).collect();
            self.dir = doubled;
            self.depth += 1;
        }
        let bit = 1u64 << (63 - depth);
        let old = std::mem::replace(&mut self.segs[s], Segment::new(depth + 1, pairs, 0));
        let hashes: Vec<(u64, u32)> = old.index.iter().map(|&o| (hash_elem(&self.hasher, old.key(o)), o)).collect();
        let uppers = hashes.iter().filter(|(h, _)| h & bit != 0).count();
        let mut halves =
            [Segment::new(depth + 1, pairs, hashes.len() - uppers), Segment::new(depth + 1, pairs, uppers)];
        let mut sizes = [0usize; 2];
        for &(h, o) in &hashes {
            sizes[(h & bit != 0) as usize] += old.record(o).len();
        }
        for (half, size) in halves.iter_mut().zip(sizes) {
            half.arena = Arena::for_bytes(size);
        }
        for (h, o) in hashes {
            let half = &mut halves[(h & bit != 0) as usize];
            let slot = half.copy_in(old.record(o));
            half.index_insert(h, slot, &self.hasher);
        }
        let [lower, upper] = halves;
        self.segs[s] = lower;
        let new_index = self.segs.len() as u32;
        self.segs.push(upper);
        // The old segment's directory slots are contiguous: the upper half
        // of them now names the new segment.
        let span = 1usize << (self.depth - depth);
        let first = self.dir.iter().position(|&d| d as usize == s).unwrap_or(0);
        for slot in self.dir.iter_mut().skip(first + span / 2).take(span / 2) {
            *slot = new_index;
        }
    }

    /// Every record, segment by segment.
    pub fn iter(&self) -> impl Iterator<Item = Rec<'_>> + '_ {
        self.segs.iter().flat_map(move |seg| seg.index.iter().map(move |&slot| self.rec(seg, slot)))
    }

    /// A random record: a random directory slot (segments are picked in
    /// proportion to the hash range they cover, so to their expected size),
    /// then a random record of that segment.
    pub fn random(&self, mut rnd: impl FnMut() -> u64) -> Option<Rec<'_>> {
        if self.len == 0 {
            return None;
        }
        let pick = |seg: &Segment, r: u64| seg.index.iter().nth((r % seg.index.len() as u64) as usize).copied();
        for _ in 0..32 {
            let s = self.dir.get((rnd() % self.dir.len() as u64) as usize).copied().unwrap_or(0) as usize;
            if let Some(seg) = self.segs.get(s).filter(|seg| !seg.index.is_empty()) {
                return pick(seg, rnd()).map(|slot| self.rec(seg, slot));
            }
        }
        // Mostly empty directory: choose among the segments holding records.
        let full: Vec<&Segment> = self.segs.iter().filter(|seg| !seg.index.is_empty()).collect();
        let seg = full.get((rnd() % full.len().max(1) as u64) as usize)?;
        pick(seg, rnd()).map(|slot| self.rec(seg, slot))
    }

    /// Visits records whose hash is at least `pos`, in hash order, stopping
    /// at a hash boundary once `count` were visited. Returns the position to
    /// resume from, `None` when done. Segments cover contiguous hash ranges,
    /// so records present for the whole scan are visited at least once
    /// whatever splits happen in between.
    pub fn scan<'a>(&'a self, pos: u64, count: usize, mut visit: impl FnMut(Rec<'a>)) -> Option<u64> {
        let mut pos = pos;
        let mut visited = 0usize;
        let mut group: Vec<(u64, u32)> = Vec::new();
        loop {
            let seg = self.segs.get(self.seg_of(pos))?;
            group.clear();
            group.extend(seg.index.iter().map(|&o| (hash_elem(&self.hasher, seg.key(o)), o)).filter(|g| g.0 >= pos));
            group.sort_unstable_by_key(|g| g.0);
            let mut i = 0;
            while let Some(&(h, _)) = group.get(i) {
                while let Some(&(_, o)) = group.get(i).filter(|g| g.0 == h) {
                    visit(self.rec(seg, o));
                    visited += 1;
                    i += 1;
                }
                if let Some(&(next, _)) = group.get(i).filter(|_| visited >= count) {
                    return Some(next);
                }
            }
            let d = seg.depth;
            let lo = if d == 0 { 0 } else { pos & !(u64::MAX >> d) };
            let hi = lo as u128 + (1u128 << (64 - d));
            if hi >= 1u128 << 64 {
                return None;
            }
            pos = hi as u64;
            if visited >= count {
                return Some(pos);
            }
        }
    }

    pub fn heap_size(&self) -> usize {
        self.dir.capacity() * 4
            + self.segs.capacity() * std::mem::size_of::<Segment>()
            + self.segs.iter().map(Segment::heap_size).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn bytes(i: Item) -> Vec<u8> {
        i.to_vec()
    }

    #[test]
    fn pairs_agree_with_a_btreemap_through_splits() {
        let mut m = SegMap::new(true);
        let mut model = BTreeMap::new();
        for i in 0..20_000u32 {
            let k = if i % 3 == 0 { i.to_string() } else { format!("field:{i}") };
            let v = match i % 4 {
                0 => i.to_string(),
                1 => "x".repeat((i % 50) as usize),
                2 => "y".repeat(1500),
                _ => String::new(),
            };
            assert!(m.insert(k.as_bytes(), Some(v.as_bytes())));
            model.insert(k.into_bytes(), v.into_bytes());
        }
        // Overwrite with other lengths (in place, moved, spilled, unspilled).
        for i in (0..20_000u32).step_by(7) {
            let k = if i % 3 == 0 { i.to_string() } else { format!("field:{i}") };
            let v = if i % 2 == 0 { "z".repeat(2000) } else { format!("{}", i * 3) };
            assert!(!m.insert(k.as_bytes(), Some(v.as_bytes())));
            model.insert(k.into_bytes(), v.into_bytes());
        }
        for i in (0..20_000u32).step_by(5) {
            let k = if i % 3 == 0 { i.to_string() } else { format!("field:{i}") };
            assert!(m.remove(k.as_bytes()));
            assert!(!m.remove(k.as_bytes()));
            model.remove(k.as_bytes());
        }
        assert_eq!(m.len(), model.len());
        for (k, v) in &model {
            assert_eq!(m.get(k).map(bytes).as_ref(), Some(v), "{:?}", String::from_utf8_lossy(k));
        }
        let all: BTreeMap<Vec<u8>, Vec<u8>> = m.iter().map(|r| (bytes(r.key), bytes(r.value))).collect();
        assert_eq!(all, model);
        assert!(m.segs.len() > 16);
    }

    #[test]
    fn scan_sees_every_stable_member_despite_splits() {
        let mut m = SegMap::new(false);
        for i in 0..3000u32 {
            m.insert(format!("stable{i}").as_bytes(), None);
        }
        let mut seen = BTreeSet::new();
        let (mut pos, mut extra) = (0u64, 0u32);
        loop {
            let next = m.scan(pos, 10, |r| {
                seen.insert(bytes(r.key));
            });
            for _ in 0..50 {
                m.insert(format!("extra{extra}").as_bytes(), None);
                extra += 1;
            }
            match next {
                Some(p) => pos = p,
                None => break,
            }
        }
        for i in 0..3000u32 {
            assert!(seen.contains(format!("stable{i}").as_bytes()), "missed stable{i}");
        }
    }

    #[test]
    fn random_and_empty() {
        let mut m = SegMap::new(false);
        let mut x = 1u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        assert!(m.random(&mut rnd).is_none());
        for i in 0..5000 {
            m.insert(format!("{i}").as_bytes(), None);
        }
        let mut hits = BTreeSet::new();
        for _ in 0..20_000 {
            hits.insert(bytes(m.random(&mut rnd).unwrap().key));
        }
        assert!(hits.len() > 4000);
        for i in 0..5000 {
            assert!(m.remove(format!("{i}").as_bytes()));
        }
        assert!(m.is_empty() && m.random(&mut rnd).is_none());
        assert_eq!(m.scan(0, 10, |_| panic!()), None);
    }
}
