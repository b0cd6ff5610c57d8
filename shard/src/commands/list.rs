//! List commands. LMOVE/RPOPLPUSH/LMPOP run here when their keys share this
//! shard; proxy/src/commands/list.rs moves elements between shards
//! otherwise. The blocking
//! commands are the proxy's (`proxy::blocking`), built on the `try_*`
//! functions below, which either serve a pop or report "nothing yet".

use super::prelude::*;
use super::Ctx;
use crate::args::{parse_i64, Args};
use crate::db::Ttl;
use crate::notify;
use crate::reply::errors::*;
use crate::reply::Reply;
use crate::shard::Shard;
use crate::types::list::{Fill, List};
use crate::value::Value;

const OUT_OF_RANGE: &str = "ERR value is out of range, must be positive";

fn fill(s: &Shard) -> Fill {
    Fill(s.config.list_max_listpack_size)
}

/// The list at `key` (see `aggregate::lookup`; list reads count no
/// keyspace hits).
fn lookup<'a>(s: &'a mut Shard, ctx: &mut Ctx, key: &[u8]) -> Result<Option<&'a mut List>, ()> {
    super::aggregate::lookup(s, ctx, key, false, |v| match v {
        Value::List(l) => Some(&mut **l),
        _ => None,
    })
}

/// Deletes `key` when its list became empty (Redis never keeps empty lists),
/// with its `del` event.
fn drop_if_empty(s: &mut Shard, ctx: &Ctx, key: &[u8]) {
    if matches!(s.dbs[ctx.db].peek(key, ctx.now).map(|e| &e.value), Some(Value::List(l)) if l.is_empty()) {
        s.dbs[ctx.db].remove(key, ctx.now);
        s.notify(notify::GENERIC, "del", ctx.db, key);
    }
}

/// Redis's listElementsRemoved: `lpop`/`rpop`, then `del` when the list is
/// now empty.
fn popped(s: &mut Shard, ctx: &Ctx, key: &[u8], head: bool) {
    s.notify(notify::LIST, if head { "lpop" } else { "rpop" }, ctx.db, key);
    drop_if_empty(s, ctx, key);
}

/// Pushes `values` at the head or tail, creating the list unless `only_if_exists`.
/// Returns the new length, or `None` once WRONGTYPE was replied.
fn push(
    s: &mut Shard,
    ctx: &mut Ctx,
    key: &[u8],
    values: impl Iterator<Item = impl AsRef<[u8]>>,
    head: bool,
    only_if_exists: bool,
) -> Option<usize> {
    let fill = fill(s);
    let depth = s.config.list_compress_depth;
    let list = match lookup(s, ctx, key) {
        Err(()) => return None,
        Ok(Some(l)) => l,
        Ok(None) if only_if_exists => return Some(0),
        Ok(None) => {
            // The depth is the list's own from now on, as Redis sets it
            // when the quicklist is made (quicklistSetOptions).
            let list = List::with_depth(depth);
            let entry = s.dbs[ctx.db].set(key, Value::List(Box::new(list)), Ttl::Clear, ctx.now);
            match &mut entry.value {
                Value::List(l) => l,
                _ => return None,
            }
        }
    };
    for v in values {
        if head {
            list.push_front(v.as_ref(), fill);
        } else {
            list.push_back(v.as_ref(), fill);
        }
    }
    let len = list.len();
    s.signal_ready(ctx.db, key);
    s.notify(notify::LIST, if head { "lpush" } else { "rpush" }, ctx.db, key);
    Some(len)
}

fn push_command(s: &mut Shard, ctx: &mut Ctx, args: Args, head: bool, only_if_exists: bool) {
    if let Some(len) = push(s, ctx, args.get(1), args.iter().skip(2), head, only_if_exists) {
        ctx.reply.int(len as i64);
    }
}

pub fn lpush(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    push_command(s, ctx, args, true, false)
}

pub fn rpush(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    push_command(s, ctx, args, false, false)
}

pub fn lpushx(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    push_command(s, ctx, args, true, true)
}

pub fn rpushx(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    push_command(s, ctx, args, false, true)
}

