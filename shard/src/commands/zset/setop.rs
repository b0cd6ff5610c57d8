//! ZUNION, ZINTER, ZDIFF, their STORE forms and ZINTERCARD on one shard
//! (Redis's zunionInterDiffGenericCommand). The computation takes borrowed
//! sets, so the proxy runs the same code over sets gathered from several
//! shards. Plain sets are inputs too, every member scored 1, as in Redis.

use super::{reply_elements, reply_pair, WrongType};
use crate::args::{parse_i64, Args};
use crate::commands::Ctx;
use crate::db::Db;
use crate::numbers::parse_double;
use crate::reply::errors::*;
use crate::reply::Reply;
use crate::shard::Shard;
use crate::types::set::Set;
use crate::types::zset::{cmp_key, Limits, ZSet};
use crate::value::Value;

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Op {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Aggregate {
    Sum,
    Min,
    Max,
}

/// Options after the keys.
#[derive(Clone, Debug)]
pub struct SetOpts {
    pub weights: Vec<f64>,
    pub aggregate: Aggregate,
    pub withscores: bool,
    /// ZINTERCARD's LIMIT (0: none).
    pub limit: usize,
}

/// The `numkeys` argument at `at` of command `name`, checked against the
/// arguments there are. Redis checks it before reading the keys.
pub fn parse_numkeys(args: &Args, at: usize, name: &str) -> Result<usize, String> {
    let n = parse_i64(args.get(at)).ok_or(NOT_INTEGER)?;
    if n < 1 {
        return Err(format!("ERR at least 1 input key is needed for '{name}' command"));
    }
    if n as u64 > (args.len() - at - 1) as u64 {
        return Err(SYNTAX.into());
    }
    Ok(n as usize)
}

/// The options following the keys (read after the keys, so WRONGTYPE comes
/// first). `store`: a STORE form; `card`: ZINTERCARD.
pub fn parse_opts(
    args: &Args,
    at: usize,
    numkeys: usize,
    op: Op,
    store: bool,
    card: bool,
) -> Result<SetOpts, &'static str> {
    let mut o = SetOpts { weights: vec![1.0; numkeys], aggregate: Aggregate::Sum, withscores: false, limit: 0 };
    let mut j = at + 1 + numkeys;
    let scored = op != Op::Diff && !card;
    while j < args.len() {
        let remaining = args.len() - j;
        if scored && remaining > numkeys && args.is(j, "weights") {
            for w in o.weights.iter_mut() {
                j += 1;
                *w = parse_double(args.get(j)).ok_or("ERR weight value is not a float")?;
            }
        } else if scored && remaining >= 2 && args.is(j, "aggregate") {
            j += 1;
            o.aggregate = match args.get(j).to_ascii_lowercase().as_slice() {
                b"sum" => Aggregate::Sum,
                b"min" => Aggregate::Min,
                b"max" => Aggregate::Max,
                _ => return Err(SYNTAX),
            };
        } else if !store && !card && args.is(j, "withscores") {
            o.withscores = true;
        } else if card && remaining >= 2 && args.is(j, "limit") {
            j += 1;
            let n = parse_i64(args.get(j)).filter(|&n| n >= 0);
            o.limit = n.ok_or("ERR LIMIT can't be negative")? as usize;
        } else {
            return Err(SYNTAX);
        }
        j += 1;
    }
    Ok(o)
}

#[inline]
fn aggregate(target: &mut f64, value: f64, how: Aggregate) {
    match how {
        Aggregate::Sum => {
            *target += value;
            // inf + -inf: Redis keeps 0.
            if target.is_nan() {
                *target = 0.0;
            }
        }
        Aggregate::Min => *target = if value < *target { value } else { *target },
        Aggregate::Max => *target = if value > *target { value } else { *target },
    }
}

/// A weighted score; 0 * inf is taken as 0.
#[inline]
fn weighted(score: f64, weight: f64) -> f64 {
    let v = score * weight;
    if v.is_nan() {
        0.0
    } else {
        v
    }
}

fn len_of(z: Option<&ZSet>) -> usize {
    z.map_or(0, ZSet::len)
}

/// Union and intersection visit sources smallest first (a stable order, so
/// sums add up in the same order as Redis's).
fn by_size(srcs: &[Option<&ZSet>]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..srcs.len()).collect();
    order.sort_by_key(|&i| len_of(srcs[i]));
    order
}

