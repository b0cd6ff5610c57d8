//! Reading the ziplists of Redis ≤ 6.2 dumps (lists, small hashes and
//! sorted sets), with `ziplistValidateIntegrity`'s deep checks.
//!
//! Layout: total bytes (u32 LE), offset of the last entry (u32 LE), count
//! (u16 LE, 65535 = unknown), entries, 0xFF. An entry is the previous
//! entry's length (1 byte, or 0xFE and a u32), an encoding, then data.

use crate::types::pack::Item;

const HEADER: usize = 10;
const END: u8 = 0xff;
const BAD: &str = "Ziplist integrity check failed";

/// One entry at `p`: (element, its whole length, its prevlen field).
fn entry(zl: &[u8], p: usize) -> Option<(Item<'_>, usize, usize)> {
    let (prevlen, prevsize) = match *zl.get(p)? {
        0xfe => (u32::from_le_bytes(zl.get(p + 1..p + 5)?.try_into().ok()?) as usize, 5),
        b => (b as usize, 1),
    };
    let e = p + prevsize;
    let enc = *zl.get(e)?;
    let int = |n: usize| -> Option<i64> {
        let bytes = zl.get(e + 1..e + 1 + n)?;
        let v = bytes.iter().rev().fold(0u64, |acc, &x| acc << 8 | x as u64);
        let shift = 64 - 8 * n as u32;
        Some(((v << shift) as i64) >> shift)
    };
    let (item, head, data) = match enc {
        0x00..=0x3f => (None, 1, (enc & 0x3f) as usize),
        0x40..=0x7f => (None, 2, ((enc as usize & 0x3f) << 8) | *zl.get(e + 1)? as usize),
        0x80..=0xbf => {
            let len = u32::from_be_bytes(zl.get(e + 1..e + 5)?.try_into().ok()?) as usize;
            (None, 5, len)
        }
        0xc0 => (Some(int(2)?), 1, 2),
        0xd0 => (Some(int(4)?), 1, 4),
        0xe0 => (Some(int(8)?), 1, 8),
        0xf0 => (Some(int(3)?), 1, 3),
        0xfe => (Some(int(1)?), 1, 1),
        0xf1..=0xfd => (Some((enc & 0x0f) as i64 - 1), 1, 0),
        _ => return None,
    };
    let start = e + head;
    let end = start.checked_add(data)?;
    let item = match item {
        Some(n) => Item::Int(n),
        None => Item::Str(zl.get(start..end)?),
    };
    Some((item, end - p, prevlen))
}

/// Every element of a ziplist, after Redis's deep integrity checks.
pub fn parse(zl: &[u8]) -> Result<Vec<Item<'_>>, &'static str> {
    if zl.len() < HEADER + 1 || zl[zl.len() - 1] != END {
        return Err(BAD);
    }
    let word = |i: usize| u32::from_le_bytes([zl[i], zl[i + 1], zl[i + 2], zl[i + 3]]) as usize;
    let (total, tail) = (word(0), word(4));
    let count = u16::from_le_bytes([zl[8], zl[9]]) as usize;
    let last = zl.len() - 1;
    if total != zl.len() || tail > last {
        return Err(BAD);
    }
    let body = &zl[..last];
    let mut items = Vec::with_capacity(count.min(last / 2));
    let (mut p, mut prev_start, mut prev_size) = (HEADER, None, 0);
    while p < last {
        let (item, size, prevlen) = entry(body, p).ok_or(BAD)?;
        if prevlen != prev_size {
            return Err(BAD);
        }
        items.push(item);
        prev_start = Some(p);
        prev_size = size;
        p += size;
    }
    if prev_start.is_some_and(|s| s != tail) || (count != 65535 && count != items.len()) {
        return Err(BAD);
    }
    Ok(items)
}

/// Builds a ziplist (tests of the loader: Redis 7 never writes one).
#[cfg(test)]
pub fn build(items: &[&[u8]]) -> Vec<u8> {
    let mut out = vec![0u8; HEADER];
    let (mut prev, mut tail) = (0usize, HEADER);
    for s in items {
        let start = out.len();
        tail = start;
        if prev < 254 {
            out.push(prev as u8);
        } else {
            out.push(0xfe);
            out.extend_from_slice(&(prev as u32).to_le_bytes());
        }
        match crate::args::parse_i64(s) {
            Some(n) if (0..=12).contains(&n) => out.push(0xf1 + n as u8),
            Some(n) if i8::try_from(n).is_ok() => out.extend_from_slice(&[0xfe, n as u8]),
            Some(n) if i16::try_from(n).is_ok() => {
                out.push(0xc0);
                out.extend_from_slice(&(n as i16).to_le_bytes());
            }
            Some(n) => {
                out.push(0xe0);
                out.extend_from_slice(&n.to_le_bytes());
            }
            None if s.len() < 64 => {
                out.push(s.len() as u8);
                out.extend_from_slice(s);
            }
            None if s.len() < 16384 => {
                out.extend_from_slice(&[0x40 | (s.len() >> 8) as u8, s.len() as u8]);
                out.extend_from_slice(s);
            }
            None => {
                out.push(0x80);
                out.extend_from_slice(&(s.len() as u32).to_be_bytes());
                out.extend_from_slice(s);
            }
        }
        prev = out.len() - start;
    }
    out.push(END);
    let total = out.len() as u32;
    out[..4].copy_from_slice(&total.to_le_bytes());
    out[4..8].copy_from_slice(&(tail as u32).to_le_bytes());
    out[8..10].copy_from_slice(&(items.len().min(65535) as u16).to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_every_encoding() {
        let long = vec![b'z'; 300];
        let big = vec![b'y'; 20000];
        let items: Vec<&[u8]> = vec![b"a", b"7", b"-100", b"30000", b"-9223372036854775808", &long, &big, b""];
        let zl = build(&items);
        let back: Vec<Vec<u8>> = parse(&zl).unwrap().iter().map(|i| i.to_vec()).collect();
        assert_eq!(back, items.iter().map(|s| s.to_vec()).collect::<Vec<_>>());
        let mut bad = zl.clone();
        bad[4] ^= 1; // the tail offset
        assert!(parse(&bad).is_err());
    }

    proptest! {
        #[test]
        fn corrupted_never_panics(seed in proptest::collection::vec(any::<u8>(), 1..80), flip in any::<usize>(), bit in 0u8..8) {
            let parts: Vec<&[u8]> = seed.chunks(9).collect();
            let mut zl = build(&parts);
            prop_assert_eq!(parse(&zl).unwrap().len(), parts.len());
            let i = flip % zl.len();
            zl[i] ^= 1 << bit;
            let _ = parse(&zl);
            let _ = parse(&zl[..i]);
        }
    }
}
