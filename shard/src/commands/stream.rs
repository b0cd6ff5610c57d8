//! Stream commands (Redis 7.0's t_stream.c): XADD, XRANGE, XREVRANGE,
//! XLEN, XDEL, XTRIM, XSETID here; consumer groups (XGROUP, XACK,
//! XPENDING, XCLAIM, XAUTOCLAIM) in `stream/group.rs`; XINFO in
//! `stream/info.rs`; XREAD/XREADGROUP's shard side in `stream/read.rs`
//! (the proxy routes them: proxy/src/commands/stream.rs).
//!
//! Writes log their own effects as Redis propagates them (XADD with the ID
//! it picked and an exact trim, XREADGROUP as XCLAIMs...); `propagate.rs`
//! leaves stream commands to them. They raise t_stream.c's keyspace events
//! (class `t`) where and in the order Redis does.

pub mod group;
pub mod info;
pub mod read;

use super::prelude::*;
use super::Ctx;
use crate::args::{parse_i64, Args};
use crate::db::{Db, Ttl};
use crate::notify;
use crate::reply::errors::*;
use crate::reply::Reply;
use crate::shard::Shard;
use crate::types::pack::Item;
use crate::types::stream::{AddError, NodeLimits, Stream, StreamId, Trim, TrimArgs};
use crate::value::Value;

pub const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";

/// The key holds another type.
pub struct WrongType;

pub fn stream_mut<'a>(db: &'a mut Db, key: &[u8], now: u64) -> Result<Option<&'a mut Stream>, WrongType> {
    match db.get(key, now) {
        None => Ok(None),
        Some(e) => match &mut e.value {
            Value::Stream(s) => Ok(Some(s)),
            _ => Err(WrongType),
        },
    }
}

/// Like `stream_mut` for a read, counting the keyspace hit or miss.
pub fn stream_read<'a>(s: &'a mut Shard, db: usize, key: &[u8], now: u64) -> Result<Option<&'a mut Stream>, WrongType> {
    let Shard { dbs, stats, .. } = s;
    let found = stream_mut(&mut dbs[db], key, now);
    match &found {
        Ok(None) => stats.keyspace_misses += 1,
        _ => stats.keyspace_hits += 1,
    }
    found
}

pub fn limits(s: &Shard) -> NodeLimits {
    NodeLimits::of(&s.config)
}

/// Redis's string2ull: a canonical integer that is not negative, else
/// what strtoull accepts (spaces, a sign, leading zeros) with no overflow.
fn string2ull(s: &[u8]) -> Option<u64> {
    if let Some(n) = parse_i64(s) {
        return (n >= 0).then_some(n as u64);
    }
    let mut i = 0;
    while i < s.len() && matches!(s[i], b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c) {
        i += 1;
    }
    let neg = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    if i >= s.len() {
        return None;
    }
    let mut v: u64 = 0;
    for &c in &s[i..] {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    Some(if neg { v.wrapping_neg() } else { v })
}

/// streamGenericParseIDOrReply: `(id, seq_given)`. `strict` refuses `-`
/// and `+`; `seq_star` accepts `ms-*` (seq_given false).
pub fn parse_id(arg: &[u8], missing_seq: u64, strict: bool, seq_star: bool) -> Result<(StreamId, bool), &'static str> {
    if arg.len() > 127 {
        return Err(INVALID_ID);
    }
    if strict && (arg == b"-" || arg == b"+") {
        return Err(INVALID_ID);
    }
    if arg == b"-" {
        return Ok((StreamId::MIN, true));
    }
    if arg == b"+" {
        return Ok((StreamId::MAX, true));
    }
    // C strings end at a NUL.
    let arg = match arg.iter().position(|&b| b == 0) {
        Some(n) => &arg[..n],
        None => arg,
    };
    let (ms, seq) = match arg.iter().position(|&b| b == b'-') {
        Some(dash) => (&arg[..dash], Some(&arg[dash + 1..])),
        None => (arg, None),
    };
    let ms = string2ull(ms).ok_or(INVALID_ID)?;
    match seq {
        Some(b"*") if seq_star => Ok((StreamId::new(ms, 0), false)),
        Some(seq) => Ok((StreamId::new(ms, string2ull(seq).ok_or(INVALID_ID)?), true)),
        None => Ok((StreamId::new(ms, missing_seq), true)),
    }
}

