//! A sorted run of (score, member) entries packed into one byte buffer: the
//! small ("listpack") encoding of a sorted set, and the leaves of the large
//! one. Entries are in (score, member) order. One entry is a varint header
//! (member length << 1 | float flag), the score (a zigzag varint when it is
//! an integer below 2^53, else 8 little-endian bytes), then the member.
//! Lookups are linear scans, as in Redis's listpack: the run is short.

use std::cmp::Ordering;

#[derive(Clone, Default, Debug)]
pub struct Pack {
    buf: Vec<u8>,
    len: u32,
}

/// Scores that are integers of this magnitude or less take a varint.
const INT_LIMIT: f64 = 9_007_199_254_740_992.0;

/// (score, member) order as Redis compares: scores with `<` (so -0 == 0),
/// ties broken by the members' bytes.
#[inline]
pub fn cmp_key(s1: f64, m1: &[u8], s2: f64, m2: &[u8]) -> Ordering {
    if s1 < s2 {
        Ordering::Less
    } else if s1 > s2 {
        Ordering::Greater
    } else {
        m1.cmp(m2)
    }
}

#[inline]
fn as_int(score: f64) -> Option<i64> {
    let exact = score.fract() == 0.0 && score.abs() < INT_LIMIT && (score != 0.0 || score.is_sign_positive());
    exact.then_some(score as i64)
}

#[inline]
fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

#[inline]
fn write_varint(out: &mut [u8], mut v: u64) -> usize {
    let mut n = 0;
    while v >= 0x80 {
        out[n] = v as u8 | 0x80;
        v >>= 7;
        n += 1;
    }
    out[n] = v as u8;
    n + 1
}

#[inline]
fn read_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            return Some(v);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

/// Bytes one entry takes.
pub fn entry_len(score: f64, member: &[u8]) -> usize {
    let head = varint_len((member.len() as u64) << 1);
    let body = match as_int(score) {
        Some(n) => varint_len(((n << 1) ^ (n >> 63)) as u64),
        None => 8,
    };
    head + body + member.len()
}

/// Writes one entry into `out`, which is exactly `entry_len` bytes.
fn encode(out: &mut [u8], score: f64, member: &[u8]) {
    let int = as_int(score);
    let mut n = write_varint(out, (member.len() as u64) << 1 | int.is_none() as u64);
    match int {
        Some(i) => n += write_varint(&mut out[n..], ((i << 1) ^ (i >> 63)) as u64),
        None => {
            out[n..n + 8].copy_from_slice(&score.to_le_bytes());
            n += 8;
        }
    }
    out[n..n + member.len()].copy_from_slice(member);
}

/// The entry at `pos` and where the next one starts.
#[inline]
fn decode(buf: &[u8], pos: usize) -> Option<(f64, &[u8], usize)> {
    let mut p = pos;
    let head = read_varint(buf, &mut p)?;
    let score = if head & 1 == 0 {
        let z = read_varint(buf, &mut p)?;
        ((z >> 1) as i64 ^ -((z & 1) as i64)) as f64
    } else {
        let raw = buf.get(p..p + 8)?;
        p += 8;
        f64::from_le_bytes(raw.try_into().ok()?)
    };
    let end = p.checked_add((head >> 1) as usize)?;
    Some((score, buf.get(p..end)?, end))
}

/// Entries from a byte position on.
pub struct Iter<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (f64, &'a [u8]);
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let (score, member, next) = decode(self.buf, self.pos)?;
        self.pos = next;
        Some((score, member))
    }
}

impl Pack {
    pub fn new() -> Pack {
        Pack::default()
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of encoded entries.
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    pub fn heap_size(&self) -> usize {
        self.buf.capacity()
    }

    pub fn iter(&self) -> Iter<'_> {
        Iter { buf: &self.buf, pos: 0 }
    }

    /// Entries with their byte positions and the position after each.
    fn positions(&self) -> impl Iterator<Item = (usize, f64, &[u8], usize)> {
        let buf = &self.buf[..];
        let mut pos = 0;
        std::iter::from_fn(move || {
            let (score, member, next) = decode(buf, pos)?;
            let at = pos;
            pos = next;
            Some((at, score, member, next))
        })
    }

    pub fn first(&self) -> Option<(f64, &[u8])> {
        self.iter().next()
    }

    /// Byte position of entry `idx` (the end for `idx == len`).
    fn pos_of(&self, idx: usize) -> usize {
        if idx >= self.len() {
            return self.buf.len();
        }
        self.positions().nth(idx).map_or(self.buf.len(), |e| e.0)
    }

    pub fn nth(&self, idx: usize) -> Option<(f64, &[u8])> {
        self.iter().nth(idx)
    }

    /// Index and score of `member`.
    pub fn find(&self, member: &[u8]) -> Option<(usize, f64)> {
        self.iter().enumerate().find(|(_, (_, m))| *m == member).map(|(i, (s, _))| (i, s))
    }

    /// `Ok((index, pos))` of the entry equal to the key, or `Err((index,
    /// pos))` where it would go.
    #[allow(clippy::type_complexity)]
    fn locate(&self, score: f64, member: &[u8]) -> Result<(usize, usize), (usize, usize)> {
        for (i, (at, s, m, _)) in self.positions().enumerate() {
            match cmp_key(s, m, score, member) {
                Ordering::Less => {}
                Ordering::Equal => return Ok((i, at)),
                Ordering::Greater => return Err((i, at)),
            }
        }
        Err((self.len(), self.buf.len()))
    }

    /// Index of the entry equal to the key.
    pub fn index_of(&self, score: f64, member: &[u8]) -> Option<usize> {
        self.locate(score, member).ok().map(|(i, _)| i)
    }

