//! The compact element codec shared by the small and large encodings of
//! hashes and sets, and `Pack`: a flat byte vector of encoded elements (the
//! role Redis's listpack plays).
//!
//! Every element is stored in one canonical form, so two elements are equal
//! exactly when their encoded bytes are equal, and lookups compare bytes
//! without decoding. Strings that are canonical integers (Redis's
//! `string2ll`) are stored as integers, like listpack does:
//!
//! | header        | element                                        |
//! |---------------|------------------------------------------------|
//! | `0x00..=0x7f` | string of that length, bytes follow            |
//! | `0x80..=0xbf` | integer 0..=63 held in the header              |
//! | `0xc1..=0xc8` | integer in `header - 0xc0` little-endian bytes |
//! | `0xf0`        | LEB128 length, then the string's bytes         |
//!
//! No back-length as in listpack: the encodings are walked forwards only.

use crate::args::parse_i64;

const SHORT_MAX: usize = 0x7f;
const TINY_INT: u8 = 0x80;
const INT: u8 = 0xc0;
const LONG: u8 = 0xf0;

/// A decoded element. Encodings are canonical, so two elements are the same
/// string exactly when they are equal as `Item`s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Item<'a> {
    Str(&'a [u8]),
    Int(i64),
}

impl<'a> Item<'a> {
    /// A command argument as an element: canonical integers become `Int`.
    pub fn arg(s: &'a [u8]) -> Item<'a> {
        match parse_i64(s) {
            Some(n) => Item::Int(n),
            None => Item::Str(s),
        }
    }

    /// The element's string form; integers are formatted into `scratch`.
    #[inline]
    pub fn bytes<'b>(&self, scratch: &'b mut itoa::Buffer) -> &'b [u8]
    where
        'a: 'b,
    {
        match *self {
            Item::Str(s) => s,
            Item::Int(n) => scratch.format(n).as_bytes(),
        }
    }

    pub fn to_vec(&self) -> Vec<u8> {
        self.bytes(&mut itoa::Buffer::new()).to_vec()
    }

    pub fn len(&self) -> usize {
        match *self {
            Item::Str(s) => s.len(),
            Item::Int(n) => itoa::Buffer::new().format(n).len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn as_int(&self) -> Option<i64> {
        match *self {
            Item::Int(n) => Some(n),
            Item::Str(_) => None,
        }
    }
}

/// A string in its canonical encoding: `head` then `body`, without copying
/// the body.
#[derive(Clone, Copy)]
pub struct Enc<'a> {
    head: [u8; 11],
    head_len: u8,
    body: &'a [u8],
}

impl<'a> Enc<'a> {
    pub fn new(s: &'a [u8]) -> Enc<'a> {
        match parse_i64(s) {
            Some(n) => Enc::int(n),
            None => Enc::string(s),
        }
    }

    /// An integer element (always a canonical integer string).
    pub fn int(n: i64) -> Enc<'static> {
        let mut head = [0u8; 11];
        if (0..64).contains(&n) {
            head[0] = TINY_INT + n as u8;
            return Enc { head, head_len: 1, body: &[] };
        }
        // Fewest bytes that keep the sign when sign-extended back.
        let bytes = (1..8).find(|&b| n >> (8 * b - 1) == 0 || n >> (8 * b - 1) == -1).unwrap_or(8);
        head[0] = INT + bytes as u8;
        head[1..=bytes].copy_from_slice(&n.to_le_bytes()[..bytes]);
        Enc { head, head_len: bytes as u8 + 1, body: &[] }
    }

