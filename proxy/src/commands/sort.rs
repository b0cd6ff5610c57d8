//! SORT and SORT_RO over several shards. Without patterns that read keys
//! (BY with '*', GET other than '#') a SORT is routed like any keyed
//! command; otherwise, or when STORE names another shard's key, it runs
//! here in phases: the elements are collected on the source's owner, the
//! keys the patterns name are read from their owners (one mesh call per
//! shard), the shard's own code sorts, and a STORE result is saved on the
//! destination's owner (inside the command's unit). The pattern keys are
//! read without locks: a SORT may see another unit's writes to them
//! partially (Redis's SORT sees one instant). One shard:
//! shard/src/commands/sort.rs.

use super::gather::LOST;
use super::reply::reply;
use crate::coordinator::dispatch::call;
use crate::session::{Connection, Deferred};
use shard::commands::sort::{collect, finish, parse, pattern_key, reply_rows, store_rows, value_at, Collected};
use shard::config::ClusterMode;
use shard::reply::errors::WRONGTYPE;
use shard::{Args, CommandSpec, Reply};
use std::collections::HashMap;

/// A pattern key: (key, hash field).
type PatternKey = (Vec<u8>, Option<Vec<u8>>);

fn parsed<'a>(
    conn: &Connection,
    spec: &CommandSpec,
    args: &Args<'a>,
) -> Result<shard::commands::sort::Opts<'a>, &'static str> {
    let cluster = conn.core.config().cluster_mode != ClusterMode::No;
    parse(args, spec.name == "sort_ro", cluster)
}

/// Routes a SORT: on its keys' owner when that is all it reads.
pub fn route(conn: &mut Connection, spec: &'static CommandSpec, args: Args) -> Option<Deferred> {
    let reads_others = conn.core.count > 1 && parsed(conn, spec, &args).is_ok_and(|o| o.reads_other_keys());
    match conn.owner_of_keys(spec, &args) {
        _ if reads_others => return Some(Deferred::Command(spec)),
        Some(shard) if shard == conn.core.index => conn.run_local(spec, args),
        Some(shard) => {
            let (db, resp3) = (conn.state.db, conn.state.resp3);
            conn.pipeline.remote(shard, spec, db, resp3, args.iter())
        }
        None => return Some(Deferred::Command(spec)),
    }
    None
}

/// A SORT in phases (patterns over shards, or STORE on another shard).
pub async fn run(conn: &mut Connection, spec: &CommandSpec, args: Args<'_>) {
    let o = match parsed(conn, spec, &args) {
        Ok(o) => o,
        Err(e) => return conn.error(e),
    };
    let (db, src, shape) = (conn.state.db, args.get(1).to_vec(), o.shape());
    let collected = call(&conn.core, conn.core.shard_of(&src), move |core| {
        let mut s = core.shard.borrow_mut();
        s.stats.commands += 1;
        let Some(e) = s.dbs[db].get(&src, shard::unix_ms()) else {
            s.stats.keyspace_misses += 1;
            return collect(None, shape);
        };
        let found = collect(Some(&e.value), shape);
        s.stats.keyspace_hits += 1;
        found
    })
    .await;
    let collected = match collected {
        None => return conn.error(LOST),
        Some(Err(_)) => return conn.error(WRONGTYPE),
        Some(Ok(c)) => c,
    };
    let values = match read_pattern_keys(conn, &o, &collected).await {
        Some(v) => v,
        None => return conn.error(LOST),
    };
    let rows = finish(&o, collected, &mut |pattern, elem| match pattern {
        b"#" => Some(elem.to_vec()),
        _ => pattern_key(pattern, elem).and_then(|k| values.get(&k).cloned().flatten()),
    });
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => return conn.error(e),
    };
    let Some(dest) = o.store else {
        return reply(conn, |r| reply_rows(r, &rows));
    };
    let (dest, n) = (dest.to_vec(), rows.len());
    let done = call(&conn.core, conn.core.shard_of(&dest), move |core| {
        let mut s = core.shard.borrow_mut();
        let (now, fill) = (shard::unix_ms(), s.config.list_max_listpack_size);
        let mut sink = Vec::new();
        store_rows(&mut s.dbs[db], &dest, &rows, fill, now, &mut Reply::new(&mut sink, false));
        s.log_key_state(db, &dest, now);
        s.signal_ready(db, &dest);
    })
    .await;
    match done {
        Some(()) => reply(conn, |r| r.int(n as i64)),
        None => conn.error(LOST),
    }
}

/// Every value the patterns read for the collected elements, from the
/// keys' owners, one call per shard.
async fn read_pattern_keys(
    conn: &Connection,
    o: &shard::commands::sort::Opts<'_>,
    c: &Collected,
) -> Option<HashMap<PatternKey, Option<Vec<u8>>>> {
    let sorting = !o.dontsort && !c.set_sorted_alpha;
    let patterns: Vec<&[u8]> = o.by.filter(|_| sorting).into_iter().chain(o.gets.iter().copied()).collect();
    let mut by_shard: Vec<(usize, Vec<PatternKey>)> = Vec::new();
    let mut values = HashMap::new();
    for elem in &c.elems {
        for pattern in &patterns {
            let Some(k) = pattern_key(pattern, elem) else { continue };
            if values.contains_key(&k) {
                continue;
            }
            values.insert(k.clone(), None);
            let shard = conn.core.shard_of(&k.0);
            match by_shard.iter_mut().find(|(s, _)| *s == shard) {
                Some((_, keys)) => keys.push(k),
                None => by_shard.push((shard, vec![k])),
            }
        }
    }
    let db = conn.state.db;
    for (shard, keys) in by_shard {
        let found = call(&conn.core, shard, move |core| {
            let mut s = core.shard.borrow_mut();
            let now = shard::unix_ms();
            keys.into_iter()
                .map(|k| {
                    let v = value_at(&mut s.dbs[db], &k.0, k.1.as_deref(), now);
                    (k, v)
                })
                .collect::<Vec<_>>()
        })
        .await?;
        values.extend(found);
    }
    Some(values)
}