/// The result of `op`, in (score, member) order.
pub fn compute<'a>(op: Op, srcs: &[Option<&'a ZSet>], o: &SetOpts) -> Vec<(f64, &'a [u8])> {
    let mut out: Vec<(f64, &'a [u8])> = Vec::new();
    match op {
        Op::Inter => {
            let order = by_size(srcs);
            let Some(&smallest) = order.first() else {
                return out;
            };
            let Some(first) = srcs[smallest] else {
                return out;
            };
            first.for_each(|s, member| {
                let mut score = weighted(s, o.weights[smallest]);
                for &j in &order[1..] {
                    match srcs[j].and_then(|z| z.score(member)) {
                        // Unlike the first source, these may stay NaN (Redis).
                        Some(v) => aggregate(&mut score, v * o.weights[j], o.aggregate),
                        None => return,
                    }
                }
                out.push((score, member));
            });
        }
        Op::Union => {
            let total = srcs.iter().map(|z| len_of(*z)).max().unwrap_or(0);
            let mut acc: hashbrown::HashMap<&'a [u8], f64> = hashbrown::HashMap::with_capacity(total);
            for i in by_size(srcs) {
                let Some(z) = srcs[i] else {
                    continue;
                };
                z.for_each(|s, member| {
                    let score = weighted(s, o.weights[i]);
                    acc.entry(member).and_modify(|t| aggregate(t, score, o.aggregate)).or_insert(score);
                });
            }
            out = acc.into_iter().map(|(m, s)| (s, m)).collect();
        }
        Op::Diff => {
            let Some(Some(first)) = srcs.first() else {
                return out;
            };
            let rest = &srcs[1..];
            first.for_each(|s, member| {
                if !rest.iter().any(|z| z.is_some_and(|z| z.score(member).is_some())) {
                    out.push((s, member));
                }
            });
        }
    }
    out.sort_unstable_by(|a, b| cmp_key(a.0, a.1, b.0, b.1));
    out
}

/// ZINTERCARD: the intersection's size, counting stopped at `limit` (0:
/// none).
pub fn inter_card(srcs: &[Option<&ZSet>], limit: usize) -> usize {
    let order = by_size(srcs);
    let Some(Some(first)) = order.first().map(|&i| srcs[i]) else {
        return 0;
    };
    let mut n = 0;
    first.walk(0, false, &mut |_, member| {
        if order[1..].iter().all(|&j| srcs[j].is_some_and(|z| z.score(member).is_some())) {
            n += 1;
        }
        limit == 0 || n < limit
    });
    n
}

pub fn reply_result(r: &mut Reply, result: &[(f64, &[u8])], withscores: bool) {
    reply_elements(r, result.len(), withscores);
    for &(score, member) in result {
        if withscores {
            reply_pair(r, member, score)
        } else {
            r.bulk(member)
        }
    }
}

/// The result as a set to store, encoded by its contents.
pub fn result_set(result: &[(f64, &[u8])], limits: Limits) -> ZSet {
    let max_len = result.iter().map(|(_, m)| m.len()).max().unwrap_or(0);
    ZSet::from_sorted(result.iter().copied(), result.len(), max_len, limits)
}

/// A plain set as the set algebra reads it: every member scored 1, as
/// Redis's ZUNION/ZINTER/ZDIFF (and STORE forms, ZINTERCARD) accept sets.
pub fn scored_set(set: &Set, limits: Limits) -> ZSet {
    let mut members: Vec<Vec<u8>> = set.iter().map(|item| item.to_vec()).collect();
    members.sort_unstable();
    let max_len = members.iter().map(Vec::len).max().unwrap_or(0);
    ZSet::from_sorted(members.iter().map(|m| (1.0, m.as_slice())), members.len(), max_len, limits)
}

/// An input of the set algebra, copied: a sorted set, or a plain set scored
/// by `scored_set`. `Ok(None)` when missing.
pub fn input_copy(db: &mut Db, key: &[u8], now: u64, limits: Limits) -> Result<Option<ZSet>, WrongType> {
    match db.get(key, now).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::ZSet(z)) => Ok(Some((**z).clone())),
        Some(Value::Set(set)) => Ok(Some(scored_set(set, limits))),
        Some(_) => Err(WrongType),
    }
}