pub fn parse_strict(arg: &[u8]) -> Result<StreamId, &'static str> {
    parse_id(arg, 0, true, false).map(|(id, _)| id)
}

/// streamParseIntervalIDOrReply: `(id, exclusive)`.
pub fn parse_interval(arg: &[u8], missing_seq: u64) -> Result<(StreamId, bool), &'static str> {
    if arg.len() > 1 && arg[0] == b'(' {
        Ok((parse_id(&arg[1..], missing_seq, true, false)?.0, true))
    } else {
        Ok((parse_id(arg, missing_seq, false, false)?.0, false))
    }
}

/// A range's start: `(` moves past it.
pub fn parse_start(arg: &[u8]) -> Result<StreamId, &'static str> {
    let (id, ex) = parse_interval(arg, 0)?;
    if ex {
        id.incr().ok_or("ERR invalid start ID for the interval")
    } else {
        Ok(id)
    }
}

pub fn parse_end(arg: &[u8]) -> Result<StreamId, &'static str> {
    let (id, ex) = parse_interval(arg, u64::MAX)?;
    if ex {
        id.decr().ok_or("ERR invalid end ID for the interval")
    } else {
        Ok(id)
    }
}

pub fn reply_id(r: &mut Reply, id: StreamId) {
    let mut b = Vec::with_capacity(24);
    id.format(&mut b);
    r.bulk(&b);
}

fn reply_item(r: &mut Reply, item: Item) {
    match item {
        Item::Str(s) => r.bulk(s),
        Item::Int(n) => r.bulk_int(n),
    }
}

/// `[id, [field, value, ...]]`.
pub fn reply_entry(r: &mut Reply, id: StreamId, fields: &[(Item, Item)]) {
    r.array(2);
    reply_id(r, id);
    r.array(fields.len() * 2);
    for (f, v) in fields {
        reply_item(r, *f);
        reply_item(r, *v);
    }
}

/// Entries `start..=end` as an array, at most `count` (0: all); the number
/// sent.
pub fn reply_range(r: &mut Reply, s: &Stream, start: StreamId, end: StreamId, count: usize, rev: bool) -> usize {
    let mut n = 0;
    let mut body = Vec::new();
    {
        let mut inner = Reply::new(&mut body, r.resp3);
        s.range(start, end, rev, |id, node, e| {
            reply_entry(&mut inner, id, &node.fields(e));
            n += 1;
            count == 0 || n < count
        });
    }
    r.array(n);
    r.raw(&body);
    n
}

/// A long long argument or Redis's error.
pub fn arg_i64(arg: &[u8]) -> Result<i64, &'static str> {
    parse_i64(arg).ok_or(NOT_INTEGER)
}

/// Parsed XADD/XTRIM options (streamParseAddOrTrimArgsOrReply).
pub struct AddTrim {
    pub trim: Option<TrimArgs>,
    /// Index of the MAXLEN/MINID threshold (for the rewrite).
    pub trim_at: usize,
    /// Index of LIMIT's keyword, if given (dropped when propagating).
    pub limit_at: Option<usize>,
    pub nomkstream: bool,
    /// XADD: the ID's index, the ID (`None`: `*`) and whether its sequence
    /// was given.
    pub id_at: usize,
    pub id: Option<(StreamId, bool)>,
}

