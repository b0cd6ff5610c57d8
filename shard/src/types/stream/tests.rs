//! The packed encoding against a plain ordered map of entries.

use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
enum Op {
    Add { ms: u64, fields: Vec<(String, String)> },
    Del(u64),
    TrimLen(u64, bool),
    TrimMin(u64, bool),
}

fn op() -> impl Strategy<Value = Op> {
    let field = prop_oneof![Just("a".to_string()), Just("b".to_string()), "[a-c]{1,3}", "[0-9]{1,4}"];
    let value = prop_oneof!["[a-z]{0,8}", "-?[0-9]{1,12}", "x{60,70}"];
    prop_oneof![
        6 => (0u64..4, prop::collection::vec((field, value), 1..4)).prop_map(|(ms, fields)| Op::Add { ms, fields }),
        2 => (0u64..200).prop_map(Op::Del),
        1 => (0u64..40, any::<bool>()).prop_map(|(n, a)| Op::TrimLen(n, a)),
        1 => (0u64..200, any::<bool>()).prop_map(|(n, a)| Op::TrimMin(n, a)),
    ]
}

type Model = BTreeMap<StreamId, Vec<(String, String)>>;

fn contents(s: &Stream) -> Model {
    let mut out = Model::new();
    s.range(StreamId::MIN, StreamId::MAX, false, |id, n, e| {
        let f = n
            .fields(e)
            .into_iter()
            .map(|(f, v)| (String::from_utf8(f.to_vec()).unwrap(), String::from_utf8(v.to_vec()).unwrap()));
        out.insert(id, f.collect());
        true
    });
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn matches_a_plain_map(ops in prop::collection::vec(op(), 1..300), entries in 1u64..8, bytes in prop_oneof![Just(0u64), Just(120), Just(4096)]) {
        let limits = NodeLimits { max_bytes: bytes, max_entries: entries };
        let mut s = Stream::default();
        let mut model = Model::new();
        let mut clock = 0u64;
        for op in ops {
            match op {
                Op::Add { ms, fields } => {
                    clock += ms;
                    let pairs: Vec<(&[u8], &[u8])> = fields.iter().map(|(f, v)| (f.as_bytes(), v.as_bytes())).collect();
                    let id = s.append(&pairs, None, clock, limits).unwrap();
                    prop_assert!(model.keys().next_back().is_none_or(|last| *last < id));
                    model.insert(id, fields);
                }
                Op::Del(n) => {
                    let id = model.keys().nth(n as usize % (model.len() + 1)).copied().unwrap_or(StreamId::new(n, 0));
                    prop_assert_eq!(s.delete(id), model.remove(&id).is_some());
                }
                Op::TrimLen(max, approx) => {
                    let removed = s.trim(&TrimArgs { trim: Trim::MaxLen(max), approx, limit: 0 });
                    let before = model.len() as u64;
                    if approx {
                        // Whole nodes only: what is left is a suffix no shorter than max.
                        let keep: Vec<StreamId> = contents(&s).keys().copied().collect();
                        model.retain(|k, _| keep.contains(k));
                        prop_assert!(model.len() as u64 >= max.min(before));
                    } else {
                        while model.len() as u64 > max {
                            let first = *model.keys().next().unwrap();
                            model.remove(&first);
                        }
                    }
                    prop_assert_eq!(removed, before - model.len() as u64);
                }
                Op::TrimMin(ms, approx) => {
                    let min = StreamId::new(ms, 0);
                    s.trim(&TrimArgs { trim: Trim::MinId(min), approx, limit: 0 });
                    if approx {
                        let keep: Vec<StreamId> = contents(&s).keys().copied().collect();
                        model.retain(|k, _| keep.contains(k));
                    } else {
                        model.retain(|k, _| *k >= min);
                    }
                }
            }
            prop_assert_eq!(s.len(), model.len() as u64);
            prop_assert_eq!(contents(&s), model.clone());
            prop_assert_eq!(s.first_id, model.keys().next().copied().unwrap_or_default());
            for n in s.nodes.values() {
                prop_assert!(crate::rdb::listpack::parse(&n.lp).is_ok());
                // An exact MINID trim may leave a node of tombstones, as in Redis.
                prop_assert!(n.count() >= 0);
            }
        }
        // Ranges both ways with bounds inside and between entries.
        let ids: Vec<StreamId> = model.keys().copied().collect();
        if let (Some(a), Some(b)) = (ids.first(), ids.last()) {
            let mid = StreamId::new((a.ms + b.ms) / 2, 0);
            let mut fwd = Vec::new();
            s.range(mid, *b, false, |id, _, _| { fwd.push(id); true });
            let mut back = Vec::new();
            s.range(mid, *b, true, |id, _, _| { back.push(id); true });
            back.reverse();
            let want: Vec<StreamId> = model.range(mid..=*b).map(|(k, _)| *k).collect();
            prop_assert_eq!(&fwd, &want);
            prop_assert_eq!(&back, &want);
        }
    }
}

#[test]
fn redis_node_bytes() {
    // XADD s 1-1 a 1 on Redis 7.0: the node DUMP shows.
    let mut s = Stream::default();
    s.append(&[(b"a", b"1")], Some((StreamId::new(1, 1), true)), 0, NodeLimits::default()).unwrap();
    let node = s.nodes.values().next().unwrap();
    let items = crate::rdb::listpack::parse(&node.lp).unwrap();
    assert_eq!(
        items,
        vec![
            Item::Int(1),
            Item::Int(0),
            Item::Int(1),
            Item::Str(b"a"),
            Item::Int(0),
            Item::Int(FLAG_SAMEFIELDS_I),
            Item::Int(0),
            Item::Int(0),
            Item::Int(1),
            Item::Int(4)
        ]
    );
}

const FLAG_SAMEFIELDS_I: i64 = node::FLAG_SAMEFIELDS;

#[test]
fn rax_node_counts() {
    let mut s = Stream::default();
    assert_eq!(s.rax_nodes(), 1);
    let lim = NodeLimits { max_bytes: 0, max_entries: 1 };
    s.append(&[(b"a", b"1")], Some((StreamId::new(1, 0), true)), 0, lim).unwrap();
    assert_eq!(s.rax_nodes(), 2);
    s.append(&[(b"a", b"1")], Some((StreamId::new(2, 0), true)), 0, lim).unwrap();
    // Compressed prefix of 7 bytes, a branch, two leaves each behind a
    // compressed tail of 8 bytes.
    assert_eq!(s.rax_nodes(), 6);
}