    /// The encoding of a decoded element.
    pub fn of(item: Item<'a>) -> Enc<'a> {
        match item {
            Item::Int(n) => Enc::int(n),
            Item::Str(s) => Enc::string(s),
        }
    }

    fn string(s: &'a [u8]) -> Enc<'a> {
        let mut head = [0u8; 11];
        if s.len() <= SHORT_MAX {
            head[0] = s.len() as u8;
            return Enc { head, head_len: 1, body: s };
        }
        head[0] = LONG;
        let mut n = s.len() as u64;
        let mut i = 1;
        loop {
            let more = n >= 0x80;
            head[i] = (n as u8 & 0x7f) | ((more as u8) << 7);
            i += 1;
            n >>= 7;
            if !more {
                break;
            }
        }
        Enc { head, head_len: i as u8, body: s }
    }

    #[inline]
    pub fn head(&self) -> &[u8] {
        &self.head[..self.head_len as usize]
    }

    /// Encoded length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.head_len as usize + self.body.len()
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether `raw` (one encoded element) is this element.
    #[inline]
    pub fn matches(&self, raw: &[u8]) -> bool {
        let h = self.head_len as usize;
        raw.len() == h + self.body.len() && raw[..h] == self.head[..h] && raw[h..] == *self.body
    }

    /// The bytes after the header (a string's content; empty for integers).
    pub fn body(&self) -> &'a [u8] {
        self.body
    }

    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.head());
        out.extend_from_slice(self.body);
    }

    pub fn write_at(&self, out: &mut [u8]) {
        let h = self.head_len as usize;
        out[..h].copy_from_slice(self.head());
        out[h..h + self.body.len()].copy_from_slice(self.body);
    }
}

/// Length of the encoded element starting `buf`, or `None` when `buf` does
/// not start with a whole element.
#[inline]
pub fn elem_len(buf: &[u8]) -> Option<usize> {
    let h = *buf.first()?;
    let len = match h {
        0..=0x7f => 1 + h as usize,
        0x80..=0xbf => 1,
        0xc1..=0xc8 => 1 + (h - INT) as usize,
        LONG => {
            let (n, used) = read_varint(buf.get(1..)?)?;
            1 + used + n
        }
        _ => return None,
    };
    (len <= buf.len()).then_some(len)
}

fn read_varint(buf: &[u8]) -> Option<(usize, usize)> {
    let mut n = 0usize;
    for (i, &b) in buf.iter().enumerate().take(10) {
        n |= ((b & 0x7f) as usize).checked_shl(7 * i as u32)?;
        if b & 0x80 == 0 {
            return Some((n, i + 1));
        }
    }
    None
}

/// Decodes the element that `raw` holds exactly (as sliced by `elem_len`).
#[inline]
pub fn decode(raw: &[u8]) -> Item<'_> {
    let Some(&h) = raw.first() else {
        return Item::Str(&[]);
    };
    match h {
        0..=0x7f => Item::Str(raw.get(1..).unwrap_or_default()),
        0x80..=0xbf => Item::Int((h - TINY_INT) as i64),
        0xc1..=0xc8 => {
            let bytes = raw.get(1..).unwrap_or_default();
            let mut le = [0u8; 8];
            let n = bytes.len().min(8);
            le[..n].copy_from_slice(&bytes[..n]);
            // Sign-extend from the top byte stored.
            let shift = 64 - 8 * n as u32;
            Item::Int(i64::from_le_bytes(le).wrapping_shl(shift).wrapping_shr(shift))
        }
        _ => {
            let body = raw.get(1..).and_then(|b| read_varint(b).map(|(_, used)| &b[used..]));
            Item::Str(body.unwrap_or_default())
        }
    }
}

/// Walks encoded elements from the start of `buf`: each element's bytes.
pub struct Elems<'a> {
    buf: &'a [u8],
}

impl<'a> Elems<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Elems { buf }
    }
}

impl<'a> Iterator for Elems<'a> {
    type Item = &'a [u8];
    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        let n = elem_len(self.buf)?;
        let (raw, rest) = self.buf.split_at(n);
        self.buf = rest;
        Some(raw)
    }
}

/// A flat sequence of encoded elements that grows exactly as needed (one
/// reallocation per insert, like listpack).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Pack {
    buf: Vec<u8>,
    count: u32,
}

