//! Bitmap and HyperLogLog commands whose keys live on several shards. BITOP
//! reads its operands on their owners, computes here and stores the result
//! on the destination's owner; PFCOUNT and PFMERGE merge registers on each
//! owner and combine them here. Single-shard forms run on the owner.

use super::reply::reply;
use crate::coordinator::dispatch::call;
use crate::session::Connection;
use shard::commands::bitmap::{bitop_fold, read_operand, store_bitop, BitOp, BITOP_NOT_KEYS};
use shard::commands::hyperloglog::{gather, store_merged};
use shard::reply::errors::SYNTAX;
use shard::types::hll::{count_registers, REGISTERS};
use shard::Args;

const UNAVAILABLE: &str = "ERR shard unavailable (server shutting down)";

/// Keys (with their argument positions) from argument `first` on, grouped
/// by owning shard.
type ShardKeys = (usize, Vec<(usize, Vec<u8>)>);

fn keys_by_shard(conn: &Connection, args: &Args, first: usize) -> Vec<ShardKeys> {
    let mut groups: Vec<ShardKeys> = Vec::new();
    for (pos, key) in args.iter().enumerate().skip(first) {
        let shard = conn.core.shard_of(key);
        let entry = (pos, key.to_vec());
        match groups.iter_mut().find(|(s, _)| *s == shard) {
            Some(g) => g.1.push(entry),
            None => groups.push((shard, vec![entry])),
        }
    }
    groups
}

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
        let len = store_bitop(&mut s.dbs[db], &dest, acc, now);
        s.log_key_state(db, &dest, now);
        len
    });
    match stored.await {
        Some(len) => reply(conn, |r| r.int(len)),
        None => conn.error(UNAVAILABLE),
    }
}

/// Registers of the union of every key's HLL (merged on each owner, then
/// here) and whether any was dense; the error of the first failing key in
/// argument order, as Redis checks them in order.
async fn merge_all(conn: &Connection, args: &Args<'_>) -> Result<(Vec<u8>, bool), &'static str> {
    let (db, now) = (conn.state.db, conn.now);
    let mut max = vec![0u8; REGISTERS];
    let mut dense = false;
    let mut first_err: Option<(usize, &'static str)> = None;
    for (shard, keys) in keys_by_shard(conn, args, 1) {
        let part = call(&conn.core, shard, move |core| {
            let mut s = core.shard.borrow_mut();
            let mut max = vec![0u8; REGISTERS];
            let keys = keys.iter().map(|(pos, k)| (*pos, k.as_slice()));
            let (dense, err) = gather(&mut s.dbs[db], keys, &mut max, now);
            (max, dense, err)
        });
        let (part, part_dense, err) = part.await.ok_or(UNAVAILABLE)?;
        dense |= part_dense;
        if let Some(e) = err {
            if first_err.is_none_or(|(pos, _)| e.0 < pos) {
                first_err = Some(e);
            }
        }
        for (m, p) in max.iter_mut().zip(&part) {
            *m = (*m).max(*p);
        }
    }
    match first_err {
        Some((_, e)) => Err(e),
        None => Ok((max, dense)),
    }
}

/// Multi-key PFCOUNT over several shards: the union's cardinality, no write.
pub async fn pfcount(conn: &mut Connection, args: Args<'_>) {
    match merge_all(conn, &args).await {
        Ok((max, _)) => reply(conn, |r| r.int(count_registers(&max) as i64)),
        Err(e) => conn.error(e),
    }
}

/// PFMERGE over several shards: the union is written on the destination's
/// owner. Not atomic across cores: a source changed between the phases may
/// or may not be included.
pub async fn pfmerge(conn: &mut Connection, args: Args<'_>) {
    let (max, dense) = match merge_all(conn, &args).await {
        Ok(m) => m,
        Err(e) => return conn.error(e),
    };
    let (db, now) = (conn.state.db, conn.now);
    let dest = args.get(1).to_vec();
    let owner = conn.core.shard_of(&dest);
    let stored = call(&conn.core, owner, move |core| {
        let mut s = core.shard.borrow_mut();
        let max_bytes = s.config.hll_sparse_max_bytes as usize;
        let stored = store_merged(&mut s.dbs[db], &dest, &max, dense, max_bytes, now);
        s.log_key_state(db, &dest, now);
        stored
    });
    match stored.await {
        Some(Ok(())) => reply(conn, |r| r.ok()),
        Some(Err(e)) => conn.error(e),
        None => conn.error(UNAVAILABLE),
    }
}
