//! Random list operations on a shard, through the command table, agree with
//! a `VecDeque` model, across node boundaries (small node sizes force many),
//! with compression off and with compress depths 1 and 2 (compressible
//! values make the interior nodes LZF-compressed). After every operation
//! each list's layout is checked: counts, and a node compressed exactly
//! when it lies past the depth and compresses.

mod common;

use common::{run, Resp};
use proptest::prelude::*;
use shard::value::Value;
use shard::{Config, Shard};
use std::collections::VecDeque;

#[derive(Debug, Clone)]
enum Op {
    Push(bool, Vec<Vec<u8>>),
    PushX(bool, Vec<u8>),
    Pop(bool, Option<usize>),
    Index(i64),
    Set(i64, Vec<u8>),
    Range(i64, i64),
    Trim(i64, i64),
    Rem(i64, Vec<u8>),
    Insert(bool, Vec<u8>, Vec<u8>),
    Pos(Vec<u8>, i64, Option<usize>, usize),
    /// LMOVE between the two lists: from the first, from its head, to its head.
    Move(bool, bool, bool),
    /// LMPOP over both lists.
    MPop(bool, usize),
}

/// Short values, integers, noise, and long repetitive values that compress.
fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (0u8..4).prop_map(|n| vec![b'a' + n]),
        (-3i64..70).prop_map(|n| n.to_string().into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..40),
        (0u8..3, 10usize..90).prop_map(|(c, n)| format!("{c}:{}", "abcd".repeat(n / 4)).into_bytes()),
        (0u8..3, 10usize..90).prop_map(|(c, n)| vec![b'x' + c; n]),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (any::<bool>(), proptest::collection::vec(value(), 1..8)).prop_map(|(h, v)| Op::Push(h, v)),
        1 => (any::<bool>(), value()).prop_map(|(h, v)| Op::PushX(h, v)),
        2 => (any::<bool>(), proptest::option::of(0usize..5)).prop_map(|(h, c)| Op::Pop(h, c)),
        1 => (-20i64..20).prop_map(Op::Index),
        1 => (-20i64..20, value()).prop_map(|(i, v)| Op::Set(i, v)),
        1 => (-20i64..20, -20i64..20).prop_map(|(a, b)| Op::Range(a, b)),
        1 => (-20i64..20, -20i64..20).prop_map(|(a, b)| Op::Trim(a, b)),
        1 => (-3i64..3, value()).prop_map(|(c, v)| Op::Rem(c, v)),
        1 => (any::<bool>(), value(), value()).prop_map(|(b, p, v)| Op::Insert(b, p, v)),
        1 => (value(), prop_oneof![-3i64..0, 1i64..4], proptest::option::of(0usize..4), 0usize..12)
            .prop_map(|(v, r, c, m)| Op::Pos(v, r, c, m)),
        1 => (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(a, f, t)| Op::Move(a, f, t)),
        1 => (any::<bool>(), 1usize..5).prop_map(|(h, c)| Op::MPop(h, c)),
    ]
}

