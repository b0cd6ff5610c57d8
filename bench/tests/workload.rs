//! Key generation, value verification, slot hashing and option parsing.

use clap::Parser;
use corekv_bench::cli::{derive_seed, Args, Config, Ratio, SizeList};
use corekv_bench::cluster::{key_slot, parse_redirect, RedirectKind, SlotMap};
use corekv_bench::data::DataSet;
use corekv_bench::keys::{KeyGen, KeyPattern, KnownKeys};
use corekv_bench::protocol::parse_reply;
use corekv_bench::workload::{ClientGen, Kind, Mix, Template, Values, Workload};
use rand::rngs::SmallRng;
use rand::SeedableRng;

fn value_of(values: &Values, key: u64, len: u32) -> Vec<u8> {
    let mut out = Vec::new();
    values.encode(&mut out, key, len);
    match parse_reply(&out).unwrap().unwrap().0 {
        corekv_bench::protocol::Reply::Bulk(v) => v.to_vec(),
        other => panic!("not a bulk: {other:?}"),
    }
}

#[test]
fn values_verify_and_catch_corruption() {
    let values = Values::new(&[(100, 99), (5000, 1), (3, 1)]);
    for (key, len) in [(0, 100), (123_456_789, 100), (42, 5000), (7, 3)] {
        let v = value_of(&values, key, len);
        assert_eq!(v.len(), len as usize);
        assert!(values.check(&v, key), "own value must verify");
        assert!(!values.check(&v, key + 1), "another key's value must not verify");
        let mut flipped = v.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(!values.check(&flipped, key), "corrupted byte must be caught");
        assert!(!values.check(&v[..v.len() - 1], key), "truncation must be caught");
    }
    // A 100-byte prefix of the 5000-byte value has the right length but the
    // wrong embedded length: still caught.
    let long = value_of(&values, 42, 5000);
    assert!(!values.check(&long[..100], 42));
}

#[test]
fn size_mix_follows_weights() {
    let values = Values::new(&[(100, 9), (1000, 1)]);
    let mut rng = SmallRng::seed_from_u64(1);
    let big = (0..10_000).filter(|_| values.pick_size(&mut rng) == 1000).count();
    assert!((700..1300).contains(&big), "expected ~10% large values, got {big}/10000");
}

#[test]
fn key_patterns_stay_in_range() {
    let mut rng = SmallRng::seed_from_u64(3);
    for pattern in [KeyPattern::Random, KeyPattern::Sequential, KeyPattern::Gaussian] {
        let mut g = KeyGen::new(pattern, 10, 19, 0, 1);
        for _ in 0..1000 {
            let k = g.next_key(&mut rng);
            assert!((10..=19).contains(&k), "{pattern:?} produced {k}");
        }
    }
    // Sequential clients start spread out and wrap around.
    let mut a = KeyGen::new(KeyPattern::Sequential, 0, 99, 0, 4);
    let mut b = KeyGen::new(KeyPattern::Sequential, 0, 99, 1, 4);
    assert_eq!(a.next_key(&mut rng), 0);
    assert_eq!(b.next_key(&mut rng), 25);
    let mut c = KeyGen::new(KeyPattern::Sequential, 5, 6, 0, 1);
    let seq: Vec<u64> = (0..4).map(|_| c.next_key(&mut rng)).collect();
    assert_eq!(seq, [5, 6, 5, 6]);
}

#[test]
fn gaussian_concentrates_around_the_median() {
    let mut rng = SmallRng::seed_from_u64(9);
    let mut g = KeyGen::new(KeyPattern::Gaussian, 0, 5999, 0, 1);
    let central = (0..10_000).filter(|_| (2000..4000).contains(&g.next_key(&mut rng))).count();
    assert!(central > 6000, "about 68% within one stddev, got {central}/10000");
}

#[test]
fn ratio_cycle_is_exact() {
    let w =
        Workload { mix: Mix::Ratio { sets: 1, gets: 3 }, key_prefix: b"k:".to_vec(), values: Values::new(&[(10, 1)]) };
    let mut g =
        ClientGen { rng: SmallRng::seed_from_u64(1), keys: KeyGen::new(KeyPattern::Random, 0, 9, 0, 1), pos: 0 };
    let kinds: Vec<Kind> = (0..8).map(|_| w.next_request(&mut g).kind).collect();
    use Kind::{Get, Set};
    assert_eq!(kinds, [Set, Get, Get, Get, Set, Get, Get, Get]);
}

/// The bulk strings of one encoded command.
fn bulks(mut buf: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let header = buf.iter().position(|&b| b == b'\n').unwrap();
    buf = &buf[header + 1..];
    while let Some((corekv_bench::protocol::Reply::Bulk(v), used)) = parse_reply(buf).unwrap() {
        out.push(v.to_vec());
        buf = &buf[used..];
    }
    out
}