pub fn parse_add_trim(args: &Args, xadd: bool, limits: NodeLimits) -> Result<AddTrim, &'static str> {
    let mut p = AddTrim { trim: None, trim_at: 0, limit_at: None, nomkstream: false, id_at: 0, id: None };
    let mut strategy: Option<Trim> = None;
    let mut approx = false;
    let mut limit: i64 = 0;
    let mut limit_given = false;
    let argc = args.len();
    let mut i = 2;
    while i < argc {
        let more = argc - 1 - i;
        let opt = args.get(i);
        if xadd && opt == b"*" {
            p.id_at = i;
            break;
        } else if (opt.eq_ignore_ascii_case(b"maxlen") || opt.eq_ignore_ascii_case(b"minid")) && more > 0 {
            if strategy.is_some() {
                return Err("ERR syntax error, MAXLEN and MINID options at the same time are not compatible");
            }
            approx = false;
            let next = args.get(i + 1);
            if more >= 2 && next == b"~" {
                approx = true;
                i += 1;
            } else if more >= 2 && next == b"=" {
                i += 1;
            }
            if opt.eq_ignore_ascii_case(b"maxlen") {
                let n = arg_i64(args.get(i + 1))?;
                if n < 0 {
                    return Err("ERR The MAXLEN argument must be >= 0.");
                }
                strategy = Some(Trim::MaxLen(n as u64));
            } else {
                strategy = Some(Trim::MinId(parse_strict(args.get(i + 1))?));
            }
            i += 1;
            p.trim_at = i;
        } else if opt.eq_ignore_ascii_case(b"limit") && more > 0 {
            limit = arg_i64(args.get(i + 1))?;
            if limit < 0 {
                return Err("ERR The LIMIT argument must be >= 0.");
            }
            limit_given = true;
            p.limit_at = Some(i);
            i += 1;
        } else if xadd && opt.eq_ignore_ascii_case(b"nomkstream") {
            p.nomkstream = true;
        } else if xadd {
            let (id, seq_given) = parse_id(opt, 0, true, true)?;
            p.id = Some((id, seq_given));
            p.id_at = i;
            break;
        } else {
            return Err(SYNTAX);
        }
        i += 1;
    }
    if xadd && p.id_at == 0 {
        p.id_at = i;
    }
    if limit != 0 && strategy.is_none() {
        return Err("ERR syntax error, LIMIT cannot be used without specifying a trimming strategy");
    }
    if !xadd && strategy.is_none() {
        return Err("ERR syntax error, XTRIM must be called with a trimming strategy");
    }
    if limit_given {
        if !approx {
            return Err("ERR syntax error, LIMIT cannot be used without the special ~ option");
        }
    } else if approx {
        limit = (100u64.saturating_mul(limits.max_entries)).min(i64::MAX as u64) as i64;
        if limit <= 0 {
            limit = 10000;
        }
        if limit > 1_000_000 {
            limit = 1_000_000;
        }
    } else {
        limit = 0;
    }
    p.trim = strategy.map(|trim| TrimArgs { trim, approx, limit: limit as u64 });
    Ok(p)
}

/// The propagated form of XADD/XTRIM: the ID (XADD) replaced, an
/// approximate trim made exact on what it left, LIMIT dropped.
fn rewritten(args: &Args, p: &AddTrim, s: &Stream, id: Option<StreamId>) -> Vec<Vec<u8>> {
    let approx = p.trim.is_some_and(|t| t.approx);
    let mut out = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        if Some(i) == p.limit_at {
            i += 2;
            continue;
        }
        let a = args.get(i);
        if let (Some(id), true) = (id, i == p.id_at && i >= 2) {
            out.push(id.to_bytes());
        } else if approx && i + 1 == p.trim_at && a == b"~" {
            out.push(b"=".to_vec());
        } else if approx && i == p.trim_at {
            out.push(match p.trim.map(|t| t.trim) {
                Some(Trim::MaxLen(_)) => s.length.to_string().into_bytes(),
                _ => s.first_id_any().to_bytes(),
            });
        } else {
            out.push(a.to_vec());
        }
        i += 1;
    }
    out
}

pub fn log_parts(s: &mut Shard, db: usize, parts: &[Vec<u8>]) {
    let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    s.log_effect(db, &refs);
}

