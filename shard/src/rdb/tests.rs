//! Round trips of every type and encoding through files and DUMP payloads;
//! corrupted and hostile inputs.

use super::*;
use crate::types::hash::Hash;
use crate::types::list::List;
use crate::types::set::Set;
use crate::types::zset::ZSet;
use crate::value::Value;
use proptest::prelude::*;

fn limits() -> Limits {
    Limits::default()
}

fn list(items: &[Vec<u8>]) -> Value {
    let mut l = List::new();
    for i in items {
        l.push_back(i, limits().list_fill);
    }
    Value::List(Box::new(l))
}

fn set(members: &[Vec<u8>]) -> Value {
    let mut s = Set::for_member(members.first().map_or(&b"x"[..], |m| m));
    for m in members {
        s.add(m, limits().set_max_intset_entries);
    }
    Value::Set(Box::new(s))
}

fn hash(pairs: &[(Vec<u8>, Vec<u8>)]) -> Value {
    let mut h = Hash::default();
    for (f, v) in pairs {
        h.set(f, v, &limits().hash);
    }
    Value::Hash(Box::new(h))
}

fn zset(pairs: &[(f64, Vec<u8>)]) -> Value {
    let l = limits().zset;
    let mut z = ZSet::new(l, pairs.first().map_or(0, |p| p.1.len()));
    for (s, m) in pairs {
        match z.score(m) {
            Some(old) => z.rescore(m, old, *s),
            None => z.insert(*s, m, l),
        }
    }
    Value::ZSet(Box::new(z))
}

fn strings(n: usize, f: impl Fn(usize) -> String) -> Vec<Vec<u8>> {
    (0..n).map(|i| f(i).into_bytes()).collect()
}