#[test]
fn data_sets_fill_each_value_of_a_command_apart() {
    for data in [DataSet::Random, DataSet::Repeat, DataSet::Text] {
        let w = Workload {
            mix: Mix::Custom(Template::parse("MSET a__key__ __data__ b__key__ __data__").unwrap()),
            key_prefix: b"k:".to_vec(),
            values: Values::new(&[(700, 1)]).with_data(data),
        };
        let mut g =
            ClientGen { rng: SmallRng::seed_from_u64(3), keys: KeyGen::new(KeyPattern::Random, 0, 9, 0, 1), pos: 0 };
        let (first, second) = (w.next_request(&mut g), w.next_request(&mut g));
        let encode = |req| {
            let mut out = Vec::new();
            w.encode(&mut out, &req, b"k:1");
            bulks(&out)
        };
        let (one, two) = (encode(first), encode(second));
        assert_eq!(one[0], b"MSET");
        assert_eq!((one[1].as_slice(), one[3].as_slice()), (&b"ak:1"[..], &b"bk:1"[..]));
        assert!(one[2].len() == 700 && one[4].len() == 700, "{data:?}");
        assert_eq!(one, encode(first), "{data:?}: a request's values are a function of it");
        if data == DataSet::Repeat {
            assert!(one[2].iter().all(|&b| b == b'x'));
        } else {
            assert_ne!(one[2], one[4], "{data:?}: values of one command differ");
            assert_ne!(one[2], two[2], "{data:?}: values of two requests differ");
        }
        if data == DataSet::Text {
            assert!(one[2].starts_with(b"{\"id\":\"sess:"), "{:?}", String::from_utf8_lossy(&one[2]));
        }
        assert!(w.values.check(&one[2], 5), "other data sets are not verified");
    }
}

#[test]
fn known_keys_tracking() {
    let k = KnownKeys::new(100, 300);
    assert!(!k.is_known(150));
    k.mark(150);
    k.mark(300);
    k.mark(99); // out of range: ignored
    assert!(k.is_known(150) && k.is_known(300) && !k.is_known(151) && !k.is_known(99));
    k.mark_all();
    assert!(k.is_known(151));
}

#[test]
fn cluster_slots_match_redis() {
    // Reference values from `CLUSTER KEYSLOT` (Redis docs and redis-cli).
    assert_eq!(key_slot(b"foo"), 12182);
    assert_eq!(key_slot(b"bar"), 5061);
    assert_eq!(key_slot(b"123456789"), 0x31C3, "the CRC16-XMODEM check value");
    // Hash tags: only the first non-empty {...} counts.
    assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
    assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
    assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"), "empty first tag: whole key hashed");
    assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
}

#[test]
fn redirects_parse() {
    assert_eq!(
        parse_redirect(b"MOVED 3999 127.0.0.1:6381"),
        Some((RedirectKind::Moved, 3999, "127.0.0.1".into(), 6381))
    );
    assert_eq!(parse_redirect(b"ASK 12 ::1:7000"), Some((RedirectKind::Ask, 12, "::1".into(), 7000)));
    assert_eq!(parse_redirect(b"MOVED 3999 :6381"), Some((RedirectKind::Moved, 3999, "".into(), 6381)));
    assert_eq!(parse_redirect(b"ERR something"), None);
    assert_eq!(parse_redirect(b"MOVED 99999 h:1"), None);
}

#[test]
fn slot_map_from_cluster_slots_reply() {
    let raw = b"*2\r\n*3\r\n:0\r\n:8191\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n\
                *4\r\n:8192\r\n:16383\r\n*2\r\n$0\r\n\r\n:7001\r\n*2\r\n$9\r\n127.0.0.1\r\n:7002\r\n";
    let (reply, _) = parse_reply(raw).unwrap().unwrap();
    let mut map = SlotMap::empty();
    map.update_from_reply(&reply, "localhost").unwrap();
    assert_eq!(map.unassigned_slots(), 0);
    assert_eq!(map.masters().len(), 2, "replicas are not masters");
    let n0 = map.owner(0).unwrap();
    let n1 = map.owner(16383).unwrap();
    assert_eq!((map.nodes[n0].port, map.nodes[n1].port), (7000, 7001));
    assert_eq!(map.nodes[n1].host, "localhost", "empty endpoint means the seed host");
    assert_eq!(map.owner(8191), Some(n0));
}

#[test]
fn options_parse_and_validate() {
    assert_eq!("1:10".parse::<Ratio>().unwrap(), Ratio { sets: 1, gets: 10 });
    assert!("0:0".parse::<Ratio>().is_err());
    assert_eq!("100:99,102400:1".parse::<SizeList>().unwrap().0, vec![(100, 99), (102400, 1)]);
    assert!("100".parse::<SizeList>().is_err());
    let cfg = |args: &[&str]| Config::from_args(Args::try_parse_from([&["corekv-bench"], args].concat()).unwrap());
    assert!(cfg(&["--warmup", "1"]).is_err(), "warm-up needs --test-time");
    assert!(cfg(&["--key-minimum", "5", "--key-maximum", "4"]).is_err());
    assert!(cfg(&["--rate", "0"]).is_err());
    assert!(cfg(&["--command", "__key__"]).is_err());
    let c = cfg(&["--command", "incr __key__", "--seed", "5"]).unwrap();
    assert_eq!(c.workload.command_names(), ["INCR"]);
    assert_eq!(c.seed, 5);
    assert!(Args::try_parse_from(["corekv-bench", "--test-time", "1", "-n", "5"]).is_err());
}

#[test]
fn client_seeds_are_distinct_and_deterministic() {
    let seeds: std::collections::HashSet<u64> = (0..1000).map(|i| derive_seed(42, i)).collect();
    assert_eq!(seeds.len(), 1000);
    assert_eq!(derive_seed(42, 7), derive_seed(42, 7));
    assert_ne!(derive_seed(42, 7), derive_seed(43, 7));
}