impl Pack {
    /// Number of elements.
    #[inline]
    pub fn count(&self) -> usize {
        self.count as usize
    }

    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    pub fn heap_size(&self) -> usize {
        self.buf.capacity()
    }

    /// The encoded elements, back to back.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// A pack over `buf`, which holds exactly `count` encoded elements (a
    /// list node's decompressed bytes).
    pub fn from_parts(buf: Vec<u8>, count: usize) -> Pack {
        Pack { buf, count: count as u32 }
    }

    /// The byte buffer back, for reuse.
    pub fn into_buf(self) -> Vec<u8> {
        self.buf
    }

    /// Splits at byte offset `pos` (an element boundary): `self` keeps the
    /// elements before it, the returned pack holds the rest.
    pub fn split_off(&mut self, pos: usize) -> Pack {
        let tail = self.buf.split_off(pos.min(self.buf.len()));
        let count = Elems::new(&tail).count();
        self.count -= count as u32;
        self.buf.shrink_to_fit();
        Pack { buf: tail, count: count as u32 }
    }

    /// Appends `other`'s elements.
    pub fn append(&mut self, other: &Pack) {
        self.reserve(other.buf.len());
        self.buf.extend_from_slice(&other.buf);
        self.count += other.count;
    }

    /// Keeps the elements for which `keep` (called once per element, in
    /// order) is true; returns how many were removed.
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8]) -> bool) -> usize {
        let (mut read, mut write, mut removed) = (0, 0, 0);
        while let Some(n) = self.buf.get(read..).and_then(elem_len) {
            if keep(&self.buf[read..read + n]) {
                self.buf.copy_within(read..read + n, write);
                write += n;
            } else {
                removed += 1;
            }
            read += n;
        }
        self.buf.truncate(write);
        self.count -= removed as u32;
        if removed > 0 && self.buf.capacity() > 64 && self.buf.len() < self.buf.capacity() / 2 {
            self.buf.shrink_to_fit();
        }
        removed
    }

    /// Every element's raw bytes, in order.
    pub fn elems(&self) -> Elems<'_> {
        Elems::new(&self.buf)
    }

    /// Byte offset of the first element at an even/odd position (`stride` 2
    /// skips values in a field/value pack) that is `e`.
    pub fn find(&self, e: &Enc, stride: usize) -> Option<usize> {
        let mut pos = 0;
        let mut rest = &self.buf[..];
        loop {
            let n = elem_len(rest)?;
            if e.matches(&rest[..n]) {
                return Some(pos);
            }
            let mut skip = n;
            for _ in 1..stride {
                skip += elem_len(&rest[skip..])?;
            }
            pos += skip;
            rest = &rest[skip..];
        }
    }

    /// Byte offset of the `n`th element.
    pub fn nth_pos(&self, n: usize) -> Option<usize> {
        let mut pos = 0;
        for _ in 0..n {
            pos += elem_len(self.buf.get(pos..)?)?;
        }
        (pos < self.buf.len()).then_some(pos)
    }

    /// The element at byte offset `pos`.
    pub fn at(&self, pos: usize) -> Option<&[u8]> {
        let rest = self.buf.get(pos..)?;
        Some(&rest[..elem_len(rest)?])
    }

    pub fn push(&mut self, e: &Enc) {
        self.reserve(e.len());
        e.write_to(&mut self.buf);
        self.count += 1;
    }

    fn reserve(&mut self, more: usize) {
        if self.buf.capacity() - self.buf.len() < more {
            self.buf.reserve_exact(more);
        }
    }

    /// Inserts `e` at byte offset `pos` (an element boundary or the end).
    pub fn insert(&mut self, pos: usize, e: &Enc) {
        self.reserve(e.len());
        let mut bytes = [0u8; 11];
        let head = e.head();
        bytes[..head.len()].copy_from_slice(head);
        self.buf.splice(pos..pos, bytes[..head.len()].iter().copied().chain(e.body().iter().copied()));
        self.count += 1;
    }

    /// Byte offsets of every element, in order (for walking backwards).
    pub fn offsets(&self) -> Vec<usize> {
        let mut out = Vec::with_capacity(self.count as usize);
        let mut pos = 0;
        while let Some(n) = self.buf.get(pos..).and_then(elem_len) {
            out.push(pos);
            pos += n;
        }
        out
    }

    /// Replaces the element at `pos` with `e`.
    pub fn replace(&mut self, pos: usize, e: &Enc) {
        let Some(old) = self.at(pos).map(<[u8]>::len) else { return };
        let new = e.len();
        if new > old {
            self.reserve(new - old);
        }
        if new != old {
            self.buf.splice(pos..pos + old, std::iter::repeat_n(0, new));
        }
        e.write_at(&mut self.buf[pos..pos + new]);
    }

    /// Removes `n` consecutive elements starting at byte offset `pos`.
    pub fn remove(&mut self, pos: usize, n: usize) {
        let mut end = pos;
        for _ in 0..n {
            match self.buf.get(end..).and_then(elem_len) {
                Some(len) => end += len,
                None => return,
            }
        }
        self.buf.drain(pos..end);
        self.count -= n as u32;
        // Give memory back once the buffer is mostly empty.
        if self.buf.capacity() > 64 && self.buf.len() < self.buf.capacity() / 2 {
            self.buf.shrink_to_fit();
        }
    }
}

