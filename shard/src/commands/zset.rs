//! Sorted-set commands: ZADD and the single-key reads and writes. Ranges
//! live in `zset/range.rs`, union/intersection/difference in
//! `zset/setop.rs`, pops, random members and ZSCAN in `zset/pop.rs`; over
//! several shards: proxy/src/commands/zset.rs.

pub mod pop;
pub mod range;
pub mod setop;

use super::prelude::*;
use super::Ctx;
use crate::args::Args;
use crate::db::{Db, Ttl};
use crate::notify;
use crate::numbers::{format_double, parse_double};
use crate::reply::errors::*;
use crate::reply::Reply;
use crate::shard::Shard;
use crate::types::zset::{Limits, ZSet};
use crate::value::Value;

pub const NAN_SCORE: &str = "ERR resulting score is not a number (NaN)";

/// A score as Redis's `addReplyDouble` sends it: a `%.17g` bulk string in
/// RESP2, a double in RESP3.
pub fn reply_score(r: &mut Reply, score: f64) {
    let mut buf = [0u8; 32];
    let text = format_double(score, &mut buf);
    if r.resp3 {
        r.raw(b",");
        r.raw(text);
        r.raw(b"\r\n");
    } else {
        r.bulk(text);
    }
}

/// One element of a WITHSCORES reply: `[member, score]` pairs in RESP3,
/// flat in RESP2.
pub fn reply_pair(r: &mut Reply, member: &[u8], score: f64) {
    if r.resp3 {
        r.array(2);
    }
    r.bulk(member);
    reply_score(r, score);
}

/// An array of `n` elements, doubled in RESP2 when scores come along.
pub fn reply_elements(r: &mut Reply, n: usize, withscores: bool) {
    r.array(if withscores && !r.resp3 { 2 * n } else { n });
}

/// The key holds another type.
pub struct WrongType;

/// The sorted set at `key` (`None`: no such key).
pub fn zset_mut<'a>(db: &'a mut Db, key: &[u8], now: u64) -> Result<Option<&'a mut ZSet>, WrongType> {
    match db.get(key, now) {
        None => Ok(None),
        Some(e) => match &mut e.value {
            Value::ZSet(z) => Ok(Some(z)),
            _ => Err(WrongType),
        },
    }
}

/// Like `zset_mut` for a read, counting the keyspace hit or miss.
pub fn zset_read<'a>(s: &'a mut Shard, db: usize, key: &[u8], now: u64) -> Result<Option<&'a mut ZSet>, WrongType> {
    s.notify_miss(db, key, now);
    let Shard { dbs, stats, .. } = s;
    let found = zset_mut(&mut dbs[db], key, now);
    match &found {
        Ok(None) => stats.keyspace_misses += 1,
        _ => stats.keyspace_hits += 1,
    }
    found
}

/// Deletes the key when its set was emptied (with its `del` event).
pub fn drop_if_empty(s: &mut Shard, db: usize, key: &[u8], now: u64) {
    if matches!(zset_mut(&mut s.dbs[db], key, now), Ok(Some(z)) if z.is_empty()) {
        s.dbs[db].remove(key, now);
        s.notify(notify::GENERIC, "del", db, key);
    }
}

/// Stores `z` at `key` (replacing any value and TTL) raising `event`
/// (`zunionstore`...), or deletes the key (`del`) when `z` is empty;
/// replies with its length, as the STORE commands do.
pub fn store(s: &mut Shard, db: usize, key: &[u8], z: ZSet, now: u64, r: &mut Reply, event: &'static str) {
    let n = z.len();
    if n == 0 {
        if s.dbs[db].remove(key, now).is_some() {
            s.notify(notify::GENERIC, "del", db, key);
        }
    } else {
        s.dbs[db].set(key, Value::ZSet(Box::new(z)), Ttl::Clear, now);
        s.notify(notify::ZSET, event, db, key);
    }
    r.int(n as i64);
}

pub fn limits(s: &Shard) -> Limits {
    Limits::of(&s.config)
}

#[derive(Default)]
struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

/// What ZADD did.
#[derive(Default)]
struct Added {
    added: i64,
    updated: i64,
    /// The element was not skipped (XX, NX, GT, LT); then `score` is its
    /// new score.
    processed: bool,
    score: f64,
}

/// Redis's `zsetAdd` for one element; `Err` when INCR makes a NaN.
fn add_one(z: &mut ZSet, f: &AddFlags, score: f64, member: &[u8], limits: Limits, out: &mut Added) -> Result<(), ()> {
    out.processed = false;
    match z.score(member) {
        Some(current) => {
            if f.nx {
                return Ok(());
            }
            let score = if f.incr { score + current } else { score };
            if score.is_nan() {
                return Err(());
            }
            if (f.lt && score >= current) || (f.gt && score <= current) {
                return Ok(());
            }
            if score != current {
                z.rescore(member, current, score);
                out.updated += 1;
            }
            out.processed = true;
            out.score = score;
        }
        None if f.xx => {}
        None => {
            z.insert(score, member, limits);
            out.added += 1;
            out.processed = true;
            out.score = score;
        }
    }
    Ok(())
}

