//! Random command sequences run on a shard through the command table agree
//! with a simple model of the keyspace (a map of byte strings).

mod common;

use common::run_raw as run;
use proptest::prelude::*;
use shard::{Config, Shard};
use std::collections::HashMap;

fn bulk(v: Option<&Vec<u8>>) -> Vec<u8> {
    match v {
        None => b"$-1\r\n".to_vec(),
        Some(v) => {
            let mut out = format!("${}\r\n", v.len()).into_bytes();
            out.extend_from_slice(v);
            out.extend_from_slice(b"\r\n");
            out
        }
    }
}

fn int(n: i64) -> Vec<u8> {
    format!(":{n}\r\n").into_bytes()
}

#[derive(Debug, Clone)]
enum Op {
    Set(u8, Vec<u8>),
    Get(u8),
    Del(u8, u8),
    Append(u8, Vec<u8>),
    Incr(u8),
    GetDel(u8),
    Exists(u8),
    Strlen(u8),
    Rename(u8, u8),
    SetRange(u8, u8, Vec<u8>),
    MGet(u8, u8),
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..5;
    let val =
        prop_oneof![proptest::collection::vec(any::<u8>(), 0..8), (0i64..50).prop_map(|n| n.to_string().into_bytes())];
    prop_oneof![
        (key.clone(), val.clone()).prop_map(|(k, v)| Op::Set(k, v)),
        key.clone().prop_map(Op::Get),
        (key.clone(), key.clone()).prop_map(|(a, b)| Op::Del(a, b)),
        (key.clone(), val.clone()).prop_map(|(k, v)| Op::Append(k, v)),
        key.clone().prop_map(Op::Incr),
        key.clone().prop_map(Op::GetDel),
        key.clone().prop_map(Op::Exists),
        key.clone().prop_map(Op::Strlen),
        (key.clone(), key.clone()).prop_map(|(a, b)| Op::Rename(a, b)),
        (key.clone(), 0u8..10, val).prop_map(|(k, o, v)| Op::SetRange(k, o, v)),
        (key.clone(), key).prop_map(|(a, b)| Op::MGet(a, b)),
    ]
}

fn k(i: u8) -> Vec<u8> {
    format!("key{i}").into_bytes()
}

proptest! {
    #[test]
    fn shard_agrees_with_a_map(ops in proptest::collection::vec(op(), 1..60)) {
        let mut shard = Shard::new(0, 1, Config::default());
        let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        for op in ops {
            let (cmd, expected): (Vec<Vec<u8>>, Vec<u8>) = match &op {
                Op::Set(a, v) => {
                    model.insert(k(*a), v.clone());
                    (vec![b"SET".to_vec(), k(*a), v.clone()], b"+OK\r\n".to_vec())
                }
                Op::Get(a) => (vec![b"GET".to_vec(), k(*a)], bulk(model.get(&k(*a)))),
                Op::Del(a, b) => {
                    let mut n = model.remove(&k(*a)).is_some() as i64;
                    n += model.remove(&k(*b)).is_some() as i64;
                    (vec![b"DEL".to_vec(), k(*a), k(*b)], int(n))
                }
                Op::Append(a, v) => {
                    let e = model.entry(k(*a)).or_default();
                    e.extend_from_slice(v);
                    (vec![b"APPEND".to_vec(), k(*a), v.clone()], int(e.len() as i64))
                }
                Op::Incr(a) => {
                    let cur = model.get(&k(*a)).cloned();
                    let parsed = match &cur {
                        None => Some(0),
                        Some(v) => shard::args::parse_i64(v),
                    };
                    match parsed.and_then(|n| n.checked_add(1)) {
                        Some(n) => {
                            model.insert(k(*a), n.to_string().into_bytes());
                            (vec![b"INCR".to_vec(), k(*a)], int(n))
                        }
                        None => (vec![b"INCR".to_vec(), k(*a)], b"-ERR value is not an integer or out of range\r\n".to_vec()),
                    }
                }
                Op::GetDel(a) => {
                    let v = model.remove(&k(*a));
                    (vec![b"GETDEL".to_vec(), k(*a)], bulk(v.as_ref()))
                }
                Op::Exists(a) => (vec![b"EXISTS".to_vec(), k(*a)], int(model.contains_key(&k(*a)) as i64)),
                Op::Strlen(a) => (vec![b"STRLEN".to_vec(), k(*a)], int(model.get(&k(*a)).map_or(0, |v| v.len() as i64))),
                Op::Rename(a, b) => {
                    let cmd = vec![b"RENAME".to_vec(), k(*a), k(*b)];
                    match model.remove(&k(*a)) {
                        None => (cmd, b"-ERR no such key\r\n".to_vec()),
                        Some(v) => {
                            model.insert(k(*b), v);
                            (cmd, b"+OK\r\n".to_vec())
                        }
                    }
                }
                Op::SetRange(a, off, v) => {
                    let cmd = vec![b"SETRANGE".to_vec(), k(*a), off.to_string().into_bytes(), v.clone()];
                    let len = match model.get_mut(&k(*a)) {
                        None if v.is_empty() => 0,
                        Some(cur) if v.is_empty() => cur.len(),
                        cur => {
                            let mut s = cur.cloned().unwrap_or_default();
                            let end = *off as usize + v.len();
                            if s.len() < end {
                                s.resize(end, 0);
                            }
                            s[*off as usize..end].copy_from_slice(v);
                            let n = s.len();
                            model.insert(k(*a), s);
                            n
                        }
                    };
                    (cmd, int(len as i64))
                }
                Op::MGet(a, b) => {
                    let mut out = b"*2\r\n".to_vec();
                    out.extend(bulk(model.get(&k(*a))));
                    out.extend(bulk(model.get(&k(*b))));
                    (vec![b"MGET".to_vec(), k(*a), k(*b)], out)
                }
            };
            let got = run(&mut shard, &cmd);
            prop_assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(&expected), "{:?}", op);
        }
        prop_assert_eq!(shard.keys(), model.len());
    }
}
