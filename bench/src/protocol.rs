//! RESP2 command encoding and an incremental, allocation-light reply parser.
//!
//! The parser works on whatever bytes have arrived so far: it returns
//! `Ok(None)` for an incomplete reply (the caller reads more and retries from
//! the same offset), so replies split across reads need no extra state.

use std::fmt;

/// Bulk strings longer than this are treated as protocol errors (Redis'
/// own `proto-max-bulk-len` default), so a corrupt length can't make us buffer
/// forever.
pub const MAX_BULK_LEN: usize = 512 * 1024 * 1024;
/// Nesting limit for arrays; keeps hostile input from exhausting the stack.
pub const MAX_DEPTH: usize = 32;

/// A parsed reply borrowing from the read buffer. `$-1`, `*-1` and RESP3 `_`
/// all map to `Nil`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply<'a> {
    Simple(&'a [u8]),
    Error(&'a [u8]),
    Integer(i64),
    Bulk(&'a [u8]),
    Nil,
    Array(Vec<Reply<'a>>),
}

impl Reply<'_> {
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtocolError(pub &'static str);

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RESP protocol error: {}", self.0)
    }
}

impl std::error::Error for ProtocolError {}

pub type ParseResult<'a> = Result<Option<(Reply<'a>, usize)>, ProtocolError>;

/// Parses one reply from the start of `buf`; on success returns it with the
/// number of bytes it occupied.
pub fn parse_reply(buf: &[u8]) -> ParseResult<'_> {
    parse_at(buf, 0, 0)
}

fn parse_at(buf: &[u8], pos: usize, depth: usize) -> ParseResult<'_> {
    let Some(&tag) = buf.get(pos) else {
        return Ok(None);
    };
    let Some(line_end) = find_crlf(buf, pos + 1) else {
        return Ok(None);
    };
    let line = &buf[pos + 1..line_end];
    let next = line_end + 2;
    match tag {
        b'+' => Ok(Some((Reply::Simple(line), next))),
        b'-' => Ok(Some((Reply::Error(line), next))),
        b':' => Ok(Some((Reply::Integer(parse_int(line)?), next))),
        b'_' if line.is_empty() => Ok(Some((Reply::Nil, next))),
        b'$' => {
            let len = parse_int(line)?;
            if len == -1 {
                return Ok(Some((Reply::Nil, next)));
            }
            let len = usize::try_from(len).map_err(|_| ProtocolError("negative bulk length"))?;
            if len > MAX_BULK_LEN {
                return Err(ProtocolError("bulk length too large"));
            }
            let end = next + len;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(ProtocolError("bulk string not terminated by CRLF"));
            }
            Ok(Some((Reply::Bulk(&buf[next..end]), end + 2)))
        }
        b'*' => {
            let n = parse_int(line)?;
            if n == -1 {
                return Ok(Some((Reply::Nil, next)));
            }
            let n = usize::try_from(n).map_err(|_| ProtocolError("negative array length"))?;
            if depth >= MAX_DEPTH {
                return Err(ProtocolError("arrays nested too deeply"));
            }
            // Every element needs at least 3 bytes, so a count the buffer can't
            // possibly hold yet means "wait", not "allocate".
            if n > (buf.len() - next) / 3 {
                return Ok(None);
            }
            let mut items = Vec::with_capacity(n);
            let mut at = next;
            for _ in 0..n {
                match parse_at(buf, at, depth + 1)? {
                    Some((item, after)) => {
                        items.push(item);
                        at = after;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Array(items), at)))
        }
        _ => Err(ProtocolError("unknown reply type byte")),
    }
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    let rest = buf.get(from..)?;
    rest.windows(2).position(|w| w == b"\r\n").map(|i| from + i)
}

/// Strict decimal parser for RESP lengths and integers.
pub fn parse_int(s: &[u8]) -> Result<i64, ProtocolError> {
    let (neg, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 19 {
        return Err(ProtocolError("invalid integer"));
    }
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return Err(ProtocolError("invalid integer"));
        }
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(i64::from(d - b'0')))
            .ok_or(ProtocolError("integer overflow"))?;
    }
    Ok(if neg { -v } else { v })
}

/// Appends `*<n>\r\n`.
#[inline]
pub fn encode_array_header(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends `$<len>\r\n`; the caller then writes `len` bytes and `\r\n`.
#[inline]
pub fn encode_bulk_header(out: &mut Vec<u8>, len: usize) {
    out.push(b'$');
    out.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
    out.extend_from_slice(b"\r\n");
}

#[inline]
pub fn encode_bulk(out: &mut Vec<u8>, arg: &[u8]) {
    encode_bulk_header(out, arg.len());
    out.extend_from_slice(arg);
    out.extend_from_slice(b"\r\n");
}

/// Encodes a whole command as a RESP array of bulk strings.
pub fn encode_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    encode_array_header(out, args.len());
    for a in args {
        encode_bulk(out, a);
    }
}
