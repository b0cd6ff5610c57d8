//! RESP encoder and reply parser: every reply type, errors, nil, nesting,
//! replies split at every byte, malformed input, and a fuzz property.

use corekv_bench::protocol::{encode_command, parse_reply, ProtocolError, Reply, MAX_DEPTH};
use proptest::prelude::*;

fn one(input: &[u8]) -> Reply<'_> {
    let (r, n) = parse_reply(input).expect("valid").expect("complete");
    assert_eq!(n, input.len(), "consumed the whole reply");
    r
}

#[test]
fn parses_every_reply_type() {
    assert_eq!(one(b"+OK\r\n"), Reply::Simple(b"OK"));
    assert_eq!(one(b"-ERR wrong type\r\n"), Reply::Error(b"ERR wrong type"));
    assert_eq!(one(b":42\r\n"), Reply::Integer(42));
    assert_eq!(one(b":-7\r\n"), Reply::Integer(-7));
    assert_eq!(one(b"$5\r\nhello\r\n"), Reply::Bulk(b"hello"));
    assert_eq!(one(b"$0\r\n\r\n"), Reply::Bulk(b""));
    assert_eq!(one(b"$4\r\na\r\nb\r\n"), Reply::Bulk(b"a\r\nb"), "bulk payload may contain CRLF");
    assert_eq!(one(b"$-1\r\n"), Reply::Nil);
    assert_eq!(one(b"*-1\r\n"), Reply::Nil);
    assert_eq!(one(b"_\r\n"), Reply::Nil);
    assert_eq!(one(b"*0\r\n"), Reply::Array(vec![]));
    assert!(one(b"-MOVED 3999 127.0.0.1:6381\r\n").is_error());
}

#[test]
fn parses_nested_arrays_like_cluster_slots() {
    let input = b"*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$4\r\nabcd\r\n";
    let expected = Reply::Array(vec![Reply::Array(vec![
        Reply::Integer(0),
        Reply::Integer(16383),
        Reply::Array(vec![Reply::Bulk(b"127.0.0.1"), Reply::Integer(7000), Reply::Bulk(b"abcd")]),
    ])]);
    assert_eq!(one(input), expected);
    assert_eq!(
        one(b"*3\r\n$1\r\na\r\n$-1\r\n-ERR x\r\n"),
        Reply::Array(vec![Reply::Bulk(b"a"), Reply::Nil, Reply::Error(b"ERR x")])
    );
}

#[test]
fn consecutive_replies_parse_one_at_a_time() {
    let input = b"+OK\r\n$3\r\nabc\r\n:1\r\n";
    let (r, n) = parse_reply(input).unwrap().unwrap();
    assert_eq!((r, n), (Reply::Simple(b"OK"), 5));
    let (r, m) = parse_reply(&input[n..]).unwrap().unwrap();
    assert_eq!((r, m), (Reply::Bulk(b"abc"), 9));
    assert_eq!(parse_reply(&input[n + m..]).unwrap().unwrap().0, Reply::Integer(1));
}

/// Every strict prefix of a reply is "incomplete", never an error or a
/// wrong reply: this is what happens when a reply is split across reads.
#[test]
fn split_reads_are_incomplete_not_errors() {
    let replies: [&[u8]; 6] = [
        b"+OK\r\n",
        b"-ERR boom\r\n",
        b":123456\r\n",
        b"$11\r\nhello world\r\n",
        b"$-1\r\n",
        b"*2\r\n*1\r\n:1\r\n$3\r\nxyz\r\n",
    ];
    for full in replies {
        for cut in 0..full.len() {
            assert_eq!(parse_reply(&full[..cut]), Ok(None), "prefix {:?}", String::from_utf8_lossy(&full[..cut]));
        }
        assert_eq!(parse_reply(full).unwrap().unwrap().1, full.len());
    }
}

#[test]
fn rejects_malformed_input() {
    let bad: [&[u8]; 9] = [
        b"?what\r\n",
        b":12a\r\n",
        b":\r\n",
        b"$abc\r\n",
        b"$-2\r\n",
        b"$3\r\nabcXY",
        b"*-5\r\n",
        b":99999999999999999999\r\n",
        b"$999999999999\r\n",
    ];
    for input in bad {
        assert!(
            matches!(parse_reply(input), Err(ProtocolError(_))),
            "{:?} should be a protocol error",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let mut input = b"*1\r\n".repeat(MAX_DEPTH + 1);
    input.extend_from_slice(b":1\r\n");
    assert!(parse_reply(&input).is_err());
    let mut ok = b"*1\r\n".repeat(MAX_DEPTH - 1);
    ok.extend_from_slice(b":1\r\n");
    assert!(parse_reply(&ok).unwrap().is_some());
}

#[test]
fn huge_array_count_waits_for_data_without_allocating() {
    // Claims 2^40 elements: must answer "incomplete" instead of reserving memory.
    assert_eq!(parse_reply(b"*1099511627776\r\n:1\r\n"), Ok(None));
}

#[test]
fn encodes_commands_as_bulk_arrays() {
    let mut out = Vec::new();
    encode_command(&mut out, &[b"SET", b"key:1", b"a b\r\n"]);
    assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$5\r\nkey:1\r\n$5\r\na b\r\n\r\n");
    // The encoder's output is itself valid RESP (servers parse requests this way).
    let parsed = one(&out);
    assert_eq!(parsed, Reply::Array(vec![Reply::Bulk(b"SET"), Reply::Bulk(b"key:1"), Reply::Bulk(b"a b\r\n")]));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Arbitrary bytes, fed in arbitrary chunks like a socket would deliver
    /// them, never panic the parser and never claim more bytes than given.
    #[test]
    fn arbitrary_chunks_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512),
                                    cuts in proptest::collection::vec(any::<usize>(), 0..8)) {
        let mut ends: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
        ends.push(data.len());
        ends.sort_unstable();
        let mut start = 0;
        for end in ends {
            // Consume complete replies from what has "arrived" so far.
            loop {
                match parse_reply(&data[start..end]) {
                    Ok(Some((_, n))) => {
                        prop_assert!(n > 0 && start + n <= end);
                        start += n;
                    }
                    Ok(None) => break,
                    Err(_) => return Ok(()), // a protocol error ends the connection
                }
            }
        }
    }

    /// Structured fuzzing: RESP-looking fragments glued together.
    #[test]
    fn resp_like_fragments_never_panic(parts in proptest::collection::vec(
        prop_oneof![
            Just(b"*".to_vec()), Just(b"$".to_vec()), Just(b":".to_vec()), Just(b"+".to_vec()),
            Just(b"-".to_vec()), Just(b"\r\n".to_vec()), Just(b"-1".to_vec()), Just(b"_".to_vec()),
            (0u32..20).prop_map(|n| n.to_string().into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..6),
        ], 0..40)) {
        let data = parts.concat();
        for cut in 0..=data.len() {
            if let Ok(Some((_, n))) = parse_reply(&data[..cut]) {
                prop_assert!(n <= cut);
            }
        }
    }

    /// Round trip: any command encodes to one array of the same bulk strings.
    #[test]
    fn encode_parse_round_trip(args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..8)) {
        let refs: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
        let mut out = Vec::new();
        encode_command(&mut out, &refs);
        let (r, n) = parse_reply(&out).unwrap().unwrap();
        prop_assert_eq!(n, out.len());
        prop_assert_eq!(r, Reply::Array(refs.iter().map(|a| Reply::Bulk(a)).collect()));
    }
}
