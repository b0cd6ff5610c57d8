//! Hash commands: HSET HGET and friends, counters, HRANDFIELD, HSCAN.

use super::aggregate::{
    distinct_random, empty_scan, parse_cursor, parse_random_count, parse_scan_opts, rng, MAX_REPEATS,
};
use super::prelude::*;
use super::Ctx;
use crate::args::{parse_i64, Args};
use crate::db::Ttl;
use crate::notify;
use crate::numbers::{incr_by_float, IncrFloatError};
use crate::reply::errors::*;
use crate::shard::Shard;
use crate::types::hash::{Hash, HashLimits};
use crate::types::pack::Item;
use crate::value::Value;

fn limits(s: &Shard) -> HashLimits {
    HashLimits {
        max_entries: s.config.hash_max_listpack_entries as usize,
        max_value: s.config.hash_max_listpack_value as usize,
    }
}

/// The hash at `key` (see `aggregate::lookup`).
fn lookup<'a>(s: &'a mut Shard, ctx: &mut Ctx, key: &[u8], read: bool) -> Result<Option<&'a mut Hash>, ()> {
    super::aggregate::lookup(s, ctx, key, read, |v| match v {
        Value::Hash(h) => Some(&mut **h),
        _ => None,
    })
}

/// The hash at `key`, created empty when missing.
fn lookup_or_create<'a>(s: &'a mut Shard, ctx: &mut Ctx, key: &[u8]) -> Result<&'a mut Hash, ()> {
    let db = &mut s.dbs[ctx.db];
    if db.get(key, ctx.now).is_none() {
        db.set(key, Value::Hash(Box::default()), Ttl::Clear, ctx.now);
    }
    match db.get(key, ctx.now).map(|e| &mut e.value) {
        Some(Value::Hash(h)) => Ok(h),
        _ => {
            ctx.reply.error(WRONGTYPE);
            Err(())
        }
    }
}

fn bulk_item(ctx: &mut Ctx, item: Item) {
    let mut scratch = itoa::Buffer::new();
    ctx.reply.bulk(item.bytes(&mut scratch));
}

/// HSET and HMSET: (fields added, or +OK).
fn set_pairs(s: &mut Shard, ctx: &mut Ctx, args: Args, name: &str) -> Option<i64> {
    if !args.len().is_multiple_of(2) {
        ctx.reply.error(&super::arity_error(name));
        return None;
    }
    let limits = limits(s);
    let h = lookup_or_create(s, ctx, args.get(1)).ok()?;
    h.prepare(args.iter().skip(2).map(<[u8]>::len), &limits);
    let mut added = 0;
    for i in (2..args.len()).step_by(2) {
        added += h.set(args.get(i), args.get(i + 1), &limits) as i64;
    }
    s.notify(notify::HASH, "hset", ctx.db, args.get(1));
    Some(added)
}

pub fn hset(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    if let Some(added) = set_pairs(s, ctx, args, "hset") {
        ctx.reply.int(added);
    }
}

pub fn hmset(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    if set_pairs(s, ctx, args, "hmset").is_some() {
        ctx.reply.ok();
    }
}

pub fn hsetnx(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let limits = limits(s);
    let Ok(h) = lookup_or_create(s, ctx, args.get(1)) else { return };
    if h.contains(args.get(2)) {
        return ctx.reply.int(0);
    }
    h.prepare([args.get(2).len(), args.get(3).len()].into_iter(), &limits);
    h.set(args.get(2), args.get(3), &limits);
    s.notify(notify::HASH, "hset", ctx.db, args.get(1));
    ctx.reply.int(1);
}

pub fn hget(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    match lookup(s, ctx, args.get(1), true) {
        Ok(Some(h)) => match h.get(args.get(2)) {
            Some(v) => bulk_item(ctx, v),
            None => ctx.reply.null(),
        },
        Ok(None) => ctx.reply.null(),
        Err(()) => {}
    }
}

pub fn hmget(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let Ok(h) = lookup(s, ctx, args.get(1), true) else { return };
    let h = h.map(|h| &*h);
    ctx.reply.array(args.len() - 2);
    for f in args.iter().skip(2) {
        match h.and_then(|h| h.get(f)) {
            Some(v) => bulk_item(ctx, v),
            None => ctx.reply.null(),
        }
    }
}