    /// How many leading entries satisfy `before` (true for a prefix).
    pub fn count_while(&self, before: &dyn Fn(f64, &[u8]) -> bool) -> usize {
        self.iter().take_while(|(s, m)| before(*s, m)).count()
    }

    /// Inserts a key that is not present; returns its index, or `None` when
    /// it already was.
    pub fn insert(&mut self, score: f64, member: &[u8]) -> Option<usize> {
        let (idx, pos) = self.locate(score, member).err()?;
        self.insert_at(pos, score, member);
        Some(idx)
    }

    fn insert_at(&mut self, pos: usize, score: f64, member: &[u8]) {
        let n = entry_len(score, member);
        let old = self.buf.len();
        self.buf.reserve_exact(n);
        self.buf.resize(old + n, 0);
        self.buf.copy_within(pos..old, pos + n);
        encode(&mut self.buf[pos..pos + n], score, member);
        self.len += 1;
    }

    /// Appends an entry that sorts after every present one.
    pub fn push(&mut self, score: f64, member: &[u8]) {
        let end = self.buf.len();
        self.insert_at(end, score, member);
    }

    /// Removes the entry equal to the key; false when absent.
    pub fn remove(&mut self, score: f64, member: &[u8]) -> bool {
        let Ok((idx, _)) = self.locate(score, member) else {
            return false;
        };
        self.remove_range(idx, idx + 1, &mut |_, _| {});
        true
    }

    /// Removes entries `lo..hi`, showing each to `removed` first.
    pub fn remove_range(&mut self, lo: usize, hi: usize, removed: &mut dyn FnMut(f64, &[u8])) {
        let hi = hi.min(self.len());
        if lo >= hi {
            return;
        }
        let start = self.pos_of(lo);
        let mut end = start;
        for _ in lo..hi {
            match decode(&self.buf, end) {
                Some((s, m, next)) => {
                    removed(s, m);
                    end = next;
                }
                None => break,
            }
        }
        self.buf.drain(start..end);
        self.len -= (hi - lo) as u32;
        if self.buf.capacity() > 2 * self.buf.len() + 64 {
            self.buf.shrink_to_fit();
        }
    }

    /// Moves entries `at..` into a new pack.
    pub fn split_off(&mut self, at: usize) -> Pack {
        let pos = self.pos_of(at);
        let tail = Pack { buf: self.buf[pos..].to_vec(), len: self.len - at.min(self.len()) as u32 };
        self.buf.truncate(pos);
        self.buf.shrink_to_fit();
        self.len -= tail.len;
        tail
    }

    /// The index splitting the bytes in about equal halves (both non-empty).
    pub fn middle(&self) -> usize {
        let half = self.buf.len() / 2;
        let at = self.positions().position(|e| e.3 >= half).map_or(0, |i| i + 1);
        at.clamp(1, self.len().saturating_sub(1).max(1))
    }

    /// Appends `other`, whose entries all sort after ours.
    pub fn append(&mut self, other: &Pack) {
        self.buf.reserve_exact(other.buf.len());
        self.buf.extend_from_slice(&other.buf);
        self.len += other.len;
    }

    /// Shows entries from index `start` on (or from `start` down to 0 when
    /// `rev`) to `f` until it returns false; false when it did.
    pub fn walk<'a>(&'a self, start: usize, rev: bool, f: &mut dyn FnMut(f64, &'a [u8]) -> bool) -> bool {
        if !rev {
            return self.iter_from(start).all(|(s, m)| f(s, m));
        }
        if start >= self.len() {
            return true;
        }
        let starts: Vec<usize> = self.positions().take(start + 1).map(|e| e.0).collect();
        starts.iter().rev().all(|&pos| match decode(&self.buf, pos) {
            Some((s, m, _)) => f(s, m),
            None => true,
        })
    }

    pub fn iter_from(&self, idx: usize) -> Iter<'_> {
        Iter { buf: &self.buf, pos: self.pos_of(idx) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_orders() {
        let mut p = Pack::new();
        let keys: &[(f64, &[u8])] = &[
            (1.0, b"b"),
            (-5.0, b"neg"),
            (0.1, b"float"),
            (f64::INFINITY, b"inf"),
            (1.0, b"a"),
            (-0.0, b"negzero"),
            (1e300, b""),
            (-9007199254740993.0, b"big"),
        ];
        for (s, m) in keys {
            assert!(p.insert(*s, m).is_some());
        }
        assert!(p.insert(1.0, b"a").is_none());
        let got: Vec<(f64, Vec<u8>)> = p.iter().map(|(s, m)| (s, m.to_vec())).collect();
        let mut want: Vec<(f64, Vec<u8>)> = keys.iter().map(|(s, m)| (*s, m.to_vec())).collect();
        want.sort_by(|a, b| cmp_key(a.0, &a.1, b.0, &b.1));
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.0.to_bits(), w.0.to_bits());
            assert_eq!(g.1, w.1);
        }
        assert_eq!(p.find(b"float"), Some((3, 0.1)));
        let tail = p.split_off(p.middle());
        let mut joined = p.clone();
        joined.append(&tail);
        assert_eq!(joined.iter().count(), keys.len());
        let mut seen = Vec::new();
        joined.walk(5, true, &mut |s, _| {
            seen.push(s);
            true
        });
        assert_eq!(seen.len(), 6);
        joined.remove_range(1, 3, &mut |_, _| {});
        assert_eq!(joined.len(), keys.len() - 2);
        assert!(joined.remove(f64::INFINITY, b"inf"));
        assert!(!joined.remove(f64::INFINITY, b"inf"));
    }
}
