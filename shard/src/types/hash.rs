//! The hash type: `listpack` (a `Pack` of field, value, field, value... in
//! insertion order, searched linearly) while small, `hashtable` (a `SegMap`
//! of pairs) past `hash-max-listpack-entries` fields or a field or value
//! longer than `hash-max-listpack-value`. The conversion is one-way, as in
//! Redis.

use super::pack::{decode, Enc, Item, Pack};
use super::segmap::SegMap;

/// Redis's listpack safety limit: a listpack never grows past 1GB.
const PACK_SAFETY: usize = 1 << 30;

/// The thresholds that pick the encoding (from the configuration).
#[derive(Clone, Copy, Debug)]
pub struct HashLimits {
    pub max_entries: usize,
    pub max_value: usize,
}

#[derive(Clone)]
pub enum Hash {
    Pack(Pack),
    Table(Box<SegMap>),
}

impl Default for Hash {
    fn default() -> Self {
        Hash::Pack(Pack::default())
    }
}

/// Byte offsets of a field and of its value in a pack.
fn find_in_pack(p: &Pack, field: &[u8]) -> Option<(usize, usize)> {
    let at = p.find(&Enc::new(field), 2)?;
    Some((at, at + p.at(at)?.len()))
}

impl Hash {
    pub fn len(&self) -> usize {
        match self {
            Hash::Pack(p) => p.count() / 2,
            Hash::Table(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            Hash::Pack(_) => "listpack",
            Hash::Table(_) => "hashtable",
        }
    }

    pub fn get(&self, field: &[u8]) -> Option<Item<'_>> {
        match self {
            Hash::Pack(p) => {
                let (_, v) = find_in_pack(p, field)?;
                p.at(v).map(decode)
            }
            Hash::Table(t) => t.get(field),
        }
    }

    pub fn contains(&self, field: &[u8]) -> bool {
        match self {
            Hash::Pack(p) => p.find(&Enc::new(field), 2).is_some(),
            Hash::Table(t) => t.contains(field),
        }
    }

    /// Converts to a hash table when adding strings of these lengths would
    /// break the listpack limits (Redis's hashTypeTryConversion).
    pub fn prepare(&mut self, lens: impl Iterator<Item = usize>, limits: &HashLimits) {
        let Hash::Pack(p) = self else { return };
        let mut sum = p.bytes();
        for len in lens {
            if len > limits.max_value {
                return self.convert();
            }
            sum += len;
        }
        if sum > PACK_SAFETY {
            self.convert();
        }
    }

    /// Sets `field` to `value`; true when the field is new.
    pub fn set(&mut self, field: &[u8], value: &[u8], limits: &HashLimits) -> bool {
        if let Hash::Pack(p) = self {
            let long = field.len() > limits.max_value || value.len() > limits.max_value;
            if long || p.bytes() + field.len() + value.len() > PACK_SAFETY {
                self.convert();
            }
        }
        match self {
            Hash::Pack(p) => {
                let ev = Enc::new(value);
                if let Some((_, v)) = find_in_pack(p, field) {
                    p.replace(v, &ev);
                    return false;
                }
                p.push(&Enc::new(field));
                p.push(&ev);
                if p.count() / 2 > limits.max_entries {
                    self.convert();
                }
                true
            }
            Hash::Table(t) => t.insert(field, Some(value)),
        }
    }

    /// Removes `field`; true when it was present.
    pub fn remove(&mut self, field: &[u8]) -> bool {
        match self {
            Hash::Pack(p) => match find_in_pack(p, field) {
                Some((f, _)) => {
                    p.remove(f, 2);
                    true
                }
                None => false,
            },
            Hash::Table(t) => t.remove(field),
        }
    }