pub fn hdel(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let key = args.get(1);
    let Ok(found) = lookup(s, ctx, key, false) else { return };
    let Some(h) = found else {
        return ctx.reply.int(0);
    };
    let removed = args.iter().skip(2).filter(|f| h.remove(f)).count();
    let empty = h.is_empty();
    if removed > 0 {
        s.notify(notify::HASH, "hdel", ctx.db, key);
    }
    if empty {
        s.dbs[ctx.db].remove(key, ctx.now);
        s.notify(notify::GENERIC, "del", ctx.db, key);
    }
    ctx.reply.int(removed as i64);
}

pub fn hexists(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    if let Ok(h) = lookup(s, ctx, args.get(1), true) {
        ctx.reply.int(h.is_some_and(|h| h.contains(args.get(2))) as i64);
    }
}

pub fn hlen(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    if let Ok(h) = lookup(s, ctx, args.get(1), true) {
        ctx.reply.int(h.map_or(0, |h| h.len()) as i64);
    }
}

pub fn hstrlen(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    if let Ok(h) = lookup(s, ctx, args.get(1), true) {
        ctx.reply.int(h.and_then(|h| h.get(args.get(2))).map_or(0, |v| v.len()) as i64);
    }
}

/// HKEYS, HVALS, HGETALL.
fn get_all(s: &mut Shard, ctx: &mut Ctx, args: Args, keys: bool, values: bool) {
    let Ok(h) = lookup(s, ctx, args.get(1), true) else { return };
    let n = h.as_ref().map_or(0, |h| h.len());
    if keys && values {
        ctx.reply.map(n);
    } else {
        ctx.reply.array(n);
    }
    for (f, v) in h.iter().flat_map(|h| h.iter()) {
        if keys {
            bulk_item(ctx, f);
        }
        if values {
            bulk_item(ctx, v);
        }
    }
}

pub fn hkeys(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    get_all(s, ctx, args, true, false)
}

pub fn hvals(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    get_all(s, ctx, args, false, true)
}

pub fn hgetall(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    get_all(s, ctx, args, true, true)
}

pub fn hincrby(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let Some(incr) = parse_i64(args.get(3)) else {
        return ctx.reply.error(NOT_INTEGER);
    };
    let limits = limits(s);
    let Ok(h) = lookup_or_create(s, ctx, args.get(1)) else { return };
    // Canonical integers are stored as integers: any string is not one.
    let current = match h.get(args.get(2)) {
        None => 0,
        Some(Item::Int(n)) => n,
        Some(Item::Str(_)) => return ctx.reply.error("ERR hash value is not an integer"),
    };
    let Some(next) = current.checked_add(incr) else {
        return ctx.reply.error(OVERFLOW);
    };
    h.set(args.get(2), itoa::Buffer::new().format(next).as_bytes(), &limits);
    ctx.reply.int(next);
    s.notify(notify::HASH, "hincrby", ctx.db, args.get(1));
}

pub fn hincrbyfloat(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    // The increment alone first: Redis refuses it before looking at the key.
    match incr_by_float(None, args.get(3)) {
        Err(IncrFloatError::NotFloat) => return ctx.reply.error(NOT_FLOAT),
        Err(IncrFloatError::NanOrInfinity) => return ctx.reply.error("ERR value is NaN or Infinity"),
        Ok(_) => {}
    }
    let limits = limits(s);
    let Ok(h) = lookup_or_create(s, ctx, args.get(1)) else { return };
    let current = h.get(args.get(2)).map(|v| v.to_vec());
    match incr_by_float(current.as_deref(), args.get(3)) {
        Ok(text) => {
            h.set(args.get(2), &text, &limits);
            ctx.reply.bulk(&text);
            s.notify(notify::HASH, "hincrbyfloat", ctx.db, args.get(1));
        }
        Err(IncrFloatError::NotFloat) => ctx.reply.error("ERR hash value is not a float"),
        Err(IncrFloatError::NanOrInfinity) => ctx.reply.error("ERR increment would produce NaN or Infinity"),
    }
}

