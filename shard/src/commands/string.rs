//! String commands: GET SET and friends, counters, ranges.

use super::prelude::*;
use super::Ctx;
use crate::args::{parse_i64, Args};
use crate::db::Ttl;
use crate::notify;
use crate::numbers::{incr_by_float, IncrFloatError};
use crate::reply::errors::*;
use crate::shard::Shard;
use crate::value::Value;

/// Replies with a string value, or WRONGTYPE.
fn reply_string(ctx: &mut Ctx, value: &Value) {
    let mut scratch = itoa::Buffer::new();
    match value.string_bytes(&mut scratch) {
        Some(b) if value.is_string() => ctx.reply.bulk(b),
        _ => ctx.reply.error(WRONGTYPE),
    }
}

pub fn get(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    match s.dbs[ctx.db].get(args.get(1), ctx.now) {
        Some(e) => {
            s.stats.keyspace_hits += 1;
            reply_string(ctx, &e.value)
        }
        None => {
            s.stats.keyspace_misses += 1;
            ctx.reply.null();
            s.notify(notify::KEY_MISS, "keymiss", ctx.db, args.get(1));
        }
    }
}

/// Options shared by SET and GETEX (Redis's parseExtendedStringArguments).
#[derive(Default)]
struct SetOptions<'a> {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    persist: bool,
    /// (argument, in milliseconds?, absolute?)
    expire: Option<(&'a [u8], bool, bool)>,
}

fn parse_set_options<'a>(args: &Args<'a>, from: usize, is_set: bool) -> Result<SetOptions<'a>, ()> {
    let mut o = SetOptions::default();
    let mut j = from;
    while j < args.len() {
        let has_next = j + 1 < args.len();
        let no_expire = o.expire.is_none();
        let expire_kind = |name| o.expire.is_none_or(|(_, ms, abs)| (ms, abs) == name);
        if args.is(j, "nx") && !o.xx && is_set {
            o.nx = true;
        } else if args.is(j, "xx") && !o.nx && is_set {
            o.xx = true;
        } else if args.is(j, "get") && is_set {
            o.get = true;
        } else if args.is(j, "keepttl") && !o.persist && no_expire && is_set {
            o.keepttl = true;
        } else if args.is(j, "persist") && !is_set && no_expire && !o.keepttl {
            o.persist = true;
        } else if !o.keepttl
            && !o.persist
            && has_next
            && (args.is(j, "ex") || args.is(j, "px") || args.is(j, "exat") || args.is(j, "pxat"))
        {
            let kind = (args.is(j, "px") || args.is(j, "pxat"), args.is(j, "exat") || args.is(j, "pxat"));
            // Redis lets the same option repeat (last wins) but not mix.
            if !expire_kind(kind) {
                return Err(());
            }
            o.expire = Some((args.get(j + 1), kind.0, kind.1));
            j += 1;
        } else {
            return Err(());
        }
        j += 1;
    }
    Ok(o)
}

/// Absolute expiry in ms from an EX/PX/EXAT/PXAT argument, or the error text.
fn expire_at(arg: &[u8], millis: bool, absolute: bool, now: u64, cmd: &str) -> Result<u64, String> {
    let n = parse_i64(arg).ok_or_else(|| NOT_INTEGER.to_string())?;
    let invalid = || format!("ERR invalid expire time in '{cmd}' command");
    if n <= 0 || (!millis && n > i64::MAX / 1000) {
        return Err(invalid());
    }
    let ms = if millis { n } else { n * 1000 };
    let at = if absolute { Some(ms) } else { ms.checked_add(now as i64) };
    match at {
        Some(at) if at > 0 => Ok(at as u64),
        _ => Err(invalid()),
    }
}

/// Replies with the current string value for SET ... GET / GETSET; false when
/// the key holds another type (WRONGTYPE already sent).
fn reply_old(s: &mut Shard, ctx: &mut Ctx, key: &[u8]) -> bool {
    match s.dbs[ctx.db].get(key, ctx.now) {
        None => ctx.reply.null(),
        Some(e) if e.value.is_string() => reply_string(ctx, &e.value),
        Some(_) => {
            ctx.reply.error(WRONGTYPE);
            return false;
        }
    }
    true
}