/// Pops up to `count` elements from one end (`None`: the single-element
/// form). Replies and returns false when there was nothing to pop, so a
/// blocking caller knows to wait instead.
fn pop_reply(s: &mut Shard, ctx: &mut Ctx, key: &[u8], head: bool, count: Option<usize>, nil_if_missing: bool) -> bool {
    let list = match lookup(s, ctx, key) {
        Err(()) => return true,
        Ok(None) => {
            if nil_if_missing {
                match count {
                    Some(_) => ctx.reply.null_array(),
                    None => ctx.reply.null(),
                }
            }
            return false;
        }
        Ok(Some(l)) => l,
    };
    match count {
        None => match if head { list.pop_front() } else { list.pop_back() } {
            Some(v) => ctx.reply.bulk(&v),
            None => ctx.reply.null(),
        },
        Some(n) => {
            let n = n.min(list.len());
            ctx.reply.array(n);
            for _ in 0..n {
                if let Some(v) = if head { list.pop_front() } else { list.pop_back() } {
                    ctx.reply.bulk(&v);
                }
            }
            if n == 0 {
                return true;
            }
        }
    }
    popped(s, ctx, key, head);
    true
}

fn pop_command(s: &mut Shard, ctx: &mut Ctx, args: Args, head: bool) {
    let count = if args.len() == 3 {
        // Redis's getPositiveLong: one message for negative and non-numeric.
        match parse_i64(args.get(2)) {
            Some(n) if n >= 0 => Some(n as usize),
            _ => return ctx.reply.error(OUT_OF_RANGE),
        }
    } else if args.len() > 3 {
        return ctx.reply.error(&super::arity_error(if head { "lpop" } else { "rpop" }));
    } else {
        None
    };
    pop_reply(s, ctx, args.get(1), head, count, true);
}

pub fn lpop(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    pop_command(s, ctx, args, true)
}

pub fn rpop(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    pop_command(s, ctx, args, false)
}

pub fn llen(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    if let Ok(l) = lookup(s, ctx, args.get(1)) {
        ctx.reply.int(l.map_or(0, |l| l.len()) as i64);
    }
}

/// Redis's index normalisation for LRANGE/LTRIM: `None` for an empty range.
fn normalize_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 { (len + start).max(0) } else { start };
    let end = if end < 0 { len + end } else { end };
    if start > end || start >= len {
        return None;
    }
    Some((start as usize, end.min(len - 1) as usize))
}

pub fn lrange(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let (Some(start), Some(end)) = (parse_i64(args.get(2)), parse_i64(args.get(3))) else {
        return ctx.reply.error(NOT_INTEGER);
    };
    let Ok(found) = lookup(s, ctx, args.get(1)) else { return };
    match found.and_then(|l| normalize_range(start, end, l.len()).map(|r| (l, r))) {
        None => ctx.reply.array(0),
        Some((l, (a, b))) => {
            ctx.reply.array(b - a + 1);
            let (mut left, mut scratch) = (b - a + 1, itoa::Buffer::new());
            l.walk(a, false, |item| {
                ctx.reply.bulk(item.bytes(&mut scratch));
                left -= 1;
                left > 0
            });
        }
    }
}

/// A list index from a command argument, normalised from the end.
fn index_of(i: i64, len: usize) -> Option<usize> {
    let i = if i < 0 { len as i64 + i } else { i };
    (0..len as i64).contains(&i).then_some(i as usize)
}

pub fn lindex(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let list = match lookup(s, ctx, args.get(1)) {
        Err(()) => return,
        Ok(None) => return ctx.reply.null(),
        Ok(Some(l)) => l,
    };
    let Some(i) = parse_i64(args.get(2)) else {
        return ctx.reply.error(NOT_INTEGER);
    };
    let reply = &mut ctx.reply;
    let found =
        index_of(i, list.len()).and_then(|i| list.get(i, |item| reply.bulk(item.bytes(&mut itoa::Buffer::new()))));
    if found.is_none() {
        ctx.reply.null();
    }
}

pub fn lset(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let list = match lookup(s, ctx, args.get(1)) {
        Err(()) => return,
        Ok(None) => return ctx.reply.error(NO_SUCH_KEY),
        Ok(Some(l)) => l,
    };
    let Some(i) = parse_i64(args.get(2)) else {
        return ctx.reply.error(NOT_INTEGER);
    };
    match index_of(i, list.len()) {
        Some(i) if list.set(i, args.get(3)) => {
            ctx.reply.ok();
            s.notify(notify::LIST, "lset", ctx.db, args.get(1));
        }
        _ => ctx.reply.error("ERR index out of range"),
    }
}

