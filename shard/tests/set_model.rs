//! Random sequences of set commands run on a shard through the command
//! table agree with a model (a map of BTreeSets), encodings included: the
//! intset limit is set low so sequences cross it, and bulk inserts grow
//! hash tables through segment splits.

mod common;

use common::{run, Resp};
use proptest::prelude::*;
use shard::args::parse_i64;
use shard::{Config, Shard};
use std::collections::{BTreeMap, BTreeSet};

const MAX_INTSET: usize = 8;

type Members = BTreeSet<Vec<u8>>;

#[derive(Default, Debug, Clone)]
struct Model {
    set: Members,
    /// No longer an intset (one-way, except that SPOP can rebuild).
    table: bool,
}

impl Model {
    fn add(&mut self, m: &[u8]) -> bool {
        if parse_i64(m).is_none() {
            self.table = true;
        }
        let new = self.set.insert(m.to_vec());
        if self.set.len() > MAX_INTSET {
            self.table = true;
        }
        new
    }

    /// Redis builds results of set operations from an intset.
    fn built(set: Members) -> Model {
        let mut m = Model::default();
        for x in &set {
            m.add(x);
        }
        m
    }
}

#[derive(Debug, Clone)]
enum Op {
    Add(u8, Vec<Vec<u8>>),
    Rem(u8, Vec<Vec<u8>>),
    IsMember(u8, Vec<u8>),
    MIsMember(u8, Vec<Vec<u8>>),
    Card(u8),
    Members(u8),
    Pop(u8, Option<u16>),
    Rand(u8, i64),
    Move(u8, u8, Vec<u8>),
    Inter(Vec<u8>),
    Union(Vec<u8>),
    Diff(Vec<u8>),
    Store(u8, u8, Vec<u8>),
    InterCard(Vec<u8>, u16),
    Scan(u8, i64, Option<String>),
    Bulk(u8, u16, u16, bool),
    DelKey(u8),
}

fn member() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => (-5i64..40).prop_map(|n| n.to_string().into_bytes()),
        1 => prop_oneof![Just(i64::MAX), Just(i64::MIN), Just(70000), Just(-3_000_000_000)]
            .prop_map(|n| n.to_string().into_bytes()),
        2 => "[a-e]{0,3}".prop_map(String::into_bytes),
        1 => "[a-z]{60,80}".prop_map(String::into_bytes),
    ]
}

fn members() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec(member(), 1..5)
}

fn keys() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(0u8..5, 1..4)
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..5;
    prop_oneof![
        5 => (key.clone(), members()).prop_map(|(k, m)| Op::Add(k, m)),
        2 => (key.clone(), members()).prop_map(|(k, m)| Op::Rem(k, m)),
        1 => (key.clone(), member()).prop_map(|(k, m)| Op::IsMember(k, m)),
        1 => (key.clone(), members()).prop_map(|(k, m)| Op::MIsMember(k, m)),
        1 => key.clone().prop_map(Op::Card),
        1 => key.clone().prop_map(Op::Members),
        2 => (key.clone(), proptest::option::of(prop_oneof![0u16..4, 0u16..60])).prop_map(|(k, c)| Op::Pop(k, c)),
        1 => (key.clone(), -10i64..30).prop_map(|(k, c)| Op::Rand(k, c)),
        1 => (key.clone(), key.clone(), member()).prop_map(|(a, b, m)| Op::Move(a, b, m)),
        1 => keys().prop_map(Op::Inter),
        1 => keys().prop_map(Op::Union),
        1 => keys().prop_map(Op::Diff),
        2 => (0u8..3, key.clone(), keys()).prop_map(|(o, d, k)| Op::Store(o, d, k)),
        1 => (keys(), 0u16..5).prop_map(|(k, l)| Op::InterCard(k, l)),
        1 => (key.clone(), 1i64..40, proptest::option::of(Just("1*".to_string()))).prop_map(|(k, c, p)| Op::Scan(k, c, p)),
        1 => (key.clone(), prop_oneof![1u16..20, 100u16..2500], 0u16..2000, any::<bool>())
            .prop_map(|(k, n, b, s)| Op::Bulk(k, n, b, s)),
        1 => key.prop_map(Op::DelKey),
    ]
}

fn k(i: u8) -> Vec<u8> {
    format!("set{i}").into_bytes()
}

fn empty() -> &'static Members {
    static EMPTY: Members = BTreeSet::new();
    &EMPTY
}

fn sorted(r: &Resp) -> Members {
    r.strings().into_iter().collect()
}

