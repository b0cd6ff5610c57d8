//! The set type. Redis 7.0 reports two encodings: `intset` while every
//! member is an integer and there are at most `set-max-intset-entries`,
//! `hashtable` otherwise. A `hashtable` set is kept as a `Pack` while it is
//! small (what Redis 7.2 calls a listpack set), then as a `SegMap`: both
//! report `hashtable`, the order of members is unspecified either way.
//! Conversions only go forward (intset, pack, table), as in Redis.

use super::intset::{self, IntSet};
use super::pack::{decode, Elems, Enc, Item, Pack};
use super::segmap::SegMap;

/// A small `hashtable` set stays packed up to this many members...
const PACK_MAX_ENTRIES: usize = 128;
/// ...each at most this long.
const PACK_MAX_ITEM: usize = 64;

#[derive(Clone)]
pub enum Set {
    Ints(IntSet),
    Pack(Pack),
    Table(Box<SegMap>),
}

/// String form of an element, for the table (which hashes strings).
fn with_bytes<R>(item: Item, f: impl FnOnce(&[u8]) -> R) -> R {
    let mut scratch = itoa::Buffer::new();
    f(item.bytes(&mut scratch))
}

impl Set {
    /// An empty set of the encoding Redis creates for a first member
    /// (`setTypeCreate`).
    pub fn for_member(first: &[u8]) -> Set {
        match Item::arg(first) {
            Item::Int(_) => Set::Ints(IntSet::default()),
            Item::Str(_) => Set::Pack(Pack::default()),
        }
    }

    /// An empty intset, where Redis builds the results of set operations.
    pub fn new_intset() -> Set {
        Set::Ints(IntSet::default())
    }

    pub fn len(&self) -> usize {
        match self {
            Set::Ints(s) => s.len(),
            Set::Pack(p) => p.count(),
            Set::Table(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            Set::Ints(_) => "intset",
            Set::Pack(_) | Set::Table(_) => "hashtable",
        }
    }

    pub fn contains(&self, member: &[u8]) -> bool {
        self.contains_item(Item::arg(member))
    }

    pub fn contains_item(&self, item: Item) -> bool {
        match (self, item) {
            (Set::Ints(s), Item::Int(n)) => s.contains(n),
            (Set::Ints(_), Item::Str(_)) => false,
            (Set::Pack(p), _) => p.find(&Enc::of(item), 1).is_some(),
            (Set::Table(t), _) => with_bytes(item, |b| t.contains(b)),
        }
    }

    /// Adds a member; true when it is new. `max_intset` is
    /// `set-max-intset-entries`.
    pub fn add(&mut self, member: &[u8], max_intset: usize) -> bool {
        self.add_item(Item::arg(member), max_intset)
    }

    pub fn add_item(&mut self, item: Item, max_intset: usize) -> bool {
        match (&mut *self, item) {
            (Set::Ints(s), Item::Int(n)) => {
                let added = s.insert(n);
                if added && s.len() > max_intset {
                    self.grow(0);
                }
                added
            }
            (Set::Ints(_), Item::Str(s)) => {
                self.grow(s.len());
                self.add_item(item, max_intset)
            }
            (Set::Pack(p), _) => {
                let e = Enc::of(item);
                if p.find(&e, 1).is_some() {
                    return false;
                }
                if p.count() < PACK_MAX_ENTRIES && item.len() <= PACK_MAX_ITEM {
                    p.push(&e);
                    return true;
                }
                self.grow(item.len());
                self.add_item(item, max_intset)
            }
            (Set::Table(t), _) => with_bytes(item, |b| t.insert(b, None)),
        }
    }

    /// Moves to the next encoding that can take one more member of `len`
    /// bytes (intset to pack or table, pack to table).
    fn grow(&mut self, len: usize) {
        let fits_pack = self.len() < PACK_MAX_ENTRIES && len <= PACK_MAX_ITEM;
        let next = match self {
            Set::Ints(s) if fits_pack => {
                let mut p = Pack::default();
                s.iter().for_each(|n| p.push(&Enc::int(n)));
                Set::Pack(p)
            }
            Set::Table(_) => return,
            _ => {
                let mut t = SegMap::new(false);
                for item in self.iter() {
                    with_bytes(item, |b| t.insert(b, None));
                }
                Set::Table(Box::new(t))
            }
        };
        *self = next;
    }

    /// Removes a member; true when it was present.
    pub fn remove(&mut self, member: &[u8]) -> bool {
        match (self, Item::arg(member)) {
            (Set::Ints(s), Item::Int(n)) => s.remove(n),
            (Set::Ints(_), Item::Str(_)) => false,
            (Set::Pack(p), item) => match p.find(&Enc::of(item), 1) {
                Some(pos) => {
                    p.remove(pos, 1);
                    true
                }
                None => false,
            },
            (Set::Table(t), _) => t.remove(member),
        }
    }

    /// Members: ascending for an intset, insertion order for a small
    /// `hashtable` set, unspecified for a large one.
    pub fn iter(&self) -> SetIter<'_> {
        match self {
            Set::Ints(s) => SetIter::Ints(s.iter()),
            Set::Pack(p) => SetIter::Pack(p.elems()),
            Set::Table(t) => SetIter::Table(Box::new(t.iter().map(|r| r.key))),
        }
    }

