//! Keyspace commands: existence, deletion, expiry, renaming, introspection.
//! SCAN, RANDOMKEY and RENAME/COPY/MSETNX over several shards:
//! proxy/src/commands/keys.rs.

use super::prelude::*;
use super::Ctx;
use crate::args::{parse_i64, Args};
use crate::db::Ttl;
use crate::glob::glob_match;
use crate::notify;
use crate::reply::errors::*;
use crate::shard::Shard;

pub fn del(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let mut removed = 0;
    let unlink = args.is(0, "unlink");
    for key in args.iter().skip(1) {
        if let Some(entry) = s.dbs[ctx.db].remove(key, ctx.now) {
            // Redis's freeObjAsync threshold (LAZYFREE_THRESHOLD).
            if unlink && entry.value.free_effort() > 64 {
                s.stats.lazyfreed += 1;
            }
            removed += 1;
            s.notify(notify::GENERIC, "del", ctx.db, key);
        }
    }
    ctx.reply.int(removed as i64);
}

/// EXISTS and TOUCH: how many of the keys (repeats counted) exist.
pub fn exists(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let db = &mut s.dbs[ctx.db];
    let found = args.iter().skip(1).filter(|k| db.contains(k, ctx.now)).count();
    ctx.reply.int(found as i64);
}

/// TOUCH: EXISTS that counts as an access (Redis's lookupKeyRead: the idle
/// time restarts, the LFU counter may grow, a hit or miss is counted).
pub fn touch(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let Shard { dbs, stats, .. } = s;
    let db = &mut dbs[ctx.db];
    let found = args.iter().skip(1).filter(|k| db.get(k, ctx.now).is_some()).count();
    stats.keyspace_hits += found as u64;
    stats.keyspace_misses += (args.len() - 1 - found) as u64;
    ctx.reply.int(found as i64);
}

pub fn type_(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let name = s.dbs[ctx.db].peek(args.get(1), ctx.now).map_or("none", |e| e.value.type_name());
    ctx.reply.simple(name);
}

const NX: u8 = 1;
const XX: u8 = 2;
const GT: u8 = 4;
const LT: u8 = 8;

/// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (Redis's expireGenericCommand).
fn expire_generic(s: &mut Shard, ctx: &mut Ctx, args: Args, base: i64, millis: bool, cmd: &str) {
    let Some(mut when) = parse_i64(args.get(2)) else {
        return ctx.reply.error(NOT_INTEGER);
    };
    let mut flag = 0u8;
    for opt in args.iter().skip(3) {
        flag |= match opt.to_ascii_lowercase().as_slice() {
            b"nx" => NX,
            b"xx" => XX,
            b"gt" => GT,
            b"lt" => LT,
            _ => return ctx.reply.error(&format!("ERR Unsupported option {}", String::from_utf8_lossy(opt))),
        };
    }
    if flag & NX != 0 && flag & (XX | GT | LT) != 0 {
        return ctx.reply.error("ERR NX and XX, GT or LT options at the same time are not compatible");
    }
    if flag & GT != 0 && flag & LT != 0 {
        return ctx.reply.error("ERR GT and LT options at the same time are not compatible");
    }
    let invalid = format!("ERR invalid expire time in '{cmd}' command");
    if !millis {
        match when.checked_mul(1000) {
            Some(ms) => when = ms,
            None => return ctx.reply.error(&invalid),
        }
    }
    match when.checked_add(base) {
        Some(w) => when = w,
        None => return ctx.reply.error(&invalid),
    }
    let db = &mut s.dbs[ctx.db];
    let Some(entry) = db.get(args.get(1), ctx.now) else {
        return ctx.reply.int(0);
    };
    let current = entry.expire_at().map(|t| t as i64);
    let refused = (flag & NX != 0 && current.is_some())
        || (flag & XX != 0 && current.is_none())
        || (flag & GT != 0 && current.is_none_or(|c| when <= c))
        || (flag & LT != 0 && current.is_some_and(|c| when >= c));
    if refused {
        return ctx.reply.int(0);
    }
    let event = if when <= ctx.now as i64 {
        db.remove(args.get(1), ctx.now);
        "del"
    } else {
        db.set_expire(args.get(1), Some(when as u64), ctx.now);
        "expire"
    };
    s.notify(notify::GENERIC, event, ctx.db, args.get(1));
    ctx.reply.int(1);
}

