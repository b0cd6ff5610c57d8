//! Random list operations on a shard, through the command table, agree with
//! a `VecDeque` model, across node boundaries (small node sizes force many).

mod common;

use common::{run, Resp};
use proptest::prelude::*;
use shard::{Config, Shard};
use std::collections::VecDeque;

#[derive(Debug, Clone)]
enum Op {
    Push(bool, Vec<Vec<u8>>),
    Pop(bool, Option<usize>),
    Index(i64),
    Set(i64, Vec<u8>),
    Range(i64, i64),
    Trim(i64, i64),
    Rem(i64, Vec<u8>),
    Insert(bool, Vec<u8>, Vec<u8>),
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (0u8..4).prop_map(|n| vec![b'a' + n]),
        (-3i64..70).prop_map(|n| n.to_string().into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..40),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (any::<bool>(), proptest::collection::vec(value(), 1..6)).prop_map(|(h, v)| Op::Push(h, v)),
        (any::<bool>(), proptest::option::of(0usize..5)).prop_map(|(h, c)| Op::Pop(h, c)),
        (-12i64..12).prop_map(Op::Index),
        (-12i64..12, value()).prop_map(|(i, v)| Op::Set(i, v)),
        (-12i64..12, -12i64..12).prop_map(|(a, b)| Op::Range(a, b)),
        (-12i64..12, -12i64..12).prop_map(|(a, b)| Op::Trim(a, b)),
        (-3i64..3, value()).prop_map(|(c, v)| Op::Rem(c, v)),
        (any::<bool>(), value(), value()).prop_map(|(b, p, v)| Op::Insert(b, p, v)),
    ]
}

fn w(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
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

proptest! {
    #[test]
    fn lists_agree_with_a_deque(fill in prop_oneof![Just(-1i64), Just(2), Just(3), Just(-2)], ops in proptest::collection::vec(op(), 1..80)) {
        let mut shard = Shard::new(0, 1, Config { list_max_listpack_size: fill, ..Config::default() });
        let mut m: VecDeque<Vec<u8>> = VecDeque::new();
        let key = w("l");
        for op in ops {
            match op {
                Op::Push(head, vals) => {
                    let mut cmd = vec![w(if head { "LPUSH" } else { "RPUSH" }), key.clone()];
                    cmd.extend(vals.iter().cloned());
                    for v in vals {
                        if head { m.push_front(v) } else { m.push_back(v) }
                    }
                    prop_assert_eq!(run(&mut shard, &cmd), Resp::Int(m.len() as i64));
                }
                Op::Pop(head, count) => {
                    let mut cmd = vec![w(if head { "LPOP" } else { "RPOP" }), key.clone()];
                    let mut popped = Vec::new();
                    for _ in 0..count.unwrap_or(1) {
                        if let Some(v) = if head { m.pop_front() } else { m.pop_back() } { popped.push(v) }
                    }
                    match count {
                        None => prop_assert_eq!(run(&mut shard, &cmd).bulk().into_iter().collect::<Vec<_>>(), popped),
                        Some(c) => {
                            cmd.push(c.to_string().into_bytes());
                            match run(&mut shard, &cmd) {
                                got @ Resp::Array(_) => prop_assert_eq!(got.strings(), popped),
                                other => prop_assert!(popped.is_empty(), "{:?}", other),
                            }
                        }
                    }
                }
                Op::Index(i) => {
                    let got = run(&mut shard, &[w("LINDEX"), key.clone(), i.to_string().into_bytes()]).bulk();
                    prop_assert_eq!(got, index(i, m.len()).map(|i| m[i].clone()));
                }
                Op::Set(i, v) => {
                    let got = run(&mut shard, &[w("LSET"), key.clone(), i.to_string().into_bytes(), v.clone()]);
                    match index(i, m.len()) {
                        Some(i) => { m[i] = v; prop_assert_eq!(got, Resp::Simple("OK".into())); }
                        None => prop_assert!(matches!(got, Resp::Error(_))),
                    }
                }
                Op::Range(a, b) => {
                    let got = run(&mut shard, &[w("LRANGE"), key.clone(), a.to_string().into_bytes(), b.to_string().into_bytes()]).strings();
                    let want: Vec<Vec<u8>> = range(a, b, m.len()).map(|(a, b)| m.range(a..=b).cloned().collect()).unwrap_or_default();
                    prop_assert_eq!(got, want);
                }
                Op::Trim(a, b) => {
                    run(&mut shard, &[w("LTRIM"), key.clone(), a.to_string().into_bytes(), b.to_string().into_bytes()]);
                    m = range(a, b, m.len()).map(|(a, b)| m.range(a..=b).cloned().collect()).unwrap_or_default();
                }
                Op::Rem(count, v) => {
                    let got = run(&mut shard, &[w("LREM"), key.clone(), count.to_string().into_bytes(), v.clone()]).int();
                    let positions: Vec<usize> = m.iter().enumerate().filter(|(_, e)| **e == v).map(|(i, _)| i).collect();
                    let limit = if count == 0 { usize::MAX } else { count.unsigned_abs() as usize };
                    let doomed: Vec<usize> = if count < 0 { positions.iter().rev().take(limit).copied().collect() } else { positions.into_iter().take(limit).collect() };
                    m = m.into_iter().enumerate().filter(|(i, _)| !doomed.contains(i)).map(|(_, e)| e).collect();
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
            }
            let all = run(&mut shard, &[w("LRANGE"), key.clone(), w("0"), w("-1")]).strings();
            prop_assert_eq!(all, m.iter().cloned().collect::<Vec<_>>());
            prop_assert_eq!(run(&mut shard, &[w("EXISTS"), key.clone()]).int(), (!m.is_empty()) as i64);
        }
    }
}
