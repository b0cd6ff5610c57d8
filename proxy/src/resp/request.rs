//! Parses client requests out of the connection's read buffer. Arguments are
//! byte ranges into that buffer (no copies); a frame split over several reads
//! is resumed where it stopped rather than parsed again from its start.

use shard::config::split_args;
use std::borrow::Cow;

/// Longest line (inline command or `*`/`$` header) Redis accepts.
const INLINE_MAX: usize = 64 * 1024;

/// Redis's PROTO_MBULK_BIG_ARG: a bulk at least this long is read into room
/// made for exactly it (`RequestParser::big_bulk_end`).
pub const BIG_ARG: usize = 32 * 1024;

pub struct Limits {
    pub proto_max_bulk_len: u64,
    /// Requirepass is set and the client has not authenticated: Redis then
    /// accepts only small frames.
    pub unauthenticated: bool,
}

#[derive(Debug, PartialEq)]
pub enum Parsed {
    /// A complete command: its arguments are in `args()`, in the read buffer
    /// (or in `inline_buf()` when `inline`).
    Command { inline: bool },
    /// More bytes are needed.
    Incomplete,
    /// A protocol error: reply with this text, then close the connection.
    Error(Cow<'static, [u8]>),
}

#[derive(Default)]
pub struct RequestParser {
    /// Start of the frame being parsed.
    start: usize,
    /// Where parsing resumes.
    pos: usize,
    /// Arguments of the current multibulk still to read; 0 outside one.
    remaining: u64,
    in_multibulk: bool,
    /// Length of the bulk whose header was read but whose data has not.
    bulk: Option<usize>,
    args: Vec<(u32, u32)>,
    inline: Vec<u8>,
}

fn find_crlf_start(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?.iter().position(|&b| b == b'\r').map(|i| from + i)
}

/// Redis's string2ll on a header line.
fn header_number(s: &[u8]) -> Option<i64> {
    shard::args::parse_i64(s)
}

impl RequestParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Arguments of the command last returned.
    pub fn args(&self) -> &[(u32, u32)] {
        &self.args
    }

    /// Storage of inline commands' (unescaped) arguments.
    pub fn inline_buf(&self) -> &[u8] {
        &self.inline
    }

    /// Bytes of `buf` fully consumed by returned commands.
    pub fn consumed(&self) -> usize {
        self.start
    }

    /// Where the bulk being read ends in the buffer (its data and CRLF)
    /// when its header announced a big argument (at least `BIG_ARG`
    /// bytes): the buffer needs room up to there, and no more for it.
    pub fn big_bulk_end(&self) -> Option<usize> {
        match self.bulk {
            Some(len) if self.in_multibulk && len >= BIG_ARG => Some(self.pos + len + 2),
            _ => None,
        }
    }

    /// The caller dropped the first `n` consumed bytes of its buffer.
    pub fn shift(&mut self, n: usize) {
        debug_assert!(n <= self.start);
        self.start -= n;
        self.pos -= n;
        if self.in_multibulk {
            // A frame in progress: its arguments so far move with the bytes.
            for r in &mut self.args {
                r.0 -= n as u32;
                r.1 -= n as u32;
            }
        } else {
            // The last command returned lay in the dropped bytes.
            self.args.clear();
        }
    }

    /// Parses the next command in `buf` (the whole unconsumed buffer, which
    /// only ever grows at its end between calls).
    pub fn next(&mut self, buf: &[u8], limits: &Limits) -> Parsed {
        loop {
            if !self.in_multibulk && self.pos == self.start {
                self.args.clear();
                if self.start >= buf.len() {
                    return Parsed::Incomplete;
                }
                if buf[self.start] != b'*' {
                    match self.inline(buf) {
                        Some(Ok(true)) => return Parsed::Command { inline: true },
                        Some(Ok(false)) => continue, // empty line
                        Some(Err(e)) => return Parsed::Error(e),
                        None => return Parsed::Incomplete,
                    }
                }
            }
            match self.multibulk(buf, limits) {
                Ok(Some(true)) => return Parsed::Command { inline: false },
                Ok(Some(false)) => continue, // empty multibulk
                Ok(None) => return Parsed::Incomplete,
                Err(e) => return Parsed::Error(e),
            }
        }
    }

