//! BITOP over keys of several shards, as one coordinator unit: the operands
//! are read on their owners, combined here with the shard's own code
//! ([`BitOp`], [`bitop_fold`]) and the result stored on the destination's
//! owner. One shard, and the other bitmap commands: shard/src/commands/bitmap.rs.

use super::gather::{keys_by_shard, LOST as UNAVAILABLE};
use super::reply::reply;
use crate::coordinator::dispatch::call;
use crate::session::Connection;
use shard::commands::bitmap::{bitop_fold, read_operand, store_bitop, BitOp, BITOP_NOT_KEYS};
use shard::reply::errors::SYNTAX;
use shard::Args;

pub async fn bitop(conn: &mut Connection, args: Args<'_>) {
    let Some(op) = BitOp::parse(args.get(1)) else {
        return conn.error(SYNTAX);
    };
    if op == BitOp::Not && args.len() != 4 {
        return conn.error(BITOP_NOT_KEYS);
    }
    let (db, now) = (conn.state.db, conn.now);
    let mut sources: Vec<Option<Vec<u8>>> = vec![None; args.len()];
    for (shard, keys) in keys_by_shard(conn, &args, 3) {
        let read = call(&conn.core, shard, move |core| {
            let mut s = core.shard.borrow_mut();
            keys.into_iter()
                .map(|(pos, key)| read_operand(&mut s.dbs[db], &key, now).map(|v| (pos, v)))
                .collect::<Result<Vec<_>, &'static str>>()
        })
        .await;
        match read {
            None => return conn.error(UNAVAILABLE),
            Some(Err(e)) => return conn.error(e),
            Some(Ok(found)) => {
                for (pos, v) in found {
                    if let Some(slot) = sources.get_mut(pos) {
                        *slot = v;
                    }
                }
            }
        }
    }
    let mut acc = Vec::new();
    for (i, src) in sources.iter().skip(3).enumerate() {
        bitop_fold(op, &mut acc, src.as_deref().unwrap_or_default(), i);
    }
    let dest = args.get(2).to_vec();
    let owner = conn.core.shard_of(&dest);
    let stored = call(&conn.core, owner, move |core| {
        let mut s = core.shard.borrow_mut();
        let len = store_bitop(&mut s, db, &dest, acc, now);
        s.log_key_state(db, &dest, now);
        len
    });
    match stored.await {
        Some(len) => reply(conn, |r| r.int(len)),
        None => conn.error(UNAVAILABLE),
    }
}
