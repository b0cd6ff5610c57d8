//! Sorted sets in Redis 7.0's two encodings. Small sets are one packed,
//! sorted buffer ("listpack"; linear scans, a few bytes per element). Past
//! `zset-max-listpack-entries` elements or a member longer than
//! `zset-max-listpack-value` bytes a set becomes an order-statistic B+tree
//! plus a member → score index ("skiplist"): O(log n) updates, ranks and
//! ranges. Like Redis, a set never converts back, except that results of
//! ZUNIONSTORE and friends get the encoding their contents call for.

mod index;
pub mod pack;
pub mod tree;

pub use pack::cmp_key;
use pack::Pack;
use tree::Tree;

/// The encoding thresholds (from the shard's configuration).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub entries: usize,
    pub value: usize,
}

impl Limits {
    pub fn of(config: &crate::config::Config) -> Limits {
        Limits {
            entries: config.zset_max_listpack_entries.min(usize::MAX as u64) as usize,
            value: config.zset_max_listpack_value.min(usize::MAX as u64) as usize,
        }
    }
}

#[derive(Clone)]
pub enum ZSet {
    Pack(Pack),
    Tree(Box<Tree>),
}

impl Default for ZSet {
    fn default() -> Self {
        ZSet::Pack(Pack::new())
    }
}

/// A listpack stores integral scores as integers: -0 reads back as 0.
#[inline]
fn packed(score: f64) -> f64 {
    if score == 0.0 {
        0.0
    } else {
        score
    }
}

impl ZSet {
    /// An empty set about to receive a first member of `first_len` bytes,
    /// encoded as ZADD creates it.
    pub fn new(limits: Limits, first_len: usize) -> ZSet {
        if limits.entries == 0 || first_len > limits.value {
            ZSet::Tree(Box::default())
        } else {
            ZSet::Pack(Pack::new())
        }
    }

    /// A set of `len` entries given in increasing (score, member) order, the
    /// longest member `max_len` bytes, encoded as Redis encodes a computed
    /// result (ZUNIONSTORE, ZRANGESTORE...).
    pub fn from_sorted<'a>(
        items: impl Iterator<Item = (f64, &'a [u8])>,
        len: usize,
        max_len: usize,
        limits: Limits,
    ) -> ZSet {
        if len <= limits.entries && max_len <= limits.value {
            let mut pack = Pack::new();
            for (score, member) in items {
                pack.push(packed(score), member);
            }
            ZSet::Pack(pack)
        } else {
            ZSet::Tree(Box::new(Tree::from_sorted(items, len)))
        }
    }

    pub fn len(&self) -> usize {
        match self {
            ZSet::Pack(p) => p.len(),
            ZSet::Tree(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            ZSet::Pack(_) => "listpack",
            ZSet::Tree(_) => "skiplist",
        }
    }

    pub fn score(&self, member: &[u8]) -> Option<f64> {
        match self {
            ZSet::Pack(p) => p.find(member).map(|(_, s)| s),
            ZSet::Tree(t) => t.score(member),
        }
    }

    /// (rank, score) of a member.
    pub fn rank(&self, member: &[u8]) -> Option<(usize, f64)> {
        match self {
            ZSet::Pack(p) => p.find(member),
            ZSet::Tree(t) => t.rank(member),
        }
    }

    /// Adds a member known to be absent, converting to the large encoding
    /// first when the small one would exceed its limits.
    pub fn insert(&mut self, score: f64, member: &[u8], limits: Limits) {
        if let ZSet::Pack(p) = self {
            if p.len() < limits.entries && member.len() <= limits.value {
                p.insert(packed(score), member);
                return;
            }
            *self = ZSet::Tree(Box::new(Tree::from_sorted(p.iter(), p.len() + 1)));
        }
        if let ZSet::Tree(t) = self {
            t.insert(score, member);
        }
    }

    /// Moves a present member from score `old` to `new`.
    pub fn rescore(&mut self, member: &[u8], old: f64, new: f64) {
        match self {
            ZSet::Pack(p) => {
                if p.remove(old, member) {
                    p.insert(packed(new), member);
                }
            }
            ZSet::Tree(t) => t.rescore(member, old, new),
        }
    }

    /// Removes a member; its score if it was present.
    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        match self {
            ZSet::Pack(p) => {
                let (_, score) = p.find(member)?;
                p.remove(score, member);
                Some(score)
            }
            ZSet::Tree(t) => t.remove(member),
        }
    }

    /// How many leading elements satisfy `before` (true for a prefix of the
    /// (score, member) order).
    pub fn count_before(&self, before: &dyn Fn(f64, &[u8]) -> bool) -> usize {
        match self {
            ZSet::Pack(p) => p.count_while(before),
            ZSet::Tree(t) => t.count_before(before),
        }
    }

    /// Shows elements from rank `start` upwards (or downwards to rank 0 when
    /// `rev`) to `f` until it returns false.
    pub fn walk<'a>(&'a self, start: usize, rev: bool, f: &mut dyn FnMut(f64, &'a [u8]) -> bool) {
        match self {
            ZSet::Pack(p) => {
                p.walk(start, rev, f);
            }
            ZSet::Tree(t) => t.walk(start, rev, f),
        }
    }

