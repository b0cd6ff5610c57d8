//! Sorted-set commands whose keys live on different shards: ZUNION ZINTER
//! ZDIFF, their STORE forms, ZINTERCARD, ZMPOP and ZRANGESTORE. When every
//! key is on one shard they run there as usual (the table counts `numkeys`
//! keys); otherwise the sets are copied from their owners over the mesh,
//! combined here with the shard's own code, and a STORE result is saved on
//! the destination's owner, all inside one coordinator unit (atomic). One
//! shard, and every other sorted-set command: shard/src/commands/zset.rs.

use super::gather::{fail, gather, WrongType, LOST};
use super::reply::reply;
use crate::blocking::{BlockOp, BlockWait};
use crate::coordinator::dispatch::call;
use crate::session::Connection;
use shard::commands::zset::pop::{parse_mpop, try_pop, Shape};
use shard::commands::zset::range::{parse_range, range_set};
use shard::commands::zset::setop::{
    compute, input_copy, inter_card, parse_numkeys, parse_opts, reply_result, result_set, Op,
};
use shard::commands::zset::{store, zset_read};
use shard::reply::errors::WRONGTYPE;
use shard::types::zset::{Limits, ZSet};
use shard::{Args, CommandSpec, Reply};

/// Where `numkeys` is, and whether a destination key precedes it.
fn numkeys_at(name: &str) -> (usize, bool) {
    match name {
        "zunionstore" | "zinterstore" | "zdiffstore" => (2, true),
        _ => (1, false),
    }
}

fn limits(conn: &Connection) -> Limits {
    Limits::of(&conn.core.config())
}

/// A copy of the sorted set at `key`, or of the set read as one.
fn read_input(s: &mut shard::Shard, db: usize, key: &[u8], now: u64) -> Result<Option<Box<ZSet>>, WrongType> {
    let limits = shard::commands::zset::limits(s);
    input_copy(&mut s.dbs[db], key, now, limits).map(|z| z.map(Box::new)).map_err(|_| WrongType)
}

/// Saves `z` at `key` on its owner (deleting the key when `z` is empty) and
/// replies with its length; `event` is the command's keyspace event.
pub(super) async fn store_on_owner(conn: &mut Connection, key: Vec<u8>, z: ZSet, event: &'static str) {
    let (db, owner, n) = (conn.state.db, conn.core.shard_of(&key), z.len());
    let done = call(&conn.core, owner, move |core| {
        let mut s = core.shard.borrow_mut();
        s.stats.commands += 1;
        let mut sink = Vec::new();
        let now = shard::unix_ms();
        store(&mut s, db, &key, z, now, &mut Reply::new(&mut sink, false), event);
        s.log_key_state(db, &key, now);
        s.signal_ready(db, &key);
    })
    .await;
    match done {
        Some(()) => reply(conn, |r| r.int(n as i64)),
        None => conn.error(LOST),
    }
}

/// ZUNION ZINTER ZDIFF, their STORE forms and ZINTERCARD over shards.
pub async fn setop(conn: &mut Connection, spec: &CommandSpec, args: Args<'_>) {
    let (op, card) = match spec.name {
        "zunion" | "zunionstore" => (Op::Union, false),
        "zdiff" | "zdiffstore" => (Op::Diff, false),
        "zintercard" => (Op::Inter, true),
        _ => (Op::Inter, false),
    };
    let (at, store) = numkeys_at(spec.name);
    let numkeys = match parse_numkeys(&args, at, spec.name) {
        Ok(n) => n,
        Err(e) => return conn.error(&e),
    };
    let keys: Vec<&[u8]> = args.iter().skip(at + 1).take(numkeys).collect();
    let sets = match gather(conn, &keys, read_input).await {
        Ok(sets) => sets,
        Err(f) => return fail(conn, f),
    };
    let o = match parse_opts(&args, at, numkeys, op, store, card) {
        Ok(o) => o,
        Err(e) => return conn.error(e),
    };
    let refs: Vec<Option<&ZSet>> = sets.iter().map(|z| z.as_deref()).collect();
    if card {
        let n = inter_card(&refs, o.limit);
        return reply(conn, |r| r.int(n as i64));
    }
    let result = compute(op, &refs, &o);
    if !store {
        return reply(conn, |r| reply_result(r, &result, o.withscores));
    }
    let z = result_set(&result, limits(conn));
    let event = match op {
        Op::Union => "zunionstore",
        Op::Inter => "zinterstore",
        Op::Diff => "zdiffstore",
    };
    store_on_owner(conn, args.get(1).to_vec(), z, event).await;
}