pub fn linsert(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let before = if args.is(2, "before") {
        true
    } else if args.is(2, "after") {
        false
    } else {
        return ctx.reply.error(SYNTAX);
    };
    let fill = fill(s);
    let list = match lookup(s, ctx, args.get(1)) {
        Err(()) => return,
        Ok(None) => return ctx.reply.int(0),
        Ok(Some(l)) => l,
    };
    if list.insert(args.get(3), before, args.get(4), fill) {
        let len = list.len();
        ctx.reply.int(len as i64);
        s.notify(notify::LIST, "linsert", ctx.db, args.get(1));
    } else {
        ctx.reply.int(-1)
    }
}

pub fn lrem(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let Some(count) = parse_i64(args.get(2)) else {
        return ctx.reply.error(NOT_INTEGER);
    };
    let list = match lookup(s, ctx, args.get(1)) {
        Err(()) => return,
        Ok(None) => return ctx.reply.int(0),
        Ok(Some(l)) => l,
    };
    let removed = list.remove(count, args.get(3));
    if removed > 0 {
        s.notify(notify::LIST, "lrem", ctx.db, args.get(1));
        drop_if_empty(s, ctx, args.get(1));
    }
    ctx.reply.int(removed as i64);
}

pub fn ltrim(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let (Some(start), Some(end)) = (parse_i64(args.get(2)), parse_i64(args.get(3))) else {
        return ctx.reply.error(NOT_INTEGER);
    };
    let list = match lookup(s, ctx, args.get(1)) {
        Err(()) => return,
        Ok(None) => return ctx.reply.ok(),
        Ok(Some(l)) => l,
    };
    let keep = normalize_range(start, end, list.len());
    if keep != Some((0, list.len().saturating_sub(1))) {
        list.trim(keep);
    }
    s.notify(notify::LIST, "ltrim", ctx.db, args.get(1));
    drop_if_empty(s, ctx, args.get(1));
    ctx.reply.ok();
}

pub fn lpos(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let (mut rank, mut count, mut maxlen) = (1i64, None, 0usize);
    let mut j = 3;
    while j < args.len() {
        let has_value = j + 1 < args.len();
        let value = if has_value { parse_i64(args.get(j + 1)) } else { None };
        if args.is(j, "rank") && has_value {
            match value {
                None => return ctx.reply.error(NOT_INTEGER),
                Some(0) => return ctx.reply.error("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list"),
                Some(r) => rank = r,
            }
        } else if args.is(j, "count") && has_value {
            match value {
                None => return ctx.reply.error(NOT_INTEGER),
                Some(c) if c < 0 => return ctx.reply.error("ERR COUNT can't be negative"),
                Some(c) => count = Some(c as usize),
            }
        } else if args.is(j, "maxlen") && has_value {
            match value {
                None => return ctx.reply.error(NOT_INTEGER),
                Some(m) if m < 0 => return ctx.reply.error("ERR MAXLEN can't be negative"),
                Some(m) => maxlen = m as usize,
            }
        } else {
            return ctx.reply.error(SYNTAX);
        }
        j += 2;
    }
    let list = match lookup(s, ctx, args.get(1)) {
        Err(()) => return,
        Ok(l) => l,
    };
    let target = crate::types::pack::Item::arg(args.get(2));
    let mut found = Vec::new();
    if let Some(list) = list {
        let len = list.len();
        let limit = if maxlen == 0 { len } else { maxlen.min(len) };
        let want = count.map_or(1, |c| if c == 0 { usize::MAX } else { c });
        let mut skip = rank.unsigned_abs().saturating_sub(1);
        let mut visit = |i: usize, e: crate::types::pack::Item| {
            if e == target {
                if skip > 0 {
                    skip -= 1;
                } else {
                    found.push(i);
                }
            }
            found.len() < want
        };
        if limit > 0 {
            // `seen` elements compared so far, at most `limit`.
            let mut seen = 0;
            let (from, rev) = if rank > 0 { (0, false) } else { (len - 1, true) };
            list.walk(from, rev, |e| {
                let i = if rev { len - 1 - seen } else { seen };
                seen += 1;
                visit(i, e) && seen < limit
            });
        }
    }
    match count {
        None => match found.first() {
            Some(&i) => ctx.reply.int(i as i64),
            None => ctx.reply.null(),
        },
        Some(_) => {
            ctx.reply.array(found.len());
            for i in found {
                ctx.reply.int(i as i64);
            }
        }
    }
}

/// LEFT/RIGHT as "from the head".
pub fn parse_side(arg: &[u8]) -> Option<bool> {
    if arg.eq_ignore_ascii_case(b"left") {
        Some(true)
    } else if arg.eq_ignore_ascii_case(b"right") {
        Some(false)
    } else {
        None
    }
}