fn xadd(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let limits = limits(s);
    let p = match parse_add_trim(&args, true, limits) {
        Ok(p) => p,
        Err(e) => return ctx.reply.error(e),
    };
    let field_at = p.id_at + 1;
    let nfields = args.len().saturating_sub(field_at);
    if nfields < 2 || !nfields.is_multiple_of(2) {
        return ctx.reply.error(&super::arity_error("xadd"));
    }
    if let Some((id, true)) = p.id {
        if id.is_zero() {
            return ctx.reply.error("ERR The ID specified in XADD must be greater than 0-0");
        }
    }
    let (db, key) = (ctx.db, args.get(1));
    let found = match stream_mut(&mut s.dbs[db], key, ctx.now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(found) => found.is_some(),
    };
    if !found {
        if p.nomkstream {
            return ctx.reply.null();
        }
        s.dbs[db].set(key, Value::Stream(Box::default()), Ttl::Clear, ctx.now);
    }
    let Ok(Some(stream)) = stream_mut(&mut s.dbs[db], key, ctx.now) else { return };
    if stream.last_id == StreamId::MAX {
        return ctx.reply.error("ERR The stream has exhausted the last possible ID, unable to add more items");
    }
    let fields: Vec<(&[u8], &[u8])> =
        (field_at..args.len()).step_by(2).map(|i| (args.get(i), args.get(i + 1))).collect();
    let id = match stream.append(&fields, p.id, ctx.now, limits) {
        Ok(id) => id,
        Err(e) => {
            let msg = match e {
                AddError::NotGreater => {
                    "ERR The ID specified in XADD is equal or smaller than the target stream top item"
                }
                AddError::TooLarge => "ERR Elements are too large to be stored",
            };
            if stream.is_empty() && stream.groups.is_empty() && stream.last_id.is_zero() && !found {
                s.dbs[db].remove(key, ctx.now);
            }
            return ctx.reply.error(msg);
        }
    };
    reply_id(&mut ctx.reply, id);
    let trimmed = p.trim.as_ref().map_or(0, |t| stream.trim(t));
    s.notify(notify::STREAM, "xadd", db, key);
    if trimmed > 0 {
        s.notify(notify::STREAM, "xtrim", db, key);
    }
    if s.effects.is_some() {
        let Ok(Some(stream)) = stream_mut(&mut s.dbs[db], key, ctx.now) else { return };
        let parts = rewritten(&args, &p, stream, Some(id));
        log_parts(s, db, &parts);
    }
}

fn xrange(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    range_command(s, ctx, args, false)
}

fn xrevrange(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    range_command(s, ctx, args, true)
}

fn range_command(s: &mut Shard, ctx: &mut Ctx, args: Args, rev: bool) {
    let (start_arg, end_arg) = if rev { (args.get(3), args.get(2)) } else { (args.get(2), args.get(3)) };
    let start = match parse_start(start_arg) {
        Ok(id) => id,
        Err(e) => return ctx.reply.error(e),
    };
    let end = match parse_end(end_arg) {
        Ok(id) => id,
        Err(e) => return ctx.reply.error(e),
    };
    let mut count: i64 = -1;
    let mut j = 4;
    while j < args.len() {
        if args.is(j, "count") && j + 1 < args.len() {
            count = match arg_i64(args.get(j + 1)) {
                Ok(n) => n.max(0),
                Err(e) => return ctx.reply.error(e),
            };
            j += 2;
        } else {
            return ctx.reply.error(SYNTAX);
        }
    }
    match stream_read(s, ctx.db, args.get(1), ctx.now) {
        Err(WrongType) => ctx.reply.error(WRONGTYPE),
        Ok(None) => ctx.reply.array(0),
        Ok(Some(_)) if count == 0 => ctx.reply.null_array(),
        Ok(Some(st)) => {
            reply_range(&mut ctx.reply, st, start, end, count.max(0) as usize, rev);
        }
    }
}

fn xlen(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    match stream_read(s, ctx.db, args.get(1), ctx.now) {
        Err(WrongType) => ctx.reply.error(WRONGTYPE),
        Ok(None) => ctx.reply.int(0),
        Ok(Some(st)) => ctx.reply.int(st.len() as i64),
    }
}