pub fn set(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let Ok(o) = parse_set_options(&args, 3, true) else {
        return ctx.reply.error(SYNTAX);
    };
    let ttl = match o.expire {
        Some((arg, ms, abs)) => match expire_at(arg, ms, abs, ctx.now, "set") {
            Ok(at) => Ttl::At(at),
            Err(e) => return ctx.reply.error(&e),
        },
        None if o.keepttl => Ttl::Keep,
        None => Ttl::Clear,
    };
    let key = args.get(1);
    if o.get && !reply_old(s, ctx, key) {
        return;
    }
    if o.nx || o.xx {
        let found = s.dbs[ctx.db].contains(key, ctx.now);
        if (o.nx && found) || (o.xx && !found) {
            if !o.get {
                ctx.reply.null();
            }
            return;
        }
    }
    s.dbs[ctx.db].set_string(key, args.get(2), ttl, ctx.now);
    notify_set(s, ctx.db, key, o.expire.is_some());
    if !o.get {
        ctx.reply.ok();
    }
}

/// `set`, then `expire` when the command gave a time (setGenericCommand).
fn notify_set(s: &mut Shard, db: usize, key: &[u8], expire: bool) {
    s.notify(notify::STRING, "set", db, key);
    if expire {
        s.notify(notify::GENERIC, "expire", db, key);
    }
}

pub fn setnx(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let db = &mut s.dbs[ctx.db];
    if db.contains(args.get(1), ctx.now) {
        return ctx.reply.int(0);
    }
    db.set_string(args.get(1), args.get(2), Ttl::Clear, ctx.now);
    s.notify(notify::STRING, "set", ctx.db, args.get(1));
    ctx.reply.int(1);
}

fn set_with_expire(s: &mut Shard, ctx: &mut Ctx, args: Args, millis: bool, cmd: &str) {
    match expire_at(args.get(2), millis, false, ctx.now, cmd) {
        Ok(at) => {
            s.dbs[ctx.db].set_string(args.get(1), args.get(3), Ttl::At(at), ctx.now);
            notify_set(s, ctx.db, args.get(1), true);
            ctx.reply.ok();
        }
        Err(e) => ctx.reply.error(&e),
    }
}

pub fn setex(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    set_with_expire(s, ctx, args, false, "setex")
}

pub fn psetex(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    set_with_expire(s, ctx, args, true, "psetex")
}

pub fn getset(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    if reply_old(s, ctx, args.get(1)) {
        s.dbs[ctx.db].set_string(args.get(1), args.get(2), Ttl::Clear, ctx.now);
        s.notify(notify::STRING, "set", ctx.db, args.get(1));
    }
}

pub fn getdel(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    if reply_old(s, ctx, args.get(1)) && s.dbs[ctx.db].remove(args.get(1), ctx.now).is_some() {
        s.notify(notify::GENERIC, "del", ctx.db, args.get(1));
    }
}

pub fn getex(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let Ok(o) = parse_set_options(&args, 2, false) else {
        return ctx.reply.error(SYNTAX);
    };
    let key = args.get(1);
    let db = &mut s.dbs[ctx.db];
    let Some(entry) = db.get(key, ctx.now) else {
        return ctx.reply.null();
    };
    if !entry.value.is_string() {
        return ctx.reply.error(WRONGTYPE);
    }
    let at = match o.expire {
        Some((arg, ms, abs)) => match expire_at(arg, ms, abs, ctx.now, "getex") {
            Ok(at) => Some((at, abs)),
            Err(e) => return ctx.reply.error(&e),
        },
        None => None,
    };
    reply_string(ctx, &entry.value);
    let had_ttl = entry.expire_at().is_some();
    let event = match at {
        Some((at, true)) if at <= ctx.now => {
            db.remove(key, ctx.now);
            (notify::GENERIC, "del")
        }
        Some((at, _)) => {
            db.set_expire(key, Some(at), ctx.now);
            (notify::GENERIC, "expire")
        }
        None if o.persist && had_ttl => {
            db.set_expire(key, None, ctx.now);
            (notify::GENERIC, "persist")
        }
        None => return,
    };
    s.notify(event.0, event.1, ctx.db, key);
}

pub fn mget(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    ctx.reply.array(args.len() - 1);
    for key in args.iter().skip(1) {
        match s.dbs[ctx.db].get(key, ctx.now) {
            Some(e) if e.value.is_string() => {
                s.stats.keyspace_hits += 1;
                reply_string(ctx, &e.value)
            }
            Some(_) => ctx.reply.null(),
            None => {
                s.stats.keyspace_misses += 1;
                ctx.reply.null();
                s.notify(notify::KEY_MISS, "keymiss", ctx.db, key);
            }
        }
    }
}

pub fn mset(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    if args.len().is_multiple_of(2) {
        return ctx.reply.error(&super::arity_error("mset"));
    }
    for i in (1..args.len()).step_by(2) {
        s.dbs[ctx.db].set_string(args.get(i), args.get(i + 1), Ttl::Clear, ctx.now);
        s.notify(notify::STRING, "set", ctx.db, args.get(i));
    }
    ctx.reply.ok();
}

