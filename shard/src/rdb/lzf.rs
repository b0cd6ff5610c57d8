//! LZF, the compression of RDB strings (liblzf 3.6 as Redis builds it:
//! HLOG 16, VERY_FAST). Format, one control byte at a time:
//!
//! ```text
//! 000LLLLL <L+1 bytes>          literal run of 1..=32 bytes
//! LLLooooo oooooooo             back reference, L+2 = 3..=8 bytes, offset o+1
//! 111ooooo LLLLLLLL oooooooo    back reference of L+9 bytes
//! ```

use std::cell::RefCell;

const HLOG: u32 = 16;
const HSIZE: usize = 1 << HLOG;
const MAX_LIT: usize = 1 << 5;
const MAX_OFF: usize = 1 << 13;
const MAX_REF: usize = (1 << 8) + (1 << 3);

/// Positions by hash of 3 bytes, tagged with the call that stored them
/// (upper 32 bits), so the table needs no clearing between calls.
struct Table {
    slots: Vec<u64>,
    call: u32,
}

thread_local! {
    static TABLE: RefCell<Table> = const { RefCell::new(Table { slots: Vec::new(), call: 0 }) };
}

#[inline]
fn idx(h: u32) -> usize {
    ((h >> (3 * 8 - HLOG)).wrapping_sub(h.wrapping_mul(5)) as usize) & (HSIZE - 1)
}

/// Compresses `input` into `out` (cleared first) if the result fits in
/// `max_out` bytes; false when it does not (or the input is too large).
pub fn compress(input: &[u8], max_out: usize, out: &mut Vec<u8>) -> bool {
    out.clear();
    if input.len() < 3 || max_out == 0 || input.len() > u32::MAX as usize {
        return false;
    }
    out.resize(max_out, 0);
    let n = TABLE.with(|t| {
        let mut t = t.borrow_mut();
        t.call = t.call.wrapping_add(1);
        if t.slots.is_empty() || t.call == 0 {
            t.slots = vec![0; HSIZE];
            t.call = 1;
        }
        let call = t.call;
        compress_into(input, out, &mut t.slots, call)
    });
    match n {
        Some(n) => {
            out.truncate(n);
            true
        }
        None => {
            out.clear();
            false
        }
    }
}

fn compress_into(input: &[u8], out: &mut [u8], htab: &mut [u64], call: u32) -> Option<usize> {
    let tag = (call as u64) << 32;
    let in_len = input.len();
    let out_len = out.len();
    let mut op = 1; // room for the first literal run's control byte
    let mut lit = 0usize;
    let mut ip = 0usize;
    let mut hval: u32 = (input[0] as u32) << 8 | input[1] as u32;
    while ip + 2 < in_len {
        hval = (hval << 8) | input[ip + 2] as u32;
        let slot = idx(hval);
        let stored = htab[slot];
        htab[slot] = tag | ip as u64;
        // As liblzf: never a reference to position 0 (its empty slot).
        let r = if stored >> 32 == call as u64 { stored as u32 as usize } else { 0 };
        let candidate = r > 0 && r < ip && ip - r - 1 < MAX_OFF && input[r..r + 3] == input[ip..ip + 3];
        if candidate {
            let off = ip - r - 1;
            let maxlen = (in_len - ip - 2).min(MAX_REF);
            if op + 4 >= out_len && op - (lit == 0) as usize + 4 >= out_len {
                return None;
            }
            out[op - lit - 1] = (lit as u8).wrapping_sub(1); // close the run
            op -= (lit == 0) as usize; // or drop it when empty
            let mut len = 3;
            while len < maxlen && input[r + len] == input[ip + len] {
                len += 1;
            }
            len -= 2;
            ip += 1;
            if len < 7 {
                out[op] = ((off >> 8) + (len << 5)) as u8;
                op += 1;
            } else {
                out[op] = ((off >> 8) + (7 << 5)) as u8;
                out[op + 1] = (len - 7) as u8;
                op += 2;
            }
            out[op] = off as u8;
            op += 2; // and room for the next run's control byte
            lit = 0;
            ip += len + 1;
            if ip + 2 >= in_len {
                break;
            }
            // Hash the last two positions of the match (VERY_FAST).
            ip -= 2;
            hval = (input[ip] as u32) << 8 | input[ip + 1] as u32;
            for _ in 0..2 {
                hval = (hval << 8) | input[ip + 2] as u32;
                htab[idx(hval)] = tag | ip as u64;
                ip += 1;
            }
        } else {
            if op >= out_len {
                return None;
            }
            lit += 1;
            out[op] = input[ip];
            op += 1;
            ip += 1;
            if lit == MAX_LIT {
                out[op - lit - 1] = (lit - 1) as u8;
                lit = 0;
                op += 1;
            }
        }
    }
    if op + 3 > out_len {
        return None;
    }
    while ip < in_len {
        lit += 1;
        out[op] = input[ip];
        op += 1;
        ip += 1;
        if lit == MAX_LIT {
            out[op - lit - 1] = (lit - 1) as u8;
            lit = 0;
            op += 1;
        }
    }
    out[op - lit - 1] = (lit as u8).wrapping_sub(1);
    op -= (lit == 0) as usize;
    Some(op)
}