fn xdel(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let (db, key) = (ctx.db, args.get(1));
    let st = match stream_mut(&mut s.dbs[db], key, ctx.now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(None) => return ctx.reply.int(0),
        Ok(Some(st)) => st,
    };
    let mut ids = Vec::with_capacity(args.len() - 2);
    for i in 2..args.len() {
        match parse_strict(args.get(i)) {
            Ok(id) => ids.push(id),
            Err(e) => return ctx.reply.error(e),
        }
    }
    let deleted = ids.iter().filter(|id| st.delete(**id)).count();
    ctx.reply.int(deleted as i64);
    if deleted > 0 {
        s.notify(notify::STREAM, "xdel", db, key);
        let parts: Vec<Vec<u8>> = args.iter().map(<[u8]>::to_vec).collect();
        log_parts(s, db, &parts);
    }
}

fn xtrim(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let p = match parse_add_trim(&args, false, limits(s)) {
        Ok(p) => p,
        Err(e) => return ctx.reply.error(e),
    };
    let (db, key) = (ctx.db, args.get(1));
    let st = match stream_mut(&mut s.dbs[db], key, ctx.now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(None) => return ctx.reply.int(0),
        Ok(Some(st)) => st,
    };
    let deleted = p.trim.map_or(0, |t| st.trim(&t));
    ctx.reply.int(deleted as i64);
    if deleted > 0 {
        s.notify(notify::STREAM, "xtrim", db, key);
    }
    if deleted > 0 && s.effects.is_some() {
        let Ok(Some(st)) = stream_mut(&mut s.dbs[db], key, ctx.now) else { return };
        let parts = rewritten(&args, &p, st, None);
        log_parts(s, db, &parts);
    }
}

fn xsetid(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let id = match parse_strict(args.get(2)) {
        Ok(id) => id,
        Err(e) => return ctx.reply.error(e),
    };
    let mut entries_added: i64 = -1;
    let mut max_xdel = StreamId::MIN;
    let mut i = 3;
    while i < args.len() {
        let more = args.len() - 1 - i;
        if args.is(i, "entriesadded") && more > 0 {
            match arg_i64(args.get(i + 1)) {
                Err(e) => return ctx.reply.error(e),
                Ok(n) if n < 0 => return ctx.reply.error("ERR entries_added must be positive"),
                Ok(n) => entries_added = n,
            }
        } else if args.is(i, "maxdeletedid") && more > 0 {
            match parse_strict(args.get(i + 1)) {
                Err(e) => return ctx.reply.error(e),
                Ok(m) if id < m => {
                    return ctx
                        .reply
                        .error("ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id")
                }
                Ok(m) => max_xdel = m,
            }
        } else {
            return ctx.reply.error(SYNTAX);
        }
        i += 2;
    }
    let (db, key) = (ctx.db, args.get(1));
    let st = match stream_mut(&mut s.dbs[db], key, ctx.now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(None) => return ctx.reply.error(NO_SUCH_KEY),
        Ok(Some(st)) => st,
    };
    if st.length > 0 {
        if id < st.last_valid_id() {
            return ctx.reply.error("ERR The ID specified in XSETID is smaller than the target stream top item");
        }
        if entries_added != -1 && st.length > entries_added as u64 {
            return ctx
                .reply
                .error("ERR The entries_added specified in XSETID is smaller than the target stream length");
        }
    }
    st.last_id = id;
    if entries_added != -1 {
        st.entries_added = entries_added as u64;
    }
    if !max_xdel.is_zero() {
        st.max_deleted_id = max_xdel;
    }
    ctx.reply.ok();
    s.notify(notify::STREAM, "xsetid", db, key);
    let parts: Vec<Vec<u8>> = args.iter().map(<[u8]>::to_vec).collect();
    log_parts(s, db, &parts);
}

/// `ERR unknown subcommand or wrong number of arguments for '<sub>'. Try
/// <CMD> HELP.`
pub fn subcommand_error(args: &Args) -> String {
    format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
        String::from_utf8_lossy(&args.get(1)[..args.get(1).len().min(128)]),
        String::from_utf8_lossy(args.get(0)).to_uppercase()
    )
}