/// The error of a step that already wrote its error reply.
#[derive(Debug)]
pub struct Replied;

/// The element LMOVE takes from `src`: `Ok(None)` when `src` is missing
/// or empty; `Err` once a WRONGTYPE (src or dst) was replied. Checks both
/// types before removing anything, as Redis does. The caller pushes the
/// element, then calls [`lmove_taken`] (Redis's order of events; an empty
/// `src` is deleted there).
pub fn lmove_take(
    s: &mut Shard,
    ctx: &mut Ctx,
    src: &[u8],
    dst: Option<&[u8]>,
    from_head: bool,
) -> Result<Option<Vec<u8>>, Replied> {
    match lookup(s, ctx, src).map_err(|()| Replied)? {
        None => return Ok(None),
        Some(l) if l.is_empty() => return Ok(None),
        Some(_) => {}
    }
    if let Some(dst) = dst {
        if !matches!(s.dbs[ctx.db].peek(dst, ctx.now).map(|e| &e.value), None | Some(Value::List(_))) {
            ctx.reply.error(WRONGTYPE);
            return Err(Replied);
        }
    }
    let Ok(Some(list)) = lookup(s, ctx, src) else { return Ok(None) };
    let v = if from_head { list.pop_front() } else { list.pop_back() };
    Ok(v)
}

/// After LMOVE's push: the source's `lpop`/`rpop`, and its deletion when
/// empty.
pub fn lmove_taken(s: &mut Shard, ctx: &Ctx, src: &[u8], from_head: bool) {
    popped(s, ctx, src, from_head);
}

/// Pushes one element for LMOVE's destination; false when `dst` holds
/// another type (the caller checked it earlier, but a cross-shard move may
/// race a write).
pub fn lmove_put(s: &mut Shard, db: usize, now: u64, dst: &[u8], value: &[u8], to_head: bool) -> bool {
    let mut discard = Vec::new();
    let mut ctx = Ctx { db, now, reply: Reply::new(&mut discard, false) };
    push(s, &mut ctx, dst, std::iter::once(value), to_head, false).is_some()
}

/// One LMOVE attempt: replies and returns true when something moved (or on
/// an error); false and no reply when `src` is empty (a blocking caller
/// waits, LMOVE answers nil).
pub fn try_lmove(s: &mut Shard, ctx: &mut Ctx, src: &[u8], dst: &[u8], from_head: bool, to_head: bool) -> bool {
    match lmove_take(s, ctx, src, Some(dst), from_head) {
        Err(Replied) => true,
        Ok(None) => false,
        Ok(Some(v)) => {
            lmove_put(s, ctx.db, ctx.now, dst, &v, to_head);
            lmove_taken(s, ctx, src, from_head);
            ctx.reply.bulk(&v);
            true
        }
    }
}

pub fn lmove(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let (Some(from), Some(to)) = (parse_side(args.get(3)), parse_side(args.get(4))) else {
        return ctx.reply.error(SYNTAX);
    };
    if !try_lmove(s, ctx, args.get(1), args.get(2), from, to) {
        ctx.reply.null();
    }
}

pub fn rpoplpush(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    if !try_lmove(s, ctx, args.get(1), args.get(2), false, true) {
        ctx.reply.null();
    }
}

/// Parsed `[numkeys key...] LEFT|RIGHT [COUNT n]` of LMPOP/BLMPOP, starting
/// at the numkeys argument.
pub struct MultiPop {
    pub keys: std::ops::Range<usize>,
    pub from_head: bool,
    pub count: usize,
}

pub fn parse_mpop(args: &Args, at: usize, sides: fn(&[u8]) -> Option<bool>) -> Result<MultiPop, &'static str> {
    let numkeys = match parse_i64(args.get(at)) {
        Some(n) if n > 0 => n as usize,
        _ => return Err("ERR numkeys should be greater than 0"),
    };
    let first = at + 1;
    let side_at = first.checked_add(numkeys).filter(|&i| i < args.len()).ok_or(SYNTAX)?;
    let from_head = sides(args.get(side_at)).ok_or(SYNTAX)?;
    let (mut count, mut counted) = (1, false);
    let mut j = side_at + 1;
    while j < args.len() {
        if args.is(j, "count") && j + 1 < args.len() && !counted {
            counted = true;
            count = match parse_i64(args.get(j + 1)) {
                Some(n) if n > 0 => n as usize,
                _ => return Err("ERR count should be greater than 0"),
            };
            j += 2;
        } else {
            return Err(SYNTAX);
        }
    }
    Ok(MultiPop { keys: first..side_at, from_head, count })
}

