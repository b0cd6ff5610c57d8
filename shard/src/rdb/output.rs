//! Writing RDB's primitives: lengths, strings (integer, LZF or verbatim)
//! and integers as strings, as `rdb.c` writes them; `input.rs` reads them.

use super::{lzf, SaveOptions};
use std::cell::RefCell;

thread_local! {
    static LZF_SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// `rdbSaveLen`: 6, 14, 32 or 64 bits, big-endian past the first byte.
pub(crate) fn write_len(out: &mut Vec<u8>, len: u64) {
    if len < 1 << 6 {
        out.push(len as u8);
    } else if len < 1 << 14 {
        out.extend_from_slice(&[0x40 | (len >> 8) as u8, len as u8]);
    } else if len <= u32::MAX as u64 {
        out.push(0x80);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

/// `rdbEncodeInteger`: 8, 16 or 32-bit integer strings; false past 32 bits.
fn write_int_encoded(out: &mut Vec<u8>, v: i64) -> bool {
    if let Ok(b) = i8::try_from(v) {
        out.extend_from_slice(&[0xc0, b as u8]);
    } else if let Ok(h) = i16::try_from(v) {
        out.push(0xc1);
        out.extend_from_slice(&h.to_le_bytes());
    } else if let Ok(w) = i32::try_from(v) {
        out.push(0xc2);
        out.extend_from_slice(&w.to_le_bytes());
    } else {
        return false;
    }
    true
}

/// `rdbSaveRawString`: integer form when the string is a small canonical
/// integer, LZF when asked and it saves at least 4 bytes, else verbatim.
pub(crate) fn write_string(out: &mut Vec<u8>, s: &[u8], opts: &SaveOptions) {
    if s.len() <= 11 {
        if let Some(n) = crate::args::parse_i64(s) {
            if write_int_encoded(out, n) {
                return;
            }
        }
    }
    if opts.compress && s.len() > 20 && write_lzf(out, s, s.len() - 4, usize::MAX) {
        return;
    }
    write_len(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// `s` as an LZF string if it compresses into `max_out` bytes and the
/// result is at most `max_len` bytes.
pub(crate) fn write_lzf(out: &mut Vec<u8>, s: &[u8], max_out: usize, max_len: usize) -> bool {
    LZF_SCRATCH.with(|scratch| {
        let mut packed = scratch.borrow_mut();
        if !lzf::compress(s, max_out, &mut packed) || packed.len() > max_len {
            return false;
        }
        out.push(0xc3);
        write_len(out, packed.len() as u64);
        write_len(out, s.len() as u64);
        out.extend_from_slice(&packed);
        true
    })
}

/// `rdbSaveLongLongAsStringObject`.
pub(crate) fn write_long(out: &mut Vec<u8>, v: i64) {
    if !write_int_encoded(out, v) {
        let mut buf = itoa::Buffer::new();
        let digits = buf.format(v).as_bytes();
        write_len(out, digits.len() as u64);
        out.extend_from_slice(digits);
    }
}