pub fn expire(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    expire_generic(s, ctx, args, ctx.now as i64, false, "expire")
}

pub fn pexpire(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    expire_generic(s, ctx, args, ctx.now as i64, true, "pexpire")
}

pub fn expireat(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    expire_generic(s, ctx, args, 0, false, "expireat")
}

pub fn pexpireat(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    expire_generic(s, ctx, args, 0, true, "pexpireat")
}

/// TTL, PTTL, EXPIRETIME, PEXPIRETIME.
fn ttl_generic(s: &mut Shard, ctx: &mut Ctx, args: Args, millis: bool, absolute: bool) {
    let Some(entry) = s.dbs[ctx.db].peek(args.get(1), ctx.now) else {
        return ctx.reply.int(-2);
    };
    let Some(at) = entry.expire_at() else {
        return ctx.reply.int(-1);
    };
    let ms = if absolute { at as i64 } else { (at as i64 - ctx.now as i64).max(0) };
    ctx.reply.int(if millis { ms } else { (ms + 500) / 1000 });
}

pub fn ttl(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    ttl_generic(s, ctx, args, false, false)
}

pub fn pttl(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    ttl_generic(s, ctx, args, true, false)
}

pub fn expiretime(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let Some(entry) = s.dbs[ctx.db].peek(args.get(1), ctx.now) else {
        return ctx.reply.int(-2);
    };
    ctx.reply.int(entry.expire_at().map_or(-1, |at| at as i64 / 1000));
}

pub fn pexpiretime(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    ttl_generic(s, ctx, args, true, true)
}

pub fn persist(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let db = &mut s.dbs[ctx.db];
    let had = db.get(args.get(1), ctx.now).is_some_and(|e| e.expire_at().is_some());
    if had {
        db.set_expire(args.get(1), None, ctx.now);
        s.notify(notify::GENERIC, "persist", ctx.db, args.get(1));
    }
    ctx.reply.int(had as i64);
}

/// KEYS on this shard's part of the keyspace.
pub fn keys(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let pattern = args.get(1);
    let all = pattern == b"*";
    let matching: Vec<&[u8]> = s.dbs[ctx.db]
        .iter_live(ctx.now)
        .map(|e| e.key.as_slice())
        .filter(|k| all || glob_match(pattern, k, false))
        .collect();
    ctx.reply.array(matching.len());
    for k in matching {
        ctx.reply.bulk(k);
    }
}

/// RENAME with both keys on this shard.
pub fn rename(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    rename_generic(s, ctx, args, false)
}

pub fn renamenx(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    rename_generic(s, ctx, args, true)
}

fn rename_generic(s: &mut Shard, ctx: &mut Ctx, args: Args, nx: bool) {
    let (src, dst) = (args.get(1), args.get(2));
    let db = &mut s.dbs[ctx.db];
    if !db.contains(src, ctx.now) {
        return ctx.reply.error(NO_SUCH_KEY);
    }
    if src == dst {
        return if nx { ctx.reply.int(0) } else { ctx.reply.ok() };
    }
    if nx && db.contains(dst, ctx.now) {
        return ctx.reply.int(0);
    }
    let entry = db.remove(src, ctx.now).expect("checked live above"); // ok: same batch, same clock
    let ttl = entry.expire_at().map_or(Ttl::Clear, Ttl::At);
    // Redis deletes the old destination, then adds the key: `new` fires.
    db.remove(dst, ctx.now);
    db.set(dst, entry.value, ttl, ctx.now);
    s.notify(notify::GENERIC, "rename_from", ctx.db, src);
    s.notify(notify::GENERIC, "rename_to", ctx.db, dst);
    if nx {
        ctx.reply.int(1)
    } else {
        ctx.reply.ok()
    }
}

