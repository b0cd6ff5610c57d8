//! The request parser (proxy/src/resp/request.rs) on arbitrary bytes, inline
//! and multibulk, under arbitrary limits: no panic, every argument inside
//! the buffer it names, and the input fed in arbitrary pieces parses to the
//! same commands and the same error as the whole of it at once (the parser
//! resumes a frame where it stopped).
//!
//! Input layout: byte 0 picks the limits, bytes 1..4 the piece sizes, the
//! rest is what the client sends.

#![no_main]

use libfuzzer_sys::fuzz_target;

// The parser is a leaf of the proxy that needs only `shard`: including its
// file keeps this build free of glommio, io_uring and Lua.
#[allow(dead_code)]
#[path = "../../proxy/src/resp/request.rs"]
mod request;

use request::{Limits, Parsed, RequestParser};

type Outcome = (Vec<Vec<Vec<u8>>>, Option<Vec<u8>>);

/// Feeds `input` in pieces of the given sizes (cycled), dropping consumed
/// bytes as the connection does, and collects every command and the error.
fn parse(input: &[u8], pieces: &[usize], limits: &Limits) -> Outcome {
    let mut parser = RequestParser::new();
    let mut buf = Vec::new();
    let mut commands = Vec::new();
    let mut fed = 0;
    let mut sizes = pieces.iter().cycle();
    while fed < input.len() {
        let n = (*sizes.next().unwrap()).clamp(1, input.len() - fed);
        buf.extend_from_slice(&input[fed..fed + n]);
        fed += n;
        loop {
            match parser.next(&buf, limits) {
                Parsed::Command { inline } => {
                    let src: &[u8] = if inline { parser.inline_buf() } else { &buf };
                    let args = parser.args();
                    assert!(!args.is_empty(), "a command has a name");
                    commands.push(
                        args.iter()
                            .map(|&(s, e)| {
                                assert!(s <= e && e as usize <= src.len(), "argument outside its buffer");
                                src[s as usize..e as usize].to_vec()
                            })
                            .collect(),
                    );
                }
                Parsed::Incomplete => break,
                Parsed::Error(e) => return (commands, Some(e.into_owned())),
            }
        }
        let used = parser.consumed();
        assert!(used <= buf.len());
        buf.drain(..used);
        parser.shift(used);
    }
    (commands, None)
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let (head, input) = data.split_at(4);
    let limits = Limits {
        proto_max_bulk_len: if head[0] & 1 == 0 { 512 << 20 } else { u64::from(head[0] >> 2) },
        unauthenticated: head[0] & 2 != 0,
    };
    let whole = parse(input, &[input.len().max(1)], &limits);
    let pieces: Vec<usize> = head[1..].iter().map(|&b| usize::from(b % 32) + 1).collect();
    assert_eq!(parse(input, &pieces, &limits), whole, "pieces {pieces:?}");
    assert_eq!(parse(input, &[1], &limits), whole, "byte by byte");
});
