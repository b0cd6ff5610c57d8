//! A read position over the input (a whole RDB file or a DUMP payload):
//! lengths, strings (verbatim, integer or LZF) and doubles, as `rdb.c`
//! reads them. Nothing is allocated from an announced length before the
//! bytes are there; errors name the absolute offset.

use super::{lzf, RdbError};
use crate::numbers::parse_double;
use std::borrow::Cow;

pub type Result<T> = std::result::Result<T, RdbError>;

/// A read position in the input; errors name the absolute offset.
pub struct Input<'a> {
    data: &'a [u8],
    pub pos: usize,
}

/// A length, or the special string encoding that takes its place.
enum Len {
    Plain(u64),
    Encoded(u8),
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8], pos: usize) -> Input<'a> {
        Input { data, pos }
    }

    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    pub fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    pub fn error(&self, message: impl Into<String>) -> RdbError {
        RdbError::new(self.pos, message)
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.error(format!("unexpected end of input reading {n} bytes")));
        }
        let out = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.bytes(1)?[0])
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N)?);
        Ok(out)
    }

    fn len_or_encoding(&mut self) -> Result<Len> {
        let b = self.u8()?;
        Ok(match b >> 6 {
            0 => Len::Plain((b & 0x3f) as u64),
            1 => Len::Plain(((b as u64 & 0x3f) << 8) | self.u8()? as u64),
            3 => Len::Encoded(b & 0x3f),
            _ => match b {
                0x80 => Len::Plain(u32::from_be_bytes(self.array()?) as u64),
                0x81 => Len::Plain(u64::from_be_bytes(self.array()?)),
                _ => return Err(RdbError::new(self.pos - 1, format!("Unknown length encoding {b}"))),
            },
        })
    }

    /// `rdbLoadLen`.
    pub fn len(&mut self) -> Result<u64> {
        match self.len_or_encoding()? {
            Len::Plain(n) => Ok(n),
            Len::Encoded(_) => Err(RdbError::new(self.pos - 1, "an encoded string where a length was expected")),
        }
    }

    /// A count of things that each take at least one byte: the capacity
    /// to reserve for them, bounded by what is left.
    pub fn capacity(&self, count: u64) -> usize {
        count.min(self.remaining() as u64) as usize
    }

    /// A string: verbatim (borrowed), an integer, or LZF-compressed.
    pub fn string(&mut self) -> Result<Cow<'a, [u8]>> {
        match self.len_or_encoding()? {
            Len::Plain(n) => Ok(Cow::Borrowed(self.bytes(usize::try_from(n).unwrap_or(usize::MAX))?)),
            Len::Encoded(0) => Ok(Cow::Owned(int_string(self.u8()? as i8 as i64))),
            Len::Encoded(1) => Ok(Cow::Owned(int_string(i16::from_le_bytes(self.array()?) as i64))),
            Len::Encoded(2) => Ok(Cow::Owned(int_string(i32::from_le_bytes(self.array()?) as i64))),
            Len::Encoded(3) => {
                let at = self.pos;
                let clen = self.len()?;
                let ulen = self.len()?;
                let packed = self.bytes(usize::try_from(clen).unwrap_or(usize::MAX))?;
                let ulen = usize::try_from(ulen).map_err(|_| RdbError::new(at, "Invalid LZF compressed string"))?;
                lzf::decompress(packed, ulen).map(Cow::Owned).map_err(|e| RdbError::new(at, e))
            }
            Len::Encoded(e) => Err(RdbError::new(self.pos - 1, format!("Unknown RDB string encoding type {e}"))),
        }
    }

    /// Steps over a string without decompressing it.
    pub fn skip_string(&mut self) -> Result<()> {
        match self.len_or_encoding()? {
            Len::Plain(n) => self.bytes(usize::try_from(n).unwrap_or(usize::MAX)).map(drop),
            Len::Encoded(0) => self.bytes(1).map(drop),
            Len::Encoded(1) => self.bytes(2).map(drop),
            Len::Encoded(2) => self.bytes(4).map(drop),
            Len::Encoded(3) => {
                let clen = self.len()?;
                self.len()?;
                self.bytes(usize::try_from(clen).unwrap_or(usize::MAX)).map(drop)
            }
            Len::Encoded(e) => Err(RdbError::new(self.pos - 1, format!("Unknown RDB string encoding type {e}"))),
        }
    }

    /// `rdbLoadDoubleValue`: a length byte (253 NaN, 254 +inf, 255 -inf)
    /// and ASCII digits (RDB_TYPE_ZSET, before RDB 8).
    pub fn ascii_double(&mut self) -> Result<f64> {
        let at = self.pos;
        match self.u8()? {
            255 => Ok(f64::NEG_INFINITY),
            254 => Ok(f64::INFINITY),
            253 => Ok(f64::NAN),
            n => {
                let text = self.bytes(n as usize)?;
                parse_double(text).ok_or_else(|| RdbError::new(at, "Invalid double value"))
            }
        }
    }
}

fn int_string(n: i64) -> Vec<u8> {
    itoa::Buffer::new().format(n).as_bytes().to_vec()
}
