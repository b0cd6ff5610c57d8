//! Random sorted-set command sequences run on a shard through the command
//! table agree with a simple model (member → score maps, sorted on demand),
//! across both encodings: the thresholds are small and bulk adds build trees
//! several levels deep. The tree's invariants are checked after every case.

mod common;

use common::run_raw as run;
use proptest::prelude::*;
use shard::numbers::format_double;
use shard::types::zset::cmp_key;
use shard::value::Value;
use shard::{Config, Shard};
use std::collections::{BTreeMap, HashMap};

/// Expected RESP2 replies.
struct Out(Vec<u8>);

impl Out {
    fn new() -> Out {
        Out(Vec::new())
    }
    fn int(mut self, n: i64) -> Out {
        self.0.extend(format!(":{n}\r\n").bytes());
        self
    }
    fn bulk(mut self, b: &[u8]) -> Out {
        self.0.extend(format!("${}\r\n", b.len()).bytes());
        self.0.extend_from_slice(b);
        self.0.extend_from_slice(b"\r\n");
        self
    }
    fn score(self, s: f64) -> Out {
        let mut buf = [0u8; 32];
        let text = format_double(s, &mut buf).to_vec();
        self.bulk(&text)
    }
    fn null(mut self) -> Out {
        self.0.extend_from_slice(b"$-1\r\n");
        self
    }
    fn array(mut self, n: usize) -> Out {
        self.0.extend(format!("*{n}\r\n").bytes());
        self
    }
    fn elements(mut self, items: &[(f64, Vec<u8>)], withscores: bool) -> Out {
        self = self.array(items.len() * if withscores { 2 } else { 1 });
        for (s, m) in items {
            self = self.bulk(m);
            if withscores {
                self = self.score(*s);
            }
        }
        self
    }
}

type ZModel = BTreeMap<Vec<u8>, f64>;

/// A model set and whether it is in the large encoding.
#[derive(Clone, Default, Debug)]
struct MSet {
    map: ZModel,
    big: bool,
}

impl MSet {
    fn sorted(&self) -> Vec<(f64, Vec<u8>)> {
        let mut v: Vec<(f64, Vec<u8>)> = self.map.iter().map(|(m, s)| (*s, m.clone())).collect();
        v.sort_by(|a, b| cmp_key(a.0, &a.1, b.0, &b.1));
        v
    }

    /// Redis's encoding rules for inserting a new member.
    fn insert(&mut self, member: &[u8], score: f64, entries: usize, value: usize) {
        if self.map.is_empty() && !self.big && (entries == 0 || member.len() > value) {
            self.big = true;
        }
        if !self.big && (self.map.len() + 1 > entries || member.len() > value) {
            self.big = true;
        }
        self.map.insert(member.to_vec(), score);
    }

