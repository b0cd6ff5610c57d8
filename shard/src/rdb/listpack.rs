//! Redis's listpack, byte for byte: building one from elements (RDB
//! encodings of small hashes, sorted sets and list nodes) and reading one
//! back with Redis's deep integrity checks (`lpValidateIntegrity`).
//!
//! Layout: total bytes (u32 LE), element count (u16 LE, 65535 = unknown),
//! entries, 0xFF. An entry is its encoding and data, then its own length
//! again, backwards, for reverse walks ("backlen").

use crate::args::parse_i64;
use crate::types::pack::Item;

const HEADER: usize = 6;
const EOF: u8 = 0xff;
/// `lpSafeToAdd`: a listpack never grows past 1 GB.
pub const MAX_SAFE: usize = 1 << 30;

/// Builds one listpack.
pub struct Writer {
    buf: Vec<u8>,
    count: usize,
}

impl Default for Writer {
    fn default() -> Self {
        Writer::new()
    }
}

impl Writer {
    pub fn new() -> Writer {
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(&[0; HEADER]);
        Writer { buf, count: 0 }
    }

    /// Appends a string; canonical integers are stored as integers, as
    /// `lpAppend` does.
    pub fn push_str(&mut self, s: &[u8]) {
        match parse_i64(s) {
            Some(n) => self.push_int(n),
            None => {
                let start = self.buf.len();
                let len = s.len();
                if len < 64 {
                    self.buf.push(0x80 | len as u8);
                } else if len < 4096 {
                    self.buf.extend_from_slice(&[0xe0 | (len >> 8) as u8, len as u8]);
                } else {
                    self.buf.push(0xf0);
                    self.buf.extend_from_slice(&(len as u32).to_le_bytes());
                }
                self.buf.extend_from_slice(s);
                self.finish_entry(start);
            }
        }
    }

    pub fn push_int(&mut self, v: i64) {
        let start = self.buf.len();
        if (0..=127).contains(&v) {
            self.buf.push(v as u8);
        } else if (-4096..=4095).contains(&v) {
            let u = (v as u64) & 0x1fff;
            self.buf.extend_from_slice(&[0xc0 | (u >> 8) as u8, u as u8]);
        } else if (-32768..=32767).contains(&v) {
            self.buf.push(0xf1);
            self.buf.extend_from_slice(&(v as i16).to_le_bytes());
        } else if (-8_388_608..=8_388_607).contains(&v) {
            self.buf.push(0xf2);
            self.buf.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
        } else if (i32::MIN as i64..=i32::MAX as i64).contains(&v) {
            self.buf.push(0xf3);
            self.buf.extend_from_slice(&(v as i32).to_le_bytes());
        } else {
            self.buf.push(0xf4);
            self.buf.extend_from_slice(&v.to_le_bytes());
        }
        self.finish_entry(start);
    }

    pub fn push(&mut self, item: Item) {
        match item {
            Item::Int(n) => self.push_int(n),
            Item::Str(s) => self.push_str(s),
        }
    }

    fn finish_entry(&mut self, start: usize) {
        let mut back = [0u8; 5];
        let n = encode_backlen(&mut back, (self.buf.len() - start) as u64);
        self.buf.extend_from_slice(&back[..n]);
        self.count += 1;
    }

    /// Bytes so far, terminator included.
    pub fn len(&self) -> usize {
        self.buf.len() + 1
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.buf.push(EOF);
        let total = self.buf.len() as u32;
        self.buf[..4].copy_from_slice(&total.to_le_bytes());
        let count = self.count.min(65535) as u16;
        self.buf[4..6].copy_from_slice(&count.to_le_bytes());
        self.buf
    }
}

/// `lpEncodeBacklen`: the entry length in 1..=5 bytes, read backwards.
fn encode_backlen(buf: &mut [u8; 5], l: u64) -> usize {
    if l <= 127 {
        buf[0] = l as u8;
        1
    } else if l < 16383 {
        buf[0] = (l >> 7) as u8;
        buf[1] = (l & 127) as u8 | 128;
        2
    } else if l < 2_097_151 {
        buf[0] = (l >> 14) as u8;
        buf[1] = ((l >> 7) & 127) as u8 | 128;
        buf[2] = (l & 127) as u8 | 128;
        3
    } else if l < 268_435_455 {
        buf[0] = (l >> 21) as u8;
        buf[1] = ((l >> 14) & 127) as u8 | 128;
        buf[2] = ((l >> 7) & 127) as u8 | 128;
        buf[3] = (l & 127) as u8 | 128;
        4
    } else {
        buf[0] = (l >> 28) as u8;
        buf[1] = ((l >> 21) & 127) as u8 | 128;
        buf[2] = ((l >> 14) & 127) as u8 | 128;
        buf[3] = ((l >> 7) & 127) as u8 | 128;
        buf[4] = (l & 127) as u8 | 128;
        5
    }
}

fn backlen_size(l: u64) -> usize {
    encode_backlen(&mut [0; 5], l)
}

/// `lpDecodeBacklen` over the bytes ending at `end` (exclusive).
fn decode_backlen(buf: &[u8], end: usize) -> Option<u64> {
    let mut val = 0u64;
    let mut shift = 0;
    let mut p = end.checked_sub(1)?;
    loop {
        let b = *buf.get(p)?;
        val |= ((b & 127) as u64) << shift;
        if b & 128 == 0 {
            return Some(val);
        }
        shift += 7;
        if shift > 28 {
            return None;
        }
        p = p.checked_sub(1)?;
    }
}

