//! Set commands. Multi-key operations run here when every key lives on
//! this shard; over several shards proxy/src/commands/set.rs gathers the
//! sets and uses the same `reply_op`/`store_op`/`inter_card` on them.

use super::aggregate::{
    distinct_random, empty_scan, parse_cursor, parse_random_count, parse_scan_opts, rng, MAX_REPEATS,
};
use super::prelude::*;
use super::Ctx;
use crate::args::{parse_i64, Args};
use crate::db::Ttl;
use crate::notify;
use crate::reply::errors::*;
use crate::reply::Reply;
use crate::shard::Shard;
use crate::types::pack::Item;
use crate::types::set::{difference, from_items, intersection, union, Set};
use crate::value::Value;

fn max_intset(s: &Shard) -> usize {
    s.config.set_max_intset_entries as usize
}

/// The set at `key` (see `aggregate::lookup`).
fn lookup<'a>(s: &'a mut Shard, ctx: &mut Ctx, key: &[u8], read: bool) -> Result<Option<&'a mut Set>, ()> {
    super::aggregate::lookup(s, ctx, key, read, |v| match v {
        Value::Set(set) => Some(&mut **set),
        _ => None,
    })
}

fn bulk_item(reply: &mut Reply, item: Item) {
    let mut scratch = itoa::Buffer::new();
    reply.bulk(item.bytes(&mut scratch));
}

pub fn sadd(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let (key, max) = (args.get(1), max_intset(s));
    let db = &mut s.dbs[ctx.db];
    if db.get(key, ctx.now).is_none() {
        db.set(key, Value::Set(Box::new(Set::for_member(args.get(2)))), Ttl::Clear, ctx.now);
    }
    let Some(Value::Set(set)) = db.get(key, ctx.now).map(|e| &mut e.value) else {
        return ctx.reply.error(WRONGTYPE);
    };
    let added = args.iter().skip(2).filter(|m| set.add(m, max)).count();
    if added > 0 {
        s.notify(notify::SET, "sadd", ctx.db, key);
    }
    ctx.reply.int(added as i64);
}

pub fn srem(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let key = args.get(1);
    let set = match lookup(s, ctx, key, false) {
        Ok(Some(set)) => set,
        Ok(None) => return ctx.reply.int(0),
        Err(()) => return,
    };
    let removed = args.iter().skip(2).filter(|m| set.remove(m)).count();
    let empty = set.is_empty();
    if removed > 0 {
        s.notify(notify::SET, "srem", ctx.db, key);
    }
    if empty {
        remove_empty(s, ctx.db, key, ctx.now);
    }
    ctx.reply.int(removed as i64);
}

pub fn sismember(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    if let Ok(set) = lookup(s, ctx, args.get(1), true) {
        ctx.reply.int(set.is_some_and(|set| set.contains(args.get(2))) as i64);
    }
}

pub fn smismember(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let Ok(set) = lookup(s, ctx, args.get(1), true) else { return };
    ctx.reply.array(args.len() - 2);
    for m in args.iter().skip(2) {
        ctx.reply.int(set.as_ref().is_some_and(|set| set.contains(m)) as i64);
    }
}

pub fn scard(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    if let Ok(set) = lookup(s, ctx, args.get(1), true) {
        ctx.reply.int(set.map_or(0, |set| set.len()) as i64);
    }
}

pub fn smembers(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let Ok(set) = lookup(s, ctx, args.get(1), true) else { return };
    ctx.reply.set(set.as_ref().map_or(0, |set| set.len()));
    for m in set.iter().flat_map(|set| set.iter()) {
        bulk_item(&mut ctx.reply, m);
    }
}

pub fn spop(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    match args.len() {
        2 => {}
        3 => return spop_count(s, ctx, args),
        _ => return ctx.reply.error(SYNTAX),
    }
    let key = args.get(1);
    let mut rnd = rng(s);
    let set = match lookup(s, ctx, key, false) {
        Ok(Some(set)) => set,
        Ok(None) => return ctx.reply.null(),
        Err(()) => return,
    };
    match set.pop(&mut rnd) {
        Some(m) => ctx.reply.bulk(&m),
        None => ctx.reply.null(),
    }
    let empty = set.is_empty();
    s.notify(notify::SET, "spop", ctx.db, key);
    if empty {
        remove_empty(s, ctx.db, key, ctx.now);
    }
}

/// Deletes a set that became empty, with Redis's `del` event.
fn remove_empty(s: &mut Shard, db: usize, key: &[u8], now: u64) {
    s.dbs[db].remove(key, now);
    s.notify(notify::GENERIC, "del", db, key);
}

