//! Random sequences of hash commands run on a shard through the command
//! table agree with a model (a map of BTreeMaps), encodings included: the
//! thresholds are set low so sequences cross them, and bulk inserts grow
//! hash tables through segment splits.

mod common;

use common::{run, Resp};
use proptest::prelude::*;
use shard::{Config, Shard};
use std::collections::{BTreeMap, BTreeSet};

const MAX_ENTRIES: usize = 8;
const MAX_VALUE: usize = 12;

#[derive(Default, Debug)]
struct Model {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Converted to a hash table (one-way).
    table: bool,
}

type Elem = Vec<u8>;

#[derive(Debug, Clone)]
enum Op {
    Set(u8, Vec<(Elem, Elem)>),
    SetNx(u8, Elem, Elem),
    Get(u8, Elem),
    MGet(u8, Vec<Elem>),
    Del(u8, Vec<Elem>),
    Exists(u8, Elem),
    Len(u8),
    Strlen(u8, Elem),
    IncrBy(u8, Elem, i64),
    GetAll(u8),
    Scan(u8, i64, Option<String>),
    Rand(u8, i64, bool),
    Bulk(u8, u16, u16),
    DelKey(u8),
    Copy(u8, u8),
}

fn elem() -> impl Strategy<Value = Elem> {
    prop_oneof![
        (0u8..12).prop_map(|i| format!("f{i}").into_bytes()),
        (-3i64..70).prop_map(|n| n.to_string().into_bytes()),
        "[a-z]{0,16}".prop_map(String::into_bytes),
        Just(b"9223372036854775807".to_vec()),
        Just(b"007".to_vec()),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..4;
    prop_oneof![
        4 => (key.clone(), proptest::collection::vec((elem(), elem()), 1..4)).prop_map(|(k, p)| Op::Set(k, p)),
        1 => (key.clone(), elem(), elem()).prop_map(|(k, f, v)| Op::SetNx(k, f, v)),
        2 => (key.clone(), elem()).prop_map(|(k, f)| Op::Get(k, f)),
        1 => (key.clone(), proptest::collection::vec(elem(), 1..4)).prop_map(|(k, f)| Op::MGet(k, f)),
        2 => (key.clone(), proptest::collection::vec(elem(), 1..4)).prop_map(|(k, f)| Op::Del(k, f)),
        1 => (key.clone(), elem()).prop_map(|(k, f)| Op::Exists(k, f)),
        1 => key.clone().prop_map(Op::Len),
        1 => (key.clone(), elem()).prop_map(|(k, f)| Op::Strlen(k, f)),
        1 => (key.clone(), elem(), prop_oneof![-100i64..100, Just(i64::MAX), Just(1_000_000_000_000)])
            .prop_map(|(k, f, d)| Op::IncrBy(k, f, d)),
        1 => key.clone().prop_map(Op::GetAll),
        1 => (key.clone(), 1i64..50, proptest::option::of(prop_oneof![Just("f*".to_string()), Just("*1".to_string())]))
            .prop_map(|(k, c, p)| Op::Scan(k, c, p)),
        1 => (key.clone(), -20i64..20, any::<bool>()).prop_map(|(k, c, w)| Op::Rand(k, c, w)),
        1 => (key.clone(), prop_oneof![1u16..20, 100u16..2500], 0u16..3000).prop_map(|(k, n, b)| Op::Bulk(k, n, b)),
        1 => key.clone().prop_map(Op::DelKey),
        1 => (key.clone(), key).prop_map(|(a, b)| Op::Copy(a, b)),
    ]
}

fn k(i: u8) -> Vec<u8> {
    format!("hash{i}").into_bytes()
}

fn bulk(v: Option<&Vec<u8>>) -> Resp {
    Resp::Bulk(v.cloned())
}

/// Sets a field in the model, applying the conversion rules.
fn model_set(m: &mut Model, f: &[u8], v: &[u8]) -> bool {
    if f.len() > MAX_VALUE || v.len() > MAX_VALUE {
        m.table = true;
    }
    let new = m.map.insert(f.to_vec(), v.to_vec()).is_none();
    if m.map.len() > MAX_ENTRIES {
        m.table = true;
    }
    new
}

fn check(shard: &mut Shard, models: &mut BTreeMap<u8, Model>, op: &Op) {
    match op {
        Op::Set(key, pairs) => {
            let m = models.entry(*key).or_default();
            // HSET converts first when any argument is too long.
            if pairs.iter().any(|(f, v)| f.len() > MAX_VALUE || v.len() > MAX_VALUE) {
                m.table = true;
            }
            let added = pairs.iter().filter(|(f, v)| model_set(m, f, v)).count();
            let mut w = cmd!["HSET", &k(*key)];
            for (f, v) in pairs {
                w.push(f.clone());
                w.push(v.clone());
            }
            assert_eq!(run(shard, &w), Resp::Int(added as i64));
        }
        Op::SetNx(key, f, v) => {
            let m = models.entry(*key).or_default();
            let set = !m.map.contains_key(f);
            if set {
                model_set(m, f, v);
            }
            assert_eq!(run(shard, &cmd!["HSETNX", &k(*key), f, v]), Resp::Int(set as i64));
        }
        Op::Get(key, f) => {
            let want = bulk(models.get(key).and_then(|m| m.map.get(f)));
            assert_eq!(run(shard, &cmd!["HGET", &k(*key), f]), want);
        }
        Op::MGet(key, fields) => {
            let want = fields.iter().map(|f| bulk(models.get(key).and_then(|m| m.map.get(f)))).collect();
            let mut w = cmd!["HMGET", &k(*key)];
            w.extend(fields.iter().cloned());
            assert_eq!(run(shard, &w), Resp::Array(want));
        }
        Op::Del(key, fields) => {
            let n = match models.get_mut(key) {
                Some(m) => fields.iter().filter(|f| m.map.remove(*f).is_some()).count(),
                None => 0,
            };
            let mut w = cmd!["HDEL", &k(*key)];
            w.extend(fields.iter().cloned());
            assert_eq!(run(shard, &w), Resp::Int(n as i64));
        }
        Op::Exists(key, f) => {
            let want = models.get(key).is_some_and(|m| m.map.contains_key(f));
            assert_eq!(run(shard, &cmd!["HEXISTS", &k(*key), f]), Resp::Int(want as i64));
        }
        Op::Len(key) => {
            let want = models.get(key).map_or(0, |m| m.map.len());
            assert_eq!(run(shard, &cmd!["HLEN", &k(*key)]), Resp::Int(want as i64));
        }
        Op::Strlen(key, f) => {
            let want = models.get(key).and_then(|m| m.map.get(f)).map_or(0, Vec::len);
            assert_eq!(run(shard, &cmd!["HSTRLEN", &k(*key), f]), Resp::Int(want as i64));
        }
        Op::IncrBy(key, f, d) => {
            let m = models.entry(*key).or_default();
            let cur = m.map.get(f).cloned();
            let parsed = match &cur {
                None => Some(0),
                Some(v) => shard::args::parse_i64(v),
            };
            let got = run(shard, &cmd!["HINCRBY", &k(*key), f, *d]);
            match parsed {
                None => assert_eq!(got, Resp::Error("ERR hash value is not an integer".into())),
                Some(n) => match n.checked_add(*d) {
                    None => assert_eq!(got, Resp::Error("ERR increment or decrement would overflow".into())),
                    Some(next) => {
                        model_set(m, f, next.to_string().as_bytes());
                        assert_eq!(got, Resp::Int(next));
                    }
                },
            }
            if m.map.is_empty() {
                models.remove(key);
            }
        }
        Op::GetAll(key) => {
            let got = run(shard, &cmd!["HGETALL", &k(*key)]);
            let pairs: BTreeMap<Vec<u8>, Vec<u8>> =
                got.strings().chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect();
            let want = models.get(key).map(|m| m.map.clone()).unwrap_or_default();
            assert_eq!(got.array().len(), 2 * want.len());
            assert_eq!(pairs, want);
            let keys = run(shard, &cmd!["HKEYS", &k(*key)]).strings();
            assert_eq!(keys.iter().cloned().collect::<BTreeSet<_>>(), want.keys().cloned().collect());
            let vals = run(shard, &cmd!["HVALS", &k(*key)]).strings();
            // Same order as HKEYS, so values line up with their fields.
            let by_keys: Vec<Vec<u8>> = keys.iter().map(|f| want[f].clone()).collect();
            assert_eq!(vals, by_keys);
        }
        Op::Scan(key, count, pattern) => {
            let mut cursor = b"0".to_vec();
            let mut seen = BTreeMap::new();
            for round in 0.. {
                assert!(round < 100_000, "scan does not end");
                let mut w = cmd!["HSCAN", &k(*key), &cursor, "COUNT", *count];
                if let Some(p) = pattern {
                    w.extend(cmd!["MATCH", p.as_str()]);
                }
                let got = run(shard, &w);
                let parts = got.array();
                cursor = parts[0].bulk().unwrap();
                for p in parts[1].strings().chunks(2) {
                    seen.insert(p[0].clone(), p[1].clone());
                }
                if cursor == b"0" {
                    break;
                }
            }
            let want: BTreeMap<Vec<u8>, Vec<u8>> = models
                .get(key)
                .map(|m| {
                    m.map
                        .iter()
                        .filter(|(f, _)| {
                            pattern.as_ref().is_none_or(|p| shard::glob::glob_match(p.as_bytes(), f, false))
                        })
                        .map(|(f, v)| (f.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default();
            assert_eq!(seen, want);
        }
        Op::Rand(key, count, withvalues) => {
            let mut w = cmd!["HRANDFIELD", &k(*key), *count];
            if *withvalues {
                w.extend(cmd!["WITHVALUES"]);
            }
            let got = run(shard, &w);
            let empty = BTreeMap::new();
            let map = models.get(key).map_or(&empty, |m| &m.map);
            let items = got.strings();
            let per = if *withvalues { 2 } else { 1 };
            let n = items.len() / per;
            if *count >= 0 {
                assert_eq!(n, (*count as usize).min(map.len()));
                let distinct: BTreeSet<_> = items.chunks(per).map(|c| c[0].clone()).collect();
                assert_eq!(distinct.len(), n, "distinct fields");
            } else {
                assert_eq!(n, if map.is_empty() { 0 } else { count.unsigned_abs() as usize });
            }
            for c in items.chunks(per) {
                let v = map.get(&c[0]).expect("a field of the hash");
                if *withvalues {
                    assert_eq!(&c[1], v);
                }
            }
        }
        Op::Bulk(key, n, base) => {
            let m = models.entry(*key).or_default();
            let mut w = cmd!["HSET", &k(*key)];
            let mut added = 0;
            for i in 0..*n {
                let (f, v) = (format!("b{}", *base as u32 + i as u32), format!("{}", i as u32 * 7));
                added += model_set(m, f.as_bytes(), v.as_bytes()) as i64;
                w.push(f.into_bytes());
                w.push(v.into_bytes());
            }
            assert_eq!(run(shard, &w), Resp::Int(added));
        }
        Op::DelKey(key) => {
            let existed = models.remove(key).is_some();
            assert_eq!(run(shard, &cmd!["DEL", &k(*key)]), Resp::Int(existed as i64));
        }
        Op::Copy(a, b) => {
            let got = run(shard, &cmd!["COPY", &k(*a), &k(*b), "REPLACE"]);
            if a == b {
                assert!(matches!(got, Resp::Error(_)));
            } else {
                match models.get(a) {
                    Some(m) => {
                        let copy = Model { map: m.map.clone(), table: m.table };
                        models.insert(*b, copy);
                        assert_eq!(got, Resp::Int(1));
                    }
                    None => assert_eq!(got, Resp::Int(0)),
                }
            }
        }
    }
    // Empty hashes are deleted; encodings follow the one-way rule.
    models.retain(|_, m| !m.map.is_empty());
    for (key, m) in models.iter() {
        let want = if m.table { "hashtable" } else { "listpack" };
        let got = run(shard, &cmd!["OBJECT", "ENCODING", &k(*key)]);
        assert_eq!(got, Resp::Bulk(Some(want.as_bytes().to_vec())), "{op:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    #[test]
    fn hashes_agree_with_a_model(ops in proptest::collection::vec(op(), 1..50)) {
        let config = Config { hash_max_listpack_entries: MAX_ENTRIES as u64, hash_max_listpack_value: MAX_VALUE as u64, ..Config::default() };
        let mut shard = Shard::new(0, 1, config);
        let mut models = BTreeMap::new();
        for op in &ops {
            check(&mut shard, &mut models, op);
        }
        for i in 0..4u8 {
            let ty = run(&mut shard, &cmd!["TYPE", &k(i)]);
            let want = if models.contains_key(&i) { "hash" } else { "none" };
            prop_assert_eq!(ty, Resp::Simple(want.into()));
        }
        prop_assert_eq!(shard.keys(), models.len());
    }
}
