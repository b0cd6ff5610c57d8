//! RESP2/RESP3 reply encoding, written straight into the connection's (or the
//! cross-core message's) output buffer where the data lives.

/// An output buffer plus the protocol version the client negotiated.
pub struct Reply<'a> {
    pub buf: &'a mut Vec<u8>,
    pub resp3: bool,
}

#[inline]
fn put_len(buf: &mut Vec<u8>, prefix: u8, n: i64) {
    buf.push(prefix);
    buf.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    buf.extend_from_slice(b"\r\n");
}

impl<'a> Reply<'a> {
    pub fn new(buf: &'a mut Vec<u8>, resp3: bool) -> Self {
        Reply { buf, resp3 }
    }

    #[inline]
    pub fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }

    #[inline]
    pub fn simple(&mut self, s: &str) {
        self.buf.push(b'+');
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }

    /// `msg` is the whole error line without the leading '-', e.g.
    /// "ERR syntax error" or "WRONGTYPE Operation ...". Newlines would break
    /// the protocol, so they are replaced as Redis does.
    pub fn error(&mut self, msg: &str) {
        self.buf.push(b'-');
        let start = self.buf.len();
        self.buf.extend_from_slice(msg.as_bytes());
        for b in &mut self.buf[start..] {
            if *b == b'\r' || *b == b'\n' {
                *b = b' ';
            }
        }
        self.buf.extend_from_slice(b"\r\n");
    }

    #[inline]
    pub fn int(&mut self, n: i64) {
        put_len(self.buf, b':', n);
    }

    #[inline]
    pub fn bulk(&mut self, data: &[u8]) {
        put_len(self.buf, b'$', data.len() as i64);
        self.buf.extend_from_slice(data);
        self.buf.extend_from_slice(b"\r\n");
    }

    pub fn bulk_int(&mut self, n: i64) {
        self.bulk(itoa::Buffer::new().format(n).as_bytes());
    }

    /// A missing value: `$-1` in RESP2, `_` in RESP3.
    #[inline]
    pub fn null(&mut self) {
        self.buf.extend_from_slice(if self.resp3 { b"_\r\n" } else { b"$-1\r\n" });
    }

    /// A missing aggregate: `*-1` in RESP2, `_` in RESP3.
    pub fn null_array(&mut self) {
        self.buf.extend_from_slice(if self.resp3 { b"_\r\n" } else { b"*-1\r\n" });
    }

    #[inline]
    pub fn array(&mut self, n: usize) {
        put_len(self.buf, b'*', n as i64);
    }

    /// A map of `n` pairs: `%n` in RESP3, a flat array of 2n in RESP2.
    pub fn map(&mut self, n: usize) {
        if self.resp3 {
            put_len(self.buf, b'%', n as i64);
        } else {
            put_len(self.buf, b'*', 2 * n as i64);
        }
    }

    pub fn set(&mut self, n: usize) {
        put_len(self.buf, if self.resp3 { b'~' } else { b'*' }, n as i64);
    }

    pub fn bool(&mut self, v: bool) {
        if self.resp3 {
            self.buf.extend_from_slice(if v { b"#t\r\n" } else { b"#f\r\n" });
        } else {
            self.int(v as i64);
        }
    }

    /// Text that RESP3 sends as a verbatim string (INFO, CLIENT LIST).
    pub fn verbatim(&mut self, text: &[u8]) {
        if self.resp3 {
            put_len(self.buf, b'=', text.len() as i64 + 4);
            self.buf.extend_from_slice(b"txt:");
            self.buf.extend_from_slice(text);
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.bulk(text);
        }
    }

    pub fn raw(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }
}

/// Redis's exact texts for errors shared by many commands.
pub mod errors {
    pub const SYNTAX: &str = "ERR syntax error";
    pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
    pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
    pub const NOT_FLOAT: &str = "ERR value is not a valid float";
    pub const OVERFLOW: &str = "ERR increment or decrement would overflow";
    pub const NO_SUCH_KEY: &str = "ERR no such key";
    pub const DB_INDEX: &str = "ERR DB index is out of range";
    pub const NOAUTH: &str = "NOAUTH Authentication required.";
    pub const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";
    pub const STRING_TOO_LONG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_both_protocols() {
        let mut b = Vec::new();
        let mut r = Reply::new(&mut b, false);
        r.null();
        r.map(1);
        r.error("ERR a\r\nb");
        assert_eq!(b, b"$-1\r\n*2\r\n-ERR a  b\r\n");
        let mut b = Vec::new();
        let mut r = Reply::new(&mut b, true);
        r.null();
        r.map(1);
        r.bool(true);
        assert_eq!(b, b"_\r\n%1\r\n#t\r\n");
    }
}