fn check(shard: &mut Shard, models: &mut BTreeMap<u8, Model>, op: &Op) {
    let get = |models: &BTreeMap<u8, Model>, key: &u8| models.get(key).map(|m| m.set.clone()).unwrap_or_default();
    match op {
        Op::Add(key, ms) => {
            let m = models.entry(*key).or_default();
            let added = ms.iter().filter(|x| m.add(x)).count();
            let mut w = cmd!["SADD", &k(*key)];
            w.extend(ms.iter().cloned());
            assert_eq!(run(shard, &w), Resp::Int(added as i64));
        }
        Op::Rem(key, ms) => {
            let n = models.get_mut(key).map_or(0, |m| ms.iter().filter(|x| m.set.remove(*x)).count());
            let mut w = cmd!["SREM", &k(*key)];
            w.extend(ms.iter().cloned());
            assert_eq!(run(shard, &w), Resp::Int(n as i64));
        }
        Op::IsMember(key, x) => {
            let want = models.get(key).is_some_and(|m| m.set.contains(x));
            assert_eq!(run(shard, &cmd!["SISMEMBER", &k(*key), x]), Resp::Int(want as i64));
        }
        Op::MIsMember(key, ms) => {
            let want =
                ms.iter().map(|x| Resp::Int(models.get(key).is_some_and(|m| m.set.contains(x)) as i64)).collect();
            let mut w = cmd!["SMISMEMBER", &k(*key)];
            w.extend(ms.iter().cloned());
            assert_eq!(run(shard, &w), Resp::Array(want));
        }
        Op::Card(key) => {
            let want = models.get(key).map_or(0, |m| m.set.len());
            assert_eq!(run(shard, &cmd!["SCARD", &k(*key)]), Resp::Int(want as i64));
        }
        Op::Members(key) => {
            let got = run(shard, &cmd!["SMEMBERS", &k(*key)]);
            let want = get(models, key);
            assert_eq!(got.array().len(), want.len());
            assert_eq!(sorted(&got), want);
            // An intset answers in ascending order.
            if models.get(key).is_some_and(|m| !m.table) {
                let nums: Vec<i64> = got.strings().iter().map(|s| parse_i64(s).unwrap()).collect();
                assert!(nums.windows(2).all(|w| w[0] < w[1]), "{nums:?}");
            }
        }
        Op::Pop(key, count) => {
            let Some(m) = models.get_mut(key) else {
                let w = match count {
                    Some(c) => cmd!["SPOP", &k(*key), *c as i64],
                    None => cmd!["SPOP", &k(*key)],
                };
                let got = run(shard, &w);
                assert!(got == Resp::Bulk(None) || got == Resp::Array(vec![]), "{got:?}");
                return;
            };
            let size = m.set.len();
            let popped: Vec<Vec<u8>> = match count {
                None => vec![run(shard, &cmd!["SPOP", &k(*key)]).bulk().expect("a member")],
                Some(c) => run(shard, &cmd!["SPOP", &k(*key), *c as i64]).strings(),
            };
            let want = count.map_or(1, |c| (c as usize).min(size));
            assert_eq!(popped.len(), want);
            for x in &popped {
                assert!(m.set.remove(x), "popped a member twice or a stranger: {:?}", String::from_utf8_lossy(x));
            }
            // Popping most of a set rebuilds it from what is left.
            if let Some(c) = count {
                let c = *c as usize;
                if c < size && (size - c) * 5 <= c {
                    *m = Model::built(std::mem::take(&mut m.set));
                }
            }
        }
        Op::Rand(key, count) => {
            let got = run(shard, &cmd!["SRANDMEMBER", &k(*key), *count]).strings();
            let set = models.get(key).map_or(empty(), |m| &m.set);
            if *count >= 0 {
                assert_eq!(got.len(), (*count as usize).min(set.len()));
                assert_eq!(got.iter().collect::<BTreeSet<_>>().len(), got.len(), "distinct");
            } else {
                assert_eq!(got.len(), if set.is_empty() { 0 } else { count.unsigned_abs() as usize });
            }
            assert!(got.iter().all(|x| set.contains(x)));
        }
        Op::Move(a, b, x) => {
            let got = run(shard, &cmd!["SMOVE", &k(*a), &k(*b), x]);
            let present = models.get(a).is_some_and(|m| m.set.contains(x));
            assert_eq!(got, Resp::Int(present as i64));
            if present && a != b {
                if let Some(m) = models.get_mut(a) {
                    m.set.remove(x);
                }
                let dst =
                    models.entry(*b).or_insert_with(|| Model { table: parse_i64(x).is_none(), ..Model::default() });
                dst.add(x);
            }
        }
        Op::Inter(ks) | Op::Union(ks) | Op::Diff(ks) => {
            let name = match op {
                Op::Inter(_) => "SINTER",
                Op::Union(_) => "SUNION",
                _ => "SDIFF",
            };
            let mut w = cmd![name];
            w.extend(ks.iter().map(|i| k(*i)));
            let want = combine(op, ks.iter().map(|i| get(models, i)).collect());
            let got = run(shard, &w);
            assert_eq!(got.array().len(), want.len());
            assert_eq!(sorted(&got), want);
        }
        Op::Store(which, dst, ks) => {
            let (name, shape) = match which {
                0 => ("SINTERSTORE", Op::Inter(vec![])),
                1 => ("SUNIONSTORE", Op::Union(vec![])),
                _ => ("SDIFFSTORE", Op::Diff(vec![])),
            };
            let mut w = cmd![name, &k(*dst)];
            w.extend(ks.iter().map(|i| k(*i)));
            let want = combine(&shape, ks.iter().map(|i| get(models, i)).collect());
            assert_eq!(run(shard, &w), Resp::Int(want.len() as i64));
            models.insert(*dst, Model::built(want));
        }
        Op::InterCard(ks, limit) => {
            let mut w = cmd!["SINTERCARD", ks.len() as i64];
            w.extend(ks.iter().map(|i| k(*i)));
            w.extend(cmd!["LIMIT", *limit as i64]);
            let n = combine(&Op::Inter(vec![]), ks.iter().map(|i| get(models, i)).collect()).len();
            let want = if *limit == 0 { n } else { n.min(*limit as usize) };
            assert_eq!(run(shard, &w), Resp::Int(want as i64));
        }
        Op::Scan(key, count, pattern) => {
            let mut cursor = b"0".to_vec();
            let mut seen = Members::new();
            for round in 0.. {
                assert!(round < 100_000, "scan does not end");
                let mut w = cmd!["SSCAN", &k(*key), &cursor, "COUNT", *count];
                if let Some(p) = pattern {
                    w.extend(cmd!["MATCH", p.as_str()]);
                }
                let got = run(shard, &w);
                let parts = got.array();
                cursor = parts[0].bulk().unwrap();
                seen.extend(parts[1].strings());
                if cursor == b"0" {
                    break;
                }
            }
            let want: Members = get(models, key)
                .into_iter()
                .filter(|x| pattern.as_ref().is_none_or(|p| shard::glob::glob_match(p.as_bytes(), x, false)))
                .collect();
            assert_eq!(seen, want);
        }
        Op::Bulk(key, n, base, strings) => {
            let m = models.entry(*key).or_default();
            let mut w = cmd!["SADD", &k(*key)];
            let mut added = 0;
            for i in 0..*n as u32 {
                let x = if *strings { format!("m{}", *base as u32 + i) } else { (*base as u32 + i).to_string() };
                added += m.add(x.as_bytes()) as i64;
                w.push(x.into_bytes());
            }
            assert_eq!(run(shard, &w), Resp::Int(added));
        }
        Op::DelKey(key) => {
            let existed = models.remove(key).is_some();
            assert_eq!(run(shard, &cmd!["DEL", &k(*key)]), Resp::Int(existed as i64));
        }
    }
    models.retain(|_, m| !m.set.is_empty());
    for (key, m) in models.iter() {
        let want = if m.table { "hashtable" } else { "intset" };
        let got = run(shard, &cmd!["OBJECT", "ENCODING", &k(*key)]);
        assert_eq!(got, Resp::Bulk(Some(want.as_bytes().to_vec())), "{op:?}");
    }
}

fn combine(op: &Op, sets: Vec<Members>) -> Members {
    let mut it = sets.into_iter();
    let first = it.next().unwrap_or_default();
    match op {
        Op::Inter(_) => it.fold(first, |acc, s| acc.intersection(&s).cloned().collect()),
        Op::Union(_) => it.fold(first, |acc, s| acc.union(&s).cloned().collect()),
        _ => it.fold(first, |acc, s| acc.difference(&s).cloned().collect()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    #[test]
    fn sets_agree_with_a_model(ops in proptest::collection::vec(op(), 1..50)) {
        let config = Config { set_max_intset_entries: MAX_INTSET as u64, ..Config::default() };
        let mut shard = Shard::new(0, 1, config);
        let mut models = BTreeMap::new();
        for op in &ops {
            check(&mut shard, &mut models, op);
        }
        for i in 0..5u8 {
            let ty = run(&mut shard, &cmd!["TYPE", &k(i)]);
            let want = if models.contains_key(&i) { "set" } else { "none" };
            prop_assert_eq!(ty, Resp::Simple(want.into()));
        }
        prop_assert_eq!(shard.keys(), models.len());
    }
}
