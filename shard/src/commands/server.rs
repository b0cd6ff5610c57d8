//! Server commands that run on shards (PING, TIME, DBSIZE, FLUSH*) and the
//! subcommand tables of the server commands the proxy implements.

use super::prelude::*;
use super::Ctx;
use crate::args::Args;
use crate::reply::errors::SYNTAX;
use crate::shard::Shard;

pub fn ping(_s: &mut Shard, ctx: &mut Ctx, args: Args) {
    match args.len() {
        1 => ctx.reply.simple("PONG"),
        2 => ctx.reply.bulk(args.get(1)),
        _ => ctx.reply.error(&super::arity_error("ping")),
    }
}

pub fn echo(_s: &mut Shard, ctx: &mut Ctx, args: Args) {
    ctx.reply.bulk(args.get(1))
}

pub fn time(_s: &mut Shard, ctx: &mut Ctx, _args: Args) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    ctx.reply.array(2);
    ctx.reply.bulk_int(now.as_secs() as i64);
    ctx.reply.bulk_int(now.subsec_micros() as i64);
}

pub fn dbsize(s: &mut Shard, ctx: &mut Ctx, _args: Args) {
    ctx.reply.int(s.dbs[ctx.db].len() as i64)
}

/// FLUSHDB/FLUSHALL accept an optional ASYNC or SYNC; both free at once here
/// (a shard's part of the keyspace is small enough to drop inline).
fn flush_mode_ok(args: &Args) -> bool {
    args.len() == 1 || (args.len() == 2 && (args.is(1, "async") || args.is(1, "sync")))
}

pub fn flushdb(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    if !flush_mode_ok(&args) {
        return ctx.reply.error(SYNTAX);
    }
    if args.len() == 2 && args.is(1, "async") {
        // Redis's emptyDbAsync: every key of the database goes to its
        // lazy-free thread.
        s.stats.lazyfreed += s.dbs[ctx.db].len() as u64;
    }
    let flushed = blocked_keys_in(s, ctx.db);
    s.dbs[ctx.db].clear();
    signal_all(s, ctx.db, flushed);
    ctx.reply.ok()
}

pub fn flushall(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    if !flush_mode_ok(&args) {
        return ctx.reply.error(SYNTAX);
    }
    let lazy = args.len() == 2 && args.is(1, "async");
    for i in 0..s.dbs.len() {
        if lazy {
            s.stats.lazyfreed += s.dbs[i].len() as u64;
        }
        let flushed = blocked_keys_in(s, i);
        s.dbs[i].clear();
        signal_all(s, i, flushed);
    }
    ctx.reply.ok()
}

/// The keys of `db` that clients block on: a flush removes them, and the
/// clients get a look (an XREADGROUP is told its stream is gone, as
/// Redis's scanDatabaseForDeletedStreams does).
fn blocked_keys_in(s: &Shard, db: usize) -> Vec<Vec<u8>> {
    if s.watched.is_empty() {
        return Vec::new();
    }
    s.watched.keys().filter(|k| s.dbs[db].has_entry(k)).cloned().collect()
}

fn signal_all(s: &mut Shard, db: usize, keys: Vec<Vec<u8>>) {
    for key in keys {
        s.signal_ready(db, &key);
    }
}

/// SWAPDB a b, on every shard (as one coordinator unit over all of them).
/// WATCH tables stay with their database number: keys watched in either
/// database that exist in either are touched, as Redis's
/// `touchAllWatchedKeysInDb`; clients blocked on keys of either get a look.
pub fn swapdb(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let index = |i: usize| crate::args::parse_i64(args.get(i)).filter(|n| i32::try_from(*n).is_ok());
    let Some(a) = index(1) else { return ctx.reply.error("ERR invalid first DB index") };
    let Some(b) = index(2) else { return ctx.reply.error("ERR invalid second DB index") };
    let n = s.dbs.len() as i64;
    if !(0..n).contains(&a) || !(0..n).contains(&b) {
        return ctx.reply.error("ERR DB index is out of range");
    }
    let (a, b) = (a as usize, b as usize);
    if a != b {
        if s.dbs[a].snapshot_running() || s.dbs[b].snapshot_running() {
            return ctx.reply.error("ERR SWAPDB is not supported while a snapshot is being taken");
        }
        let now = ctx.now;
        for (x, y) in [(a, b), (b, a)] {
            let (dx, dy) = if x < y {
                let (lo, hi) = s.dbs.split_at_mut(y);
                (&mut lo[x], &hi[0])
            } else {
                let (lo, hi) = s.dbs.split_at_mut(x);
                (&mut hi[0], &lo[y])
            };
            if let Some(mut w) = dx.watch.take() {
                w.touch_existing(|k| dx.find(k, now).is_some() || dy.find(k, now).is_some());
                dx.watch = Some(w);
            }
        }
        s.dbs.swap(a, b);
        let (wa, wb) = (s.dbs[a].watch.take(), s.dbs[b].watch.take());
        (s.dbs[a].watch, s.dbs[b].watch) = (wb, wa);
        let blocked: Vec<Vec<u8>> = s.watched.keys().cloned().collect();
        for key in blocked {
            s.signal_ready(a, &key);
            s.signal_ready(b, &key);
        }
    }
    ctx.reply.ok()
}

