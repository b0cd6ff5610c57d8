//! HyperLogLog commands: PFADD PFCOUNT PFMERGE, and Redis's debugging pair
//! PFDEBUG (here) and PFSELFTEST (run by the proxy: `hll::selftest`). HLLs are plain strings
//! (TYPE string, encoding raw) in Redis's representation (types/hll.rs).
//! proxy/src/commands/hyperloglog.rs runs multi-key PFCOUNT/PFMERGE over
//! several shards with [`gather`] on each owner and [`store_merged`] on the
//! destination's.

use super::prelude::*;
use super::Ctx;
use crate::args::Args;
use crate::db::{Db, Ttl};
use crate::reply::errors::WRONGTYPE;
use crate::shard::Shard;
use crate::types::hll::{self, REGISTERS};
use crate::value::Value;

/// The bytes of a valid HLL, or Redis's error for this value.
fn hll_bytes(value: &Value) -> Result<&[u8], &'static str> {
    if !value.is_string() {
        return Err(WRONGTYPE);
    }
    // An integer-encoded string is never an HLL (Redis: not sds-encoded).
    let bytes = match value {
        Value::Emb(b) => b.as_slice(),
        Value::Long(b) => b,
        Value::Raw(v) => v.as_slice(),
        _ => return Err(hll::NOT_HLL),
    };
    hll::check(bytes).map(|()| bytes)
}

/// A valid HLL made mutable in place (Redis's dbUnshareStringValue).
fn hll_mut(value: &mut Value) -> Result<&mut Vec<u8>, &'static str> {
    hll_bytes(value)?;
    value.make_raw().ok_or(WRONGTYPE)
}

pub fn pfadd(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let max_bytes = s.config.hll_sparse_max_bytes as usize;
    let db = &mut s.dbs[ctx.db];
    let key = args.get(1);
    let (hll, mut updated) = match db.get(key, ctx.now) {
        Some(e) => match hll_mut(&mut e.value) {
            Ok(v) => (v, false),
            Err(err) => return ctx.reply.error(err),
        },
        None => {
            let e = db.set(key, Value::Raw(Box::new(hll::new_sparse())), Ttl::Clear, ctx.now);
            match e.value.make_raw() {
                Some(v) => (v, true),
                None => return ctx.reply.error(WRONGTYPE),
            }
        }
    };
    for ele in args.iter().skip(2) {
        match hll::add(hll, ele, max_bytes) {
            Ok(changed) => updated |= changed,
            Err(_) => return ctx.reply.error(hll::CORRUPT),
        }
    }
    if updated {
        hll::invalidate_cache(hll);
        s.notify(crate::notify::STRING, "pfadd", ctx.db, key);
    }
    ctx.reply.int(updated as i64);
}

/// Merges the HLLs at `keys` into `max` (one byte per register) in order,
/// stopping at the first key that fails, as Redis does. Returns whether any
/// source was dense and the failing key's position with its error.
pub fn gather<'k>(
    db: &mut Db,
    keys: impl Iterator<Item = (usize, &'k [u8])>,
    max: &mut [u8],
    now: u64,
) -> (bool, Option<(usize, &'static str)>) {
    let mut dense = false;
    for (pos, key) in keys {
        let Some(e) = db.get(key, now) else {
            continue;
        };
        let bytes = match hll_bytes(&e.value) {
            Ok(b) => b,
            Err(err) => return (dense, Some((pos, err))),
        };
        dense |= hll::is_dense(bytes);
        if hll::merge(max, bytes).is_err() {
            return (dense, Some((pos, hll::CORRUPT)));
        }
    }
    (dense, None)
}

/// PFMERGE's write: raises the destination's registers to `max`, creating
/// it when missing and converting it to dense when a source was dense;
/// raises `pfadd`, as Redis does.
pub fn store_merged(
    s: &mut Shard,
    db: usize,
    key: &[u8],
    max: &[u8],
    dense: bool,
    max_bytes: usize,
    now: u64,
) -> Result<(), &'static str> {
    let d = &mut s.dbs[db];
    let hll = match d.get(key, now) {
        // Checked again: across shards it may have changed since the merge.
        Some(e) => hll_mut(&mut e.value)?,
        None => {
            let e = d.set(key, Value::Raw(Box::new(hll::new_sparse())), Ttl::Clear, now);
            e.value.make_raw().ok_or(WRONGTYPE)?
        }
    };
    if dense {
        hll::to_dense(hll).map_err(|_| hll::CORRUPT)?;
    }
    for (i, &m) in max.iter().enumerate() {
        if m != 0 {
            // Redis ignores a failed set here: every source was checked.
            let _ = hll::set_register(hll, i, m, max_bytes);
        }
    }
    hll::invalidate_cache(hll);
    s.notify(crate::notify::STRING, "pfadd", db, key);
    Ok(())
}