/// A file holding `entries` in db 0, with aux fields and the CRC trailer.
fn file(entries: &[Entry], compress: bool) -> Vec<u8> {
    let mut out = Vec::new();
    write_header(&mut out, &[("redis-ver", b"7.0.15"), ("redis-bits", b"64"), ("ctime", b"1700000000")]);
    write_select_db(&mut out, 0);
    let expires = entries.iter().filter(|e| e.2.is_some()).count() as u64;
    write_resize_db(&mut out, entries.len() as u64, expires);
    for (k, v, ttl) in entries {
        write_entry(&mut out, k, v, *ttl, Access::None, &SaveOptions { compress });
    }
    write_eof(&mut out);
    let crc = crc64::crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn read_all(data: &[u8]) -> Result<Entries, RdbError> {
    let (entries, checksum_ok) = read_unchecked(data)?;
    assert!(checksum_ok);
    Ok(entries)
}

type Entry = (Vec<u8>, Value, Option<u64>);
type Entries = Vec<Entry>;

fn read_unchecked(data: &[u8]) -> Result<(Entries, bool), RdbError> {
    let mut r = Reader::new(data)?;
    let mut out = Vec::new();
    let mut ok = false;
    while let Some(item) = r.next()? {
        match item {
            Item::Entry { key, value, expire_at_ms, .. } => out.push((key.into_owned(), value, expire_at_ms)),
            Item::Eof { checksum_ok } => ok = checksum_ok,
            _ => {}
        }
    }
    Ok((out, ok))
}

/// Every type in each of the encodings Redis 7.0 writes.
fn samples() -> Entries {
    let long_text = "the quick brown fox jumps over the lazy dog ".repeat(20);
    let noise: Vec<u8> = (0..300u32).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
    let big_zset: Vec<(f64, Vec<u8>)> =
        (0..300).map(|i| (i as f64 * 0.5 - 20.0, format!("m{i}").into_bytes())).collect();
    let v = vec![
        Value::Int(7),
        Value::Int(-70000),
        Value::Int(i64::MIN),
        Value::Int(1 << 40),
        Value::from_bytes(b"hello"),
        Value::from_bytes(b""),
        Value::from_bytes(b"0123"),
        Value::from_bytes(long_text.as_bytes()),
        Value::from_bytes(&noise),
        list(&strings(5, |i| format!("e{i}"))),
        list(&strings(3000, |i| if i % 3 == 0 { i.to_string() } else { format!("element-{i}") })),
        list(&[vec![b'x'; 70_000], b"-5".to_vec()]),
        set(&strings(10, |i| (i * 1000).to_string())),
        set(&strings(3, |i| (i as i64 * 100_000).to_string())),
        set(&[b"1".to_vec(), (1i64 << 40).to_string().into_bytes()]),
        set(&strings(20, |i| format!("s{i}"))),
        set(&strings(1000, |i| format!("member:{i}"))),
        set(&strings(600, |i| i.to_string())),
        hash(&[(b"a".to_vec(), b"1".to_vec()), (b"b".to_vec(), b"x".to_vec()), (b"99".to_vec(), b"-3".to_vec())]),
        hash(&(0..600).map(|i| (format!("f{i}").into_bytes(), i.to_string().into_bytes())).collect::<Vec<_>>()),
        hash(&[(b"k".to_vec(), vec![b'v'; 100])]),
        zset(&[(1.0, b"a".to_vec()), (2.5, b"b".to_vec()), (f64::INFINITY, b"c".to_vec()), (-1e300, b"d".to_vec())]),
        zset(&[(0.1, b"x".to_vec()), (-0.0, b"y".to_vec()), (f64::NEG_INFINITY, b"z".to_vec()), (1e17, b"w".to_vec())]),
        zset(&big_zset),
        zset(&[(3.0, vec![b'm'; 100]), (-0.0, b"n".to_vec())]),
    ];
    v.into_iter()
        .enumerate()
        .map(|(i, v)| (format!("key:{i}").into_bytes(), v, (i % 3 == 0).then_some(1_900_000_000_000 + i as u64)))
        .collect()
}

fn expected(v: &Value) -> Value {
    // Redis re-encodes strings on load (tryObjectEncoding).
    match v {
        Value::Emb(_) | Value::Long(_) | Value::Raw(_) => {
            Value::from_bytes_encoded(v.string_bytes(&mut itoa::Buffer::new()).unwrap_or_default())
        }
        other => other.clone(),
    }
}

#[test]
fn every_type_round_trips_through_a_file() {
    let entries = samples();
    for compress in [false, true] {
        let data = file(&entries, compress);
        let back = read_all(&data).unwrap();
        assert_eq!(back.len(), entries.len());
        for ((k, v, t), (k2, v2, t2)) in entries.iter().zip(&back) {
            assert_eq!((k, t), (k2, t2));
            assert_eq!(&expected(v), v2, "{}", String::from_utf8_lossy(k));
            assert_eq!(v.encoding(), v2.encoding(), "{}", String::from_utf8_lossy(k));
        }
    }
}

#[test]
fn every_type_round_trips_through_dump() {
    for (k, v, _) in samples() {
        let payload = dump_payload(&v);
        assert!(verify_payload(&payload));
        let back = restore_payload(&payload).unwrap();
        assert_eq!(expected(&v), back, "{}", String::from_utf8_lossy(&k));
        assert_eq!(v.encoding(), back.encoding());
        let mut bad = payload.clone();
        let at = bad.len() / 2;
        bad[at] ^= 0x10;
        assert!(restore_payload(&bad).is_err());
    }
}

#[test]
fn known_redis_payloads() {
    // DUMP on Redis 7.0.15 of SET k 123, RPUSH l a b c, HSET h a 1.
    let cases: [(&[u8], Value); 3] = [
        (b"\x00\xc0{\n\x00H\xe2S\xe1\x00zg\xb9", Value::Int(123)),
        (
            b"\x12\x01\x02\x10\x10\x00\x00\x00\x03\x00\x81a\x02\x81b\x02\x81c\x02\xff\n\x00\xc8\x18\xb9\x0c\x953R\x9e",
            list(&[b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]),
        ),
        (
            b"\x10\x0c\x0c\x00\x00\x00\x02\x00\x81a\x02\x01\x01\xff\n\x00\x84\xa6\x93\xe8\xaa\x17\xe4\xdb",
            hash(&[(b"a".to_vec(), b"1".to_vec())]),
        ),
    ];
    for (bytes, value) in cases {
        assert_eq!(dump_payload(&value), bytes.to_vec());
        assert_eq!(restore_payload(bytes).unwrap(), value);
    }
}

#[test]
fn skipping_keys_steps_over_values() {
    let entries = samples();
    for compress in [false, true] {
        let data = file(&entries, compress);
        let mut r = Reader::new(&data).unwrap();
        let (mut kept, mut skipped) = (0, 0);
        while let Some(item) = r.next_with(|k| k.ends_with(b"1")).unwrap() {
            match item {
                Item::Entry { key, .. } => {
                    assert!(key.ends_with(b"1"));
                    kept += 1;
                }
                Item::Skipped { .. } => skipped += 1,
                _ => {}
            }
        }
        assert_eq!(kept + skipped, entries.len());
        assert_eq!(kept, entries.iter().filter(|e| e.0.ends_with(b"1")).count());
    }
}

#[test]
fn header_aux_and_checksum() {
    let data = file(&samples()[..2], true);
    let mut r = Reader::new(&data).unwrap();
    assert_eq!(r.version(), 10);
    match r.next().unwrap() {
        Some(Item::Aux { key, value }) => assert_eq!((&key[..], &value[..]), (&b"redis-ver"[..], &b"7.0.15"[..])),
        other => panic!("{other:?}"),
    }
    let mut bad = data.clone();
    let n = bad.len();
    bad[n - 3] ^= 1;
    let mut r = Reader::new(&bad).unwrap();
    let mut last = None;
    while let Some(item) = r.next().unwrap() {
        last = Some(item);
    }
    assert!(matches!(last, Some(Item::Eof { checksum_ok: false })));
    let mut std_header = Vec::new();
    write_standard_header(&mut std_header, 1_700_000_000, 12345, true);
    let mut r = Reader::new(&std_header).unwrap();
    let mut aux = Vec::new();
    while let Ok(Some(Item::Aux { key, value })) = r.next() {
        aux.push(format!("{}={}", String::from_utf8_lossy(&key), String::from_utf8_lossy(&value)));
    }
    assert_eq!(aux, ["redis-ver=7.0.15", "redis-bits=64", "ctime=1700000000", "used-mem=12345", "aof-base=1"]);
    assert!(Reader::new(b"REDIS0011").is_err());
    assert!(Reader::new(b"RADIS0009").is_err());
    let e = Reader::new(b"REDIS0011").err().unwrap();
    assert_eq!(e.to_string(), "Can't handle RDB format version 0011 at offset 5");
}

#[test]
fn hostile_lengths_fail_without_allocating() {
    let mut p = vec![kind::SET, 0x81];
    p.extend_from_slice(&(1u64 << 62).to_be_bytes());
    p.push(0x01);
    p.push(b'a');
    for body in [
        p,
        // A 2^40-byte string announced, 3 bytes present.
        vec![kind::STRING, 0x81, 0, 0, 1, 0, 0, 0, 0, 0, b'a', b'b', b'c'],
        // LZF: 2 compressed bytes claiming 2^40 uncompressed.
        vec![kind::STRING, 0xc3, 0x02, 0x81, 0, 0, 1, 0, 0, 0, 0, 0, 0x00, b'a'],
        // A zset of 2^32 - 1 members.
        vec![kind::ZSET_2, 0x80, 0xff, 0xff, 0xff, 0xff, 0x01, b'a'],
        // A listpack claiming 4 GB.
        vec![kind::HASH_LISTPACK, 0x07, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0xff],
    ] {
        let mut payload = body.clone();
        payload.extend_from_slice(&RDB_VERSION.to_le_bytes());
        let crc = crc64::crc64(&payload);
        payload.extend_from_slice(&crc.to_le_bytes());
        let err = restore_payload(&payload).unwrap_err();
        assert!(err.offset <= body.len() as u64, "{err}");
    }
}

#[test]
fn old_encodings_load() {
    let items: Vec<&[u8]> = vec![b"f1", b"v1", b"2", b"300"];
    let zl = ziplist::build(&items);
    let mut body = vec![kind::HASH_ZIPLIST];
    output::write_string(&mut body, &zl, &SaveOptions { compress: false });
    let v = restore_body(&body).unwrap();
    assert_eq!(v, hash(&[(b"f1".to_vec(), b"v1".to_vec()), (b"2".to_vec(), b"300".to_vec())]));
    assert_eq!(v.encoding(), "listpack");
    // A zset ziplist with a fractional score, unsorted.
    let zl = ziplist::build(&[b"b", b"2.5", b"a", b"-1"]);
    let mut body = vec![kind::ZSET_ZIPLIST];
    output::write_string(&mut body, &zl, &SaveOptions { compress: false });
    assert_eq!(restore_body(&body).unwrap(), zset(&[(-1.0, b"a".to_vec()), (2.5, b"b".to_vec())]));
    // Quicklist v1 of two ziplists.
    let mut body = vec![kind::LIST_QUICKLIST, 2];
    for part in [&[&b"a"[..], b"1"][..], &[b"c"]] {
        output::write_string(&mut body, &ziplist::build(part), &SaveOptions { compress: true });
    }
    assert_eq!(restore_body(&body).unwrap(), list(&[b"a".to_vec(), b"1".to_vec(), b"c".to_vec()]));
    // Quicklist 2 with a PLAIN node (an element past the packed threshold)
    // between listpack nodes; bad containers and empty nodes are refused.
    let mut body = vec![kind::LIST_QUICKLIST_2, 3, 2];
    let mut lp = listpack::Writer::new();
    lp.push_str(b"a");
    let lp = lp.finish();
    output::write_string(&mut body, &lp, &SaveOptions { compress: false });
    body.push(1);
    output::write_string(&mut body, b"plain element", &SaveOptions { compress: false });
    body.push(2);
    output::write_string(&mut body, &lp, &SaveOptions { compress: false });
    assert_eq!(restore_body(&body).unwrap(), list(&[b"a".to_vec(), b"plain element".to_vec(), b"a".to_vec()]));
    assert!(restore_body(&[kind::LIST_QUICKLIST_2, 1, 3, 1, b'x']).unwrap_err().message.contains("Quicklist"));
    assert!(restore_body(&[kind::LIST_QUICKLIST_2, 1, 1, 0]).is_err());
    // Linked list, plain set, ascii-score zset.
    let body = [&[kind::LIST, 2, 1, b'x', 0xc0, 5][..]].concat();
    assert_eq!(restore_body(&body).unwrap(), list(&[b"x".to_vec(), b"5".to_vec()]));
    let body = [kind::ZSET, 2, 1, b'a', 3, b'1', b'.', b'5', 1, b'b', 254];
    assert_eq!(restore_body(&body).unwrap(), zset(&[(1.5, b"a".to_vec()), (f64::INFINITY, b"b".to_vec())]));
    let body = [kind::ZSET, 1, 1, b'a', 253];
    assert!(restore_body(&body).unwrap_err().message.contains("NAN"));
    // Zipmap hash.
    let mut body = vec![kind::HASH_ZIPMAP];
    output::write_string(&mut body, b"\x01\x01k\x01\x00v\xff", &SaveOptions { compress: false });
    assert_eq!(restore_body(&body).unwrap(), hash(&[(b"k".to_vec(), b"v".to_vec())]));
    // Duplicates are refused.
    let body = [kind::SET, 2, 0xc0, 1, 0xc0, 1];
    assert!(restore_body(&body).unwrap_err().message.contains("Duplicate"));
    let body = [kind::HASH, 2, 1, b'a', 1, b'1', 1, b'a', 1, b'2'];
    assert!(restore_body(&body).unwrap_err().message.contains("Duplicate"));
    // A stream cut short is refused; a stream node that is no stream
    // listpack too.
    assert!(restore_body(&[kind::STREAM_LISTPACKS, 0]).is_err());
    let mut body = vec![kind::STREAM_LISTPACKS_2, 1];
    output::write_string(&mut body, &[0u8; 16], &SaveOptions { compress: false });
    output::write_string(&mut body, &lp, &SaveOptions { compress: false });
    body.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 1, 0]);
    assert!(restore_body(&body).unwrap_err().message.contains("Stream listpack integrity"));
}

