//! Member → score index of the large sorted-set encoding. It stores no
//! members: a slot is a 32-bit fingerprint of the member's hash plus the
//! score (12 bytes), and a candidate slot is confirmed by finding (score,
//! member) in the tree. Two members with the same fingerprint and score have
//! identical slots, so removing or rescoring "the" slot of a member known to
//! be present never needs the confirmation.

use hashbrown::HashTable;

#[derive(Clone, Copy)]
struct Slot {
    fp: u32,
    lo: u32,
    hi: u32,
}

impl Slot {
    fn new(fp: u32, score: f64) -> Slot {
        let bits = score.to_bits();
        Slot { fp, lo: bits as u32, hi: (bits >> 32) as u32 }
    }

    #[inline]
    fn bits(&self) -> u64 {
        (self.hi as u64) << 32 | self.lo as u64
    }

    #[inline]
    fn score(&self) -> f64 {
        f64::from_bits(self.bits())
    }
}

/// The table's hash, derived from the fingerprint alone so the table can
/// grow without the members.
#[inline]
fn spread(fp: u32) -> u64 {
    (fp as u64 | (fp as u64) << 32).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

#[derive(Clone)]
pub struct Index {
    table: HashTable<Slot>,
    hasher: ahash::RandomState,
}

impl Default for Index {
    fn default() -> Self {
        Index { table: HashTable::new(), hasher: ahash::RandomState::new() }
    }
}

impl Index {
    #[inline]
    fn fp(&self, member: &[u8]) -> u32 {
        let h = self.hasher.hash_one(member);
        (h >> 32) as u32 ^ h as u32
    }

    /// The score of `member`: `present(score)` confirms a candidate.
    pub fn find(&self, member: &[u8], present: impl Fn(f64) -> bool) -> Option<f64> {
        let fp = self.fp(member);
        self.table.find(spread(fp), |s| s.fp == fp && present(s.score())).map(Slot::score)
    }

    /// Adds a member known to be absent.
    pub fn insert(&mut self, member: &[u8], score: f64) {
        let fp = self.fp(member);
        self.table.insert_unique(spread(fp), Slot::new(fp, score), |s| spread(s.fp));
    }

    /// Removes a member known to be present with `score`.
    pub fn remove(&mut self, member: &[u8], score: f64) {
        let fp = self.fp(member);
        let bits = score.to_bits();
        if let Ok(entry) = self.table.find_entry(spread(fp), |s| s.fp == fp && s.bits() == bits) {
            entry.remove();
        }
    }

    /// Shrinks the table after many removals, as Redis resizes its dict.
    pub fn maybe_shrink(&mut self) {
        if self.table.capacity() > 64 && self.table.len() < self.table.capacity() / 8 {
            self.table.shrink_to_fit(|s| spread(s.fp));
        }
    }

    /// Changes the score of a member known to be present with `old`.
    pub fn rescore(&mut self, member: &[u8], old: f64, new: f64) {
        let fp = self.fp(member);
        let bits = old.to_bits();
        if let Some(slot) = self.table.find_mut(spread(fp), |s| s.fp == fp && s.bits() == bits) {
            *slot = Slot::new(fp, new);
        }
    }

    pub fn reserve(&mut self, additional: usize) {
        self.table.reserve(additional, |s| spread(s.fp));
    }

    pub fn heap_size(&self) -> usize {
        self.table.allocation_size()
    }
}
