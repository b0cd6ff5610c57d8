//! Random SETBIT/GETBIT/BITCOUNT/BITPOS/BITOP sequences run on a shard
//! through the command table agree with a model that keeps every bitmap as
//! a plain vector of bits.

mod common;

use common::run_raw as run;
use proptest::prelude::*;
use shard::{Config, Shard};
use std::collections::HashMap;

fn int(n: i64) -> Vec<u8> {
    format!(":{n}\r\n").into_bytes()
}

fn bulk(v: Option<Vec<u8>>) -> Vec<u8> {
    match v {
        None => b"$-1\r\n".to_vec(),
        Some(v) => {
            let mut out = format!("${}\r\n", v.len()).into_bytes();
            out.extend_from_slice(&v);
            out.extend_from_slice(b"\r\n");
            out
        }
    }
}

/// A bitmap as bits, always a whole number of bytes long.
type Bits = Vec<bool>;

fn to_bytes(bits: &Bits) -> Vec<u8> {
    bits.chunks(8).map(|c| c.iter().fold(0u8, |b, &bit| b << 1 | bit as u8)).collect()
}

/// Redis's range rules over `total` units: negative from the end, clamped;
/// `None` when empty.
fn clamp(start: i64, end: i64, total: i64) -> Option<(i64, i64)> {
    let s = if start < 0 { (start + total).max(0) } else { start };
    let e = if end < 0 { (end + total).max(0) } else { end }.min(total - 1);
    (s <= e).then_some((s, e))
}

#[derive(Debug, Clone, Copy)]
enum Unit {
    Default,
    Byte,
    Bit,
}