/// SPOP with a count, by Redis's three cases.
fn spop_count(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let Some(count) = parse_i64(args.get(2)).filter(|n| *n >= 0) else {
        return ctx.reply.error("ERR value is out of range, must be positive");
    };
    let (key, max) = (args.get(1), max_intset(s));
    let mut rnd = rng(s);
    let set = match lookup(s, ctx, key, false) {
        Ok(Some(set)) => set,
        Ok(None) => return ctx.reply.set(0),
        Err(()) => return,
    };
    let (count, size) = (count as u64, set.len() as u64);
    if count == 0 {
        return ctx.reply.set(0);
    }
    // Everything: the whole set goes, the key with it.
    if count >= size {
        ctx.reply.set(size as usize);
        for m in set.iter() {
            bulk_item(&mut ctx.reply, m);
        }
        s.notify(notify::SET, "spop", ctx.db, key);
        remove_empty(s, ctx.db, key, ctx.now);
        return;
    }
    s.notify(notify::SET, "spop", ctx.db, key);
    let set = match lookup(s, ctx, key, false) {
        Ok(Some(set)) => set,
        _ => return,
    };
    ctx.reply.set(count as usize);
    let remaining = size - count;
    if remaining.saturating_mul(5) > count {
        for _ in 0..count {
            if let Some(m) = set.pop(&mut rnd) {
                ctx.reply.bulk(&m);
            }
        }
        return;
    }
    // Most of it: move the few that stay to a new set (which, as in Redis,
    // starts with the encoding its first member calls for), reply with what
    // is left of the old one.
    let mut kept: Option<Set> = None;
    for _ in 0..remaining {
        if let Some(m) = set.pop(&mut rnd) {
            kept.get_or_insert_with(|| Set::for_member(&m)).add(&m, max);
        }
    }
    for m in set.iter() {
        bulk_item(&mut ctx.reply, m);
    }
    if let Some(kept) = kept {
        *set = kept;
    }
}

pub fn srandmember(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    match args.len() {
        2 => {}
        3 => return srandmember_count(s, ctx, args),
        _ => return ctx.reply.error(SYNTAX),
    }
    let mut rnd = rng(s);
    match lookup(s, ctx, args.get(1), true) {
        Ok(Some(set)) => match set.random(&mut rnd) {
            Some(m) => bulk_item(&mut ctx.reply, m),
            None => ctx.reply.null(),
        },
        Ok(None) => ctx.reply.null(),
        Err(()) => {}
    }
}

fn srandmember_count(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let Some(count) = parse_random_count(ctx, args.get(2)) else { return };
    let mut rnd = rng(s);
    let set = match lookup(s, ctx, args.get(1), true) {
        Ok(Some(set)) => &*set,
        Ok(None) => return ctx.reply.array(0),
        Err(()) => return,
    };
    let (n, unique, size) = (count.unsigned_abs(), count >= 0, set.len() as u64);
    if n == 0 {
        return ctx.reply.array(0);
    }
    if !unique || n == 1 {
        if n > MAX_REPEATS {
            return ctx.reply.error("ERR value is out of range");
        }
        ctx.reply.array(n as usize);
        for _ in 0..n {
            if let Some(m) = set.random(&mut rnd) {
                bulk_item(&mut ctx.reply, m);
            }
        }
        return;
    }
    if n >= size {
        ctx.reply.array(size as usize);
        for m in set.iter() {
            bulk_item(&mut ctx.reply, m);
        }
        return;
    }
    let picks = distinct_random(set.len(), n as usize, |r| set.random(r), || set.iter().collect(), &mut rnd);
    ctx.reply.array(picks.len());
    for m in picks {
        bulk_item(&mut ctx.reply, m);
    }
}

pub fn smove(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let (src, dst, m) = (args.get(1), args.get(2), args.get(3));
    let max = max_intset(s);
    let db = &mut s.dbs[ctx.db];
    match db.get(src, ctx.now).map(|e| e.value.type_name()) {
        None => return ctx.reply.int(0),
        Some("set") => {}
        Some(_) => return ctx.reply.error(WRONGTYPE),
    }
    if db.get(dst, ctx.now).is_some_and(|e| e.value.type_name() != "set") {
        return ctx.reply.error(WRONGTYPE);
    }
    let Some(Value::Set(from)) = db.get(src, ctx.now).map(|e| &mut e.value) else {
        return ctx.reply.int(0);
    };
    if src == dst {
        return ctx.reply.int(from.contains(m) as i64);
    }
    if !from.remove(m) {
        return ctx.reply.int(0);
    }
    let empty = from.is_empty();
    s.notify(notify::SET, "srem", ctx.db, src);
    if empty {
        remove_empty(s, ctx.db, src, ctx.now);
    }
    add_member(s, ctx.db, dst, m, max, ctx.now);
    ctx.reply.int(1);
}