fn sign_extend(v: u64, bits: u32) -> i64 {
    let shift = 64 - bits;
    ((v << shift) as i64) >> shift
}

/// One entry at `p`: (element, length of encoding + data).
fn entry(lp: &[u8], p: usize) -> Option<(Item<'_>, usize)> {
    let b = *lp.get(p)?;
    let le = |n: usize| -> Option<u64> {
        let bytes = lp.get(p + 1..p + 1 + n)?;
        Some(bytes.iter().rev().fold(0u64, |acc, &x| acc << 8 | x as u64))
    };
    let string = |skip: usize, len: usize| -> Option<(Item<'_>, usize)> {
        let s = lp.get(p + skip..(p + skip).checked_add(len)?)?;
        Some((Item::Str(s), skip + len))
    };
    match b {
        0x00..=0x7f => Some((Item::Int(b as i64), 1)),
        0x80..=0xbf => string(1, (b & 0x3f) as usize),
        0xc0..=0xdf => {
            let v = ((b as u64 & 0x1f) << 8) | *lp.get(p + 1)? as u64;
            Some((Item::Int(sign_extend(v, 13)), 2))
        }
        0xe0..=0xef => {
            let len = ((b as usize & 0xf) << 8) | *lp.get(p + 1)? as usize;
            string(2, len)
        }
        0xf0 => string(5, le(4)? as usize),
        0xf1 => Some((Item::Int(sign_extend(le(2)?, 16)), 3)),
        0xf2 => Some((Item::Int(sign_extend(le(3)?, 24)), 4)),
        0xf3 => Some((Item::Int(sign_extend(le(4)?, 32)), 5)),
        0xf4 => Some((Item::Int(le(8)? as i64), 9)),
        _ => None,
    }
}

/// Every element of a listpack, checked as Redis's deep sanitization
/// does: header size and count, each entry inside the buffer with a
/// matching back-length, the terminator exactly at the end.
pub fn parse(lp: &[u8]) -> Result<Vec<Item<'_>>, &'static str> {
    const BAD: &str = "Listpack integrity check failed";
    if lp.len() < HEADER + 1 || lp[lp.len() - 1] != EOF {
        return Err(BAD);
    }
    let total = u32::from_le_bytes([lp[0], lp[1], lp[2], lp[3]]) as usize;
    let count = u16::from_le_bytes([lp[4], lp[5]]) as usize;
    if total != lp.len() {
        return Err(BAD);
    }
    let last = lp.len() - 1;
    // Each entry takes at least two bytes.
    let mut items = Vec::with_capacity(count.min(last / 2));
    let mut p = HEADER;
    while p < last {
        let (item, len) = entry(&lp[..last], p).ok_or(BAD)?;
        let back = backlen_size(len as u64);
        let next = p + len + back;
        if next > last || decode_backlen(lp, next) != Some(len as u64) {
            return Err(BAD);
        }
        items.push(item);
        p = next;
    }
    if count != 65535 && count != items.len() {
        return Err(BAD);
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn redis_bytes() {
        // A listpack Redis 7.0 writes for HSET h a 1 (checked with DUMP).
        let mut w = Writer::new();
        w.push_str(b"a");
        w.push_str(b"1");
        assert_eq!(w.finish(), b"\x0c\x00\x00\x00\x02\x00\x81a\x02\x01\x01\xff");
        for v in [0i64, 127, 128, -1, -4096, 4095, 4096, -32768, 32767, 32768, -8_388_608, 1 << 23, 1 << 31, i64::MIN] {
            let mut w = Writer::new();
            w.push_int(v);
            w.push_str(v.to_string().as_bytes());
            let lp = w.finish();
            assert_eq!(parse(&lp).unwrap(), vec![Item::Int(v), Item::Int(v)], "{v}");
        }
        for len in [0usize, 63, 64, 4095, 4096, 20000] {
            let s = vec![b'x'; len];
            let mut w = Writer::new();
            w.push_str(&s);
            let lp = w.finish();
            assert_eq!(parse(&lp).unwrap(), vec![Item::Str(&s)], "{len}");
        }
    }

    proptest! {
        #[test]
        fn round_trip(items in proptest::collection::vec(prop_oneof![
            any::<i64>().prop_map(|n| n.to_string().into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..300),
        ], 0..40)) {
            let mut w = Writer::new();
            for s in &items {
                w.push_str(s);
            }
            let lp = w.finish();
            let back: Vec<Vec<u8>> = parse(&lp).unwrap().iter().map(|i| i.to_vec()).collect();
            prop_assert_eq!(back, items);
        }

        #[test]
        fn corrupted_never_panics(seed in proptest::collection::vec(any::<u8>(), 1..60), flip in any::<usize>(), bit in 0u8..8) {
            let mut w = Writer::new();
            for chunk in seed.chunks(7) {
                w.push_str(chunk);
            }
            let mut lp = w.finish();
            let i = flip % lp.len();
            lp[i] ^= 1 << bit;
            let _ = parse(&lp);
            let _ = parse(&lp[..i]);
        }
    }
}