/// Subcommands of CLIENT: no FAST/NO_AUTH, unlike the connection commands.
const CLIENT_FLAGS: u32 = NOSCRIPT | LOADING | STALE;

pub static CLIENT_SUBCOMMANDS: &[CommandSpec] = &[
    cmd!("client|id", 2, CLIENT_FLAGS, NOKEYS, Proxy, None),
    cmd!("client|getname", 2, CLIENT_FLAGS, NOKEYS, Proxy, None),
    cmd!("client|setname", 3, CLIENT_FLAGS, NOKEYS, Proxy, None),
    cmd!("client|info", 2, CLIENT_FLAGS, NOKEYS, Proxy, None),
    cmd!("client|list", -2, ADMIN | CLIENT_FLAGS, NOKEYS, Proxy, None),
    cmd!("client|kill", -3, ADMIN | CLIENT_FLAGS, NOKEYS, Proxy, None),
    cmd!("client|help", 2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("client|tracking", -3, CLIENT_FLAGS, NOKEYS, Proxy, None),
    cmd!("client|caching", 3, CLIENT_FLAGS, NOKEYS, Proxy, None),
    cmd!("client|getredir", 2, CLIENT_FLAGS, NOKEYS, Proxy, None),
    cmd!("client|trackinginfo", 2, CLIENT_FLAGS, NOKEYS, Proxy, None),
    cmd!("client|reply", 3, CLIENT_FLAGS, NOKEYS, Proxy, None),
    cmd!("client|no-evict", 3, ADMIN | CLIENT_FLAGS, NOKEYS, Proxy, None),
    cmd!("client|pause", -3, ADMIN | CLIENT_FLAGS, NOKEYS, Proxy, None),
    cmd!("client|unpause", 2, ADMIN | CLIENT_FLAGS, NOKEYS, Proxy, None),
    cmd!("client|unblock", -3, ADMIN | CLIENT_FLAGS, NOKEYS, Proxy, None),
];

pub static COMMAND_SUBCOMMANDS: &[CommandSpec] = &[
    cmd!("command|count", 2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("command|info", -2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("command|docs", -2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("command|list", -2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("command|getkeys", -4, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("command|getkeysandflags", -4, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("command|help", 2, LOADING | STALE, NOKEYS, Proxy, None),
];

/// CLUSTER subcommands of Redis Cluster that describe or query the cluster,
/// plus corekv's RELOAD; the ones that change a Redis cluster's own
/// configuration (ADDSLOTS, MEET, ...) have no meaning here.
pub static CLUSTER_SUBCOMMANDS: &[CommandSpec] = &[
    cmd!("cluster|info", 2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("cluster|myid", 2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("cluster|myshardid", 2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("cluster|slots", 2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("cluster|shards", 2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("cluster|nodes", 2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("cluster|keyslot", 3, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("cluster|countkeysinslot", 3, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("cluster|getkeysinslot", 4, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("cluster|links", 2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("cluster|reload", 2, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("cluster|help", 2, LOADING | STALE, NOKEYS, Proxy, None),
];

pub static CONFIG_SUBCOMMANDS: &[CommandSpec] = &[
    cmd!("config|get", -3, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("config|set", -4, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("config|resetstat", 2, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("config|rewrite", 2, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("config|help", 2, LOADING | STALE, NOKEYS, Proxy, None),
];

/// ACL's subcommands, with Redis 7.0's arity and flags.
pub static ACL_SUBCOMMANDS: &[CommandSpec] = &[
    cmd!("acl|cat", -2, NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("acl|deluser", -3, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("acl|dryrun", -4, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("acl|genpass", -2, NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("acl|getuser", 3, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("acl|list", 2, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("acl|load", 2, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("acl|log", -2, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("acl|save", 2, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("acl|setuser", -3, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("acl|users", 2, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("acl|whoami", 2, NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("acl|help", 2, LOADING | STALE, NOKEYS, Proxy, None),
];

/// SLOWLOG's subcommands (Redis 7.0's arity and flags).
pub static SLOWLOG_SUBCOMMANDS: &[CommandSpec] = &[
    cmd!("slowlog|get", -2, ADMIN | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("slowlog|len", 2, ADMIN | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("slowlog|reset", 2, ADMIN | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("slowlog|help", 2, LOADING | STALE, NOKEYS, Proxy, None),
];

/// LATENCY's subcommands (Redis 7.0's arity and flags).
pub static LATENCY_SUBCOMMANDS: &[CommandSpec] = &[
    cmd!("latency|doctor", 2, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("latency|graph", 3, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("latency|histogram", -2, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("latency|history", 3, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("latency|latest", 2, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("latency|reset", -2, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("latency|help", 2, LOADING | STALE, NOKEYS, Proxy, None),
];

/// The connection and server commands.
pub static COMMANDS: &[CommandSpec] = &[
    cmd!("auth", -2, CONN, NOKEYS, Proxy, None),
    cmd!("hello", -1, CONN, NOKEYS, Proxy, None),
    cmd!("quit", -1, CONN, NOKEYS, Proxy, None),
    cmd!("reset", 1, CONN, NOKEYS, Proxy, None),
    cmd!("select", 2, LOADING | STALE | FAST, NOKEYS, Proxy, None),
    cmd!("client", -2, 0, NOKEYS, Proxy, None, CLIENT_SUBCOMMANDS),
    cmd!("ping", -1, FAST, NOKEYS, Local, Some(ping)),
    cmd!("echo", 2, LOADING | STALE | FAST, NOKEYS, Local, Some(echo)),
    cmd!("command", -1, LOADING | STALE, NOKEYS, Proxy, None, COMMAND_SUBCOMMANDS),
    cmd!("info", -1, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("cluster", -2, 0, NOKEYS, Proxy, None, CLUSTER_SUBCOMMANDS),
    cmd!("readonly", 1, LOADING | STALE | FAST, NOKEYS, Proxy, None),
    cmd!("readwrite", 1, LOADING | STALE | FAST, NOKEYS, Proxy, None),
    cmd!("asking", 1, FAST, NOKEYS, Proxy, None),
    cmd!("config", -2, 0, NOKEYS, Proxy, None, CONFIG_SUBCOMMANDS),
    cmd!("acl", -2, 0, NOKEYS, Proxy, None, ACL_SUBCOMMANDS),
    cmd!("time", 1, LOADING | STALE | FAST, NOKEYS, Local, Some(time)),
    cmd!("bgrewriteaof", 1, ADMIN | NOSCRIPT, NOKEYS, Proxy, None),
    cmd!("shutdown", -1, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("monitor", 1, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("slowlog", -2, 0, NOKEYS, Proxy, None, SLOWLOG_SUBCOMMANDS),
    cmd!("latency", -2, 0, NOKEYS, Proxy, None, LATENCY_SUBCOMMANDS),
    cmd!("save", 1, ADMIN | NOSCRIPT, NOKEYS, Proxy, None),
    cmd!("bgsave", -1, ADMIN | NOSCRIPT, NOKEYS, Proxy, None),
    cmd!("psync", -3, ADMIN | NOSCRIPT, NOKEYS, Proxy, None),
    cmd!("sync", 1, ADMIN | NOSCRIPT, NOKEYS, Proxy, None),
    cmd!("replconf", -1, ADMIN | NOSCRIPT | LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("wait", 3, NOSCRIPT, NOKEYS, Proxy, None),
    cmd!("role", 1, NOSCRIPT | LOADING | STALE | FAST, NOKEYS, Proxy, None),
    cmd!("replicaof", 3, ADMIN | NOSCRIPT | STALE, NOKEYS, Proxy, None),
    cmd!("failover", -1, ADMIN | NOSCRIPT | STALE, NOKEYS, Proxy, None),
    cmd!("slaveof", 3, ADMIN | NOSCRIPT | STALE, NOKEYS, Proxy, None),
    cmd!("lastsave", 1, LOADING | STALE | FAST, NOKEYS, Proxy, None),
    cmd!("dbsize", 1, READONLY | FAST, NOKEYS, AllShards(Sum), Some(dbsize)),
    cmd!("flushdb", -1, WRITE, NOKEYS, AllShards(AllOk), Some(flushdb)),
    cmd!("flushall", -1, WRITE, NOKEYS, AllShards(AllOk), Some(flushall)),
    cmd!("swapdb", 3, WRITE | FAST, NOKEYS, AllShards(AllOk), Some(swapdb)),
];
