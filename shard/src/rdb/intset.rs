//! Redis's intset blob: the member width in bytes (u32 LE: 2, 4 or 8), the
//! count (u32 LE), then the members ascending, little-endian. The width is
//! kept both ways, as Redis keeps its blob.

use crate::types::intset::IntSet;

pub fn encode(set: &IntSet, out: &mut Vec<u8>) {
    let (width, count) = match set {
        IntSet::W16(v) => (2u32, v.len()),
        IntSet::W32(v) => (4, v.len()),
        IntSet::W64(v) => (8, v.len()),
    };
    out.reserve(8 + width as usize * count);
    out.extend_from_slice(&width.to_le_bytes());
    out.extend_from_slice(&(count as u32).to_le_bytes());
    match set {
        IntSet::W16(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        IntSet::W32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        IntSet::W64(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
    }
}

/// Bytes `encode` writes.
pub fn encoded_len(set: &IntSet) -> usize {
    let width = match set {
        IntSet::W16(_) => 2,
        IntSet::W32(_) => 4,
        IntSet::W64(_) => 8,
    };
    8 + width * set.len()
}

fn members<T: Ord + Copy, const N: usize>(body: &[u8], read: fn([u8; N]) -> T) -> Option<Vec<T>> {
    let v: Vec<T> = body.chunks_exact(N).map(|c| read(c.try_into().unwrap_or([0; N]))).collect();
    // Strictly ascending: sorted and without duplicates.
    v.windows(2).all(|w| w[0] < w[1]).then_some(v)
}

/// `intsetValidateIntegrity` (deep): a known width, the size matching the
/// count, not empty, strictly ascending.
pub fn decode(blob: &[u8]) -> Result<IntSet, &'static str> {
    const BAD: &str = "Intset integrity check failed";
    if blob.len() < 8 {
        return Err(BAD);
    }
    let width = u32::from_le_bytes([blob[0], blob[1], blob[2], blob[3]]) as usize;
    let count = u32::from_le_bytes([blob[4], blob[5], blob[6], blob[7]]) as usize;
    if !matches!(width, 2 | 4 | 8) || count == 0 || 8 + count * width != blob.len() {
        return Err(BAD);
    }
    let body = &blob[8..];
    let set = match width {
        2 => members(body, i16::from_le_bytes).map(IntSet::W16),
        4 => members(body, i32::from_le_bytes).map(IntSet::W32),
        _ => members(body, i64::from_le_bytes).map(IntSet::W64),
    };
    set.ok_or(BAD)
}