/// MSETNX on one shard (all keys local). The proxy runs the cross-shard form.
pub fn msetnx(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    if args.len().is_multiple_of(2) {
        return ctx.reply.error(&super::arity_error("msetnx"));
    }
    let db = &mut s.dbs[ctx.db];
    if (1..args.len()).step_by(2).any(|i| db.contains(args.get(i), ctx.now)) {
        return ctx.reply.int(0);
    }
    for i in (1..args.len()).step_by(2) {
        s.dbs[ctx.db].set_string(args.get(i), args.get(i + 1), Ttl::Clear, ctx.now);
        s.notify(notify::STRING, "set", ctx.db, args.get(i));
    }
    ctx.reply.int(1);
}

fn check_length(s: &Shard, total: u64) -> Result<(), &'static str> {
    if total > s.config.proto_max_bulk_len {
        Err(STRING_TOO_LONG)
    } else {
        Ok(())
    }
}

pub fn append(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let (key, tail) = (args.get(1), args.get(2));
    let max = s.config.proto_max_bulk_len;
    let db = &mut s.dbs[ctx.db];
    match db.get(key, ctx.now) {
        None => {
            let v = Value::from_bytes_encoded(tail);
            db.set(key, v, Ttl::Clear, ctx.now);
            ctx.reply.int(tail.len() as i64)
        }
        Some(e) => {
            if !e.value.is_string() {
                return ctx.reply.error(WRONGTYPE);
            }
            let len = e.value.string_len().unwrap_or(0);
            if (len + tail.len()) as u64 > max {
                return ctx.reply.error(STRING_TOO_LONG);
            }
            let raw = e.value.make_raw().expect("string checked above"); // ok: is_string
            raw.extend_from_slice(tail);
            ctx.reply.int(raw.len() as i64)
        }
    }
    s.notify(notify::STRING, "append", ctx.db, key);
}

pub fn strlen(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    match s.dbs[ctx.db].get(args.get(1), ctx.now) {
        None => ctx.reply.int(0),
        Some(e) if e.value.is_string() => ctx.reply.int(e.value.string_len().unwrap_or(0) as i64),
        Some(_) => ctx.reply.error(WRONGTYPE),
    }
}

pub fn getrange(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let (Some(mut start), Some(mut end)) = (parse_i64(args.get(2)), parse_i64(args.get(3))) else {
        return ctx.reply.error(NOT_INTEGER);
    };
    let Some(e) = s.dbs[ctx.db].get(args.get(1), ctx.now) else {
        return ctx.reply.bulk(b"");
    };
    let mut scratch = itoa::Buffer::new();
    let Some(bytes) = e.value.string_bytes(&mut scratch).filter(|_| e.value.is_string()) else {
        return ctx.reply.error(WRONGTYPE);
    };
    let len = bytes.len() as i64;
    if start < 0 && end < 0 && start > end {
        return ctx.reply.bulk(b"");
    }
    if start < 0 {
        start += len;
    }
    if end < 0 {
        end += len;
    }
    start = start.max(0);
    end = end.max(0);
    if end >= len {
        end = len - 1;
    }
    if start > end || len == 0 {
        ctx.reply.bulk(b"")
    } else {
        ctx.reply.bulk(&bytes[start as usize..=end as usize])
    }
}

pub fn setrange(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let Some(offset) = parse_i64(args.get(2)) else {
        return ctx.reply.error(NOT_INTEGER);
    };
    if offset < 0 {
        return ctx.reply.error("ERR offset is out of range");
    }
    let (key, patch) = (args.get(1), args.get(3));
    let offset = offset as u64;
    let too_long = check_length(s, offset + patch.len() as u64);
    let db = &mut s.dbs[ctx.db];
    let raw = match db.get(key, ctx.now) {
        None => {
            if patch.is_empty() {
                return ctx.reply.int(0);
            }
            if let Err(e) = too_long {
                return ctx.reply.error(e);
            }
            let entry = db.set(key, Value::Raw(Box::default()), Ttl::Clear, ctx.now);
            entry.value.make_raw().expect("just created raw") // ok: Raw
        }
        Some(e) => {
            if !e.value.is_string() {
                return ctx.reply.error(WRONGTYPE);
            }
            if patch.is_empty() {
                return ctx.reply.int(e.value.string_len().unwrap_or(0) as i64);
            }
            if let Err(err) = too_long {
                return ctx.reply.error(err);
            }
            e.value.make_raw().expect("string checked above") // ok: is_string
        }
    };
    let end = offset as usize + patch.len();
    crate::value::grow_zeroed(raw, end);
    raw[offset as usize..end].copy_from_slice(patch);
    ctx.reply.int(raw.len() as i64);
    s.notify(notify::STRING, "setrange", ctx.db, key);
}