/// Parsed `COPY src dst [DB n] [REPLACE]`.
pub struct CopyArgs {
    pub dest_db: usize,
    pub replace: bool,
}

/// Parses COPY's options; `Err` carries the error reply text.
pub fn parse_copy(args: &Args, db: usize, databases: usize, cluster: bool) -> Result<CopyArgs, &'static str> {
    let mut c = CopyArgs { dest_db: db, replace: false };
    let mut j = 3;
    while j < args.len() {
        if args.is(j, "replace") {
            c.replace = true;
        } else if args.is(j, "db") && j + 1 < args.len() {
            let n = parse_i64(args.get(j + 1)).filter(|n| (i32::MIN as i64..=i32::MAX as i64).contains(n));
            let n = n.ok_or(NOT_INTEGER)?;
            if n < 0 || n as usize >= databases {
                return Err(DB_INDEX);
            }
            c.dest_db = n as usize;
            j += 1;
        } else {
            return Err(SYNTAX);
        }
        j += 1;
    }
    if cluster && (db != 0 || c.dest_db != 0) {
        return Err("ERR Copying to another database is not allowed in cluster mode");
    }
    if c.dest_db == db && args.get(1) == args.get(2) {
        return Err("ERR source and destination objects are the same");
    }
    Ok(c)
}

/// COPY with both keys on this shard.
pub fn copy(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let cluster = s.config.cluster_mode != crate::config::ClusterMode::No;
    let c = match parse_copy(&args, ctx.db, s.dbs.len(), cluster) {
        Ok(c) => c,
        Err(e) => return ctx.reply.error(e),
    };
    let (src, dst) = (args.get(1), args.get(2));
    let Some(entry) = s.dbs[ctx.db].get(src, ctx.now) else {
        return ctx.reply.int(0);
    };
    let (value, ttl) = (entry.value.clone(), entry.expire_at().map_or(Ttl::Clear, Ttl::At));
    let target = &mut s.dbs[c.dest_db];
    if target.contains(dst, ctx.now) {
        if !c.replace {
            return ctx.reply.int(0);
        }
        // Deleted, then added: `new` fires, as in Redis.
        target.remove(dst, ctx.now);
    }
    target.set(dst, value, ttl, ctx.now);
    s.notify(notify::GENERIC, "copy_to", c.dest_db, dst);
    ctx.reply.int(1);
}

pub static OBJECT_SUBCOMMANDS: &[CommandSpec] = &[
    cmd!("object|encoding", 3, READONLY, (2, 2, 1), Keyed, Some(object_encoding)),
    cmd!("object|refcount", 3, READONLY, (2, 2, 1), Keyed, Some(object_refcount)),
    cmd!("object|idletime", 3, READONLY, (2, 2, 1), Keyed, Some(object_idletime)),
    cmd!("object|freq", 3, READONLY, (2, 2, 1), Keyed, Some(object_freq)),
    cmd!("object|help", 2, LOADING | STALE, (0, 0, 0), Local, Some(object_help)),
];

fn object_encoding(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    match s.dbs[ctx.db].peek(args.get(2), ctx.now) {
        Some(e) => ctx.reply.bulk(e.value.encoding().as_bytes()),
        None => ctx.reply.null(),
    }
}

fn object_refcount(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    match s.dbs[ctx.db].peek(args.get(2), ctx.now) {
        // Redis shares the integer objects 0..9999 (refcount INT_MAX).
        Some(e) => ctx.reply.int(match e.value {
            crate::value::Value::Int(n) if (0..10000).contains(&n) => i32::MAX as i64,
            _ => 1,
        }),
        None => ctx.reply.null(),
    }
}