pub fn pfcount(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let db = &mut s.dbs[ctx.db];
    if args.len() > 2 {
        // The union's cardinality, merged on the fly; nothing is written.
        let mut max = [0u8; REGISTERS];
        if let (_, Some((_, err))) = gather(db, args.iter().skip(1).enumerate(), &mut max, ctx.now) {
            return ctx.reply.error(err);
        }
        return ctx.reply.int(hll::count_registers(&max) as i64);
    }
    let Some(e) = db.get(args.get(1), ctx.now) else {
        return ctx.reply.int(0);
    };
    let hll = match hll_mut(&mut e.value) {
        Ok(v) => v,
        Err(err) => return ctx.reply.error(err),
    };
    // A read that refreshes the cached cardinality inside the value.
    let card = match hll::cached(hll) {
        Some(c) => c,
        None => match hll::count(hll) {
            Ok(c) => {
                hll::store_cache(hll, c);
                c
            }
            Err(_) => return ctx.reply.error(hll::CORRUPT),
        },
    };
    ctx.reply.int(card as i64);
}

pub fn pfmerge(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let max_bytes = s.config.hll_sparse_max_bytes as usize;
    let db = &mut s.dbs[ctx.db];
    let mut max = [0u8; REGISTERS];
    // The destination is the first source.
    let (dense, err) = gather(db, args.iter().skip(1).enumerate(), &mut max, ctx.now);
    if let Some((_, err)) = err {
        return ctx.reply.error(err);
    }
    match store_merged(s, ctx.db, args.get(1), &max, dense, max_bytes, ctx.now) {
        Ok(()) => ctx.reply.ok(),
        Err(err) => ctx.reply.error(err),
    }
}

/// PFDEBUG GETREG|DECODE|ENCODING|TODENSE key: the key is looked up and
/// checked before the subcommand, as Redis does (pfdebugCommand).
pub fn pfdebug(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let Some(e) = s.dbs[ctx.db].get(args.get(2), ctx.now) else {
        return ctx.reply.error("ERR The specified key does not exist");
    };
    let hll = match hll_mut(&mut e.value) {
        Ok(v) => v,
        Err(err) => return ctx.reply.error(err),
    };
    let sub = args.get(1);
    if sub.eq_ignore_ascii_case(b"getreg") {
        if hll::to_dense(hll).is_err() {
            return ctx.reply.error(hll::CORRUPT);
        }
        let regs = hll::dense_registers(hll);
        ctx.reply.array(regs.len());
        regs.iter().for_each(|&r| ctx.reply.int(r as i64));
    } else if sub.eq_ignore_ascii_case(b"decode") {
        if hll::is_dense(hll) {
            return ctx.reply.error("ERR HLL encoding is not sparse");
        }
        ctx.reply.bulk(hll::decode_sparse(hll).as_bytes());
    } else if sub.eq_ignore_ascii_case(b"encoding") {
        ctx.reply.simple(if hll::is_dense(hll) { "dense" } else { "sparse" });
    } else if sub.eq_ignore_ascii_case(b"todense") {
        let converted = !hll::is_dense(hll);
        if hll::to_dense(hll).is_err() {
            return ctx.reply.error(hll::CORRUPT);
        }
        ctx.reply.int(converted as i64);
    } else {
        ctx.reply.error(&format!("ERR Unknown PFDEBUG subcommand '{}'", String::from_utf8_lossy(sub)));
    }
}

/// The HyperLogLog commands (multi-key forms across shards run in the proxy).
pub static COMMANDS: &[CommandSpec] = &[
    cmd!("pfdebug", 3, WRITE | DENYOOM | ADMIN, (2, 2, 1), Keyed, Some(pfdebug)),
    cmd!("pfselftest", 1, ADMIN, NOKEYS, Proxy, None),
    cmd!("pfadd", -2, WRITE | DENYOOM | FAST, KEY1, Keyed, Some(pfadd)),
    cmd!("pfcount", -2, READONLY, ALLKEYS, Keyed, Some(pfcount)),
    cmd!("pfmerge", -2, WRITE | DENYOOM, ALLKEYS, Keyed, Some(pfmerge)),
];
