//! LCS over two keys on different shards: both strings are read from their
//! owners (one mesh call per shard) and compared here with the shard's
//! code. One shard: shard/src/commands/lcs.rs.

use super::gather::{gather, Failed, WrongType};
use super::reply::reply;
use crate::session::Connection;
use shard::commands::lcs::{lcs_input, lcs_reply, NOT_STRINGS};
use shard::Args;

fn read_string(s: &mut shard::Shard, db: usize, key: &[u8], now: u64) -> Result<Option<Vec<u8>>, WrongType> {
    // `gather` counts the hit or miss itself.
    let (hits, misses) = (s.stats.keyspace_hits, s.stats.keyspace_misses);
    let found = lcs_input(s, db, key, now).map(Some).map_err(|_| WrongType);
    (s.stats.keyspace_hits, s.stats.keyspace_misses) = (hits, misses);
    found
}

pub async fn lcs(conn: &mut Connection, args: Args<'_>) {
    let keys = [args.get(1), args.get(2)];
    let found = match gather(conn, &keys, read_string).await {
        Ok(found) => found,
        Err(Failed::WrongType) => return conn.error(NOT_STRINGS),
        Err(f) => return super::gather::fail(conn, f),
    };
    let max_bulk = conn.core.config().proto_max_bulk_len;
    let (a, b) = (found[0].as_deref().unwrap_or(b""), found[1].as_deref().unwrap_or(b""));
    reply(conn, |r| lcs_reply(a, b, &args, max_bulk, r));
}
