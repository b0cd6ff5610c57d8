//! List commands whose keys span shards (LMOVE, RPOPLPUSH, LMPOP, each one
//! coordinator unit) and the blocking pops, which wait through
//! `crate::blocking`. One shard, and every other list command:
//! shard/src/commands/list.rs.

use super::reply::reply;
use crate::blocking::across::{list_or_missing, move_across, End, Moved};
use crate::blocking::{BlockOp, BlockWait};
use crate::coordinator::dispatch::call;
use crate::session::Connection;
use shard::commands::list::{parse_mpop, parse_side, try_mpop};
use shard::commands::Ctx;
use shard::reply::errors::{SYNTAX, WRONGTYPE};
use shard::{Args, Reply};

/// Runs `f` against `shard`'s data with a scratch reply buffer; returns what
/// `f` returned and the reply bytes.
async fn on_shard<T: Send + 'static>(
    conn: &Connection,
    shard: usize,
    f: impl FnOnce(&mut shard::Shard, &mut Ctx) -> T + Send + 'static,
) -> Option<(T, Vec<u8>)> {
    let (db, resp3) = (conn.state.db, conn.state.resp3);
    call(&conn.core, shard, move |core| {
        let mut out = Vec::new();
        let mut ctx = Ctx { db, now: shard::unix_ms(), reply: Reply::new(&mut out, resp3) };
        let r = f(&mut core.shard.borrow_mut(), &mut ctx);
        (r, out)
    })
    .await
}

/// LMOVE/RPOPLPUSH with source and destination on different shards (the
/// command's unit holds both keys).
pub async fn lmove(conn: &mut Connection, args: Args<'_>, rpoplpush: bool) {
    let (from_head, to_head) = if rpoplpush {
        (false, true)
    } else {
        match (parse_side(args.get(3)), parse_side(args.get(4))) {
            (Some(f), Some(t)) => (f, t),
            _ => return conn.error(SYNTAX),
        }
    };
    let (src, dst) = (args.get(1).to_vec(), args.get(2).to_vec());
    let from = End { shard: conn.core.shard_of(&src), key: src, head: from_head };
    let to = End { shard: conn.core.shard_of(&dst), key: dst, head: to_head };
    match move_across(&conn.core, conn.state.db, from, to).await {
        Moved::Value(value) => reply(conn, |r| r.bulk(&value)),
        Moved::Empty => reply(conn, |r| r.null()),
        Moved::WrongType => conn.error(WRONGTYPE),
    }
}

/// LMPOP over keys on several shards: the first key, in order, with
/// elements.
pub async fn lmpop(conn: &mut Connection, args: Args<'_>) {
    let mp = match parse_mpop(&args, 1, parse_side) {
        Ok(mp) => mp,
        Err(e) => return conn.error(e),
    };
    for i in mp.keys {
        let key = args.get(i).to_vec();
        let shard = conn.core.shard_of(&key);
        let (from_head, count) = (mp.from_head, mp.count);
        if let Some((true, bytes)) = on_shard(conn, shard, move |s, ctx| {
            let popped = try_mpop(s, ctx, &[&key], from_head, count);
            if popped {
                s.log_key_state(ctx.db, &key, ctx.now);
            }
            popped
        })
        .await
        {
            return conn.pipeline.local(|out| out.extend_from_slice(&bytes));
        }
    }
    reply(conn, |r| r.null_array());
}

/// BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP: serve at once or block.
pub async fn blocking(conn: &mut Connection, name: &str, args: Args<'_>) -> Option<BlockWait> {
    let timeout_arg = match name {
        "blmpop" => 1,
        _ => args.len() - 1,
    };
    let (keys, op) = match name {
        "blpop" | "brpop" => {
            let keys = (1..args.len() - 1).map(|i| args.get(i).to_vec()).collect::<Vec<_>>();
            (keys, BlockOp::Pop { from_head: name == "blpop" })
        }
        "blmove" | "brpoplpush" => {
            let (from_head, to_head) = if name == "brpoplpush" {
                (false, true)
            } else {
                match (parse_side(args.get(3)), parse_side(args.get(4))) {
                    (Some(f), Some(t)) => (f, t),
                    _ => {
                        conn.error(SYNTAX);
                        return None;
                    }
                }
            };
            let dst = args.get(2).to_vec();
            let dst_shard = conn.core.shard_of(&dst);
            (vec![args.get(1).to_vec()], BlockOp::Move { dst, dst_shard, from_head, to_head })
        }
        _ => (Vec::new(), BlockOp::Pop { from_head: true }),
    };
    let deadline = match crate::blocking::parse_timeout(args.get(timeout_arg)) {
        Ok(d) => d,
        Err(e) => {
            conn.error(e);
            return None;
        }
    };
    let (keys, op) = if name == "blmpop" {
        match parse_mpop(&args, 2, parse_side) {
            Ok(mp) => (
                mp.keys.map(|i| args.get(i).to_vec()).collect(),
                BlockOp::MPop { from_head: mp.from_head, count: mp.count },
            ),
            Err(e) => {
                conn.error(e);
                return None;
            }
        }
    } else {
        (keys, op)
    };
    if let BlockOp::Move { dst, dst_shard, .. } = &op {
        if *dst_shard != conn.core.shard_of(&keys[0])
            && !list_or_missing(&conn.core, conn.state.db, *dst_shard, dst.clone()).await
        {
            conn.error(WRONGTYPE);
            return None;
        }
    }
    crate::blocking::start(conn, keys, op, deadline).await
}