fn restore_body(body: &[u8]) -> Result<Value, RdbError> {
    let mut payload = body.to_vec();
    payload.extend_from_slice(&9u16.to_le_bytes());
    let crc = crc64::crc64(&payload);
    payload.extend_from_slice(&crc.to_le_bytes());
    restore_payload(&payload)
}

#[test]
fn old_versions_and_opcodes() {
    // RDB 9: aux, select, seconds expiry, idle and freq opcodes, a string.
    let mut f = b"REDIS0009".to_vec();
    f.extend_from_slice(&[opcode::AUX, 1, b'a', 1, b'b', opcode::SELECTDB, 3]);
    f.push(opcode::EXPIRETIME);
    f.extend_from_slice(&2_000_000_000i32.to_le_bytes());
    f.extend_from_slice(&[opcode::IDLE, 10, opcode::FREQ, 5, kind::STRING, 1, b'k', 1, b'v']);
    f.extend_from_slice(&[opcode::FUNCTION2, 3, b'l', b'i', b'b', opcode::EOF]);
    f.extend_from_slice(&[0; 8]);
    let mut r = Reader::new(&f).unwrap();
    let mut items = Vec::new();
    while let Some(i) = r.next().unwrap() {
        items.push(format!("{i:?}"));
    }
    assert_eq!(items.len(), 5, "{items:?}");
    assert!(items[2].contains("db: 3") && items[2].contains("Some(2000000000000)"), "{}", items[2]);
    assert!(items[2].contains("idle: Some(10)") && items[2].contains("freq: Some(5)"));
    assert_eq!(items[3], "Function([108, 105, 98])");
    // A library in the format of Redis 7.0's release candidates.
    let mut f = b"REDIS0010".to_vec();
    f.extend_from_slice(&[opcode::FUNCTION, 3, b'l', b'i', b'b', 3, b'L', b'U', b'A', 1, 1, b'd', 8]);
    f.extend_from_slice(b"return 1");
    match Reader::new(&f).unwrap().next().unwrap() {
        Some(Item::Function(payload)) => assert_eq!(payload, b"#!LUA name=lib\nreturn 1"),
        other => panic!("{other:?}"),
    }
    let mut m = b"REDIS0010".to_vec();
    m.extend_from_slice(&[opcode::MODULE_AUX, 1, 2, 0]);
    assert!(Reader::new(&m).unwrap().next().unwrap_err().message.contains("module"));
}