fn w(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

fn n(i: impl ToString) -> Vec<u8> {
    i.to_string().into_bytes()
}

/// Redis's range normalisation.
fn range(a: i64, b: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let a = if a < 0 { (len + a).max(0) } else { a };
    let b = if b < 0 { len + b } else { b };
    (a <= b && a < len).then(|| (a as usize, b.min(len - 1) as usize))
}

fn index(i: i64, len: usize) -> Option<usize> {
    let i = if i < 0 { len as i64 + i } else { i };
    (0..len as i64).contains(&i).then_some(i as usize)
}

fn pop(m: &mut VecDeque<Vec<u8>>, head: bool) -> Option<Vec<u8>> {
    if head {
        m.pop_front()
    } else {
        m.pop_back()
    }
}

/// LPOS on the model.
fn lpos(m: &VecDeque<Vec<u8>>, v: &[u8], rank: i64, count: Option<usize>, maxlen: usize) -> Vec<i64> {
    let limit = if maxlen == 0 { m.len() } else { maxlen.min(m.len()) };
    let want = count.map_or(1, |c| if c == 0 { usize::MAX } else { c });
    let order: Vec<usize> = if rank > 0 { (0..m.len()).collect() } else { (0..m.len()).rev().collect() };
    order
        .into_iter()
        .take(limit)
        .filter(|&i| m[i] == v)
        .skip(rank.unsigned_abs() as usize - 1)
        .take(want)
        .map(|i| i as i64)
        .collect()
}

fn check_layout(shard: &mut Shard, key: &[u8], depth: i64) -> Result<(), TestCaseError> {
    if let Some(e) = shard.dbs[0].peek(key, 1_000_000) {
        let Value::List(l) = &e.value else { return Err(TestCaseError::fail("not a list")) };
        prop_assert_eq!(l.depth() as i64, depth);
        l.check_layout().map_err(TestCaseError::fail)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]
    #[test]
    fn lists_agree_with_a_deque(
        fill in prop_oneof![Just(-1i64), Just(2), Just(3), Just(4), Just(-2)],
        depth in 0i64..3,
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let config = Config { list_max_listpack_size: fill, list_compress_depth: depth, ..Config::default() };
        let mut shard = Shard::new(0, 1, config);
        let keys = [w("l"), w("m")];
        let mut models: [VecDeque<Vec<u8>>; 2] = [VecDeque::new(), VecDeque::new()];
        let (key, other) = (keys[0].clone(), keys[1].clone());
        for op in ops {
            let m = &mut models[0];
            match op {
                Op::Push(head, vals) => {
                    let mut cmd = vec![w(if head { "LPUSH" } else { "RPUSH" }), key.clone()];
                    cmd.extend(vals.iter().cloned());
                    for v in vals {
                        if head { m.push_front(v) } else { m.push_back(v) }
                    }
                    prop_assert_eq!(run(&mut shard, &cmd), Resp::Int(m.len() as i64));
                }
                Op::PushX(head, v) => {
                    let got = run(&mut shard, &[w(if head { "LPUSHX" } else { "RPUSHX" }), other.clone(), v.clone()]);
                    let o = &mut models[1];
                    if !o.is_empty() {
                        if head { o.push_front(v) } else { o.push_back(v) }
                    }
                    prop_assert_eq!(got, Resp::Int(o.len() as i64));
                }
                Op::Pop(head, count) => {
                    let mut cmd = vec![w(if head { "LPOP" } else { "RPOP" }), key.clone()];
                    let mut popped = Vec::new();
                    for _ in 0..count.unwrap_or(1) {
                        if let Some(v) = pop(m, head) { popped.push(v) }
                    }
                    match count {
                        None => prop_assert_eq!(run(&mut shard, &cmd).bulk().into_iter().collect::<Vec<_>>(), popped),
                        Some(c) => {
                            cmd.push(n(c));
                            match run(&mut shard, &cmd) {
                                got @ Resp::Array(_) => prop_assert_eq!(got.strings(), popped),
                                other => prop_assert!(popped.is_empty(), "{:?}", other),
                            }
                        }
                    }
                }
                Op::Index(i) => {
                    let got = run(&mut shard, &[w("LINDEX"), key.clone(), n(i)]).bulk();
                    prop_assert_eq!(got, index(i, m.len()).map(|i| m[i].clone()));
                }
                Op::Set(i, v) => {
                    let got = run(&mut shard, &[w("LSET"), key.clone(), n(i), v.clone()]);
                    match index(i, m.len()) {
                        Some(i) => { m[i] = v; prop_assert_eq!(got, Resp::Simple("OK".into())); }
                        None => prop_assert!(matches!(got, Resp::Error(_))),
                    }
                }
                Op::Range(a, b) => {
                    let got = run(&mut shard, &[w("LRANGE"), key.clone(), n(a), n(b)]).strings();
                    let want: Vec<Vec<u8>> = range(a, b, m.len()).map(|(a, b)| m.range(a..=b).cloned().collect()).unwrap_or_default();
                    prop_assert_eq!(got, want);
                }
                Op::Trim(a, b) => {
                    run(&mut shard, &[w("LTRIM"), key.clone(), n(a), n(b)]);
                    *m = range(a, b, m.len()).map(|(a, b)| m.range(a..=b).cloned().collect()).unwrap_or_default();
                }
                Op::Rem(count, v) => {
                    let got = run(&mut shard, &[w("LREM"), key.clone(), n(count), v.clone()]).int();
                    let positions: Vec<usize> = m.iter().enumerate().filter(|(_, e)| **e == v).map(|(i, _)| i).collect();
                    let limit = if count == 0 { usize::MAX } else { count.unsigned_abs() as usize };
                    let doomed: Vec<usize> = if count < 0 { positions.iter().rev().take(limit).copied().collect() } else { positions.into_iter().take(limit).collect() };
                    *m = m.iter().enumerate().filter(|(i, _)| !doomed.contains(i)).map(|(_, e)| e.clone()).collect();
                    prop_assert_eq!(got, doomed.len() as i64);
                }
                Op::Insert(before, pivot, v) => {
                    let got = run(&mut shard, &[w("LINSERT"), key.clone(), w(if before { "BEFORE" } else { "AFTER" }), pivot.clone(), v.clone()]).int();
                    let want = if m.is_empty() { 0 } else {
                        match m.iter().position(|e| *e == pivot) {
                            Some(p) => { m.insert(if before { p } else { p + 1 }, v); m.len() as i64 }
                            None => -1,
                        }
                    };
                    prop_assert_eq!(got, want);
                }
                Op::Pos(v, rank, count, maxlen) => {
                    let mut cmd = vec![w("LPOS"), key.clone(), v.clone(), w("RANK"), n(rank), w("MAXLEN"), n(maxlen)];
                    let want = lpos(m, &v, rank, count, maxlen);
                    match count {
                        Some(c) => {
                            cmd.extend([w("COUNT"), n(c)]);
                            let got: Vec<i64> = run(&mut shard, &cmd).array().iter().map(Resp::int).collect();
                            prop_assert_eq!(got, want);
                        }
                        None => match run(&mut shard, &cmd) {
                            Resp::Int(i) => prop_assert_eq!(Some(i), want.first().copied()),
                            other => prop_assert!(want.is_empty() && other == Resp::Bulk(None), "{:?}", other),
                        },
                    }
                }
                Op::Move(first, from_head, to_head) => {
                    let (src, dst) = if first { (0, 1) } else { (1, 0) };
                    let cmd = [w("LMOVE"), keys[src].clone(), keys[dst].clone(), w(if from_head { "LEFT" } else { "RIGHT" }), w(if to_head { "LEFT" } else { "RIGHT" })];
                    let got = run(&mut shard, &cmd).bulk();
                    let moved = pop(&mut models[src], from_head);
                    if let Some(v) = &moved {
                        if to_head { models[dst].push_front(v.clone()) } else { models[dst].push_back(v.clone()) }
                    }
                    prop_assert_eq!(got, moved);
                }
                Op::MPop(head, count) => {
                    let got = run(&mut shard, &[w("LMPOP"), w("2"), key.clone(), other.clone(), w(if head { "LEFT" } else { "RIGHT" }), w("COUNT"), n(count)]);
                    match models.iter().position(|m| !m.is_empty()) {
                        // A nil array reads back as an empty one here.
                        None => prop_assert_eq!(got, Resp::Array(vec![])),
                        Some(k) => {
                            let popped: Vec<Resp> = (0..count).filter_map(|_| pop(&mut models[k], head)).map(|v| Resp::Bulk(Some(v))).collect();
                            prop_assert_eq!(got, Resp::Array(vec![Resp::Bulk(Some(keys[k].clone())), Resp::Array(popped)]));
                        }
                    }
                }
            }
            for (k, m) in keys.iter().zip(&models) {
                let all = run(&mut shard, &[w("LRANGE"), k.clone(), w("0"), w("-1")]).strings();
                prop_assert_eq!(all, m.iter().cloned().collect::<Vec<_>>());
                prop_assert_eq!(run(&mut shard, &[w("EXISTS"), k.clone()]).int(), (!m.is_empty()) as i64);
                check_layout(&mut shard, k, depth)?;
            }
        }
    }
}

/// A list keeps the depth it was made with: CONFIG SET list-compress-depth
/// applies to lists made afterwards (Redis sets it when the quicklist is made).
#[test]
fn depth_is_fixed_when_the_list_is_made() {
    let mut shard = Shard::new(0, 1, Config { list_max_listpack_size: 4, ..Config::default() });
    let long = |i: usize| format!("{i}-{}", "compressible".repeat(8)).into_bytes();
    let fill = |shard: &mut Shard, key: &str| {
        for i in 0..100 {
            run(shard, &[w("RPUSH"), w(key), long(i)]);
        }
    };
    fill(&mut shard, "old");
    shard.config.list_compress_depth = 1;
    fill(&mut shard, "new");
    fill(&mut shard, "old");
    let lists = |shard: &mut Shard, key: &str| match &shard.dbs[0].peek(key.as_bytes(), 1_000_000).unwrap().value {
        Value::List(l) => (l.depth(), l.compressed_nodes(), l.node_count()),
        _ => unreachable!(),
    };
    assert_eq!(lists(&mut shard, "old"), (0, 0, 50));
    assert_eq!(lists(&mut shard, "new"), (1, 23, 25));
    assert_eq!(run(&mut shard, &[w("OBJECT"), w("ENCODING"), w("new")]), Resp::Bulk(Some(w("quicklist"))));
}
