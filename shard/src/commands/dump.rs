//! DUMP and RESTORE (and MIGRATE's entry: the proxy runs it, see
//! proxy/src/commands/migrate.rs): a value serialized as Redis's DUMP payload (RDB
//! encoding, version and CRC-64 footer), so values move between corekv and
//! redis-server either way (`dumpCommand`, `restoreCommand`).

use super::prelude::*;
use super::Ctx;
use crate::args::{parse_i64, Args};
use crate::db::Ttl;
use crate::rdb;
use crate::reply::errors::*;
use crate::shard::Shard;

pub fn dump(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let opts = rdb::SaveOptions { compress: s.config.rdbcompression };
    match s.dbs[ctx.db].get(args.get(1), ctx.now) {
        Some(entry) => ctx.reply.bulk(&rdb::dump_payload_with(&entry.value, &opts)),
        None => ctx.reply.null(),
    }
}

/// RESTORE's options after the payload.
#[derive(Default)]
struct RestoreOptions {
    replace: bool,
    absttl: bool,
    idle: Option<u64>,
    freq: Option<u8>,
}

fn parse_options(args: &Args) -> Result<RestoreOptions, &'static str> {
    let mut o = RestoreOptions::default();
    let mut j = 4;
    while j < args.len() {
        let more = j + 1 < args.len();
        if args.is(j, "replace") {
            o.replace = true;
        } else if args.is(j, "absttl") {
            o.absttl = true;
        } else if args.is(j, "idletime") && more && o.freq.is_none() {
            let idle = parse_i64(args.get(j + 1)).ok_or(NOT_INTEGER)?;
            o.idle = Some(u64::try_from(idle).map_err(|_| "ERR Invalid IDLETIME value, must be >= 0")?);
            j += 1;
        } else if args.is(j, "freq") && more && o.idle.is_none() {
            let freq = parse_i64(args.get(j + 1)).ok_or(NOT_INTEGER)?;
            o.freq = Some(u8::try_from(freq).map_err(|_| "ERR Invalid FREQ value, must be >= 0 and <= 255")?);
            j += 1;
        } else {
            return Err(SYNTAX);
        }
        j += 1;
    }
    Ok(o)
}

/// RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f], with
/// Redis's checks in Redis's order.
pub fn restore(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let o = match parse_options(&args) {
        Ok(o) => o,
        Err(e) => return ctx.reply.error(e),
    };
    let key = args.get(1);
    if !o.replace && s.dbs[ctx.db].contains(key, ctx.now) {
        return ctx.reply.error("BUSYKEY Target key name already exists.");
    }
    let Some(ttl) = parse_i64(args.get(2)) else {
        return ctx.reply.error(NOT_INTEGER);
    };
    if ttl < 0 {
        return ctx.reply.error("ERR Invalid TTL value, must be >= 0");
    }
    let payload = args.get(3);
    if !rdb::verify_payload(payload) {
        return ctx.reply.error("ERR DUMP payload version or checksum are wrong");
    }
    let Ok(value) = rdb::restore_payload_with(payload, &rdb::Limits::of(&s.config)) else {
        return ctx.reply.error("ERR Bad data format");
    };
    let db = &mut s.dbs[ctx.db];
    let deleted = o.replace && db.remove(key, ctx.now).is_some();
    let expire_at = match (ttl, o.absttl) {
        (0, _) => None,
        (t, true) => Some(t as u64),
        (t, false) => Some((t as u64).saturating_add(ctx.now)),
    };
    if expire_at.is_some_and(|at| at <= ctx.now) {
        // Already expired: the key is gone (REPLACE deleted it), as in Redis.
        if deleted {
            s.notify(crate::notify::GENERIC, "del", ctx.db, key);
        }
        return ctx.reply.ok();
    }
    let lfu = s.config.maxmemory_policy.is_lfu();
    let entry = s.dbs[ctx.db].set(key, value, expire_at.map_or(Ttl::Clear, Ttl::At), ctx.now);
    entry.restore_access(ctx.now, lfu, o.idle, o.freq);
    s.notify(crate::notify::GENERIC, "restore", ctx.db, key);
    ctx.reply.ok();
}

pub static COMMANDS: &[CommandSpec] = &[
    cmd!("dump", 2, READONLY, KEY1, Keyed, Some(dump)),
    cmd!("restore", -4, WRITE | DENYOOM, KEY1, Keyed, Some(restore)),
    // RESTORE as a cluster migration sends it (Redis's ASKING flag: corekv
    // moves no slots, so it is RESTORE itself).
    cmd!("restore-asking", -4, WRITE | DENYOOM, KEY1, Keyed, Some(restore)),
    // DUMP here, RESTORE on another server, DEL here: network I/O between
    // the phases, so the proxy runs it holding its keys.
    cmd!("migrate", -6, WRITE, (3, 3, 1), Proxy, None).with_migrate_keys(),
];