fn any_value() -> impl Strategy<Value = Value> {
    let elem = prop_oneof![
        (-300i64..300).prop_map(|n| n.to_string().into_bytes()),
        any::<i64>().prop_map(|n| n.to_string().into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..80),
    ];
    let elems = proptest::collection::vec(elem, 1..300);
    prop_oneof![
        any::<i64>().prop_map(Value::Int),
        proptest::collection::vec(any::<u8>(), 0..200).prop_map(|b| Value::from_bytes(&b)),
        elems.clone().prop_map(|e| list(&e)),
        elems.clone().prop_map(|e| set(&e)),
        elems
            .clone()
            .prop_map(|e| hash(&e.chunks(2).map(|c| (c[0].clone(), c[c.len() - 1].clone())).collect::<Vec<_>>())),
        (elems, proptest::collection::vec(-1e6f64..1e6, 1..300)).prop_map(|(e, s)| zset(
            &e.into_iter().zip(s.into_iter().cycle()).map(|(m, s)| (s, m)).collect::<Vec<_>>()
        )),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn values_round_trip(v in any_value(), compress in any::<bool>()) {
        let data = file(&[(b"k".to_vec(), v.clone(), None)], compress);
        let back = read_all(&data).unwrap();
        prop_assert_eq!(&back[0].1, &expected(&v));
        prop_assert_eq!(back[0].1.encoding(), v.encoding());
        prop_assert_eq!(restore_payload(&dump_payload(&v)).unwrap(), expected(&v));
    }

    #[test]
    fn damaged_files_never_panic(v in any_value(), cut in any::<usize>(), flips in proptest::collection::vec((any::<usize>(), 0u8..8), 0..4)) {
        let mut data = file(&[(b"k".to_vec(), v, Some(5))], true);
        for (at, bit) in flips {
            let n = data.len();
            data[at % n] ^= 1 << bit;
        }
        let n = data.len();
        let _ = read_unchecked(&data[..cut % (n + 1)]);
        let _ = read_unchecked(&data);
        // Payload bodies without the checksum gate, to reach the decoders.
        let mut body = data[9..].to_vec();
        body.extend_from_slice(&RDB_VERSION.to_le_bytes());
        let crc = crc64::crc64(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        let _ = restore_payload(&body);
    }
}

/// Redis's own checker accepts what we write (needs `redis-check-rdb`, as
/// the differential tests need `redis-server`).
#[test]
fn redis_check_rdb_accepts_our_file() {
    let dir = std::env::temp_dir().join(format!("corekv-rdb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for compress in [false, true] {
        let path = dir.join(format!("dump-{compress}.rdb"));
        std::fs::write(&path, file(&samples(), compress)).unwrap();
        let out = std::process::Command::new("redis-check-rdb").arg(&path).output().expect("redis-check-rdb installed");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("RDB looks OK"), "{text}");
        assert!(text.contains(&format!("{} keys read", samples().len())), "{text}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