/// ZADD and ZINCRBY (Redis's zaddGenericCommand).
fn add_generic(s: &mut Shard, ctx: &mut Ctx, args: Args, incr: bool) {
    let mut f = AddFlags { incr, ..AddFlags::default() };
    let mut i = 2;
    while i < args.len() {
        let flag = if args.is(i, "nx") {
            &mut f.nx
        } else if args.is(i, "xx") {
            &mut f.xx
        } else if args.is(i, "ch") {
            &mut f.ch
        } else if args.is(i, "incr") {
            &mut f.incr
        } else if args.is(i, "gt") {
            &mut f.gt
        } else if args.is(i, "lt") {
            &mut f.lt
        } else {
            break;
        };
        *flag = true;
        i += 1;
    }
    let elements = args.len() - i;
    if elements == 0 || !elements.is_multiple_of(2) {
        return ctx.reply.error(SYNTAX);
    }
    if f.nx && f.xx {
        return ctx.reply.error("ERR XX and NX options at the same time are not compatible");
    }
    if ((f.gt || f.lt) && f.nx) || (f.gt && f.lt) {
        return ctx.reply.error("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    if f.incr && elements > 2 {
        return ctx.reply.error("ERR INCR option supports a single increment-element pair");
    }
    let first = i;
    if (first..args.len()).step_by(2).any(|j| parse_double(args.get(j)).is_none()) {
        return ctx.reply.error(NOT_FLOAT);
    }
    let key = args.get(1);
    let limits = limits(s);
    let db = &mut s.dbs[ctx.db];
    let mut fresh = None;
    let z = match zset_mut(db, key, ctx.now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(Some(z)) => z,
        Ok(None) if f.xx => return reply_added(ctx, &f, &Added::default()),
        Ok(None) => fresh.insert(ZSet::new(limits, args.get(first + 1).len())),
    };
    let mut done = Added::default();
    for j in (first..args.len()).step_by(2) {
        let score = parse_double(args.get(j)).unwrap_or(0.0);
        if add_one(z, &f, score, args.get(j + 1), limits, &mut done).is_err() {
            return ctx.reply.error(NAN_SCORE);
        }
    }
    if let Some(z) = fresh.filter(|z| !z.is_empty()) {
        db.set(key, Value::ZSet(Box::new(z)), Ttl::Clear, ctx.now);
    }
    if done.added + done.updated > 0 {
        s.notify(notify::ZSET, if f.incr { "zincr" } else { "zadd" }, ctx.db, key);
    }
    reply_added(ctx, &f, &done)
}

fn reply_added(ctx: &mut Ctx, f: &AddFlags, done: &Added) {
    if !f.incr {
        ctx.reply.int(if f.ch { done.added + done.updated } else { done.added });
    } else if done.processed {
        reply_score(&mut ctx.reply, done.score);
    } else {
        ctx.reply.null();
    }
}

pub fn zadd(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    add_generic(s, ctx, args, false)
}

pub fn zincrby(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    add_generic(s, ctx, args, true)
}

pub fn zrem(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let (key, db) = (args.get(1), &mut s.dbs[ctx.db]);
    let z = match zset_mut(db, key, ctx.now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(None) => return ctx.reply.int(0),
        Ok(Some(z)) => z,
    };
    let mut removed = 0;
    for member in args.iter().skip(2) {
        removed += z.remove(member).is_some() as i64;
        if z.is_empty() {
            break;
        }
    }
    if removed > 0 {
        s.notify(notify::ZSET, "zrem", ctx.db, key);
    }
    drop_if_empty(s, ctx.db, key, ctx.now);
    ctx.reply.int(removed);
}

pub fn zscore(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    match zset_read(s, ctx.db, args.get(1), ctx.now) {
        Err(WrongType) => ctx.reply.error(WRONGTYPE),
        Ok(z) => match z.and_then(|z| z.score(args.get(2))) {
            Some(score) => reply_score(&mut ctx.reply, score),
            None => ctx.reply.null(),
        },
    }
}

pub fn zmscore(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let z = match zset_read(s, ctx.db, args.get(1), ctx.now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(z) => z,
    };
    ctx.reply.array(args.len() - 2);
    for member in args.iter().skip(2) {
        match z.as_ref().and_then(|z| z.score(member)) {
            Some(score) => reply_score(&mut ctx.reply, score),
            None => ctx.reply.null(),
        }
    }
}

pub fn zcard(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    match zset_read(s, ctx.db, args.get(1), ctx.now) {
        Err(WrongType) => ctx.reply.error(WRONGTYPE),
        Ok(z) => ctx.reply.int(z.map_or(0, |z| z.len()) as i64),
    }
}

fn rank_generic(s: &mut Shard, ctx: &mut Ctx, args: Args, rev: bool) {
    match zset_read(s, ctx.db, args.get(1), ctx.now) {
        Err(WrongType) => ctx.reply.error(WRONGTYPE),
        Ok(z) => match z.and_then(|z| Some((z.rank(args.get(2))?.0, z.len()))) {
            Some((rank, len)) => ctx.reply.int(if rev { len - 1 - rank } else { rank } as i64),
            None => ctx.reply.null(),
        },
    }
}

pub fn zrank(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    rank_generic(s, ctx, args, false)
}

pub fn zrevrank(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    rank_generic(s, ctx, args, true)
}

/// The sorted-set commands. BZPOPMIN, BZPOPMAX and BZMPOP come with the
/// blocking machinery; commands taking `numkeys` are routed by the proxy.
pub static COMMANDS: &[CommandSpec] = &[
    cmd!("zadd", -4, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(zadd)),
    cmd!("zincrby", 4, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(zincrby)),
    cmd!("zrem", -3, WRITE | FAST, KEY1, Keyed, Some(zrem)),
    cmd!("zscore", 3, READONLY | FAST, KEY1, Keyed, Some(zscore)),
    cmd!("zmscore", -3, READONLY | FAST, KEY1, Keyed, Some(zmscore)),
    cmd!("zcard", 2, READONLY | FAST, KEY1, Keyed, Some(zcard)),
    cmd!("zcount", 4, READONLY | FAST, KEY1, Keyed, Some(range::zcount)),
    cmd!("zlexcount", 4, READONLY | FAST, KEY1, Keyed, Some(range::zlexcount)),
    cmd!("zrank", 3, READONLY | FAST, KEY1, Keyed, Some(zrank)),
    cmd!("zrevrank", 3, READONLY | FAST, KEY1, Keyed, Some(zrevrank)),
    cmd!("zrange", -4, READONLY, KEY1, Keyed, Some(range::zrange)),
    cmd!("zrangestore", -5, WRITE | DENYOOM, KEYS12, Keyed, Some(range::zrangestore)),
    cmd!("zrangebyscore", -4, READONLY, KEY1, Keyed, Some(range::zrangebyscore)),
    cmd!("zrevrangebyscore", -4, READONLY, KEY1, Keyed, Some(range::zrevrangebyscore)),
    cmd!("zrevrange", -4, READONLY, KEY1, Keyed, Some(range::zrevrange)),
    cmd!("zrangebylex", -4, READONLY, KEY1, Keyed, Some(range::zrangebylex)),
    cmd!("zrevrangebylex", -4, READONLY, KEY1, Keyed, Some(range::zrevrangebylex)),
    cmd!("zremrangebyrank", 4, WRITE, KEY1, Keyed, Some(range::zremrangebyrank)),
    cmd!("zremrangebyscore", 4, WRITE, KEY1, Keyed, Some(range::zremrangebyscore)),
    cmd!("zremrangebylex", 4, WRITE, KEY1, Keyed, Some(range::zremrangebylex)),
    cmd!("zpopmin", -2, WRITE | FAST, KEY1, Keyed, Some(pop::zpopmin)),
    cmd!("zpopmax", -2, WRITE | FAST, KEY1, Keyed, Some(pop::zpopmax)),
    cmd!("zmpop", -4, WRITE, NOKEYS, Keyed, Some(pop::zmpop)).with_keynum(1, 2),
    cmd!("bzpopmin", -3, WRITE | NOSCRIPT | FAST, (1, -2, 1), Proxy, None),
    cmd!("bzpopmax", -3, WRITE | NOSCRIPT | FAST, (1, -2, 1), Proxy, None),
    cmd!("bzmpop", -5, WRITE | NOSCRIPT, NOKEYS, Proxy, None).with_keynum(2, 3),
    cmd!("zrandmember", -2, READONLY, KEY1, Keyed, Some(pop::zrandmember)),
    cmd!("zscan", -3, READONLY, KEY1, Keyed, Some(pop::zscan)),
    cmd!("zunion", -3, READONLY, NOKEYS, Keyed, Some(setop::zunion)).with_keynum(1, 2),
    cmd!("zinter", -3, READONLY, NOKEYS, Keyed, Some(setop::zinter)).with_keynum(1, 2),
    cmd!("zdiff", -3, READONLY, NOKEYS, Keyed, Some(setop::zdiff)).with_keynum(1, 2),
    cmd!("zintercard", -3, READONLY, NOKEYS, Keyed, Some(setop::zintercard)).with_keynum(1, 2),
    cmd!("zunionstore", -4, WRITE | DENYOOM, KEY1, Keyed, Some(setop::zunionstore)).with_keynum(2, 3),
    cmd!("zinterstore", -4, WRITE | DENYOOM, KEY1, Keyed, Some(setop::zinterstore)).with_keynum(2, 3),
    cmd!("zdiffstore", -4, WRITE | DENYOOM, KEY1, Keyed, Some(setop::zdiffstore)).with_keynum(2, 3),
];