/// Adds `m` to the set at `key`, created when missing (`sadd` raised when
/// it was not there); false (and nothing done) when the key holds another
/// type.
pub fn add_member(s: &mut Shard, db: usize, key: &[u8], m: &[u8], max: usize, now: u64) -> bool {
    let d = &mut s.dbs[db];
    let added = match d.get(key, now).map(|e| &mut e.value) {
        Some(Value::Set(set)) => set.add(m, max),
        Some(_) => return false,
        None => {
            let mut set = Set::for_member(m);
            set.add(m, max);
            d.set(key, Value::Set(Box::new(set)), Ttl::Clear, now);
            true
        }
    };
    if added {
        s.notify(notify::SET, "sadd", db, key);
    }
    true
}

/// A multi-key set operation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    Inter,
    Union,
    Diff,
}

/// The sets at `keys` (`None` for a missing key) after lazy expiry; `Err`
/// once WRONGTYPE is replied: every key is checked, as Redis does.
fn gather<'a>(s: &'a mut Shard, ctx: &mut Ctx, keys: &[&[u8]]) -> Result<Vec<Option<&'a Set>>, ()> {
    for key in keys {
        lookup(s, ctx, key, true)?;
    }
    let db = &s.dbs[ctx.db];
    Ok(keys
        .iter()
        .map(|k| match db.find(k, ctx.now).map(|e| &e.value) {
            Some(Value::Set(set)) => Some(&**set),
            _ => None,
        })
        .collect())
}

/// Replies with the members of `op` over `sets` (`None`: a missing key).
pub fn reply_op(reply: &mut Reply, op: Op, sets: &[Option<&Set>], max_intset: usize) {
    match op {
        Op::Inter => {
            let all: Option<Vec<&Set>> = sets.iter().copied().collect();
            let members = all.map(|all| intersection(&all, 0)).unwrap_or_default();
            reply.set(members.len());
            for m in members {
                bulk_item(reply, m);
            }
        }
        Op::Union | Op::Diff => {
            let result = store_op(op, sets, max_intset);
            reply.set(result.len());
            for m in result.iter() {
                bulk_item(reply, m);
            }
        }
    }
}

/// The result of `op` over `sets`, as a new set (what the STORE forms save).
pub fn store_op(op: Op, sets: &[Option<&Set>], max_intset: usize) -> Set {
    let present: Vec<&Set> = sets.iter().flatten().copied().collect();
    match op {
        Op::Inter if present.len() == sets.len() => from_items(intersection(&present, 0), max_intset),
        Op::Inter => Set::new_intset(),
        Op::Union => union(&present, max_intset),
        Op::Diff => match sets.split_first() {
            Some((Some(first), others)) => {
                let others: Vec<&Set> = others.iter().flatten().copied().collect();
                difference(first, &others, max_intset)
            }
            _ => Set::new_intset(),
        },
    }
}

/// SINTERCARD's count (`limit` 0: no limit).
pub fn inter_card(sets: &[Option<&Set>], limit: usize) -> usize {
    match sets.iter().copied().collect::<Option<Vec<&Set>>>() {
        Some(all) => intersection(&all, limit).len(),
        None => 0,
    }
}

/// Saves a STORE result at `dst` (an empty result deletes it) and raises
/// `op`'s event (`sinterstore`...) or `del`; returns its size.
pub fn save(s: &mut Shard, db: usize, dst: &[u8], result: Set, now: u64, op: Op) -> usize {
    let n = result.len();
    if n == 0 {
        if s.dbs[db].remove(dst, now).is_some() {
            s.notify(notify::GENERIC, "del", db, dst);
        }
    } else {
        s.dbs[db].set(dst, Value::Set(Box::new(result)), Ttl::Clear, now);
        let event = match op {
            Op::Inter => "sinterstore",
            Op::Union => "sunionstore",
            Op::Diff => "sdiffstore",
        };
        s.notify(notify::SET, event, db, dst);
    }
    n
}

fn op_command(s: &mut Shard, ctx: &mut Ctx, args: Args, op: Op) {
    let max = max_intset(s);
    if let Ok(sets) = gather(s, ctx, &args.iter().skip(1).collect::<Vec<_>>()) {
        reply_op(&mut ctx.reply, op, &sets, max);
    }
}

fn store_command(s: &mut Shard, ctx: &mut Ctx, args: Args, op: Op) {
    let max = max_intset(s);
    let Ok(sets) = gather(s, ctx, &args.iter().skip(2).collect::<Vec<_>>()) else { return };
    let result = store_op(op, &sets, max);
    let n = save(s, ctx.db, args.get(1), result, ctx.now, op);
    ctx.reply.int(n as i64);
}

pub fn sinter(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    op_command(s, ctx, args, Op::Inter)
}

pub fn sunion(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    op_command(s, ctx, args, Op::Union)
}