    fn convert(&mut self) {
        let Hash::Pack(p) = self else { return };
        let mut t = SegMap::new(true);
        let mut elems = p.elems();
        let mut scratch = (itoa::Buffer::new(), itoa::Buffer::new());
        while let (Some(f), Some(v)) = (elems.next(), elems.next()) {
            let (f, v) = (decode(f), decode(v));
            t.insert(f.bytes(&mut scratch.0), Some(v.bytes(&mut scratch.1)));
        }
        *self = Hash::Table(Box::new(t));
    }

    /// Every (field, value), in listpack order for small hashes.
    pub fn iter(&self) -> HashIter<'_> {
        match self {
            Hash::Pack(p) => HashIter::Pack(Pairs(p.elems())),
            Hash::Table(t) => HashIter::Table(Box::new(t.iter().map(|r| (r.key, r.value)))),
        }
    }

    /// A random (field, value).
    pub fn random(&self, mut rnd: impl FnMut() -> u64) -> Option<(Item<'_>, Item<'_>)> {
        match self {
            Hash::Pack(p) => {
                let n = p.count() / 2;
                if n == 0 {
                    return None;
                }
                Pairs(p.elems()).nth((rnd() % n as u64) as usize)
            }
            Hash::Table(t) => t.random(rnd).map(|r| (r.key, r.value)),
        }
    }

    pub fn heap_size(&self) -> usize {
        std::mem::size_of::<Hash>()
            + match self {
                Hash::Pack(p) => p.heap_size(),
                Hash::Table(t) => std::mem::size_of::<SegMap>() + t.heap_size(),
            }
    }
}

/// Pairs of elements of a field/value pack.
pub struct Pairs<'a>(super::pack::Elems<'a>);

impl<'a> Iterator for Pairs<'a> {
    type Item = (Item<'a>, Item<'a>);
    fn next(&mut self) -> Option<Self::Item> {
        Some((decode(self.0.next()?), decode(self.0.next()?)))
    }
}

pub enum HashIter<'a> {
    Pack(Pairs<'a>),
    Table(Box<dyn Iterator<Item = (Item<'a>, Item<'a>)> + 'a>),
}

impl<'a> Iterator for HashIter<'a> {
    type Item = (Item<'a>, Item<'a>);
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            HashIter::Pack(p) => p.next(),
            HashIter::Table(t) => t.next(),
        }
    }
}

impl PartialEq for Hash {
    /// Same fields with the same values, whatever the encoding.
    fn eq(&self, other: &Self) -> bool {
        let mut scratch = itoa::Buffer::new();
        self.len() == other.len() && self.iter().all(|(f, v)| other.get(f.bytes(&mut scratch)) == Some(v))
    }
}

impl std::fmt::Debug for Hash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hash({}, {} fields)", self.encoding(), self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HashLimits = HashLimits { max_entries: 4, max_value: 8 };

    #[test]
    fn converts_one_way_past_the_limits() {
        let mut h = Hash::default();
        assert!(h.set(b"a", b"1", &LIMITS));
        assert!(!h.set(b"a", b"22", &LIMITS));
        assert!(h.set(b"b", b"x", &LIMITS));
        assert_eq!(h.encoding(), "listpack");
        assert_eq!(h.get(b"a").map(|i| i.to_vec()), Some(b"22".to_vec()));
        h.set(b"c", b"longer than eight", &LIMITS);
        assert_eq!(h.encoding(), "hashtable");
        assert!(h.remove(b"c"));
        assert_eq!(h.encoding(), "hashtable");
        assert_eq!(h.len(), 2);
        let mut small = Hash::default();
        for f in ["1", "2", "3", "4"] {
            small.set(f.as_bytes(), b"v", &LIMITS);
        }
        assert_eq!(small.encoding(), "listpack");
        small.set(b"5", b"v", &LIMITS);
        assert_eq!(small.encoding(), "hashtable");
        let fields: Vec<Vec<u8>> = {
            let mut f: Vec<_> = small.iter().map(|(f, _)| f.to_vec()).collect();
            f.sort();
            f
        };
        assert_eq!(fields, ["1", "2", "3", "4", "5"].map(|s| s.as_bytes().to_vec()));
    }
}
