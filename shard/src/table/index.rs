//! A segment's index: the positions of its entries, found by hash. Slots
//! are four bytes in groups of 16, one cache line per group; a slot holds
//! an entry's position and, in the bits the position leaves free, part of
//! its hash. A lookup reads one line of the index where hashbrown's control
//! bytes and its slots were two lines, one after the other, and which line
//! is known from the hash alone, so it can be prefetched before it is read
//! (`DashTable::prefetch_index`).
//!
//! Probing goes a group at a time. A group with a free slot ends a probe,
//! so a slot freed in a group that was once full (a probe may have gone
//! past it) becomes a tombstone; one freed in a group that never was full
//! is simply free again. Tombstones count towards the load and go at the
//! next rebuild.

const GROUP: usize = 16;
const FREE: u32 = 0;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Group([u32; GROUP]);

pub(super) struct Index {
    groups: Vec<Group>,
    /// Low bits of a slot: the position + 1 (0 in a free slot or a
    /// tombstone); the rest are the hash's tag.
    pos_mask: u32,
    live: usize,
    tombstones: usize,
}

/// Where a slot is: (group, slot in the group).
type At = (usize, usize);

impl Index {
    pub(super) fn with_capacity(entries: usize) -> Index {
        Self::with_slots(slots_for(entries))
    }

    fn with_slots(slots: usize) -> Index {
        // Positions are below `live`, itself below the slot count (a power
        // of two), so `position + 1` fits in log2(slots) bits.
        Index { groups: vec![Group([FREE; GROUP]); slots / GROUP], pos_mask: slots as u32 - 1, live: 0, tombstones: 0 }
    }

    #[inline]
    fn tag(&self, hash: u64) -> u32 {
        // Bits 16..48 of the hash: the directory uses the top bits and the
        // group the lowest ones.
        (hash >> 16) as u32 & !self.pos_mask
    }

    #[inline]
    fn first_group(&self, hash: u64) -> usize {
        hash as usize & (self.groups.len() - 1)
    }

    /// Asks for the cache line that a lookup of `hash` reads first.
    #[inline]
    pub(super) fn prefetch(&self, hash: u64) {
        crate::prefetch::line(&self.groups[self.first_group(hash)]);
    }

    /// The slot whose position passes `eq`, among those tagged as `hash`.
    #[inline]
    fn locate(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<At> {
        let (tag, pos_mask) = (self.tag(hash), self.pos_mask);
        let mask = self.groups.len() - 1;
        let mut g = self.first_group(hash);
        for _ in 0..self.groups.len() {
            let slots = &self.groups[g].0;
            let (mut matches, mut free) = (0u32, 0u32);
            for (i, &s) in slots.iter().enumerate() {
                matches |= u32::from(s & !pos_mask == tag && s & pos_mask != 0) << i;
                free |= u32::from(s == FREE) << i;
            }
            while matches != 0 {
                let i = matches.trailing_zeros() as usize;
                if eq((slots[i] & pos_mask) - 1) {
                    return Some((g, i));
                }
                matches &= matches - 1;
            }
            if free != 0 {
                return None;
            }
            g = (g + 1) & mask;
        }
        None
    }

    #[inline]
    pub(super) fn find(&self, hash: u64, eq: impl FnMut(u32) -> bool) -> Option<u32> {
        self.locate(hash, eq).map(|(g, i)| (self.groups[g].0[i] & self.pos_mask) - 1)
    }

    /// The first position tagged as `hash`, unconfirmed (a prefetch's guess).
    #[inline]
    pub(super) fn guess(&self, hash: u64) -> Option<u32> {
        self.find(hash, |_| true)
    }

    /// Adds `pos` for `hash` (absent). `hash_of` gives the hash of the
    /// entry at a position, for a rebuild.
    pub(super) fn insert(&mut self, hash: u64, pos: u32, hash_of: impl Fn(u32) -> u64) {
        let slots = self.groups.len() * GROUP;
        if (self.live + self.tombstones + 1) * 8 > slots * 7 {
            // Grown when mostly live, else rebuilt at its size (tombstones go).
            let size = if (self.live + 1) * 16 > slots * 7 { slots * 2 } else { slots };
            self.rebuild(size, &hash_of);
        }
        self.put(hash, pos);
        self.live += 1;
    }

    fn put(&mut self, hash: u64, pos: u32) {
        let slot = self.tag(hash) | (pos + 1);
        let mask = self.groups.len() - 1;
        let mut g = self.first_group(hash);
        loop {
            let pos_mask = self.pos_mask;
            if let Some(s) = self.groups[g].0.iter_mut().find(|s| **s & pos_mask == 0) {
                if *s != FREE {
                    self.tombstones -= 1;
                }
                *s = slot;
                return;
            }
            g = (g + 1) & mask;
        }
    }

    fn rebuild(&mut self, slots: usize, hash_of: &impl Fn(u32) -> u64) {
        let old = std::mem::replace(self, Index::with_slots(slots));
        for group in &old.groups {
            for &s in &group.0 {
                if s & old.pos_mask != 0 {
                    let pos = (s & old.pos_mask) - 1;
                    self.put(hash_of(pos), pos);
                }
            }
        }
        self.live = old.live;
    }

    /// Removes position `pos` (tagged as `hash`).
    pub(super) fn remove(&mut self, hash: u64, pos: u32) {
        let Some((g, i)) = self.locate(hash, |p| p == pos) else { return };
        let group = &mut self.groups[g].0;
        if group.contains(&FREE) {
            group[i] = FREE;
        } else {
            group[i] = !self.pos_mask;
            self.tombstones += 1;
        }
        self.live -= 1;
    }

    /// The entry at `from` (tagged as `hash`) moved to `to`.
    pub(super) fn moved(&mut self, hash: u64, from: u32, to: u32) {
        if let Some((g, i)) = self.locate(hash, |p| p == from) {
            let s = &mut self.groups[g].0[i];
            *s = (*s & !self.pos_mask) | (to + 1);
        }
    }

    pub(super) fn allocation_size(&self) -> usize {
        self.groups.capacity() * std::mem::size_of::<Group>()
    }
}

/// Slots for `entries` at most 7/8 full: a power of two, a group at least.
fn slots_for(entries: usize) -> usize {
    (entries * 8 / 7 + 1).next_power_of_two().max(GROUP)
}

#[cfg(test)]
mod tests {
    use super::Index;
    use std::collections::HashMap;