    fn finish_frame(&mut self) {
        self.start = self.pos;
        self.in_multibulk = false;
        self.bulk = None;
        self.remaining = 0;
    }

    /// Some(Ok(true)) command, Some(Ok(false)) empty line, None incomplete.
    fn inline(&mut self, buf: &[u8]) -> Option<Result<bool, Cow<'static, [u8]>>> {
        let rest = &buf[self.start..];
        let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
            if rest.len() > INLINE_MAX {
                return Some(Err(Cow::Borrowed(b"ERR Protocol error: too big inline request")));
            }
            return None;
        };
        let mut line = &rest[..nl];
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        self.pos = self.start + nl + 1;
        let parsed = split_args(line);
        self.finish_frame();
        let Some(words) = parsed else {
            return Some(Err(Cow::Borrowed(b"ERR Protocol error: unbalanced quotes in request")));
        };
        if words.is_empty() {
            return Some(Ok(false));
        }
        self.inline.clear();
        self.args.clear();
        for w in words {
            let s = self.inline.len() as u32;
            self.inline.extend_from_slice(&w);
            self.args.push((s, self.inline.len() as u32));
        }
        Some(Ok(true))
    }

    /// Ok(Some(true)) command, Ok(Some(false)) empty, Ok(None) incomplete.
    fn multibulk(&mut self, buf: &[u8], limits: &Limits) -> Result<Option<bool>, Cow<'static, [u8]>> {
        if !self.in_multibulk {
            let Some(cr) = find_crlf_start(buf, self.start) else {
                if buf.len() - self.start > INLINE_MAX {
                    return Err(Cow::Borrowed(b"ERR Protocol error: too big mbulk count string"));
                }
                return Ok(None);
            };
            if cr + 1 >= buf.len() {
                return Ok(None); // the '\n' has not arrived yet
            }
            let n = header_number(&buf[self.start + 1..cr]);
            let n = match n {
                Some(n) if n <= i32::MAX as i64 => n,
                _ => return Err(Cow::Borrowed(b"ERR Protocol error: invalid multibulk length")),
            };
            if n > 10 && limits.unauthenticated {
                return Err(Cow::Borrowed(b"ERR Protocol error: unauthenticated multibulk length"));
            }
            self.pos = cr + 2;
            if n <= 0 {
                self.finish_frame();
                return Ok(Some(false));
            }
            self.in_multibulk = true;
            self.remaining = n as u64;
            self.args.clear();
        }
        while self.remaining > 0 {
            let len = match self.bulk {
                Some(len) => len,
                None => {
                    let Some(cr) = find_crlf_start(buf, self.pos) else {
                        if buf.len() - self.pos > INLINE_MAX {
                            return Err(Cow::Borrowed(b"ERR Protocol error: too big bulk count string"));
                        }
                        return Ok(None);
                    };
                    if cr + 1 >= buf.len() {
                        return Ok(None);
                    }
                    if buf[self.pos] != b'$' {
                        return Err(expected_dollar(buf[self.pos]));
                    }
                    let len = match header_number(&buf[self.pos + 1..cr]) {
                        Some(l) if l >= 0 && (l as u64) <= limits.proto_max_bulk_len => l as usize,
                        _ => return Err(Cow::Borrowed(b"ERR Protocol error: invalid bulk length")),
                    };
                    if len > 16384 && limits.unauthenticated {
                        return Err(Cow::Borrowed(b"ERR Protocol error: unauthenticated bulk length"));
                    }
                    self.pos = cr + 2;
                    self.bulk = Some(len);
                    len
                }
            };
            // Redis skips the two bytes after the data without checking them.
            if buf.len() < self.pos + len + 2 {
                return Ok(None);
            }
            if self.pos + len > u32::MAX as usize {
                return Err(Cow::Borrowed(b"ERR Protocol error: invalid bulk length"));
            }
            self.args.push((self.pos as u32, (self.pos + len) as u32));
            self.pos += len + 2;
            self.bulk = None;
            self.remaining -= 1;
        }
        self.finish_frame();
        Ok(Some(true))
    }
}

