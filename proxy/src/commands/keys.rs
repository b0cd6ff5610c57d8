//! Keyspace commands that span shards: SCAN (its cursor walks every shard),
//! RANDOMKEY, and MSETNX/RENAME/COPY when their keys live on different
//! shards (two phases over the mesh, inside one coordinator unit). One
//! shard, and every other keyspace command: shard/src/commands/keys.rs.

use super::reply::reply;
use crate::coordinator::dispatch::{call, call_all};
use crate::session::Connection;
use shard::args::parse_i64;
use shard::commands::aggregate::parse_cursor;
use shard::commands::keys::parse_copy;
use shard::db::Ttl;
use shard::glob::glob_match;
use shard::notify;
use shard::reply::errors::*;
use shard::value::Value;
use shard::Args;

/// Bits of the cursor that name the shard (the rest is the position in that
/// shard's hash space).
fn shard_bits(shards: usize) -> u32 {
    usize::BITS - (shards - 1).leading_zeros()
}

/// The cursor for position `pos` of shard `part`.
fn cursor_of(part: usize, pos: u64, bits: u32) -> u64 {
    if bits == 0 {
        pos
    } else {
        ((part as u64) << (64 - bits)) | pos
    }
}

/// SCAN over every shard: the cursor's top bits name a shard, the rest a
/// position in its hash space. As Redis's COUNT is a hint over the whole
/// keyspace, one call goes on to the next shards, from their start, while
/// fewer than COUNT keys were visited, so a small keyspace comes back in
/// one reply with cursor 0. Every key present throughout is still seen:
/// each shard is walked in hash order, and a shard's end moves the cursor
/// to the next shard's start.
pub async fn scan(conn: &mut Connection, args: Args<'_>) {
    let Some(cursor) = parse_cursor(args.get(1)) else {
        return conn.error("ERR invalid cursor");
    };
    let (mut count, mut pattern, mut type_name) = (10usize, None, None);
    let mut i = 2;
    while i < args.len() {
        let has_value = i + 1 < args.len();
        if args.is(i, "count") && has_value {
            match parse_i64(args.get(i + 1)) {
                None => return conn.error(NOT_INTEGER),
                Some(n) if n < 1 => return conn.error(SYNTAX),
                Some(n) => count = n.min(1 << 20) as usize,
            }
        } else if args.is(i, "match") && has_value {
            let p = args.get(i + 1);
            pattern = (p != b"*").then(|| p.to_vec());
        } else if args.is(i, "type") && has_value {
            type_name = Some(String::from_utf8_lossy(args.get(i + 1)).to_ascii_lowercase());
        } else {
            return conn.error(SYNTAX);
        }
        i += 2;
    }
    // A per-core node port scans its own shard only, as a cluster node does.
    let (shards, first) = if conn.state.shard_port { (1, conn.core.index) } else { (conn.core.count, 0) };
    let bits = shard_bits(shards);
    let (mut part, mut pos) =
        if bits == 0 { (0, cursor) } else { ((cursor >> (64 - bits)) as usize, cursor & (u64::MAX >> bits)) };
    let db = conn.state.db;
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut visited = 0usize;
    let next_cursor = loop {
        if part >= shards {
            break 0;
        }
        let budget = count - visited;
        let (pattern, type_name) = (pattern.clone(), type_name.clone());
        let found = call(&conn.core, first + part, move |core| {
            let mut s = core.shard.borrow_mut();
            let now = shard::unix_ms();
            let (mut keys, mut visited) = (Vec::new(), 0usize);
            let next = s.dbs[db].scan(pos, bits, budget, now, |e| {
                visited += 1;
                let keep = pattern.as_ref().is_none_or(|p| glob_match(p, &e.key, false))
                    && type_name.as_ref().is_none_or(|t| e.value.type_name() == t);
                if keep {
                    keys.push(e.key.to_vec());
                }
            });
            s.stats.commands += 1;
            (next, keys, visited)
        })
        .await;
        let Some((next, found, seen)) = found else {
            return conn.error("ERR shard unavailable (server shutting down)");
        };
        keys.extend(found);
        visited += seen;
        match next {
            Some(p) => break cursor_of(part, p, bits),
            None if part + 1 < shards => {
                part += 1;
                pos = 0;
                if visited >= count {
                    break cursor_of(part, 0, bits);
                }
            }
            None => break 0,
        }
    };
    reply(conn, |r| {
        r.array(2);
        r.bulk(next_cursor.to_string().as_bytes());
        r.array(keys.len());
        for k in &keys {
            r.bulk(k);
        }
    });
}