    fn mix(x: u64) -> u64 {
        let x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^ (x >> 29)
    }

    proptest::proptest! {
        /// Inserts and removes against a map of position -> hash, with
        /// hashes drawn from few values so tags and groups collide.
        #[test]
        fn agrees_with_a_map(ops in proptest::collection::vec((0u8..3, 0u64..64), 0..600), spread in 0u32..3) {
            let mut index = Index::with_capacity(0);
            // Dense positions, as a segment keeps them: removal moves the last.
            let mut hashes: Vec<u64> = Vec::new();
            for (op, k) in ops {
                let hash = match spread { 0 => k, 1 => mix(k % 8), _ => mix(k) };
                match op {
                    0 | 1 => {
                        let pos = hashes.len() as u32;
                        let h = hashes.clone();
                        index.insert(hash, pos, |p| h[p as usize]);
                        hashes.push(hash);
                    }
                    _ if !hashes.is_empty() => {
                        let i = (k as usize) % hashes.len();
                        index.remove(hashes[i], i as u32);
                        let last = hashes.len() - 1;
                        if i != last {
                            index.moved(hashes[last], last as u32, i as u32);
                        }
                        hashes.swap_remove(i);
                    }
                    _ => {}
                }
                let by_pos: HashMap<u32, u64> = hashes.iter().enumerate().map(|(p, &h)| (p as u32, h)).collect();
                for (&p, &h) in &by_pos {
                    proptest::prop_assert_eq!(index.find(h, |q| q == p), Some(p));
                }
                proptest::prop_assert_eq!(index.live, hashes.len());
                proptest::prop_assert_eq!(index.find(u64::MAX - 7, |q| !by_pos.contains_key(&q)), None);
            }
        }
    }

    #[test]
    fn churn_in_one_probe_chain_stays_bounded() {
        // Two groups, every hash starting at the first: it fills, the
        // rest go to the second, removals there leave tombstones, and the
        // load limit rebuilds the index at its size.
        let mut index = Index::with_capacity(20);
        let mut hashes: Vec<u64> = Vec::new();
        for round in 0..2000u64 {
            let hash = round << 20;
            let pos = hashes.len() as u32;
            let h = hashes.clone();
            index.insert(hash, pos, |p| h[p as usize]);
            hashes.push(hash);
            if hashes.len() > 13 {
                let i = (round as usize * 7) % hashes.len();
                let last = hashes.len() as u32 - 1;
                index.remove(hashes[i], i as u32);
                if i as u32 != last {
                    index.moved(hashes[last as usize], last, i as u32);
                }
                hashes.swap_remove(i);
            }
            assert!((index.live + index.tombstones) * 8 <= 32 * 7);
        }
        assert_eq!(index.groups.len(), 2);
        for (p, &h) in hashes.iter().enumerate() {
            assert_eq!(index.find(h, |q| q == p as u32), Some(p as u32));
        }
    }
}