/// Redis reports the offending byte itself.
fn expected_dollar(got: u8) -> Cow<'static, [u8]> {
    let mut msg = b"ERR Protocol error: expected '$', got '".to_vec();
    msg.push(got);
    msg.push(b'\'');
    Cow::Owned(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const OPEN: Limits = Limits { proto_max_bulk_len: 512 << 20, unauthenticated: false };

    /// Feeds `input` in the given chunk sizes, collecting every outcome.
    fn parse_all(input: &[u8], chunks: &[usize], limits: &Limits) -> (Vec<Vec<Vec<u8>>>, Option<Vec<u8>>) {
        let mut p = RequestParser::new();
        let mut buf = Vec::new();
        let mut out = Vec::new();
        let mut fed = 0;
        let mut chunk_iter = chunks.iter().cycle();
        while fed < input.len() {
            let n = (*chunk_iter.next().unwrap()).max(1).min(input.len() - fed);
            buf.extend_from_slice(&input[fed..fed + n]);
            fed += n;
            loop {
                match p.next(&buf, limits) {
                    Parsed::Command { inline } => {
                        let src: &[u8] = if inline { p.inline_buf() } else { &buf };
                        out.push(p.args().iter().map(|&(s, e)| src[s as usize..e as usize].to_vec()).collect());
                    }
                    Parsed::Incomplete => break,
                    Parsed::Error(e) => return (out, Some(e.into_owned())),
                }
            }
            let used = p.consumed();
            buf.drain(..used);
            p.shift(used);
        }
        (out, None)
    }

    fn encode(cmd: &[Vec<u8>]) -> Vec<u8> {
        let mut v = format!("*{}\r\n", cmd.len()).into_bytes();
        for a in cmd {
            v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            v.extend_from_slice(a);
            v.extend_from_slice(b"\r\n");
        }
        v
    }

    fn err(input: &[u8], limits: &Limits) -> String {
        String::from_utf8(parse_all(input, &[input.len()], limits).1.expect("an error")).unwrap()
    }

    #[test]
    fn multibulk_inline_and_empty_frames() {
        let (cmds, e) =
            parse_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n\r\n*0\r\n*-1\r\n set  \"a b\" 'c'\r\n", &[1000], &OPEN);
        assert_eq!(e, None);
        assert_eq!(
            cmds,
            vec![
                vec![b"GET".to_vec(), b"k".to_vec()],
                vec![b"PING".to_vec()],
                vec![b"set".to_vec(), b"a b".to_vec(), b"c".to_vec()]
            ]
        );
    }

    #[test]
    fn protocol_errors_use_redis_texts() {
        assert_eq!(err(b"*abc\r\n", &OPEN), "ERR Protocol error: invalid multibulk length");
        assert_eq!(err(b"*2147483648\r\n", &OPEN), "ERR Protocol error: invalid multibulk length");
        assert_eq!(err(b"*1\r\n$-1\r\n", &OPEN), "ERR Protocol error: invalid bulk length");
        assert_eq!(err(b"*1\r\n$2147483648\r\n", &OPEN), "ERR Protocol error: invalid bulk length");
        assert_eq!(err(b"*1\r\n$abc\r\n", &OPEN), "ERR Protocol error: invalid bulk length");
        assert_eq!(err(b"*1\r\nfoo\r\n", &OPEN), "ERR Protocol error: expected '$', got 'f'");
        assert_eq!(err(b"set \"a\r\n", &OPEN), "ERR Protocol error: unbalanced quotes in request");
        assert_eq!(err(&vec![b'a'; 65 * 1024], &OPEN), "ERR Protocol error: too big inline request");
        let mut big = b"*".to_vec();
        big.extend(std::iter::repeat_n(b'1', 65 * 1024));
        assert_eq!(err(&big, &OPEN), "ERR Protocol error: too big mbulk count string");
        let mut big = b"*1\r\n$".to_vec();
        big.extend(std::iter::repeat_n(b'1', 65 * 1024));
        assert_eq!(err(&big, &OPEN), "ERR Protocol error: too big bulk count string");
        let locked = Limits { proto_max_bulk_len: 512 << 20, unauthenticated: true };
        assert_eq!(err(b"*11\r\n", &locked), "ERR Protocol error: unauthenticated multibulk length");
        assert_eq!(err(b"*1\r\n$16385\r\n", &locked), "ERR Protocol error: unauthenticated bulk length");
    }

    #[test]
    fn big_bulks_say_where_they_end() {
        let mut p = RequestParser::new();
        let head = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$40000\r\nxy";
        assert_eq!(p.next(head, &OPEN), Parsed::Incomplete);
        let data_at = head.len() - 2;
        assert_eq!(p.big_bulk_end(), Some(data_at + 40000 + 2));
        let mut p = RequestParser::new();
        assert_eq!(p.next(b"*2\r\n$3\r\nGET\r\n$100\r\nab", &OPEN), Parsed::Incomplete);
        assert_eq!(p.big_bulk_end(), None);
    }

    #[test]
    fn huge_counts_allocate_nothing_up_front() {
        let mut p = RequestParser::new();
        assert_eq!(p.next(b"*2147483647\r\n$3\r\nfoo\r\n", &OPEN), Parsed::Incomplete);
        assert!(p.args.capacity() < 64);
        let mut p = RequestParser::new();
        assert_eq!(p.next(b"*1\r\n$536870912\r\nab", &OPEN), Parsed::Incomplete);
        assert!(p.args.capacity() < 64);
    }

    proptest! {
        #[test]
        fn any_split_gives_the_same_commands(
            cmds in proptest::collection::vec(proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..20), 1..5), 1..6),
            chunks in proptest::collection::vec(1usize..17, 1..8),
        ) {
            let input: Vec<u8> = cmds.iter().flat_map(|c| encode(c)).collect();
            let (got, e) = parse_all(&input, &chunks, &OPEN);
            prop_assert_eq!(e, None);
            prop_assert_eq!(got, cmds);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512), chunks in proptest::collection::vec(1usize..64, 1..4)) {
            let _ = parse_all(&bytes, &chunks, &OPEN);
        }

        /// Resumable: whatever the input (valid or not, under any limits), any
        /// split of it parses to the same commands and the same error as the
        /// whole of it at once.
        #[test]
        fn any_split_of_any_input_matches_the_whole(
            input in request_bytes(),
            chunks in proptest::collection::vec(1usize..24, 1..8),
            max_bulk in prop_oneof![Just(512u64 << 20), 0u64..12],
            unauthenticated in any::<bool>(),
        ) {
            let limits = Limits { proto_max_bulk_len: max_bulk, unauthenticated };
            prop_assert_eq!(parse_all(&input, &chunks, &limits), parse_all(&input, &[input.len().max(1)], &limits));
        }

        /// Inline commands (quoted, escaped, blank lines, `\n` or `\r\n`)
        /// mixed with multibulk ones parse to the words `split_args` sees.
        #[test]
        fn inline_and_multibulk_mixed(
            cmds in proptest::collection::vec((any::<bool>(), proptest::collection::vec(word(), 1..5)), 1..6),
            chunks in proptest::collection::vec(1usize..17, 1..8),
        ) {
            let mut input = Vec::new();
            for (inline, words) in &cmds {
                if *inline {
                    input.extend(inline_line(words));
                } else {
                    input.extend(encode(words));
                }
            }
            let (got, e) = parse_all(&input, &chunks, &OPEN);
            prop_assert_eq!(e, None);
            prop_assert_eq!(got, cmds.into_iter().map(|(_, w)| w).collect::<Vec<_>>());
        }

        /// Redis's limits: a bulk longer than proto-max-bulk-len, and before
        /// AUTH a multibulk over 10 arguments or a bulk over 16 KiB, is a
        /// protocol error, whichever way the bytes arrive; anything within
        /// them parses.
        #[test]
        fn limits_hold_at_any_split(
            argc in 1usize..14,
            len in prop_oneof![0usize..40, 16380usize..16390],
            max_bulk in prop_oneof![0u64..40, Just(512u64 << 20)],
            unauthenticated in any::<bool>(),
            chunks in proptest::collection::vec(1usize..4096, 1..4),
        ) {
            let cmd: Vec<Vec<u8>> = (0..argc).map(|i| vec![b'a' + i as u8; len]).collect();
            let limits = Limits { proto_max_bulk_len: max_bulk, unauthenticated };
            let (got, e) = parse_all(&encode(&cmd), &chunks, &limits);
            let expected = if unauthenticated && argc > 10 {
                Some("ERR Protocol error: unauthenticated multibulk length")
            } else if len as u64 > max_bulk {
                Some("ERR Protocol error: invalid bulk length")
            } else if unauthenticated && len > 16384 {
                Some("ERR Protocol error: unauthenticated bulk length")
            } else {
                None
            };
            let e = e.map(|e| String::from_utf8(e).unwrap());
            prop_assert_eq!(e.as_deref(), expected);
            if expected.is_none() {
                prop_assert_eq!(got, vec![cmd]);
            }
        }
    }

    /// A word an inline line can carry: plain, or needing quotes.
    fn word() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(prop_oneof![b'a'..=b'z', b'0'..=b'9', Just(b'-')], 1..8),
            proptest::collection::vec(any::<u8>(), 0..8),
        ]
    }

    /// One inline line for `words`: plain words bare, the rest in double
    /// quotes with Redis's escapes; `\r\n` or a bare `\n` at the end.
    fn inline_line(words: &[Vec<u8>]) -> Vec<u8> {
        let mut line = Vec::new();
        for w in words {
            let bare = !w.is_empty() && w.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-');
            if bare {
                line.extend_from_slice(w);
            } else {
                line.push(b'"');
                for &b in w {
                    match b {
                        b'"' | b'\\' => line.extend_from_slice(&[b'\\', b]),
                        b' '..=b'~' => line.push(b),
                        _ => line.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
                    }
                }
                line.push(b'"');
            }
            line.push(b' ');
        }
        line.extend_from_slice(if words.len().is_multiple_of(2) { b"\r\n" } else { b"\n" });
        line
    }

    /// Request-shaped bytes: valid frames, inline lines and damaged
    /// pieces of both.
    fn request_bytes() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..6), 0..4).prop_map(|c| encode(&c)),
            proptest::collection::vec(word(), 0..3).prop_map(|w| inline_line(&w)),
            prop_oneof![
                Just(b"*".to_vec()),
                Just(b"$".to_vec()),
                Just(b"\r\n".to_vec()),
                Just(b"*-1\r\n".to_vec()),
                Just(b"*3\r\n".to_vec()),
                Just(b"$-1\r\n".to_vec()),
                Just(b"$100\r\n".to_vec()),
                Just(b"\"".to_vec()),
            ],
            proptest::collection::vec(any::<u8>(), 0..8),
        ];
        proptest::collection::vec(piece, 0..8).prop_map(|p| p.concat())
    }
}