    /// Every element in order.
    pub fn for_each<'a>(&'a self, mut f: impl FnMut(f64, &'a [u8])) {
        self.walk(0, false, &mut |s, m| {
            f(s, m);
            true
        });
    }

    pub fn nth(&self, rank: usize) -> Option<(f64, &[u8])> {
        match self {
            ZSet::Pack(p) => p.nth(rank),
            ZSet::Tree(t) => t.nth(rank),
        }
    }

    /// Removes the elements of ranks `lo..hi`; returns how many went.
    pub fn remove_ranks(&mut self, lo: usize, hi: usize) -> usize {
        match self {
            ZSet::Pack(p) => {
                let before = p.len();
                p.remove_range(lo, hi, &mut |_, _| {});
                before - p.len()
            }
            ZSet::Tree(t) => t.remove_ranks(lo, hi),
        }
    }

    /// Heap bytes owned (for memory accounting).
    pub fn heap_size(&self) -> usize {
        std::mem::size_of::<ZSet>()
            + match self {
                ZSet::Pack(p) => p.heap_size(),
                ZSet::Tree(t) => std::mem::size_of::<Tree>() + t.heap_size(),
            }
    }

    /// Structural invariants of the large encoding (tests).
    #[doc(hidden)]
    pub fn check(&self) -> Result<(), String> {
        match self {
            ZSet::Pack(_) => Ok(()),
            ZSet::Tree(t) => t.check(),
        }
    }
}

impl PartialEq for ZSet {
    fn eq(&self, other: &ZSet) -> bool {
        if self.len() != other.len() || self.encoding() != other.encoding() {
            return false;
        }
        let mut mine = Vec::with_capacity(self.len());
        self.for_each(|s, m| mine.push((s.to_bits(), m.to_vec())));
        let mut same = true;
        let mut i = 0;
        other.for_each(|s, m| {
            same &= mine.get(i).is_some_and(|(bits, member)| *bits == s.to_bits() && member == m);
            i += 1;
        });
        same
    }
}

impl std::fmt::Debug for ZSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ZSet({}, {} elements)", self.encoding(), self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits { entries: 128, value: 64 }
    }

    #[test]
    fn converts_past_the_limits_and_keeps_order() {
        let mut z = ZSet::new(limits(), 1);
        for i in 0..1000u32 {
            let m = format!("m{}", (i * 7919) % 1000);
            let score = ((i * 31) % 97) as f64;
            if z.score(m.as_bytes()).is_none() {
                z.insert(score, m.as_bytes(), limits());
            }
            if i == 127 {
                assert_eq!(z.encoding(), "listpack");
            }
        }
        assert_eq!(z.encoding(), "skiplist");
        assert_eq!(z.len(), 1000);
        z.check().unwrap();
        for i in (0..1000).step_by(3) {
            let m = format!("m{i}");
            let old = z.score(m.as_bytes()).unwrap();
            z.rescore(m.as_bytes(), old, -(i as f64));
        }
        z.check().unwrap();
        for i in (0..1000).step_by(2) {
            assert!(z.remove(format!("m{i}").as_bytes()).is_some());
        }
        z.check().unwrap();
        assert_eq!(z.len(), 500);
        let mut prev: Option<(f64, Vec<u8>)> = None;
        let mut rank = 0;
        z.for_each(|s, m| {
            if let Some((ps, pm)) = &prev {
                assert_eq!(cmp_key(*ps, pm, s, m), std::cmp::Ordering::Less);
            }
            assert_eq!(z.rank(m), Some((rank, s)));
            assert_eq!(z.nth(rank).map(|(_, x)| x.to_vec()), Some(m.to_vec()));
            rank += 1;
            prev = Some((s, m.to_vec()));
        });
        assert_eq!(z.remove_ranks(10, 400), 390);
        z.check().unwrap();
        assert_eq!(z.len(), 110);
        assert_eq!(z.remove_ranks(0, 110), 110);
        assert!(z.is_empty());
    }

    #[test]
    fn negative_zero_is_kept_only_in_the_large_encoding() {
        let mut small = ZSet::new(limits(), 1);
        small.insert(-0.0, b"a", limits());
        assert!(small.score(b"a").unwrap().is_sign_positive());
        let mut big = ZSet::new(Limits { entries: 0, value: 64 }, 1);
        big.insert(-0.0, b"a", limits());
        assert!(big.score(b"a").unwrap().is_sign_negative());
    }

    #[test]
    fn sequential_loads_fill_leaves() {
        let mut z = ZSet::new(Limits { entries: 0, value: 64 }, 1);
        for i in 0..100_000 {
            z.insert(i as f64, format!("member:{i}").as_bytes(), limits());
        }
        z.check().unwrap();
        // ~14 bytes per entry, index 12-byte slots at any load up to 7/8.
        let per = z.heap_size() as f64 / 100_000.0;
        assert!(per < 48.0, "{per} bytes per element");
    }
}