/// Decompresses `input`, which must expand to exactly `expected` bytes.
/// The output grows with what the input really produces, so a lying
/// `expected` costs no more memory than the data itself.
pub fn decompress(input: &[u8], expected: usize) -> Result<Vec<u8>, &'static str> {
    // One input byte yields at most ~88 output bytes (a 3-byte reference
    // of 264); start small and grow.
    let mut out = Vec::with_capacity(expected.min(input.len().saturating_mul(4).saturating_add(64)));
    decompress_into(input, expected, &mut out)?;
    Ok(out)
}

/// [`decompress`] into `out` (cleared first; its capacity is reused).
pub fn decompress_into(input: &[u8], expected: usize, out: &mut Vec<u8>) -> Result<(), &'static str> {
    out.clear();
    let mut ip = 0;
    while ip < input.len() {
        let ctrl = input[ip] as usize;
        ip += 1;
        if ctrl < MAX_LIT {
            let run = ctrl + 1;
            let lits = input.get(ip..ip + run).ok_or("Invalid LZF compressed string")?;
            if out.len() + run > expected {
                return Err("Invalid LZF compressed string");
            }
            out.extend_from_slice(lits);
            ip += run;
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                len += *input.get(ip).ok_or("Invalid LZF compressed string")? as usize;
                ip += 1;
            }
            let low = *input.get(ip).ok_or("Invalid LZF compressed string")? as usize;
            ip += 1;
            let back = ((ctrl & 0x1f) << 8) + low + 1;
            let len = len + 2;
            if back > out.len() || out.len() + len > expected {
                return Err("Invalid LZF compressed string");
            }
            let from = out.len() - back;
            if back >= len {
                out.extend_from_within(from..from + len);
            } else {
                for i in 0..len {
                    let b = out[from + i];
                    out.push(b);
                }
            }
        }
    }
    if out.len() != expected {
        return Err("Invalid LZF compressed string");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(data: &[u8]) {
        let mut packed = Vec::new();
        if compress(data, data.len() + 64, &mut packed) {
            assert_eq!(decompress(&packed, data.len()).unwrap(), data);
        }
    }

    #[test]
    fn compresses_repetitive_data() {
        let data = vec![b'a'; 1000];
        let mut packed = Vec::new();
        assert!(compress(&data, data.len() - 4, &mut packed));
        assert!(packed.len() < 40, "{}", packed.len());
        assert_eq!(decompress(&packed, 1000).unwrap(), data);
        // Incompressible input does not fit in less than its own size.
        let noise: Vec<u8> = (0..200u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        assert!(!compress(&noise, noise.len() - 4, &mut packed));
    }

    #[test]
    fn known_stream_decodes() {
        // "aaaaaaaaaa": literal 'a', then a 9-byte back reference at offset 1.
        assert_eq!(decompress(&[0x00, b'a', 0xe0, 0x00, 0x00], 10).unwrap(), b"aaaaaaaaaa");
        assert!(decompress(&[0x00, b'a', 0xe0, 0x00, 0x00], 11).is_err());
        assert!(decompress(&[0x20, 0x05], 3).is_err()); // reference before the start
        assert!(decompress(&[0x05, b'a'], 6).is_err()); // truncated literal
    }

    proptest! {
        #[test]
        fn any_input_round_trips(data in proptest::collection::vec(any::<u8>(), 0..3000)) {
            round_trip(&data);
        }

        #[test]
        fn repetitive_input_round_trips(unit in proptest::collection::vec(0u8..4, 1..20), n in 1usize..400) {
            let data: Vec<u8> = unit.iter().cycle().take(unit.len() * n).copied().collect();
            round_trip(&data);
        }

        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200), len in 0usize..100_000) {
            let _ = decompress(&data, len);
        }
    }
}
