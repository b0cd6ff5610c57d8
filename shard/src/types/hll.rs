//! Redis's HyperLogLog representation, byte for byte, so a value written by
//! one server reads the same on the other: a 16-byte header ("HYLL", the
//! encoding, three unused bytes, the cached cardinality little endian with
//! its top bit meaning "stale"), then either 16384 dense 6-bit registers or
//! the sparse run-length opcodes ZERO (00xxxxxx), XZERO (01xxxxxx yyyyyyyy)
//! and VAL (1vvvvvxx). The estimator is Redis 7's (Ertl's "new" estimator
//! over the register histogram).
//!
//! Values are never trusted: a user may SET any bytes, so every read is
//! bounds-checked and reading past the end sees 0, as Redis's sds
//! terminator does.

pub const P: u32 = 14;
pub const REGISTERS: usize = 1 << P;
/// Bits of the hash left for the run of zeroes.
const Q: usize = 64 - P as usize;
pub const HDR: usize = 16;
pub const DENSE_SIZE: usize = HDR + REGISTERS * 6 / 8;
const DENSE: u8 = 0;
const SPARSE: u8 = 1;
const VAL_MAX_VALUE: u8 = 32;
const VAL_MAX_LEN: usize = 4;
const ZERO_MAX_LEN: usize = 64;
const SEED: u64 = 0xadc8_3b19;
const ALPHA_INF: f64 = 0.721_347_520_444_481_7;

pub const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
pub const CORRUPT: &str = "INVALIDOBJ Corrupted HLL object detected";

/// A sparse representation that does not describe 16384 registers.
#[derive(Debug, PartialEq)]
pub struct Corrupt;

/// Redis's isHLLObjectOrReply on the string bytes (type already checked).
pub fn check(b: &[u8]) -> Result<(), &'static str> {
    let ok = b.len() >= HDR
        && b.starts_with(b"HYLL")
        && match b.get(4) {
            Some(&DENSE) => b.len() == DENSE_SIZE,
            Some(&SPARSE) => true,
            _ => false,
        };
    if ok {
        Ok(())
    } else {
        Err(NOT_HLL)
    }
}

/// An empty HLL: sparse, one XZERO covering every register.
pub fn new_sparse() -> Vec<u8> {
    let mut v = Vec::with_capacity(64);
    v.extend_from_slice(b"HYLL");
    v.push(SPARSE);
    v.extend_from_slice(&[0; 11]);
    push_xzero(&mut v, REGISTERS);
    v
}

pub fn is_dense(v: &[u8]) -> bool {
    v.get(4) == Some(&DENSE)
}

#[inline]
fn at(v: &[u8], i: usize) -> u8 {
    v.get(i).copied().unwrap_or(0)
}

#[inline]
fn put(v: &mut [u8], i: usize, b: u8) {
    if let Some(x) = v.get_mut(i) {
        *x = b;
    }
}

pub fn invalidate_cache(v: &mut [u8]) {
    if let Some(b) = v.get_mut(15) {
        *b |= 0x80;
    }
}

/// The cached cardinality when it is still valid.
pub fn cached(v: &[u8]) -> Option<u64> {
    let card: [u8; 8] = v.get(8..16)?.try_into().ok()?;
    (card[7] & 0x80 == 0).then(|| u64::from_le_bytes(card))
}

pub fn store_cache(v: &mut [u8], card: u64) {
    if let Some(c) = v.get_mut(8..16) {
        c.copy_from_slice(&card.to_le_bytes());
    }
}