pub static XGROUP_SUBCOMMANDS: &[CommandSpec] = &[
    cmd!("xgroup|create", -5, WRITE | DENYOOM, (2, 2, 1), Keyed, Some(group::xgroup)),
    cmd!("xgroup|setid", -5, WRITE, (2, 2, 1), Keyed, Some(group::xgroup)),
    cmd!("xgroup|destroy", 4, WRITE, (2, 2, 1), Keyed, Some(group::xgroup)),
    cmd!("xgroup|createconsumer", 5, WRITE | DENYOOM, (2, 2, 1), Keyed, Some(group::xgroup)),
    cmd!("xgroup|delconsumer", 5, WRITE, (2, 2, 1), Keyed, Some(group::xgroup)),
    cmd!("xgroup|help", 2, LOADING | STALE, NOKEYS, Local, Some(group::xgroup_help)),
];

pub static XINFO_SUBCOMMANDS: &[CommandSpec] = &[
    cmd!("xinfo|stream", -3, READONLY, (2, 2, 1), Keyed, Some(info::xinfo)),
    cmd!("xinfo|groups", 3, READONLY, (2, 2, 1), Keyed, Some(info::xinfo)),
    cmd!("xinfo|consumers", 4, READONLY, (2, 2, 1), Keyed, Some(info::xinfo)),
    cmd!("xinfo|help", 2, LOADING | STALE, NOKEYS, Local, Some(info::xinfo_help)),
];

pub static COMMANDS: &[CommandSpec] = &[
    cmd!("xadd", -5, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(xadd)),
    cmd!("xrange", -4, READONLY, KEY1, Keyed, Some(xrange)),
    cmd!("xrevrange", -4, READONLY, KEY1, Keyed, Some(xrevrange)),
    cmd!("xlen", 2, READONLY | FAST, KEY1, Keyed, Some(xlen)),
    cmd!("xdel", -3, WRITE | FAST, KEY1, Keyed, Some(xdel)),
    cmd!("xtrim", -4, WRITE, KEY1, Keyed, Some(xtrim)),
    cmd!("xsetid", -3, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(xsetid)),
    cmd!("xack", -4, WRITE | FAST, KEY1, Keyed, Some(group::xack)),
    cmd!("xpending", -3, READONLY, KEY1, Keyed, Some(group::xpending)),
    cmd!("xclaim", -6, WRITE | FAST, KEY1, Keyed, Some(group::xclaim)),
    cmd!("xautoclaim", -6, WRITE | FAST, KEY1, Keyed, Some(group::xautoclaim)),
    cmd!("xgroup", -2, 0, NOKEYS, Local, None, XGROUP_SUBCOMMANDS),
    cmd!("xinfo", -2, 0, NOKEYS, Local, None, XINFO_SUBCOMMANDS),
    // The proxy runs them (keys over shards, BLOCK); the handler serves
    // scripts.
    cmd!("xread", -4, READONLY, NOKEYS, Proxy, Some(read::xread_command)).with_streams_keys(),
    cmd!("xreadgroup", -7, WRITE, NOKEYS, Proxy, Some(read::xread_command)).with_streams_keys(),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_as_redis_does() {
        assert_eq!(parse_id(b"5", 7, false, false), Ok((StreamId::new(5, 7), true)));
        assert_eq!(parse_id(b"5-*", 0, true, true), Ok((StreamId::new(5, 0), false)));
        assert_eq!(parse_id(b"5-*", 0, true, false), Err(INVALID_ID));
        assert_eq!(parse_id(b"-", 0, true, false), Err(INVALID_ID));
        assert_eq!(parse_id(b"+", 0, false, false), Ok((StreamId::MAX, true)));
        assert_eq!(parse_id(b"007-+3", 0, false, false), Ok((StreamId::new(7, 3), true)));
        assert_eq!(parse_id(b"1--1", 0, false, false), Err(INVALID_ID));
        assert_eq!(parse_id(b"18446744073709551616", 0, false, false), Err(INVALID_ID));
        assert_eq!(
            parse_start(b"(18446744073709551615-18446744073709551615"),
            Err("ERR invalid start ID for the interval")
        );
    }
}