/// ZRANGESTORE with source and destination on different shards.
pub async fn rangestore(conn: &mut Connection, args: Args<'_>) {
    let a = match parse_range(&args, 2, true, None, None) {
        Ok(a) => a,
        Err(e) => return conn.error(e),
    };
    let (db, src, limits) = (conn.state.db, args.get(2).to_vec(), limits(conn));
    let owner = conn.core.shard_of(&src);
    let found = call(&conn.core, owner, move |core| {
        let mut s = core.shard.borrow_mut();
        s.stats.commands += 1;
        match zset_read(&mut s, db, &src, shard::unix_ms()) {
            Err(_) => Err(()),
            Ok(None) => Ok(ZSet::default()),
            Ok(Some(z)) => Ok(range_set(z, &a, limits)),
        }
    })
    .await;
    match found {
        None => conn.error(LOST),
        Some(Err(())) => conn.error(WRONGTYPE),
        Some(Ok(z)) => store_on_owner(conn, args.get(1).to_vec(), z, "zrangestore").await,
    }
}

/// ZMPOP over shards: the keys are tried in order, each on its owner.
pub async fn mpop(conn: &mut Connection, args: Args<'_>) {
    let p = match parse_mpop(&args, 1) {
        Ok(p) => p,
        Err(e) => return conn.error(e),
    };
    let (db, resp3) = (conn.state.db, conn.state.resp3);
    for key in args.iter().skip(p.first).take(p.numkeys) {
        let (key, p) = (key.to_vec(), p.clone());
        let popped = call(&conn.core, conn.core.shard_of(&key), move |core| {
            let mut s = core.shard.borrow_mut();
            s.stats.commands += 1;
            let mut out = Vec::new();
            let mut ctx = shard::Ctx { db, now: shard::unix_ms(), reply: Reply::new(&mut out, resp3) };
            let done = try_pop(&mut s, &mut ctx, &key, p.max, p.count, Shape::KeyNested);
            if done {
                s.log_key_state(db, &key, shard::unix_ms());
            }
            done.then_some(out)
        })
        .await;
        match popped {
            None => return conn.error(LOST),
            Some(Some(bytes)) => return conn.pipeline.local(|out| out.extend_from_slice(&bytes)),
            Some(None) => {}
        }
    }
    reply(conn, |r| r.null_array());
}

/// BZPOPMIN, BZPOPMAX, BZMPOP: serve at once or block. BZMPOP checks its
/// numkeys, MIN|MAX and COUNT before the timeout, as Redis does.
pub async fn blocking(conn: &mut Connection, name: &str, args: Args<'_>) -> Option<BlockWait> {
    let (keys, op, timeout_arg) = if name == "bzmpop" {
        match parse_mpop(&args, 2) {
            Ok(p) => {
                let keys = args.iter().skip(p.first).take(p.numkeys).map(<[u8]>::to_vec).collect();
                (keys, BlockOp::ZMPop { max: p.max, count: p.count }, 1)
            }
            Err(e) => {
                conn.error(e);
                return None;
            }
        }
    } else {
        let keys = args.iter().skip(1).take(args.len() - 2).map(<[u8]>::to_vec).collect();
        (keys, BlockOp::ZPop { max: name == "bzpopmax" }, args.len() - 1)
    };
    match crate::blocking::parse_timeout(args.get(timeout_arg)) {
        Ok(deadline) => crate::blocking::start(conn, keys, op, deadline).await,
        Err(e) => {
            conn.error(e);
            None
        }
    }
}