impl Unit {
    fn word(self) -> Option<&'static [u8]> {
        match self {
            Unit::Default => None,
            Unit::Byte => Some(b"BYTE"),
            Unit::Bit => Some(b"BIT"),
        }
    }

    /// The bit range of a unit range, given the string's byte length.
    fn bits(self, start: i64, end: i64, len: i64) -> Option<(usize, usize)> {
        match self {
            Unit::Bit => clamp(start, end, len * 8).map(|(s, e)| (s as usize, e as usize)),
            _ => clamp(start, end, len).map(|(s, e)| (s as usize * 8, e as usize * 8 + 7)),
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    SetBit(u8, u32, bool),
    GetBit(u8, u32),
    Count(u8, Option<(i64, i64, Unit)>),
    /// key, bit, start, end and unit
    Pos(u8, bool, Option<(i64, Option<(i64, Unit)>)>),
    Combine(&'static str, u8, Vec<u8>),
    Get(u8),
}

fn unit() -> impl Strategy<Value = Unit> {
    prop_oneof![Just(Unit::Default), Just(Unit::Byte), Just(Unit::Bit)]
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..4;
    let idx = -40i64..40;
    prop_oneof![
        4 => (key.clone(), 0u32..200, any::<bool>()).prop_map(|(k, o, v)| Op::SetBit(k, o, v)),
        2 => (key.clone(), 0u32..260).prop_map(|(k, o)| Op::GetBit(k, o)),
        2 => (key.clone(), proptest::option::of((idx.clone(), idx.clone(), unit()))).prop_map(|(k, r)| Op::Count(k, r)),
        3 => (key.clone(), any::<bool>(), proptest::option::of((idx.clone(), proptest::option::of((idx, unit())))))
            .prop_map(|(k, b, r)| Op::Pos(k, b, r)),
        2 => (
            prop_oneof![Just("AND"), Just("OR"), Just("XOR"), Just("NOT")],
            key.clone(),
            proptest::collection::vec(key.clone(), 1..4)
        )
            .prop_map(|(op, d, mut srcs)| {
                if op == "NOT" {
                    srcs.truncate(1);
                }
                Op::Combine(op, d, srcs)
            }),
        1 => key.prop_map(Op::Get),
    ]
}

fn k(i: u8) -> Vec<u8> {
    format!("bm{i}").into_bytes()
}

fn num(n: impl ToString) -> Vec<u8> {
    n.to_string().into_bytes()
}

/// What the model answers, and the command to send.
fn step(model: &mut HashMap<u8, Bits>, op: &Op) -> (Vec<Vec<u8>>, Vec<u8>) {
    match op {
        Op::SetBit(key, offset, on) => {
            let bits = model.entry(*key).or_default();
            let need = (*offset as usize / 8 + 1) * 8;
            if bits.len() < need {
                bits.resize(need, false);
            }
            let old = std::mem::replace(&mut bits[*offset as usize], *on);
            (vec![b"SETBIT".to_vec(), k(*key), num(offset), num(*on as u8)], int(old as i64))
        }
        Op::GetBit(key, offset) => {
            let bit = model.get(key).and_then(|b| b.get(*offset as usize).copied()).unwrap_or(false);
            (vec![b"GETBIT".to_vec(), k(*key), num(offset)], int(bit as i64))
        }
        Op::Count(key, range) => {
            let mut cmd = vec![b"BITCOUNT".to_vec(), k(*key)];
            let bits = model.get(key).cloned().unwrap_or_default();
            let len = bits.len() as i64 / 8;
            let span = match range {
                None => Unit::Byte.bits(0, -1, len),
                Some((s, e, u)) => {
                    cmd.extend([num(s), num(e)]);
                    cmd.extend(u.word().map(<[u8]>::to_vec));
                    if *s < 0 && *e < 0 && s > e {
                        None
                    } else {
                        u.bits(*s, *e, len)
                    }
                }
            };
            let n = span.map_or(0, |(s, e)| bits[s..=e].iter().filter(|&&b| b).count());
            (cmd, int(n as i64))
        }
        Op::Pos(key, bit, range) => {
            let mut cmd = vec![b"BITPOS".to_vec(), k(*key), num(*bit as u8)];
            let Some(bits) = model.get(key) else {
                return (cmd, int(if *bit { -1 } else { 0 }));
            };
            let len = bits.len() as i64 / 8;
            let (span, end_given) = match range {
                None => (Unit::Byte.bits(0, -1, len), false),
                Some((s, None)) => {
                    cmd.push(num(s));
                    (Unit::Byte.bits(*s, -1, len), false)
                }
                Some((s, Some((e, u)))) => {
                    cmd.extend([num(s), num(e)]);
                    cmd.extend(u.word().map(<[u8]>::to_vec));
                    (u.bits(*s, *e, len), true)
                }
            };
            let pos = match span {
                None => -1,
                Some((s, e)) => match (s..=e).find(|&i| bits[i] == *bit) {
                    Some(i) => i as i64,
                    None if !*bit && !end_given => (e as i64 / 8 + 1) * 8,
                    None => -1,
                },
            };
            (cmd, int(pos))
        }
        Op::Combine(name, dest, srcs) => {
            let mut cmd = vec![b"BITOP".to_vec(), name.as_bytes().to_vec(), k(*dest)];
            cmd.extend(srcs.iter().map(|s| k(*s)));
            let inputs: Vec<Bits> = srcs.iter().map(|s| model.get(s).cloned().unwrap_or_default()).collect();
            let width = inputs.iter().map(Vec::len).max().unwrap_or(0);
            let at = |v: &Bits, i: usize| v.get(i).copied().unwrap_or(false);
            let result: Bits = (0..width)
                .map(|i| match *name {
                    "AND" => inputs.iter().all(|v| at(v, i)),
                    "OR" => inputs.iter().any(|v| at(v, i)),
                    "XOR" => inputs.iter().filter(|v| at(v, i)).count() % 2 == 1,
                    _ => !at(&inputs[0], i),
                })
                .collect();
            if result.is_empty() {
                model.remove(dest);
            } else {
                model.insert(*dest, result);
            }
            (cmd, int(width as i64 / 8))
        }
        Op::Get(key) => (vec![b"GET".to_vec(), k(*key)], bulk(model.get(key).map(to_bytes))),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    #[test]
    fn bitmaps_agree_with_bit_vectors(ops in proptest::collection::vec(op(), 1..80)) {
        let mut shard = Shard::new(0, 1, Config::default());
        let mut model: HashMap<u8, Bits> = HashMap::new();
        for op in &ops {
            let (cmd, expected) = step(&mut model, op);
            let got = run(&mut shard, &cmd);
            prop_assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(&expected), "{:?}", op);
        }
        prop_assert_eq!(shard.keys(), model.len());
    }
}

/// The largest offset Redis accepts by default, 2^32 - 1, makes a 512 MB
/// string; one past it is refused.
#[test]
fn last_bit_of_a_512mb_bitmap() {
    let mut shard = Shard::new(0, 1, Config::default());
    let cmd = |words: &[&str]| words.iter().map(|w| w.as_bytes().to_vec()).collect::<Vec<_>>();
    assert_eq!(run(&mut shard, &cmd(&["SETBIT", "big", "4294967295", "1"])), int(0));
    assert_eq!(run(&mut shard, &cmd(&["STRLEN", "big"])), int(512 << 20));
    assert_eq!(run(&mut shard, &cmd(&["GETBIT", "big", "4294967295"])), int(1));
    assert_eq!(run(&mut shard, &cmd(&["BITCOUNT", "big"])), int(1));
    assert_eq!(run(&mut shard, &cmd(&["BITPOS", "big", "1"])), int(4294967295));
    assert_eq!(run(&mut shard, &cmd(&["BITPOS", "big", "1", "-1", "-1", "BIT"])), int(4294967295));
    assert_eq!(run(&mut shard, &cmd(&["BITPOS", "big", "0", "-1"])), int(4294967288));
    assert_eq!(
        run(&mut shard, &cmd(&["BITFIELD", "big", "GET", "i64", "4294967290"])),
        b"*1\r\n:288230376151711744\r\n"
    );
    let refused = b"-ERR bit offset is not an integer or out of range\r\n".to_vec();
    assert_eq!(run(&mut shard, &cmd(&["SETBIT", "big", "4294967296", "1"])), refused);
    assert_eq!(run(&mut shard, &cmd(&["DEL", "big"])), int(1));
}