/// MurmurHash2, 64-bit, as Redis reads it (little endian blocks).
pub fn murmur64a(key: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (key.len() as u64).wrapping_mul(M);
    let mut blocks = key.chunks_exact(8);
    for block in &mut blocks {
        let mut k = u64::from_le_bytes(block.try_into().unwrap_or([0; 8]));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate() {
            h ^= (b as u64) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register an element maps to and the length of its 0...01 pattern.
pub fn pattern(ele: &[u8]) -> (usize, u8) {
    let hash = murmur64a(ele, SEED);
    let index = (hash as usize) & (REGISTERS - 1);
    // The forced bit bounds the count at Q + 1.
    let rest = (hash >> P) | (1 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

// ---- dense ----------------------------------------------------------------

fn dense_get(regs: &[u8], i: usize) -> u8 {
    let (byte, fb) = (i * 6 / 8, (i * 6) & 7);
    let b0 = at(regs, byte) as u32;
    let b1 = at(regs, byte + 1) as u32;
    (((b0 >> fb) | (b1 << (8 - fb))) & 63) as u8
}

fn dense_put(regs: &mut [u8], i: usize, val: u8) {
    let (byte, fb) = (i * 6 / 8, (i * 6) & 7);
    let v = val as u32;
    if let Some(b) = regs.get_mut(byte) {
        *b = ((*b as u32 & !(63 << fb)) | (v << fb)) as u8;
    }
    if let Some(b) = regs.get_mut(byte + 1) {
        *b = ((*b as u32 & !(63 >> (8 - fb))) | (v >> (8 - fb))) as u8;
    }
}

/// Raises register `i` to `count`; true when it changed.
fn dense_set(v: &mut [u8], i: usize, count: u8) -> bool {
    let regs = v.get_mut(HDR..).unwrap_or_default();
    if count > dense_get(regs, i) {
        dense_put(regs, i, count);
        true
    } else {
        false
    }
}

fn dense_histogram(regs: &[u8], hist: &mut [u32; 64]) {
    // 16 registers in every 12 bytes.
    for c in regs.chunks_exact(12) {
        let Ok(c) = <&[u8; 12]>::try_from(c) else { continue };
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        let w2 = u32::from_le_bytes([c[8], c[9], c[10], c[11]]) as u64;
        for k in 0..10 {
            hist[((w >> (6 * k)) & 63) as usize] += 1;
        }
        hist[(((w >> 60) | (w2 << 4)) & 63) as usize] += 1;
        for k in 0..5 {
            hist[((w2 >> (2 + 6 * k)) & 63) as usize] += 1;
        }
    }
}

// ---- sparse ---------------------------------------------------------------

#[inline]
fn is_zero(b: u8) -> bool {
    b & 0xc0 == 0
}

#[inline]
fn is_xzero(b: u8) -> bool {
    b & 0xc0 == 0x40
}

#[inline]
fn is_val(b: u8) -> bool {
    b & 0x80 != 0
}

#[inline]
fn zero_len(b: u8) -> usize {
    (b & 0x3f) as usize + 1
}

#[inline]
fn xzero_len(b: u8, next: u8) -> usize {
    (((b & 0x3f) as usize) << 8 | next as usize) + 1
}

#[inline]
fn val_value(b: u8) -> u8 {
    ((b >> 2) & 0x1f) + 1
}

#[inline]
fn val_len(b: u8) -> usize {
    (b & 3) as usize + 1
}

#[inline]
fn val_op(value: u8, len: usize) -> u8 {
    0x80 | (value - 1) << 2 | (len as u8 - 1)
}

fn push_xzero(v: &mut impl Extend<u8>, len: usize) {
    let l = len - 1;
    v.extend([(l >> 8) as u8 | 0x40, l as u8]);
}

/// A run of `len` zero registers: ZERO up to 64, XZERO beyond.
fn push_zeros(v: &mut impl Extend<u8>, len: usize) {
    if len > ZERO_MAX_LEN {
        push_xzero(v, len)
    } else {
        v.extend([len as u8 - 1])
    }
}

/// The at most five opcodes replacing a split one, kept off the heap.
#[derive(Default)]
struct Seq {
    buf: [u8; 5],
    len: usize,
}

impl Seq {
    fn push(&mut self, b: u8) {
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = b;
            self.len += 1;
        }
    }

    fn bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }
}

impl Extend<u8> for Seq {
    fn extend<I: IntoIterator<Item = u8>>(&mut self, iter: I) {
        iter.into_iter().for_each(|b| self.push(b));
    }
}

/// One sparse opcode: (registers covered, value, bytes).
#[inline]
fn opcode(v: &[u8], p: usize) -> (usize, u8, usize) {
    let b = at(v, p);
    if is_zero(b) {
        (zero_len(b), 0, 1)
    } else if is_val(b) {
        (val_len(b), val_value(b), 1)
    } else {
        (xzero_len(b, at(v, p + 1)), 0, 2)
    }
}

/// Calls `run(first, len, value)` for every VAL run of a sparse HLL; false
/// when the opcodes do not cover exactly 16384 registers (Redis stops at a
/// VAL run that would overflow).
fn sparse_runs(v: &[u8], mut run: impl FnMut(usize, usize, u8)) -> bool {
    let (mut p, mut idx) = (HDR, 0usize);
    while p < v.len() {
        let (len, value, size) = opcode(v, p);
        if value > 0 {
            if idx + len > REGISTERS {
                return false;
            }
            run(idx, len, value);
        }
        idx += len;
        p += size;
    }
    idx == REGISTERS
}

/// Redis's hllSparseToDense; a dense HLL is left as it is.
pub fn to_dense(v: &mut Vec<u8>) -> Result<(), Corrupt> {
    if is_dense(v) {
        return Ok(());
    }
    let mut dense = vec![0u8; DENSE_SIZE];
    // Magic and cached cardinality carry over.
    dense[..HDR].copy_from_slice(v.get(..HDR).ok_or(Corrupt)?);
    dense[4] = DENSE;
    let regs = &mut dense[HDR..];
    let valid = sparse_runs(v, |first, len, value| {
        for i in first..first + len {
            dense_put(regs, i, value);
        }
    });
    if !valid {
        return Err(Corrupt);
    }
    *v = dense;
    Ok(())
}

/// Redis's hllSparseSet: raises register `index` to `count` in place,
/// splitting the opcode that covers it, merging equal neighbours, and
/// promoting to dense when the value does not fit a VAL opcode or the
/// string would grow past `max_bytes`.
fn sparse_set(v: &mut Vec<u8>, index: usize, count: u8, max_bytes: usize) -> Result<bool, Corrupt> {
    if count > VAL_MAX_VALUE {
        return promote(v, index, count);
    }
    // Step 1: the opcode covering `index`.
    let end = v.len();
    let (mut p, mut first, mut prev, mut span) = (HDR, 0usize, None, 0usize);
    let mut found = false;
    while p < end {
        let (len, _, size) = opcode(v, p);
        span = len;
        if index < first + span {
            found = true;
            break;
        }
        prev = Some(p);
        p += size;
        first += span;
    }
    if !found {
        return Err(Corrupt);
    }
    let b = at(v, p);
    let runlen = span;
    // Step 2: trivial in-place updates.
    if is_val(b) {
        if val_value(b) >= count {
            return Ok(false);
        }
        if runlen == 1 {
            put(v, p, val_op(count, 1));
            return Ok(merge_neighbours(v, prev));
        }
    }
    if is_zero(b) && runlen == 1 {
        put(v, p, val_op(count, 1));
        return Ok(merge_neighbours(v, prev));
    }
    // General case: split the run into up to three opcodes.
    let last = first + span - 1;
    let mut seq = Seq::default();
    if is_val(b) {
        let cur = val_value(b);
        if index != first {
            seq.push(val_op(cur, index - first));
        }
        seq.push(val_op(count, 1));
        if index != last {
            seq.push(val_op(cur, last - index));
        }
    } else {
        if index != first {
            push_zeros(&mut seq, index - first);
        }
        seq.push(val_op(count, 1));
        if index != last {
            push_zeros(&mut seq, last - index);
        }
    }
    // Step 3: replace the old opcode with the sequence.
    let oldlen = if is_xzero(b) { 2 } else { 1 };
    let new_len = end + seq.len - oldlen;
    if new_len > end && new_len > max_bytes {
        return promote(v, index, count);
    }
    v.splice(p..(p + oldlen).min(end), seq.bytes().iter().copied());
    // A truncated XZERO at the very end: Redis's length arithmetic wins.
    v.truncate(new_len);
    Ok(merge_neighbours(v, prev))
}

/// Step 4 of hllSparseSet: merges adjacent VAL opcodes of equal value,
/// scanning up to five opcodes from the one before the change.
fn merge_neighbours(v: &mut Vec<u8>, prev: Option<usize>) -> bool {
    let mut p = prev.unwrap_or(HDR);
    let mut scan = 5;
    while let (Some(&b), true) = (v.get(p), scan > 0) {
        scan -= 1;
        if is_xzero(b) {
            p += 2;
            continue;
        }
        if is_zero(b) {
            p += 1;
            continue;
        }
        if let Some(&n) = v.get(p + 1) {
            if is_val(n) && val_value(b) == val_value(n) {
                let len = val_len(b) + val_len(n);
                if len <= VAL_MAX_LEN {
                    put(v, p + 1, val_op(val_value(b), len));
                    v.remove(p);
                    continue;
                }
            }
        }
        p += 1;
    }
    invalidate_cache(v);
    true
}

fn promote(v: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, Corrupt> {
    to_dense(v)?;
    Ok(dense_set(v, index, count))
}

fn sparse_histogram(v: &[u8], hist: &mut [u32; 64]) -> Result<(), Corrupt> {
    let (mut p, mut idx) = (HDR, 0usize);
    while p < v.len() {
        let (len, value, size) = opcode(v, p);
        // Wrapping: a corrupt value may count past u32; it is rejected below.
        let h = &mut hist[(value & 63) as usize];
        *h = h.wrapping_add(len as u32);
        idx += len;
        p += size;
    }
    if idx == REGISTERS {
        Ok(())
    } else {
        Err(Corrupt)
    }
}

// ---- operations -----------------------------------------------------------

/// Raises register `index` to `count` in either encoding (Redis's
/// hllDenseSet / hllSparseSet); true when a register changed.
pub fn set_register(v: &mut Vec<u8>, index: usize, count: u8, max_bytes: usize) -> Result<bool, Corrupt> {
    if is_dense(v) {
        Ok(dense_set(v, index, count))
    } else {
        sparse_set(v, index, count, max_bytes)
    }
}

/// Adds one element (Redis's hllAdd); true when a register changed.
pub fn add(v: &mut Vec<u8>, ele: &[u8], max_bytes: usize) -> Result<bool, Corrupt> {
    let (index, count) = pattern(ele);
    set_register(v, index, count, max_bytes)
}

/// Merges a checked HLL into `max` (one byte per register), Redis's hllMerge.
pub fn merge(max: &mut [u8], v: &[u8]) -> Result<(), Corrupt> {
    if is_dense(v) {
        let regs = v.get(HDR..).unwrap_or_default();
        for (i, m) in max.iter_mut().enumerate().take(REGISTERS) {
            *m = (*m).max(dense_get(regs, i));
        }
        return Ok(());
    }
    let valid = sparse_runs(v, |first, len, value| {
        for m in max.iter_mut().skip(first).take(len) {
            *m = (*m).max(value);
        }
    });
    if valid {
        Ok(())
    } else {
        Err(Corrupt)
    }
}

/// The estimated cardinality of a checked HLL (Redis's hllCount).
pub fn count(v: &[u8]) -> Result<u64, Corrupt> {
    let mut hist = [0u32; 64];
    if is_dense(v) {
        dense_histogram(v.get(HDR..).unwrap_or_default(), &mut hist);
    } else {
        sparse_histogram(v, &mut hist)?;
    }
    Ok(estimate(&hist))
}

/// The estimated cardinality of registers held one per byte (multi-key
/// PFCOUNT's merged HLL).
pub fn count_registers(max: &[u8]) -> u64 {
    let mut hist = [0u32; 64];
    for &r in max {
        hist[(r & 63) as usize] += 1;
    }
    estimate(&hist)
}

/// Ertl's estimator, "New cardinality estimation algorithms for
/// HyperLogLog sketches" (arXiv:1702.01284), in Redis's operation order so
/// the floating point result is the same.
fn estimate(hist: &[u32; 64]) -> u64 {
    let m = REGISTERS as f64;
    let mut z = m * tau((m - hist[Q + 1] as f64) / m);
    for &h in hist[1..=Q].iter().rev() {
        z += h as f64;
        z *= 0.5;
    }
    z += m * sigma(hist[0] as f64 / m);
    (ALPHA_INF * m * m / z).round() as u64
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let (mut y, mut z) = (1.0, x);
    loop {
        x *= x;
        let prev = z;
        z += x * y;
        y += y;
        if prev == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let (mut y, mut z) = (1.0, 1.0 - x);
    loop {
        x = x.sqrt();
        let prev = z;
        y *= 0.5;
        // pow(1 - x, 2) in Redis, which compilers emit as this product.
        z -= (1.0 - x) * (1.0 - x) * y;
        if prev == z {
            return z / 3.0;
        }
    }
}

// ---- PFDEBUG and PFSELFTEST -----------------------------------------------

/// PFDEBUG DECODE's text of a sparse HLL: "z:len", "Z:len", "v:value,len"
/// per opcode, space separated (Redis walks the bytes as they are).
pub fn decode_sparse(v: &[u8]) -> String {
    let mut out = Vec::new();
    let mut p = HDR;
    while p < v.len() {
        let b = v[p];
        let (len, value, size) = opcode(v, p);
        out.push(match (value, size) {
            (0, 1) if is_zero(b) => format!("z:{len}"),
            (0, _) => format!("Z:{len}"),
            _ => format!("v:{value},{len}"),
        });
        p += size;
    }
    out.join(" ")
}

/// Every register of a dense HLL (PFDEBUG GETREG).
pub fn dense_registers(v: &[u8]) -> Vec<u8> {
    let regs = v.get(HDR..).unwrap_or_default();
    (0..REGISTERS).map(|i| dense_get(regs, i)).collect()
}

/// Redis's pfselftestCommand: dense registers read back what was written
/// (1000 rounds of random values), then 10 million elements added to a dense
/// and a sparse HLL whose counts must agree with each other, stay sparse
/// while small, and stay within six standard errors at each power of ten.
/// `rand` is the caller's random source; `max_bytes` is
/// hll-sparse-max-bytes.
pub fn selftest(mut rand: impl FnMut() -> u64, max_bytes: usize) -> Result<(), String> {
    let mut regs = vec![0u8; DENSE_SIZE - HDR];
    let mut bytes = vec![0u8; REGISTERS];
    for _ in 0..1000 {
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (rand() & 63) as u8;
            dense_put(&mut regs, i, *b);
        }
        for (i, &b) in bytes.iter().enumerate() {
            let got = dense_get(&regs, i);
            if got != b {
                return Err(format!("TESTFAILED Register {i} should be {b} but is {got}"));
            }
        }
    }
    let mut dense = new_sparse();
    to_dense(&mut dense).map_err(|_| "TESTFAILED dense/sparse disagree".to_string())?;
    let mut sparse = new_sparse();
    let relerr = 1.04 / (REGISTERS as f64).sqrt();
    let mut checkpoint: u64 = 1;
    let seed = rand();
    let corrupt = |_| "TESTFAILED dense/sparse disagree".to_string();
    for j in 1..=10_000_000u64 {
        let ele = (j ^ seed).to_ne_bytes();
        add(&mut dense, &ele, max_bytes).map_err(corrupt)?;
        add(&mut sparse, &ele, max_bytes).map_err(corrupt)?;
        if j != checkpoint {
            continue;
        }
        if (j as usize) < max_bytes / 2 && is_dense(&sparse) {
            return Err("TESTFAILED sparse encoding not used".into());
        }
        let card = count(&dense).map_err(corrupt)?;
        if card != count(&sparse).map_err(corrupt)? {
            return Err("TESTFAILED dense/sparse disagree".into());
        }
        let abserr = (checkpoint as i64 - card as i64).unsigned_abs();
        // Cardinality 10 may collide now and then: one off is allowed.
        let maxerr = if j == 10 { 1 } else { (relerr * 6.0 * checkpoint as f64).ceil() as u64 };
        if abserr > maxerr {
            return Err(format!("TESTFAILED Too big error. card:{checkpoint} abserr:{abserr}"));
        }
        checkpoint *= 10;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_redis_bytes() {
        let v = new_sparse();
        assert_eq!(v, b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0\x7f\xff");
        assert_eq!(count(&v), Ok(0));
    }

    #[test]
    fn dense_registers_roundtrip() {
        let mut regs = vec![0u8; REGISTERS * 6 / 8];
        for i in 0..REGISTERS {
            dense_put(&mut regs, i, (i % 64) as u8);
        }
        for i in 0..REGISTERS {
            assert_eq!(dense_get(&regs, i), (i % 64) as u8);
        }
        let mut hist = [0u32; 64];
        dense_histogram(&regs, &mut hist);
        assert!(hist.iter().all(|&h| h == 256));
    }

    #[test]
    fn sparse_and_dense_agree() {
        let mut sparse = new_sparse();
        let mut dense = new_sparse();
        to_dense(&mut dense).unwrap();
        for i in 0..3000u32 {
            let e = i.to_string();
            assert_eq!(add(&mut sparse, e.as_bytes(), 1 << 20), add(&mut dense, e.as_bytes(), 1 << 20));
        }
        assert_eq!(count(&sparse), count(&dense));
        let mut m1 = vec![0u8; REGISTERS];
        let mut m2 = vec![0u8; REGISTERS];
        merge(&mut m1, &sparse).unwrap();
        merge(&mut m2, &dense).unwrap();
        assert_eq!(m1, m2);
        to_dense(&mut sparse).unwrap();
        assert_eq!(sparse[HDR..], dense[HDR..]);
    }

    proptest::proptest! {
        /// Any bytes after a sparse header: every operation answers, none
        /// panics (a user may SET anything).
        #[test]
        fn arbitrary_sparse_bytes_never_panic(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
            elements in proptest::collection::vec(proptest::prelude::any::<u16>(), 0..20),
            max_bytes in 0usize..200,
        ) {
            let mut v = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0".to_vec();
            v.extend_from_slice(&body);
            let _ = count(&v);
            let mut max = vec![0u8; REGISTERS];
            let _ = merge(&mut max, &v);
            for e in &elements {
                let _ = add(&mut v, &e.to_le_bytes(), max_bytes);
                let _ = count(&v);
            }
            let _ = to_dense(&mut v);
            let _ = count(&v);
        }

        /// Whatever the sparse limit, sparse (possibly promoted) and dense
        /// HLLs of the same elements hold the same registers.
        #[test]
        fn sparse_matches_dense(
            elements in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..400),
            max_bytes in 0usize..4000,
        ) {
            let (mut sparse, mut dense) = (new_sparse(), new_sparse());
            to_dense(&mut dense).unwrap();
            for e in &elements {
                let e = e.to_le_bytes();
                proptest::prop_assert_eq!(add(&mut sparse, &e, max_bytes), add(&mut dense, &e, max_bytes));
            }
            proptest::prop_assert!(is_dense(&sparse) || sparse.len() <= max_bytes.max(HDR + 2));
            let (mut m1, mut m2) = (vec![0u8; REGISTERS], vec![0u8; REGISTERS]);
            merge(&mut m1, &sparse).unwrap();
            merge(&mut m2, &dense).unwrap();
            proptest::prop_assert_eq!(&m1, &m2);
            proptest::prop_assert_eq!(count(&sparse), count(&dense));
            proptest::prop_assert_eq!(count_registers(&m1), count(&dense).unwrap());
        }
    }

    #[test]
    fn corrupt_sparse_is_an_error_not_a_panic() {
        let mut v = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0".to_vec();
        assert_eq!(count(&v), Err(Corrupt));
        assert_eq!(add(&mut v, b"a", 3000), Err(Corrupt));
        let mut v = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0\x7f".to_vec();
        let _ = add(&mut v, b"a", 3000);
        let _ = count(&v);
        let mut v = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0\xff\xff\xff\x7f\xff\x7f\xff".to_vec();
        let _ = add(&mut v, b"a", 3000);
        let _ = to_dense(&mut v);
        // Enough XZERO runs to count past u32 (Redis's int would overflow).
        let mut v = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0".to_vec();
        v.extend(std::iter::repeat_n([0x7f, 0xff], 300_000).flatten());
        assert_eq!(count(&v), Err(Corrupt));
        assert_eq!(merge(&mut vec![0u8; REGISTERS], &v), Err(Corrupt));
        assert_eq!(to_dense(&mut v), Err(Corrupt));
    }
}
