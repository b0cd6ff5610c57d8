//! Reading values of one type from the shards that own them, for the
//! multi-key commands whose keys span shards (set and sorted-set algebra):
//! one mesh call per owning shard, results in key order.

use crate::coordinator::dispatch::call;
use crate::session::Connection;
use shard::reply::errors::WRONGTYPE;
use shard::Shard;

pub const LOST: &str = "ERR shard unavailable (server shutting down)";

/// Why gathering failed.
pub enum Failed {
    WrongType,
    Lost,
}

/// Answers a failed gathering with Redis's error.
pub fn fail(conn: &mut Connection, f: Failed) {
    conn.error(match f {
        Failed::WrongType => WRONGTYPE,
        Failed::Lost => LOST,
    })
}

/// The wrong type at a key.
pub struct WrongType;

/// Reads the value at one key on its owner: `Ok(None)` when missing.
pub type ReadKey<T> = fn(&mut Shard, usize, &[u8], u64) -> Result<Option<T>, WrongType>;

/// Keys bound for one shard, with their positions in the request.
pub type ShardKeys = (usize, Vec<(usize, Vec<u8>)>);

/// What `read` found at every key (`None`: missing), in key order; fails
/// with WRONGTYPE if any key holds another type, as Redis does before
/// computing anything.
pub async fn gather<T: Send + 'static>(
    conn: &Connection,
    keys: &[&[u8]],
    read: ReadKey<T>,
) -> Result<Vec<Option<T>>, Failed> {
    let db = conn.state.db;
    let mut groups: Vec<ShardKeys> = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let shard = conn.core.shard_of(k);
        let item = (i, k.to_vec());
        match groups.iter_mut().find(|g| g.0 == shard) {
            Some(g) => g.1.push(item),
            None => groups.push((shard, vec![item])),
        }
    }
    let mut out: Vec<Option<T>> = (0..keys.len()).map(|_| None).collect();
    let mut wrong = false;
    for (shard, keys) in groups {
        let found = call(&conn.core, shard, move |core| {
            let mut s = core.shard.borrow_mut();
            let now = shard::unix_ms();
            s.stats.commands += 1;
            let mut found = Vec::with_capacity(keys.len());
            for (i, k) in keys {
                let f = read(&mut s, db, &k, now);
                match f {
                    Ok(None) => s.stats.keyspace_misses += 1,
                    _ => s.stats.keyspace_hits += 1,
                }
                found.push((i, f));
            }
            found
        })
        .await
        .ok_or(Failed::Lost)?;
        for (i, f) in found {
            match f {
                Ok(v) => out[i] = v,
                Err(WrongType) => wrong = true,
            }
        }
    }
    if wrong {
        return Err(Failed::WrongType);
    }
    Ok(out)
}

/// Keys (with their argument positions) from argument `first` on, grouped
/// by owning shard.
pub fn keys_by_shard(conn: &Connection, args: &shard::Args, first: usize) -> Vec<ShardKeys> {
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