fn incr_by(s: &mut Shard, ctx: &mut Ctx, key: &[u8], delta: i64) {
    let db = &mut s.dbs[ctx.db];
    match db.get(key, ctx.now) {
        None => {
            db.set(key, Value::Int(delta), Ttl::Clear, ctx.now);
            ctx.reply.int(delta)
        }
        Some(e) => {
            let current = match &e.value {
                Value::Int(n) => Some(*n),
                Value::Emb(b) => parse_i64(b),
                Value::Long(b) => parse_i64(b),
                Value::Raw(v) => parse_i64(v),
                _ => return ctx.reply.error(WRONGTYPE),
            };
            let Some(current) = current else {
                return ctx.reply.error(NOT_INTEGER);
            };
            let Some(next) = current.checked_add(delta) else {
                return ctx.reply.error(OVERFLOW);
            };
            // In place: the key keeps its TTL, as Redis's dbOverwrite does.
            e.value = Value::Int(next);
            ctx.reply.int(next)
        }
    }
    s.notify(notify::STRING, "incrby", ctx.db, key);
}

pub fn incr(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    incr_by(s, ctx, args.get(1), 1)
}

pub fn decr(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    incr_by(s, ctx, args.get(1), -1)
}

pub fn incrby(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    match parse_i64(args.get(2)) {
        Some(d) => incr_by(s, ctx, args.get(1), d),
        None => ctx.reply.error(NOT_INTEGER),
    }
}

pub fn decrby(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    match parse_i64(args.get(2)) {
        Some(i64::MIN) => ctx.reply.error("ERR decrement would overflow"),
        Some(d) => incr_by(s, ctx, args.get(1), -d),
        None => ctx.reply.error(NOT_INTEGER),
    }
}

pub fn incrbyfloat(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let key = args.get(1);
    let db = &mut s.dbs[ctx.db];
    let mut scratch = itoa::Buffer::new();
    let result = match db.get(key, ctx.now) {
        None => incr_by_float(None, args.get(2)),
        Some(e) if e.value.is_string() => incr_by_float(e.value.string_bytes(&mut scratch), args.get(2)),
        Some(_) => return ctx.reply.error(WRONGTYPE),
    };
    match result {
        Ok(text) => {
            ctx.reply.bulk(&text);
            db.set(key, Value::from_bytes(&text), Ttl::Keep, ctx.now);
            s.notify(notify::STRING, "incrbyfloat", ctx.db, key);
        }
        Err(IncrFloatError::NotFloat) => ctx.reply.error(NOT_FLOAT),
        Err(IncrFloatError::NanOrInfinity) => ctx.reply.error("ERR increment would produce NaN or Infinity"),
    }
}

/// The string commands.
pub static COMMANDS: &[CommandSpec] = &[
    cmd!("get", 2, READONLY | FAST, KEY1, Keyed, Some(get)),
    cmd!("set", -3, WRITE | DENYOOM, KEY1, Keyed, Some(set)),
    cmd!("setnx", 3, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(setnx)),
    cmd!("setex", 4, WRITE | DENYOOM, KEY1, Keyed, Some(setex)),
    cmd!("psetex", 4, WRITE | DENYOOM, KEY1, Keyed, Some(psetex)),
    cmd!("getset", 3, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(getset)),
    cmd!("getdel", 2, WRITE | FAST, KEY1, Keyed, Some(getdel)),
    cmd!("getex", -2, WRITE | FAST, KEY1, Keyed, Some(getex)),
    cmd!("mget", -2, READONLY | FAST, ALLKEYS, SplitKeys(ByKey), Some(mget)),
    cmd!("mset", -3, WRITE | DENYOOM, PAIRS, SplitKeys(AllOk), Some(mset)),
    cmd!("msetnx", -3, WRITE | DENYOOM, PAIRS, Proxy, Some(msetnx)),
    cmd!("append", 3, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(append)),
    cmd!("strlen", 2, READONLY | FAST, KEY1, Keyed, Some(strlen)),
    cmd!("getrange", 4, READONLY, KEY1, Keyed, Some(getrange)),
    cmd!("setrange", 4, WRITE | DENYOOM, KEY1, Keyed, Some(setrange)),
    cmd!("incr", 2, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(incr)),
    cmd!("decr", 2, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(decr)),
    cmd!("incrby", 3, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(incrby)),
    cmd!("decrby", 3, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(decrby)),
    cmd!("incrbyfloat", 3, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(incrbyfloat)),
];