/// One LMPOP attempt on the keys of this shard: replies `[key, [elements]]`
/// and returns true when one of them had elements (or on WRONGTYPE).
pub fn try_mpop(s: &mut Shard, ctx: &mut Ctx, keys: &[&[u8]], from_head: bool, count: usize) -> bool {
    for key in keys {
        let list = match lookup(s, ctx, key) {
            Err(()) => return true,
            Ok(None) => continue,
            Ok(Some(l)) if l.is_empty() => continue,
            Ok(Some(l)) => l,
        };
        let n = count.min(list.len());
        ctx.reply.array(2);
        ctx.reply.bulk(key);
        ctx.reply.array(n);
        for _ in 0..n {
            if let Some(v) = if from_head { list.pop_front() } else { list.pop_back() } {
                ctx.reply.bulk(&v);
            }
        }
        popped(s, ctx, key, from_head);
        return true;
    }
    false
}

pub fn lmpop(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let mp = match parse_mpop(&args, 1, parse_side) {
        Ok(mp) => mp,
        Err(e) => return ctx.reply.error(e),
    };
    let keys: Vec<&[u8]> = mp.keys.map(|i| args.get(i)).collect();
    if !try_mpop(s, ctx, &keys, mp.from_head, mp.count) {
        ctx.reply.null_array();
    }
}

/// One BLPOP/BRPOP attempt over the keys (all on this shard): replies
/// `[key, element]` and returns true when one had an element.
pub fn try_bpop(s: &mut Shard, ctx: &mut Ctx, keys: &[&[u8]], from_head: bool) -> bool {
    for key in keys {
        match lookup(s, ctx, key) {
            Err(()) => return true,
            Ok(Some(l)) if !l.is_empty() => {
                let v = if from_head { l.pop_front() } else { l.pop_back() };
                if let Some(v) = v {
                    ctx.reply.array(2);
                    ctx.reply.bulk(key);
                    ctx.reply.bulk(&v);
                }
                popped(s, ctx, key, from_head);
                return true;
            }
            _ => {}
        }
    }
    false
}

pub static COMMANDS: &[CommandSpec] = &[
    cmd!("lpush", -3, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(lpush)),
    cmd!("rpush", -3, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(rpush)),
    cmd!("lpushx", -3, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(lpushx)),
    cmd!("rpushx", -3, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(rpushx)),
    cmd!("lpop", -2, WRITE | FAST, KEY1, Keyed, Some(lpop)),
    cmd!("rpop", -2, WRITE | FAST, KEY1, Keyed, Some(rpop)),
    cmd!("llen", 2, READONLY | FAST, KEY1, Keyed, Some(llen)),
    cmd!("lrange", 4, READONLY, KEY1, Keyed, Some(lrange)),
    cmd!("lindex", 3, READONLY, KEY1, Keyed, Some(lindex)),
    cmd!("lset", 4, WRITE | DENYOOM, KEY1, Keyed, Some(lset)),
    cmd!("linsert", 5, WRITE | DENYOOM, KEY1, Keyed, Some(linsert)),
    cmd!("lrem", 4, WRITE, KEY1, Keyed, Some(lrem)),
    cmd!("ltrim", 4, WRITE, KEY1, Keyed, Some(ltrim)),
    cmd!("lpos", -3, READONLY, KEY1, Keyed, Some(lpos)),
    cmd!("lmove", 5, WRITE | DENYOOM, KEYS12, Keyed, Some(lmove)),
    cmd!("rpoplpush", 3, WRITE | DENYOOM, KEYS12, Keyed, Some(rpoplpush)),
    cmd!("lmpop", -4, WRITE, NOKEYS, Keyed, Some(lmpop)).with_keynum(1, 2),
    cmd!("blpop", -3, WRITE | NOSCRIPT, (1, -2, 1), Proxy, None),
    cmd!("brpop", -3, WRITE | NOSCRIPT, (1, -2, 1), Proxy, None),
    cmd!("blmove", 6, WRITE | DENYOOM | NOSCRIPT, KEYS12, Proxy, None),
    cmd!("brpoplpush", 4, WRITE | DENYOOM | NOSCRIPT, KEYS12, Proxy, None),
    cmd!("blmpop", -5, WRITE | NOSCRIPT, NOKEYS, Proxy, None).with_keynum(2, 3),
];