/// The entry's access field is LRU seconds or LFU data, by the policy; each
/// OBJECT subcommand answers only under the policy that keeps its figure.
fn object_idletime(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let lfu = s.config.maxmemory_policy.is_lfu();
    match s.dbs[ctx.db].peek(args.get(2), ctx.now) {
        Some(_) if lfu => ctx.reply.error(
            "ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
        ),
        Some(e) => ctx.reply.int(e.idle_seconds(ctx.now) as i64),
        None => ctx.reply.null(),
    }
}

fn object_freq(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let (lfu, decay) = (s.config.maxmemory_policy.is_lfu(), s.config.lfu_decay_time as u32);
    match s.dbs[ctx.db].peek(args.get(2), ctx.now) {
        Some(e) if lfu => ctx.reply.int(crate::evict::lfu_counter(e.access(), ctx.now, decay) as i64),
        Some(_) => ctx.reply.error(
            "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
        ),
        None => ctx.reply.null(),
    }
}

fn object_help(_s: &mut Shard, ctx: &mut Ctx, _args: Args) {
    let lines: &[&str] = &[
        "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "ENCODING <key>",
        "    Return the kind of internal representation used in order to store the value",
        "    associated with a <key>.",
        "FREQ <key>",
        "    Return the access frequency index of the <key>. The returned integer is",
        "    proportional to the logarithm of the recent access frequency of the key.",
        "IDLETIME <key>",
        "    Return the idle time of the <key>, that is the approximated number of",
        "    seconds elapsed since the last access to the key.",
        "REFCOUNT <key>",
        "    Return the number of references of the value associated with the specified",
        "    <key>.",
        "HELP",
        "    Prints this help.",
    ];
    ctx.reply.array(lines.len());
    for l in lines {
        ctx.reply.simple(l);
    }
}

/// The keyspace commands.
pub static COMMANDS: &[CommandSpec] = &[
    cmd!("del", -2, WRITE, ALLKEYS, SplitKeys(Sum), Some(del)),
    cmd!("unlink", -2, WRITE | FAST, ALLKEYS, SplitKeys(Sum), Some(del)),
    cmd!("exists", -2, READONLY | FAST, ALLKEYS, SplitKeys(Sum), Some(exists)),
    cmd!("touch", -2, READONLY | FAST, ALLKEYS, SplitKeys(Sum), Some(touch)),
    cmd!("type", 2, READONLY | FAST, KEY1, Keyed, Some(type_)),
    cmd!("expire", -3, WRITE | FAST, KEY1, Keyed, Some(expire)),
    cmd!("pexpire", -3, WRITE | FAST, KEY1, Keyed, Some(pexpire)),
    cmd!("expireat", -3, WRITE | FAST, KEY1, Keyed, Some(expireat)),
    cmd!("pexpireat", -3, WRITE | FAST, KEY1, Keyed, Some(pexpireat)),
    cmd!("ttl", 2, READONLY | FAST, KEY1, Keyed, Some(ttl)),
    cmd!("pttl", 2, READONLY | FAST, KEY1, Keyed, Some(pttl)),
    cmd!("expiretime", 2, READONLY | FAST, KEY1, Keyed, Some(expiretime)),
    cmd!("pexpiretime", 2, READONLY | FAST, KEY1, Keyed, Some(pexpiretime)),
    cmd!("persist", 2, WRITE | FAST, KEY1, Keyed, Some(persist)),
    cmd!("keys", 2, READONLY, NOKEYS, AllShards(Concat), Some(keys)),
    cmd!("scan", -2, READONLY, NOKEYS, Proxy, None),
    cmd!("randomkey", 1, READONLY, NOKEYS, Proxy, None),
    cmd!("rename", 3, WRITE, KEYS12, Keyed, Some(rename)),
    cmd!("renamenx", 3, WRITE | FAST, KEYS12, Keyed, Some(renamenx)),
    cmd!("copy", -3, WRITE | DENYOOM, KEYS12, Keyed, Some(copy)),
    cmd!("object", -2, 0, NOKEYS, Keyed, None, OBJECT_SUBCOMMANDS),
];