/// Runs `f` over the inputs at `keys` (`None`: missing), or fails with
/// WRONGTYPE before reading any. Sorted sets are moved out of the database
/// for the call so that several can be borrowed at once (a key may be named
/// twice), and moved back afterwards; plain sets are read as scored copies.
pub fn with_sets<R>(
    db: &mut Db,
    keys: &[&[u8]],
    now: u64,
    limits: Limits,
    f: impl FnOnce(&[Option<&ZSet>]) -> R,
) -> Result<R, WrongType> {
    for key in keys {
        if !matches!(db.get(key, now).map(|e| &e.value), None | Some(Value::ZSet(_) | Value::Set(_))) {
            return Err(WrongType);
        }
    }
    // (key, set, whether it goes back into the database)
    let mut taken: Vec<(&[u8], Box<ZSet>, bool)> = Vec::new();
    let mut slots: Vec<Option<usize>> = Vec::with_capacity(keys.len());
    for &key in keys {
        if let Some(i) = taken.iter().position(|(k, _, _)| *k == key) {
            slots.push(Some(i));
            continue;
        }
        let (moved, owned) = match db.get(key, now) {
            Some(e) => match &e.value {
                Value::ZSet(_) => (std::mem::replace(&mut e.value, Value::Int(0)), true),
                Value::Set(set) => (Value::ZSet(Box::new(scored_set(set, limits))), false),
                _ => (Value::Int(0), false),
            },
            None => (Value::Int(0), false),
        };
        match moved {
            Value::ZSet(z) => {
                slots.push(Some(taken.len()));
                taken.push((key, z, owned));
            }
            _ => slots.push(None),
        }
    }
    let result = {
        let refs: Vec<Option<&ZSet>> = slots.iter().map(|s| s.and_then(|i| taken.get(i)).map(|t| &*t.1)).collect();
        f(&refs)
    };
    for (key, z, owned) in taken {
        if owned {
            if let Some(e) = db.get(key, now) {
                e.value = Value::ZSet(z);
            }
        }
    }
    Ok(result)
}

fn setop_generic(s: &mut Shard, ctx: &mut Ctx, args: Args, op: Op, name: &str, store: bool) {
    let at = if store { 2 } else { 1 };
    let numkeys = match parse_numkeys(&args, at, name) {
        Ok(n) => n,
        Err(e) => return ctx.reply.error(&e),
    };
    let keys: Vec<&[u8]> = args.iter().skip(at + 1).take(numkeys).collect();
    let limits = super::limits(s);
    let db = &mut s.dbs[ctx.db];
    let r = &mut ctx.reply;
    let stored = with_sets(db, &keys, ctx.now, limits, |srcs| {
        let o = match parse_opts(&args, at, numkeys, op, store, false) {
            Ok(o) => o,
            Err(e) => {
                r.error(e);
                return None;
            }
        };
        let result = compute(op, srcs, &o);
        if store {
            return Some(result_set(&result, limits));
        }
        reply_result(r, &result, o.withscores);
        None
    });
    match stored {
        Err(WrongType) => r.error(WRONGTYPE),
        Ok(Some(z)) => {
            let event = match op {
                Op::Union => "zunionstore",
                Op::Inter => "zinterstore",
                Op::Diff => "zdiffstore",
            };
            super::store(s, ctx.db, args.get(1), z, ctx.now, r, event)
        }
        Ok(None) => {}
    }
}

pub fn zunion(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    setop_generic(s, ctx, args, Op::Union, "zunion", false)
}

pub fn zinter(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    setop_generic(s, ctx, args, Op::Inter, "zinter", false)
}

pub fn zdiff(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    setop_generic(s, ctx, args, Op::Diff, "zdiff", false)
}

pub fn zunionstore(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    setop_generic(s, ctx, args, Op::Union, "zunionstore", true)
}

pub fn zinterstore(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    setop_generic(s, ctx, args, Op::Inter, "zinterstore", true)
}

pub fn zdiffstore(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    setop_generic(s, ctx, args, Op::Diff, "zdiffstore", true)
}

/// ZINTERCARD with every key on this shard.
pub fn zintercard(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let numkeys = match parse_numkeys(&args, 1, "zintercard") {
        Ok(n) => n,
        Err(e) => return ctx.reply.error(&e),
    };
    let keys: Vec<&[u8]> = args.iter().skip(2).take(numkeys).collect();
    let limits = super::limits(s);
    let r = &mut ctx.reply;
    let done = with_sets(&mut s.dbs[ctx.db], &keys, ctx.now, limits, |srcs| {
        match parse_opts(&args, 1, numkeys, Op::Inter, false, true) {
            Ok(o) => r.int(inter_card(srcs, o.limit) as i64),
            Err(e) => r.error(e),
        }
    });
    if done.is_err() {
        r.error(WRONGTYPE);
    }
}