    /// The encoding a computed result (STORE) gets.
    fn computed(mut map: ZModel, entries: usize, value: usize) -> MSet {
        let big = map.len() > entries || map.keys().any(|m| m.len() > value);
        if !big {
            // A listpack stores -0 as the integer 0.
            map.values_mut().filter(|s| **s == 0.0).for_each(|s| *s = 0.0);
        }
        MSet { map, big }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Add(u8, Vec<(i8, u8)>, u8),
    Bulk(u8, u16, u64),
    Incr(u8, i8, u8),
    Rem(u8, Vec<u8>),
    Score(u8, u8),
    Rank(u8, u8, bool),
    Range(u8, i16, i16, bool, bool),
    ByScore(u8, i8, i8, bool, bool, bool, i16, i16),
    Count(u8, i8, i8),
    RemRank(u8, i16, i16),
    RemScore(u8, i8, i8),
    Pop(u8, bool, u16),
    Store(u8, u8, u8, u8, i8),
    Scan(u8, u8),
    Encoding(u8),
    Lex(Vec<u8>),
    ByLex(u8, u8, bool, bool, bool),
}

fn score_of(x: i8) -> f64 {
    match x {
        i8::MIN..=-100 => f64::NEG_INFINITY,
        100..=i8::MAX => f64::INFINITY,
        x if x % 7 == 0 => x as f64 / 4.0,
        x => (x / 10) as f64,
    }
}

fn member(i: u8) -> Vec<u8> {
    // A few members are long, to cross zset-max-listpack-value.
    if i % 13 == 12 {
        format!("long-member-{i}-{}", "x".repeat(20)).into_bytes()
    } else {
        format!("m{i}").into_bytes()
    }
}

fn key(k: u8) -> Vec<u8> {
    format!("z{k}").into_bytes()
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u8..4;
    let m = 0u8..40;
    prop_oneof![
        6 => (k.clone(), proptest::collection::vec((any::<i8>(), m.clone()), 1..6), 0u8..16).prop_map(|(k, p, f)| Op::Add(k, p, f)),
        1 => (k.clone(), 0u16..4000, any::<u64>()).prop_map(|(k, n, s)| Op::Bulk(k, n, s)),
        2 => (k.clone(), any::<i8>(), m.clone()).prop_map(|(k, s, m)| Op::Incr(k, s, m)),
        3 => (k.clone(), proptest::collection::vec(m.clone(), 1..4)).prop_map(|(k, m)| Op::Rem(k, m)),
        2 => (k.clone(), m.clone()).prop_map(|(k, m)| Op::Score(k, m)),
        2 => (k.clone(), m.clone(), any::<bool>()).prop_map(|(k, m, r)| Op::Rank(k, m, r)),
        2 => (k.clone(), -50i16..50, -50i16..50, any::<bool>(), any::<bool>()).prop_map(|(k, a, b, r, w)| Op::Range(k, a, b, r, w)),
        3 => (k.clone(), any::<i8>(), any::<i8>(), any::<bool>(), any::<bool>(), any::<bool>(), -2i16..40, -2i16..40)
            .prop_map(|(k, a, b, ax, bx, r, o, l)| Op::ByScore(k, a, b, ax, bx, r, o, l)),
        1 => (k.clone(), any::<i8>(), any::<i8>()).prop_map(|(k, a, b)| Op::Count(k, a, b)),
        1 => (k.clone(), -50i16..50, -50i16..50).prop_map(|(k, a, b)| Op::RemRank(k, a, b)),
        1 => (k.clone(), any::<i8>(), any::<i8>()).prop_map(|(k, a, b)| Op::RemScore(k, a, b)),
        2 => (k.clone(), any::<bool>(), 0u16..600).prop_map(|(k, max, n)| Op::Pop(k, max, n)),
        2 => (k.clone(), k.clone(), k.clone(), 0u8..3, any::<i8>()).prop_map(|(d, a, b, o, w)| Op::Store(d, a, b, o, w)),
        1 => (k.clone(), 1u8..50).prop_map(|(k, c)| Op::Scan(k, c)),
        1 => k.clone().prop_map(Op::Encoding),
        1 => proptest::collection::vec(m.clone(), 1..8).prop_map(Op::Lex),
        1 => (m.clone(), m, any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(a, b, ax, bx, r)| Op::ByLex(a, b, ax, bx, r)),
    ]
}

fn w(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

fn num(x: impl ToString) -> Vec<u8> {
    x.to_string().into_bytes()
}

fn score_arg(s: f64) -> Vec<u8> {
    let mut buf = [0u8; 32];
    format_double(s, &mut buf).to_vec()
}

/// Redis's rank normalization.
fn span(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 { (start + len).max(0) } else { start };
    let end = if end < 0 { end + len } else { end };
    if start > end || start >= len {
        return None;
    }
    Some((start as usize, end.min(len - 1) as usize))
}

struct Model {
    sets: HashMap<Vec<u8>, MSet>,
    entries: usize,
    value: usize,
}

impl Model {
    fn get(&self, k: &[u8]) -> MSet {
        self.sets.get(k).cloned().unwrap_or_default()
    }

    fn put(&mut self, k: Vec<u8>, s: MSet) {
        if s.map.is_empty() {
            self.sets.remove(&k);
        } else {
            self.sets.insert(k, s);
        }
    }

    /// The command and its expected reply.
    fn apply(&mut self, op: &Op) -> (Vec<Vec<u8>>, Out) {
        let (entries, value) = (self.entries, self.value);
        match op {
            Op::Add(k, pairs, flags) => {
                let (nx, xx, gt, ch) =
                    (flags & 1 != 0, flags & 2 != 0 && flags & 1 == 0, flags & 4 != 0, flags & 8 != 0);
                let gt = gt && !nx;
                let mut cmd = vec![w("ZADD"), key(*k)];
                for (on, name) in [(nx, "NX"), (xx, "XX"), (gt, "GT"), (ch, "CH")] {
                    if on {
                        cmd.push(w(name));
                    }
                }
                let mut s = self.get(&key(*k));
                let (mut added, mut updated) = (0, 0);
                for (sc, m) in pairs {
                    let (score, mem) = (score_of(*sc), member(*m));
                    cmd.push(score_arg(score));
                    cmd.push(mem.clone());
                    match s.map.get(&mem).copied() {
                        Some(cur) if !(nx || gt && score <= cur) && score != cur => {
                            s.map.insert(mem, score);
                            updated += 1;
                        }
                        None if !xx => {
                            s.insert(&mem, score, entries, value);
                            added += 1;
                        }
                        _ => {}
                    }
                }
                self.put(key(*k), s);
                (cmd, Out::new().int(if ch { added + updated } else { added }))
            }
            Op::Bulk(k, n, seed) => {
                let mut cmd = vec![w("ZADD"), key(*k)];
                let mut s = self.get(&key(*k));
                let mut x = *seed | 1;
                let mut added = 0;
                for _ in 0..*n {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let score = ((x >> 8) % 2000) as f64 - 1000.0;
                    let mem = format!("bulk{}", (x >> 32) % 20000).into_bytes();
                    cmd.push(score_arg(score));
                    cmd.push(mem.clone());
                    match s.map.get(&mem) {
                        Some(_) => {
                            s.map.insert(mem, score);
                        }
                        None => {
                            s.insert(&mem, score, entries, value);
                            added += 1;
                        }
                    }
                }
                if *n == 0 {
                    return (vec![w("ZCARD"), key(*k)], Out::new().int(s.map.len() as i64));
                }
                self.put(key(*k), s);
                (cmd, Out::new().int(added))
            }
            Op::Incr(k, by, m) => {
                let (by, mem) = (score_of(*by), member(*m));
                let cmd = vec![w("ZINCRBY"), key(*k), score_arg(by), mem.clone()];
                let mut s = self.get(&key(*k));
                let new = s.map.get(&mem).map_or(by, |c| c + by);
                if new.is_nan() {
                    return (cmd, Out(b"-ERR resulting score is not a number (NaN)\r\n".to_vec()));
                }
                match s.map.get_mut(&mem) {
                    Some(cur) => *cur = new,
                    None => s.insert(&mem, new, entries, value),
                }
                self.put(key(*k), s);
                (cmd, Out::new().score(new))
            }
            Op::Rem(k, ms) => {
                let mut cmd = vec![w("ZREM"), key(*k)];
                let mut s = self.get(&key(*k));
                let mut n = 0;
                for m in ms {
                    cmd.push(member(*m));
                    n += s.map.remove(&member(*m)).is_some() as i64;
                }
                self.put(key(*k), s);
                (cmd, Out::new().int(n))
            }
            Op::Score(k, m) => {
                let s = self.get(&key(*k));
                let out = match s.map.get(&member(*m)) {
                    Some(sc) => Out::new().score(*sc),
                    None => Out::new().null(),
                };
                (vec![w("ZSCORE"), key(*k), member(*m)], out)
            }
            Op::Rank(k, m, rev) => {
                let sorted = self.get(&key(*k)).sorted();
                let pos = sorted.iter().position(|(_, x)| *x == member(*m));
                let out = match pos {
                    Some(p) => Out::new().int(if *rev { sorted.len() - 1 - p } else { p } as i64),
                    None => Out::new().null(),
                };
                (vec![w(if *rev { "ZREVRANK" } else { "ZRANK" }), key(*k), member(*m)], out)
            }
            Op::Range(k, a, b, rev, ws) => {
                let mut sorted = self.get(&key(*k)).sorted();
                if *rev {
                    sorted.reverse();
                }
                let items = match span(*a as i64, *b as i64, sorted.len()) {
                    Some((lo, hi)) => sorted[lo..=hi].to_vec(),
                    None => Vec::new(),
                };
                let mut cmd = vec![w(if *rev { "ZREVRANGE" } else { "ZRANGE" }), key(*k), num(a), num(b)];
                if *ws {
                    cmd.push(w("WITHSCORES"));
                }
                (cmd, Out::new().elements(&items, *ws))
            }
            Op::ByScore(k, a, b, ax, bx, rev, off, lim) => {
                let (min, max) = (score_of(*a), score_of(*b));
                let arg = |s: f64, ex: bool| {
                    let mut v = if ex { b"(".to_vec() } else { Vec::new() };
                    v.extend(score_arg(s));
                    v
                };
                let inr = |s: f64| (if *ax { s > min } else { s >= min }) && (if *bx { s < max } else { s <= max });
                let all = self.get(&key(*k)).sorted();
                let mut items: Vec<_> = all.iter().filter(|(s, _)| inr(*s)).cloned().collect();
                if *rev {
                    items.reverse();
                }
                let (off, lim) = (*off as i64, *lim as i64);
                let items: Vec<_> = if off < 0 || (off > 0 && off as usize >= all.len()) {
                    Vec::new()
                } else {
                    let it = items.into_iter().skip(off as usize);
                    if lim < 0 {
                        it.collect()
                    } else {
                        it.take(lim as usize).collect()
                    }
                };
                let cmd = if *rev {
                    vec![w("ZREVRANGEBYSCORE"), key(*k), arg(max, *bx), arg(min, *ax)]
                } else {
                    vec![w("ZRANGEBYSCORE"), key(*k), arg(min, *ax), arg(max, *bx)]
                };
                let mut cmd = cmd;
                cmd.extend([w("WITHSCORES"), w("LIMIT"), num(off), num(lim)]);
                (cmd, Out::new().elements(&items, true))
            }
            Op::Count(k, a, b) => {
                let (min, max) = (score_of(*a), score_of(*b));
                let n = self.get(&key(*k)).map.values().filter(|s| **s >= min && **s <= max).count();
                (vec![w("ZCOUNT"), key(*k), score_arg(min), score_arg(max)], Out::new().int(n as i64))
            }
            Op::RemRank(k, a, b) => {
                let mut s = self.get(&key(*k));
                let sorted = s.sorted();
                let mut n = 0;
                if let Some((lo, hi)) = span(*a as i64, *b as i64, sorted.len()) {
                    for (_, m) in &sorted[lo..=hi] {
                        s.map.remove(m);
                        n += 1;
                    }
                }
                self.put(key(*k), s);
                (vec![w("ZREMRANGEBYRANK"), key(*k), num(a), num(b)], Out::new().int(n))
            }
            Op::RemScore(k, a, b) => {
                let (min, max) = (score_of(*a), score_of(*b));
                let mut s = self.get(&key(*k));
                let before = s.map.len();
                s.map.retain(|_, v| !(*v >= min && *v <= max));
                let n = before - s.map.len();
                self.put(key(*k), s);
                (vec![w("ZREMRANGEBYSCORE"), key(*k), score_arg(min), score_arg(max)], Out::new().int(n as i64))
            }
            Op::Pop(k, max, n) => {
                let mut s = self.get(&key(*k));
                let mut sorted = s.sorted();
                if *max {
                    sorted.reverse();
                }
                let take: Vec<_> = sorted.into_iter().take(*n as usize).collect();
                for (_, m) in &take {
                    s.map.remove(m);
                }
                self.put(key(*k), s);
                let cmd = vec![w(if *max { "ZPOPMAX" } else { "ZPOPMIN" }), key(*k), num(n)];
                (cmd, Out::new().elements(&take, true))
            }
            Op::Store(d, a, b, op, weight) => {
                let (sa, sb) = (self.get(&key(*a)).map, self.get(&key(*b)).map);
                let wb = (*weight / 16) as f64;
                let wsum = |x: f64, y: f64| {
                    let v = x + y;
                    if v.is_nan() {
                        0.0
                    } else {
                        v
                    }
                };
                let wt = |s: f64| {
                    let v = s * wb;
                    if v.is_nan() {
                        0.0
                    } else {
                        v
                    }
                };
                let mut out = ZModel::new();
                let name = match op {
                    0 => {
                        // Smaller source first (ties: argument order).
                        let b_first = sb.len() < sa.len();
                        for (m, s) in &sa {
                            out.insert(m.clone(), *s);
                        }
                        for (m, s) in &sb {
                            let v = wt(*s);
                            let e = out.entry(m.clone()).or_insert(f64::NAN);
                            *e = if e.is_nan() {
                                v
                            } else if b_first {
                                wsum(v, *e)
                            } else {
                                wsum(*e, v)
                            };
                        }
                        "ZUNIONSTORE"
                    }
                    1 => {
                        let b_first = sb.len() < sa.len();
                        for (m, s) in &sa {
                            if let Some(t) = sb.get(m) {
                                let v = if b_first { wsum(wt(*t), *s) } else { wsum(*s, *t * wb) };
                                out.insert(m.clone(), v);
                            }
                        }
                        "ZINTERSTORE"
                    }
                    _ => {
                        for (m, s) in &sa {
                            if !sb.contains_key(m) {
                                out.insert(m.clone(), *s);
                            }
                        }
                        "ZDIFFSTORE"
                    }
                };
                let n = out.len();
                self.put(key(*d), MSet::computed(out, entries, value));
                let mut cmd = vec![w(name), key(*d), w("2"), key(*a), key(*b)];
                if *op != 2 {
                    cmd.extend([w("WEIGHTS"), w("1"), num(wb)]);
                }
                (cmd, Out::new().int(n as i64))
            }
            Op::Scan(k, _) | Op::Encoding(k) => {
                let s = self.sets.get(&key(*k));
                let out = match s {
                    None => Out::new().null(),
                    Some(s) => Out::new().bulk(if s.big { b"skiplist" } else { b"listpack" }),
                };
                (vec![w("OBJECT"), w("ENCODING"), key(*k)], out)
            }
            Op::Lex(ms) => {
                let mut cmd = vec![w("ZADD"), w("lex")];
                let mut s = self.get(b"lex");
                let mut added = 0;
                for m in ms {
                    cmd.extend([w("0"), member(*m)]);
                    if !s.map.contains_key(&member(*m)) {
                        s.insert(&member(*m), 0.0, entries, value);
                        added += 1;
                    }
                }
                self.put(w("lex"), s);
                (cmd, Out::new().int(added))
            }
            Op::ByLex(a, b, ax, bx, rev) => {
                let (lo, hi) = (member(*a), member(*b));
                let bound = |m: &[u8], ex: bool| {
                    let mut v = if ex { b"(".to_vec() } else { b"[".to_vec() };
                    v.extend_from_slice(m);
                    v
                };
                let mut items: Vec<_> = self
                    .get(b"lex")
                    .sorted()
                    .into_iter()
                    .filter(|(_, m)| (if *ax { *m > lo } else { *m >= lo }) && (if *bx { *m < hi } else { *m <= hi }))
                    .collect();
                let cmd = if *rev {
                    items.reverse();
                    vec![w("ZREVRANGEBYLEX"), w("lex"), bound(&hi, *bx), bound(&lo, *ax)]
                } else {
                    vec![w("ZRANGEBYLEX"), w("lex"), bound(&lo, *ax), bound(&hi, *bx)]
                };
                (cmd, Out::new().elements(&items, false))
            }
        }
    }
}

/// ZSCAN to the end: every element exactly as in the model.
fn scan_all(shard: &mut Shard, k: &[u8], count: u8) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut cursor = b"0".to_vec();
    let mut all = Vec::new();
    for _ in 0..100_000 {
        let reply = run(shard, &[w("ZSCAN"), k.to_vec(), cursor.clone(), w("COUNT"), num(count)]);
        let text = reply;
        // Parse *2 $n cursor *m ($len item)...
        let mut parts = Vec::new();
        let mut i = 0;
        while i < text.len() {
            let end = i + text[i..].windows(2).position(|x| x == b"\r\n").unwrap();
            let line = &text[i..end];
            i = end + 2;
            if line[0] == b'$' {
                let n: usize = std::str::from_utf8(&line[1..]).unwrap().parse().unwrap();
                parts.push(text[i..i + n].to_vec());
                i += n + 2;
            }
        }
        cursor = parts.remove(0);
        for pair in parts.chunks(2) {
            all.push((pair[0].clone(), pair[1].clone()));
        }
        if cursor == b"0" {
            break;
        }
    }
    all.sort();
    all.dedup();
    all
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn zsets_agree_with_a_model(
        ops in proptest::collection::vec(op(), 1..50),
        entries in prop_oneof![Just(0usize), Just(3), Just(16), Just(128)],
        value in prop_oneof![Just(8usize), Just(64)],
    ) {
        let config = Config {
            zset_max_listpack_entries: entries as u64,
            zset_max_listpack_value: value as u64,
            ..Config::default()
        };
        let mut shard = Shard::new(0, 1, config);
        let mut model = Model { sets: HashMap::new(), entries, value };
        for op in &ops {
            if let Op::Scan(k, count) = op {
                let want: Vec<(Vec<u8>, Vec<u8>)> =
                    model.get(&key(*k)).sorted().into_iter().map(|(s, m)| (m, score_arg(s))).collect();
                let mut want = want;
                want.sort();
                prop_assert_eq!(scan_all(&mut shard, &key(*k), *count), want, "{:?}", op);
                continue;
            }
            let (cmd, expected) = model.apply(op);
            let got = run(&mut shard, &cmd);
            prop_assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(&expected.0), "{:?}", op);
        }
        for k in (0..4).map(key).chain([w("lex")]) {
            let entry = shard.dbs[0].get(&k, 1_000_000);
            prop_assert_eq!(entry.is_some(), model.sets.contains_key(&k));
            if let Some(e) = entry {
                match &e.value {
                    Value::ZSet(z) => {
                        prop_assert_eq!(z.len(), model.sets[&k].map.len());
                        prop_assert_eq!(z.check(), Ok(()));
                    }
                    other => prop_assert!(false, "{:?}", other),
                }
            }
        }
    }
}