impl std::fmt::Debug for Pack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.elems().map(decode)).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(s: &[u8]) -> (usize, Vec<u8>) {
        let e = Enc::new(s);
        let mut out = Vec::new();
        e.write_to(&mut out);
        assert_eq!(elem_len(&out), Some(out.len()), "{:?}", String::from_utf8_lossy(s));
        assert!(e.matches(&out));
        (out.len(), decode(&out).to_vec())
    }

    #[test]
    fn canonical_forms_round_trip() {
        let long = vec![b'x'; 300];
        let cases: Vec<(&[u8], usize)> = vec![
            (b"", 1),
            (b"a", 2),
            (b"0", 1),
            (b"63", 1),
            (b"64", 2),
            (b"-1", 2),
            (b"127", 2),
            (b"128", 3),
            (b"-128", 2),
            (b"-129", 3),
            (b"9223372036854775807", 9),
            (b"-9223372036854775808", 9),
            (b"01", 3),
            (b"-0", 3),
            (b"+1", 3),
            (b"9223372036854775808", 20),
            (&long, 303),
        ];
        for (s, len) in cases {
            assert_eq!(round_trip(s), (len, s.to_vec()), "{:?}", String::from_utf8_lossy(s));
        }
        for n in [-70000i64, -32769, -32768, 255, 256, 65535, 1 << 40, i64::MIN + 1] {
            let s = n.to_string();
            assert_eq!(round_trip(s.as_bytes()).1, s.as_bytes());
        }
    }

    #[test]
    fn pack_find_replace_remove() {
        let mut p = Pack::default();
        for s in ["f1", "v1", "f2", "100000", "f3", "v3"] {
            p.push(&Enc::new(s.as_bytes()));
        }
        assert_eq!(p.count(), 6);
        let f2 = p.find(&Enc::new(b"f2"), 2).unwrap();
        assert!(p.find(&Enc::new(b"v1"), 2).is_none());
        assert!(p.find(&Enc::new(b"v1"), 1).is_some());
        let v2 = f2 + p.at(f2).unwrap().len();
        p.replace(v2, &Enc::new(b"a much longer value"));
        p.replace(v2, &Enc::new(b"7"));
        let all: Vec<Vec<u8>> = p.elems().map(|r| decode(r).to_vec()).collect();
        assert_eq!(all, ["f1", "v1", "f2", "7", "f3", "v3"].map(|s| s.as_bytes().to_vec()));
        p.remove(f2, 2);
        assert_eq!(p.count(), 4);
        assert!(p.find(&Enc::new(b"f3"), 2).is_some());
        assert!(p.find(&Enc::new(b"f2"), 2).is_none());
    }
}