pub async fn randomkey(conn: &mut Connection) {
    let db = conn.state.db;
    let pick = move |core: &std::rc::Rc<crate::core::Core>| {
        let mut s = core.shard.borrow_mut();
        let now = shard::unix_ms();
        let len = s.dbs[db].len();
        let shard = &mut *s;
        let mut seed = shard.random();
        let key = shard.dbs[db].random_key(now, || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        });
        (len, key.map(|k| k.to_vec()))
    };
    let picks = if conn.state.shard_port { vec![Some(pick(&conn.core))] } else { call_all(&conn.core, pick).await };
    let candidates: Vec<(usize, Vec<u8>)> = picks.into_iter().flatten().filter_map(|(n, k)| Some((n, k?))).collect();
    let total: usize = candidates.iter().map(|c| c.0).sum();
    let chosen = if total == 0 {
        candidates.into_iter().next().map(|c| c.1)
    } else {
        // Weighted by each shard's size, so every key is about equally likely.
        let mut ticket = (conn.core.shard.borrow_mut().random() % total as u64) as usize;
        candidates
            .into_iter()
            .find(|(n, _)| {
                let hit = ticket < *n;
                ticket = ticket.saturating_sub(*n);
                hit
            })
            .map(|c| c.1)
    };
    reply(conn, |r| match chosen {
        Some(k) => r.bulk(&k),
        None => r.null(),
    });
}

/// Key/value pairs bound for one shard.
type ShardPairs = (usize, Vec<(Vec<u8>, Vec<u8>)>);

/// Groups key/value pairs by owning shard.
fn pairs_by_shard(conn: &Connection, args: &Args) -> Vec<ShardPairs> {
    let mut groups: Vec<ShardPairs> = Vec::new();
    for i in (1..args.len()).step_by(2) {
        let shard = conn.core.shard_of(args.get(i));
        let pair = (args.get(i).to_vec(), args.get(i + 1).to_vec());
        match groups.iter_mut().find(|(s, _)| *s == shard) {
            Some(g) => g.1.push(pair),
            None => groups.push((shard, vec![pair])),
        }
    }
    groups
}

/// MSETNX over several shards: first every shard checks that none of its
/// keys exist, then every shard sets its keys. The coordinator unit holding
/// every key makes the two phases one step: no other client creates a key
/// in between, so the key set is granted once.
pub async fn msetnx(conn: &mut Connection, args: Args<'_>) {
    let db = conn.state.db;
    let groups = pairs_by_shard(conn, &args);
    for (shard, pairs) in &groups {
        let keys: Vec<Vec<u8>> = pairs.iter().map(|p| p.0.clone()).collect();
        let exists = call(&conn.core, *shard, move |core| {
            let mut s = core.shard.borrow_mut();
            let now = shard::unix_ms();
            keys.iter().any(|k| s.dbs[db].contains(k, now))
        })
        .await;
        if exists != Some(false) {
            return reply(conn, |r| r.int(0));
        }
    }
    for (shard, pairs) in groups {
        call(&conn.core, shard, move |core| {
            let mut s = core.shard.borrow_mut();
            let now = shard::unix_ms();
            for (k, v) in &pairs {
                s.dbs[db].set(k, Value::from_bytes_encoded(v), Ttl::Clear, now);
                s.notify(notify::STRING, "set", db, k);
                s.log_effect(db, &[b"SET", k, v]);
            }
        })
        .await;
    }
    reply(conn, |r| r.int(1));
}