pub fn hrandfield(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    if args.len() == 2 {
        let mut rnd = rng(s);
        return match lookup(s, ctx, args.get(1), true) {
            Ok(Some(h)) => match h.random(&mut rnd) {
                Some((f, _)) => bulk_item(ctx, f),
                None => ctx.reply.null(),
            },
            Ok(None) => ctx.reply.null(),
            Err(()) => {}
        };
    }
    let Some(count) = parse_random_count(ctx, args.get(2)) else { return };
    let withvalues = args.len() == 4;
    if args.len() > 4 || (withvalues && !args.is(3, "withvalues")) {
        return ctx.reply.error(SYNTAX);
    }
    if withvalues && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
        return ctx.reply.error("ERR value is out of range");
    }
    let mut rnd = rng(s);
    let h = match lookup(s, ctx, args.get(1), true) {
        Ok(Some(h)) => &*h,
        Ok(None) => return ctx.reply.array(0),
        Err(()) => return,
    };
    let resp3 = ctx.reply.resp3;
    let entry = |ctx: &mut Ctx, f: Item, v: Item| {
        if withvalues && resp3 {
            ctx.reply.array(2);
        }
        bulk_item(ctx, f);
        if withvalues {
            bulk_item(ctx, v);
        }
    };
    let header = |ctx: &mut Ctx, n: usize| ctx.reply.array(if withvalues && !resp3 { 2 * n } else { n });
    let size = h.len() as u64;
    let (n, unique) = (count.unsigned_abs(), count >= 0);
    if n == 0 {
        return ctx.reply.array(0);
    }
    if !unique || n == 1 {
        if n > MAX_REPEATS {
            return ctx.reply.error("ERR value is out of range");
        }
        header(ctx, n as usize);
        for _ in 0..n {
            if let Some((f, v)) = h.random(&mut rnd) {
                entry(ctx, f, v);
            }
        }
        return;
    }
    if n >= size {
        header(ctx, size as usize);
        for (f, v) in h.iter() {
            entry(ctx, f, v);
        }
        return;
    }
    let picks = distinct_random(h.len(), n as usize, |r| h.random(r), || h.iter().collect(), &mut rnd);
    header(ctx, picks.len());
    for (f, v) in picks {
        entry(ctx, f, v);
    }
}

pub fn hscan(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let Some(cursor) = parse_cursor(args.get(2)) else {
        return ctx.reply.error("ERR invalid cursor");
    };
    let h = match lookup(s, ctx, args.get(1), true) {
        Ok(Some(h)) => &*h,
        Ok(None) => return empty_scan(ctx),
        Err(()) => return,
    };
    let Some(opts) = parse_scan_opts(ctx, &args, 3) else { return };
    let mut scratch = itoa::Buffer::new();
    let mut out: Vec<(Item, Item)> = Vec::new();
    let next = match h {
        // Small encodings answer whole, with cursor 0, as Redis does.
        Hash::Pack(_) => {
            out.extend(h.iter().filter(|(f, _)| opts.matches(f.bytes(&mut scratch))));
            None
        }
        Hash::Table(t) => t.scan(cursor, opts.count, |r| {
            if opts.matches(r.key.bytes(&mut scratch)) {
                out.push((r.key, r.value));
            }
        }),
    };
    ctx.reply.array(2);
    ctx.reply.bulk(itoa::Buffer::new().format(next.unwrap_or(0)).as_bytes());
    ctx.reply.array(out.len() * 2);
    for (f, v) in out {
        bulk_item(ctx, f);
        bulk_item(ctx, v);
    }
}

/// The hash commands.
pub static COMMANDS: &[CommandSpec] = &[
    cmd!("hset", -4, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(hset)),
    cmd!("hmset", -4, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(hmset)),
    cmd!("hsetnx", 4, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(hsetnx)),
    cmd!("hget", 3, READONLY | FAST, KEY1, Keyed, Some(hget)),
    cmd!("hmget", -3, READONLY | FAST, KEY1, Keyed, Some(hmget)),
    cmd!("hdel", -3, WRITE | FAST, KEY1, Keyed, Some(hdel)),
    cmd!("hexists", 3, READONLY | FAST, KEY1, Keyed, Some(hexists)),
    cmd!("hlen", 2, READONLY | FAST, KEY1, Keyed, Some(hlen)),
    cmd!("hstrlen", 3, READONLY | FAST, KEY1, Keyed, Some(hstrlen)),
    cmd!("hkeys", 2, READONLY, KEY1, Keyed, Some(hkeys)),
    cmd!("hvals", 2, READONLY, KEY1, Keyed, Some(hvals)),
    cmd!("hgetall", 2, READONLY, KEY1, Keyed, Some(hgetall)),
    cmd!("hincrby", 4, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(hincrby)),
    cmd!("hincrbyfloat", 4, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(hincrbyfloat)),
    cmd!("hrandfield", -2, READONLY, KEY1, Keyed, Some(hrandfield)),
    cmd!("hscan", -3, READONLY, KEY1, Keyed, Some(hscan)),
];