pub fn sdiff(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    op_command(s, ctx, args, Op::Diff)
}

pub fn sinterstore(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    store_command(s, ctx, args, Op::Inter)
}

pub fn sunionstore(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    store_command(s, ctx, args, Op::Union)
}

pub fn sdiffstore(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    store_command(s, ctx, args, Op::Diff)
}

/// SINTERCARD's `numkeys` and `LIMIT`, or the error text.
pub fn parse_sintercard(args: &Args) -> Result<(usize, usize), &'static str> {
    let numkeys = parse_i64(args.get(1)).filter(|n| *n >= 1).ok_or("ERR numkeys should be greater than 0")?;
    if numkeys as u64 > (args.len() - 2) as u64 {
        return Err("ERR Number of keys can't be greater than number of args");
    }
    let mut limit = 0;
    let mut j = 2 + numkeys as usize;
    while j < args.len() {
        if args.is(j, "limit") && j + 1 < args.len() {
            j += 1;
            limit = parse_i64(args.get(j)).filter(|n| *n >= 0).ok_or("ERR LIMIT can't be negative")? as usize;
        } else {
            return Err(SYNTAX);
        }
        j += 1;
    }
    Ok((numkeys as usize, limit))
}

pub fn sintercard(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let (numkeys, limit) = match parse_sintercard(&args) {
        Ok(p) => p,
        Err(e) => return ctx.reply.error(e),
    };
    if let Ok(sets) = gather(s, ctx, &args.iter().skip(2).take(numkeys).collect::<Vec<_>>()) {
        ctx.reply.int(inter_card(&sets, limit) as i64);
    }
}

pub fn sscan(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let Some(cursor) = parse_cursor(args.get(2)) else {
        return ctx.reply.error("ERR invalid cursor");
    };
    let set = match lookup(s, ctx, args.get(1), true) {
        Ok(Some(set)) => &*set,
        Ok(None) => return empty_scan(ctx),
        Err(()) => return,
    };
    let Some(opts) = parse_scan_opts(ctx, &args, 3) else { return };
    let mut scratch = itoa::Buffer::new();
    let mut out: Vec<Item> = Vec::new();
    let next = match set {
        // Small encodings answer whole, with cursor 0, as Redis does.
        Set::Ints(_) | Set::Pack(_) => {
            out.extend(set.iter().filter(|m| opts.matches(m.bytes(&mut scratch))));
            None
        }
        Set::Table(t) => t.scan(cursor, opts.count, |r| {
            if opts.matches(r.key.bytes(&mut scratch)) {
                out.push(r.key);
            }
        }),
    };
    ctx.reply.array(2);
    ctx.reply.bulk(itoa::Buffer::new().format(next.unwrap_or(0)).as_bytes());
    ctx.reply.array(out.len());
    for m in out {
        bulk_item(&mut ctx.reply, m);
    }
}

/// The set commands.
pub static COMMANDS: &[CommandSpec] = &[
    cmd!("sadd", -3, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(sadd)),
    cmd!("srem", -3, WRITE | FAST, KEY1, Keyed, Some(srem)),
    cmd!("sismember", 3, READONLY | FAST, KEY1, Keyed, Some(sismember)),
    cmd!("smismember", -3, READONLY | FAST, KEY1, Keyed, Some(smismember)),
    cmd!("scard", 2, READONLY | FAST, KEY1, Keyed, Some(scard)),
    cmd!("smembers", 2, READONLY, KEY1, Keyed, Some(smembers)),
    cmd!("spop", -2, WRITE | FAST, KEY1, Keyed, Some(spop)),
    cmd!("srandmember", -2, READONLY, KEY1, Keyed, Some(srandmember)),
    cmd!("smove", 4, WRITE | FAST, KEYS12, Keyed, Some(smove)),
    cmd!("sinter", -2, READONLY, ALLKEYS, Keyed, Some(sinter)),
    // Keys follow `numkeys`: the proxy routes it (no fixed key positions).
    cmd!("sintercard", -3, READONLY, NOKEYS, Keyed, Some(sintercard)).with_keynum(1, 2),
    cmd!("sinterstore", -3, WRITE | DENYOOM, ALLKEYS, Keyed, Some(sinterstore)),
    cmd!("sunion", -2, READONLY, ALLKEYS, Keyed, Some(sunion)),
    cmd!("sunionstore", -3, WRITE | DENYOOM, ALLKEYS, Keyed, Some(sunionstore)),
    cmd!("sdiff", -2, READONLY, ALLKEYS, Keyed, Some(sdiff)),
    cmd!("sdiffstore", -3, WRITE | DENYOOM, ALLKEYS, Keyed, Some(sdiffstore)),
    cmd!("sscan", -3, READONLY, KEY1, Keyed, Some(sscan)),
];