    pub fn random(&self, mut rnd: impl FnMut() -> u64) -> Option<Item<'_>> {
        let n = self.len() as u64;
        if n == 0 {
            return None;
        }
        match self {
            Set::Ints(s) => s.get((rnd() % n) as usize).map(Item::Int),
            Set::Pack(p) => p.elems().nth((rnd() % n) as usize).map(decode),
            Set::Table(t) => t.random(rnd).map(|r| r.key),
        }
    }

    /// Removes and returns a random member's string form.
    pub fn pop(&mut self, rnd: impl FnMut() -> u64) -> Option<Vec<u8>> {
        let member = self.random(rnd)?.to_vec();
        self.remove(&member);
        Some(member)
    }

    pub fn heap_size(&self) -> usize {
        std::mem::size_of::<Set>()
            + match self {
                Set::Ints(s) => s.heap_size(),
                Set::Pack(p) => p.heap_size(),
                Set::Table(t) => std::mem::size_of::<SegMap>() + t.heap_size(),
            }
    }
}

pub enum SetIter<'a> {
    Ints(intset::Iter<'a>),
    Pack(Elems<'a>),
    Table(Box<dyn Iterator<Item = Item<'a>> + 'a>),
}

impl<'a> Iterator for SetIter<'a> {
    type Item = Item<'a>;
    #[inline]
    fn next(&mut self) -> Option<Item<'a>> {
        match self {
            SetIter::Ints(i) => i.next().map(Item::Int),
            SetIter::Pack(e) => e.next().map(decode),
            SetIter::Table(t) => t.next(),
        }
    }
}

impl PartialEq for Set {
    /// Same members, whatever the encoding.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|m| other.contains_item(m))
    }
}

impl std::fmt::Debug for Set {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Set({}, {} members)", self.encoding(), self.len())
    }
}

/// The members common to every set, in the iteration order of the smallest
/// (Redis's SINTER), at most `limit` of them (0: no limit).
pub fn intersection<'a>(sets: &[&'a Set], limit: usize) -> Vec<Item<'a>> {
    let mut order: Vec<&Set> = sets.to_vec();
    order.sort_by_key(|s| s.len());
    let Some((first, rest)) = order.split_first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for m in first.iter() {
        if rest.iter().all(|s| s.contains_item(m)) {
            out.push(m);
            if out.len() == limit {
                break;
            }
        }
    }
    out
}

/// The union of the sets, built as Redis builds it (from an intset).
pub fn union(sets: &[&Set], max_intset: usize) -> Set {
    let mut out = Set::new_intset();
    for s in sets {
        for m in s.iter() {
            out.add_item(m, max_intset);
        }
    }
    out
}

/// Members of the first set in none of the others.
pub fn difference(first: &Set, others: &[&Set], max_intset: usize) -> Set {
    let mut out = Set::new_intset();
    for m in first.iter() {
        if !others.iter().any(|s| s.contains_item(m)) {
            out.add_item(m, max_intset);
        }
    }
    out
}

/// A set holding `items`, built from an intset.
pub fn from_items<'a>(items: impl IntoIterator<Item = Item<'a>>, max_intset: usize) -> Set {
    let mut out = Set::new_intset();
    for m in items {
        out.add_item(m, max_intset);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(s: &Set) -> Vec<Vec<u8>> {
        s.iter().map(|m| m.to_vec()).collect()
    }

    #[test]
    fn encodings_move_forward() {
        let mut s = Set::for_member(b"3");
        for m in ["3", "1", "2", "1"] {
            s.add(m.as_bytes(), 512);
        }
        assert_eq!((s.encoding(), s.len()), ("intset", 3));
        assert_eq!(members(&s), [b"1", b"2", b"3"]);
        s.add(b"a", 512);
        assert!(matches!(s, Set::Pack(_)));
        assert_eq!(s.encoding(), "hashtable");
        assert!(s.contains(b"2") && s.contains(b"a") && !s.contains(b"b"));
        for i in 0..200 {
            s.add(format!("m{i}").as_bytes(), 512);
        }
        assert!(matches!(s, Set::Table(_)));
        assert_eq!(s.len(), 204);
        assert!(s.remove(b"2") && !s.remove(b"2"));
        let mut big = Set::new_intset();
        for i in 0..=512 {
            big.add(i.to_string().as_bytes(), 512);
        }
        assert!(matches!(big, Set::Table(_)));
        let mut few = Set::new_intset();
        for i in 0..3 {
            few.add(i.to_string().as_bytes(), 2);
        }
        assert!(matches!(few, Set::Pack(_)));
        assert_eq!(few.len(), 3);
    }

    #[test]
    fn operations() {
        let mk = |ms: &[&str]| {
            let mut s = Set::new_intset();
            for m in ms {
                s.add(m.as_bytes(), 512);
            }
            s
        };
        let (a, b, c) = (mk(&["1", "2", "3", "x"]), mk(&["2", "3", "4", "x"]), mk(&["3", "x", "9"]));
        let i: Vec<Vec<u8>> = intersection(&[&a, &b, &c], 0).iter().map(|m| m.to_vec()).collect();
        assert_eq!(i, [b"3".to_vec(), b"x".to_vec()]);
        assert_eq!(intersection(&[&a, &b, &c], 1).len(), 1);
        assert_eq!(union(&[&a, &b, &c], 512).len(), 6);
        let d = difference(&a, &[&b], 512);
        assert_eq!((d.encoding(), members(&d)), ("intset", vec![b"1".to_vec()]));
    }
}
