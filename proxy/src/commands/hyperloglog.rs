//! PFCOUNT and PFMERGE over keys of several shards, as one coordinator
//! unit: registers are merged on each owner ([`gather`]) and combined here;
//! PFMERGE stores on the destination's owner ([`store_merged`]). One shard,
//! and PFADD: shard/src/commands/hyperloglog.rs. PFSELFTEST runs here, on
//! the connection's core (it blocks it, as it blocks Redis).

use super::gather::{keys_by_shard, LOST as UNAVAILABLE};
use super::reply::reply;
use crate::coordinator::dispatch::call;
use crate::session::Connection;
use shard::commands::hyperloglog::{gather, store_merged};
use shard::types::hll::{count_registers, REGISTERS};
use shard::Args;

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
        let stored = store_merged(&mut s, db, &dest, &max, dense, max_bytes, now);
        s.log_key_state(db, &dest, now);
        stored
    });
    match stored.await {
        Some(Ok(())) => reply(conn, |r| r.ok()),
        Some(Err(e)) => conn.error(e),
        None => conn.error(UNAVAILABLE),
    }
}

/// PFSELFTEST: Redis's self test of the HLL code (`hll::selftest`), drawing
/// from the C library's rand() as Redis does.
pub fn pfselftest(conn: &mut Connection) {
    let max_bytes = conn.core.config().hll_sparse_max_bytes as usize;
    // SAFETY: rand() takes no arguments.
    let rand = || unsafe { libc::rand() } as u64;
    match shard::types::hll::selftest(|| rand() | rand() << 32, max_bytes) {
        Ok(()) => reply(conn, |r| r.ok()),
        Err(e) => conn.error(&e),
    }
}