/// A value moving between shards, with its expiry.
type Moved = Option<(Value, Option<u64>)>;

async fn exists_on(conn: &Connection, shard: usize, db: usize, key: Vec<u8>) -> bool {
    call(&conn.core, shard, move |core| core.shard.borrow_mut().dbs[db].contains(&key, shard::unix_ms()))
        .await
        .unwrap_or(false)
}

/// Writes a moved value at `key`, replacing any (deleted first, so `new`
/// fires, as Redis's dbDelete + dbAdd), and raises `event` (`rename_to`,
/// `copy_to`).
async fn put_on(conn: &Connection, to: (usize, usize), key: Vec<u8>, moved: (Value, Option<u64>), event: &'static str) {
    let ((shard, db), (value, expire)) = (to, moved);
    call(&conn.core, shard, move |core| {
        let ttl = expire.map_or(Ttl::Clear, Ttl::At);
        let mut s = core.shard.borrow_mut();
        let now = shard::unix_ms();
        s.dbs[db].remove(&key, now);
        s.dbs[db].set(&key, value, ttl, now);
        s.notify(notify::GENERIC, event, db, &key);
        s.log_key_state(db, &key, now);
        s.signal_ready(db, &key);
    })
    .await;
}

/// RENAME/RENAMENX with source and destination on different shards.
pub async fn rename(conn: &mut Connection, args: Args<'_>, nx: bool) {
    let (src, dst) = (args.get(1).to_vec(), args.get(2).to_vec());
    let (from, to) = (conn.core.shard_of(&src), conn.core.shard_of(&dst));
    let db = conn.state.db;
    let src_exists = exists_on(conn, from, db, src.clone()).await;
    if !src_exists {
        return conn.error(NO_SUCH_KEY);
    }
    if nx && exists_on(conn, to, db, dst.clone()).await {
        return reply(conn, |r| r.int(0));
    }
    let taken: Moved = call(&conn.core, from, move |core| {
        let mut s = core.shard.borrow_mut();
        let entry = s.dbs[db].remove(&src, shard::unix_ms())?;
        s.notify(notify::GENERIC, "rename_from", db, &src);
        s.log_effect(db, &[b"DEL", &src]);
        let expire = entry.expire_at();
        Some((entry.value, expire))
    })
    .await
    .flatten();
    let Some((value, expire)) = taken else {
        return conn.error(NO_SUCH_KEY);
    };
    put_on(conn, (to, db), dst, (value, expire), "rename_to").await;
    if nx {
        reply(conn, |r| r.int(1))
    } else {
        reply(conn, |r| r.ok())
    }
}

/// COPY with source and destination on different shards.
pub async fn copy(conn: &mut Connection, args: Args<'_>) {
    let databases = conn.core.config().databases;
    let cluster = conn.core.cluster().enabled();
    let options = match parse_copy(&args, conn.state.db, databases, cluster) {
        Ok(o) => o,
        Err(e) => return conn.error(e),
    };
    let (src, dst) = (args.get(1).to_vec(), args.get(2).to_vec());
    let (from, to) = (conn.core.shard_of(&src), conn.core.shard_of(&dst));
    let db = conn.state.db;
    let copied: Moved = call(&conn.core, from, move |core| {
        let mut s = core.shard.borrow_mut();
        let entry = s.dbs[db].get(&src, shard::unix_ms())?;
        Some((entry.value.clone(), entry.expire_at()))
    })
    .await
    .flatten();
    let Some((value, expire)) = copied else {
        return reply(conn, |r| r.int(0));
    };
    let dest_db = options.dest_db;
    if !options.replace && exists_on(conn, to, dest_db, dst.clone()).await {
        return reply(conn, |r| r.int(0));
    }
    put_on(conn, (to, dest_db), dst, (value, expire), "copy_to").await;
    reply(conn, |r| r.int(1));
}
