//! MULTI / EXEC / DISCARD / WATCH / UNWATCH (Redis's multi.c). EXEC runs the
//! queued commands through the connection's ordinary routing (the router
//! runs them between `exec_begin` and `exec_end`), inside one
//! coordinator unit that locks every key they and the watched keys touch;
//! a transaction whose keys all live on this core runs inline, with no
//! lock, in one synchronous step.

use super::reply::reply;
use crate::blocking::ServingHold;
use crate::coordinator::dispatch::call;
use crate::coordinator::{wait_until_free, Footprint, Unit};
use crate::core::Core;
use crate::session::{Connection, Queued};
use shard::commands::flags::DENYOOM;
use shard::{Args, CommandSpec, Route};
use std::rc::Rc;

/// Commands that run at once even inside MULTI.
pub fn runs_in_multi(spec: &CommandSpec) -> bool {
    matches!(spec.name, "exec" | "discard" | "multi" | "watch" | "quit" | "reset")
}

pub fn queue(conn: &mut Connection, spec: &'static CommandSpec, args: &Args) {
    let Some(q) = &mut conn.state.multi else { return };
    let first = q.ranges.len() as u32;
    for a in args.iter() {
        let start = q.data.len() as u32;
        q.data.extend_from_slice(a);
        q.ranges.push((start, q.data.len() as u32));
    }
    q.commands.push((spec, first, args.len() as u32));
    conn.pipeline.local(|out| out.extend_from_slice(b"+QUEUED\r\n"));
}

pub fn multi(conn: &mut Connection) {
    if conn.state.multi.is_some() {
        return conn.error("ERR MULTI calls can not be nested");
    }
    conn.state.multi = Some(Queued::default());
    reply(conn, |r| r.ok());
}

pub async fn discard(conn: &mut Connection) {
    if conn.state.multi.take().is_none() {
        return conn.error("ERR DISCARD without MULTI");
    }
    forget_watches(conn).await;
    reply(conn, |r| r.ok());
}

pub async fn unwatch(conn: &mut Connection) {
    forget_watches(conn).await;
    reply(conn, |r| r.ok());
}

pub async fn watch(conn: &mut Connection, args: Args<'_>) {
    if conn.state.multi.is_some() {
        return conn.error("ERR WATCH inside MULTI is not allowed");
    }
    let (db, id) = (conn.state.db, conn.state.id);
    let mut by_shard: Vec<(usize, Vec<Vec<u8>>)> = Vec::new();
    for key in args.iter().skip(1) {
        let shard = conn.core.shard_of(key);
        if conn.state.watched.iter().any(|w| w.0 == shard && w.1 == db && w.2 == key) {
            continue;
        }
        conn.state.watched.push((shard, db, key.to_vec()));
        match by_shard.iter_mut().find(|(s, _)| *s == shard) {
            Some((_, keys)) => keys.push(key.to_vec()),
            None => by_shard.push((shard, vec![key.to_vec()])),
        }
    }
    for (shard, keys) in by_shard {
        call(&conn.core, shard, move |core| {
            let mut s = core.shard.borrow_mut();
            let now = shard::unix_ms();
            let db = &mut s.dbs[db];
            // EXEC checks a key live when watched for running out since.
            // One already expired does not count as changed by its deletion
            // either (Redis 7.0's `expired` flag).
            let mut absent = Vec::new();
            for k in &keys {
                let live = db.find(k, now).is_some();
                if !live {
                    absent.push(k.clone());
                }
                let expired = !live && db.has_entry(k);
                db.watch.get_or_insert_with(Default::default).watch(k, id, expired);
            }
            absent
        })
        .await
        .into_iter()
        .flatten()
        .for_each(|k| conn.state.watched_absent.push((shard, db, k)));
    }
    reply(conn, |r| r.ok());
}

/// Drops every WATCH of this connection (EXEC, DISCARD, UNWATCH, RESET,
/// a closed connection).
pub async fn forget_watches(conn: &mut Connection) {
    let watched = std::mem::take(&mut conn.state.watched);
    conn.state.watched_absent.clear();
    let id = conn.state.id;
    for (shard, db, keys) in group(&watched) {
        let forget = move |core: &Rc<Core>| {
            let mut s = core.shard.borrow_mut();
            if let Some(table) = &mut s.dbs[db].watch {
                table.unwatch(&keys, id);
                if table.is_empty() {
                    s.dbs[db].watch = None;
                }
            }
        };
        call(&conn.core, shard, forget).await;
    }
}

/// Watched keys grouped by (shard, db).
fn group(watched: &[(usize, usize, Vec<u8>)]) -> Vec<(usize, usize, Vec<Vec<u8>>)> {
    let mut groups: Vec<(usize, usize, Vec<Vec<u8>>)> = Vec::new();
    for (shard, db, key) in watched {
        match groups.iter_mut().find(|g| g.0 == *shard && g.1 == *db) {
            Some(g) => g.2.push(key.clone()),
            None => groups.push((*shard, *db, vec![key.clone()])),
        }
    }
    groups
}

/// True when a watched key changed since WATCH (or ran out of time since).
async fn watches_dirty(conn: &Connection) -> bool {
    let id = conn.state.id;
    for (shard, db, keys) in group(&conn.state.watched) {
        let absent: Vec<Vec<u8>> =
            conn.state.watched_absent.iter().filter(|w| w.0 == shard && w.1 == db).map(|w| w.2.clone()).collect();
        let dirty = call(&conn.core, shard, move |core| {
            let mut s = core.shard.borrow_mut();
            let now = shard::unix_ms();
            let db = &mut s.dbs[db];
            let touched = db.watch.as_ref().is_some_and(|t| t.is_touched(id));
            touched || keys.iter().any(|k| !absent.contains(k) && db.find(k, now).is_none() && db.has_entry(k))
        })
        .await;
        if dirty != Some(false) {
            return true;
        }
    }
    false
}

/// Everything the transaction touches, with the db each command runs in.
fn footprint(conn: &Connection, q: &Queued) -> Footprint {
    let mut f = Footprint::default();
    let mut db = conn.state.db;
    for &(spec, first, count) in &q.commands {
        let args = Args::new(&q.data, &q.ranges[first as usize..(first + count) as usize]);
        match spec.name {
            "select" => {
                if let Some(n) = shard::args::parse_i64(args.get(1)).filter(|n| (0..16384).contains(n)) {
                    db = n as usize;
                }
            }
            // DEBUG DIGEST, RELOAD, POPULATE hold every shard.
            "scan" | "randomkey" | "debug" => f.whole = true,
            // Scripts may reach keys they do not declare.
            _ if super::scripting::is_script(spec) => f.whole = true,
            _ if matches!(spec.route, Route::AllShards(_)) => f.whole = true,
            _ => {}
        }
        for i in spec.key_indexes(&args) {
            f.add(conn.core.shard_of(args.get(i)), db, args.get(i));
        }
    }
    for (shard, wdb, key) in &conn.state.watched {
        f.add(*shard, *wdb, key);
    }
    f
}

/// Only connection-local work and commands that run inline here.
fn all_inline(conn: &Connection, q: &Queued, f: &Footprint) -> bool {
    let here = conn.core.index;
    !f.whole
        && f.keys.iter().all(|(s, _)| *s == here)
        && q.commands.iter().all(|(spec, ..)| !matches!(spec.route, Route::Proxy) || is_connection_command(spec))
}

fn is_connection_command(spec: &CommandSpec) -> bool {
    matches!(spec.name, "select" | "ping" | "echo" | "unwatch" | "multi")
}

/// EXEC, once checked: the queued commands to run (`None` when a watched
/// key changed: the reply is a null array), and the unit holding their
/// keys (`None` when they all run inline here).
pub struct Exec {
    pub queued: Option<Queued>,
    unit: Option<Unit>,
    /// Running inline: this core serves blocked clients only once the whole
    /// transaction ran (a unit's keys wait for its release instead).
    hold: Option<ServingHold>,
}

/// EXEC's checks and locks. `None` when EXEC is answered already (an error,
/// EXECABORT); otherwise the router runs `queued` and calls [`exec_end`].
pub async fn exec_begin(conn: &mut Connection, args: Args<'_>) -> Option<Exec> {
    if args.len() != 1 {
        conn.state.multi = None;
        forget_watches(conn).await;
        conn.error("EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command");
        return None;
    }
    let Some(q) = conn.state.multi.take() else {
        conn.error("ERR EXEC without MULTI");
        return None;
    };
    if q.failed {
        forget_watches(conn).await;
        conn.error("EXECABORT Transaction discarded because of previous errors.");
        return None;
    }
    // maxmemory went over since the commands were queued (Redis's
    // rejectCommand on EXEC).
    if q.commands.iter().any(|(s, _, _)| s.has_flag(DENYOOM)) && !conn.state.master && conn.core.out_of_memory() {
        forget_watches(conn).await;
        conn.error(&format!("EXECABORT Transaction discarded because of: {}", shard::reply::errors::OOM));
        return None;
    }
    let f = footprint(conn, &q);
    if conn.core.cluster().enabled() && crosses_slots(&q) {
        forget_watches(conn).await;
        conn.error("CROSSSLOT Keys in request don't hash to the same slot");
        return None;
    }
    let unit = if all_inline(conn, &q, &f) {
        // One shard, this one: nothing else runs here while it executes,
        // once no unit holds its keys.
        let core = conn.core.clone();
        wait_until_free(&core, &f).await;
        None
    } else if only_batches(&q) && !watches_last_shard(conn, &f) {
        // Its commands reach other shards only in batches: the last shard's
        // locks travel with the first batch there.
        let (unit, last) = Unit::acquire_but_last(&conn.core, &f).await;
        conn.pipeline.lock_with = last;
        conn.pipeline.unit = Some(unit.id);
        Some(unit)
    } else {
        let unit = Unit::acquire(&conn.core, &f).await;
        conn.pipeline.unit = Some(unit.id);
        Some(unit)
    };
    if !conn.state.watched.is_empty() && watches_dirty(conn).await {
        let resp3 = conn.state.resp3;
        conn.pipeline.local(|out| out.extend_from_slice(if resp3 { b"_\r\n" } else { b"*-1\r\n" }));
        return Some(Exec { queued: None, unit, hold: None });
    }
    let hold = unit.is_none().then(|| conn.core.hold_serving());
    if unit.is_none() {
        // Runs here in one step: its writes reach replicas as one
        // MULTI/EXEC (a unit's do through the hub).
        if let Some(feed) = conn.core.shard.borrow_mut().repl_feed() {
            feed.begin_group();
        }
    }
    Some(Exec { queued: Some(q), unit, hold })
}

/// WATCH must look at the unit's last shard before anything runs there.
fn watches_last_shard(conn: &Connection, f: &Footprint) -> bool {
    let last = f.shards(conn.core.count).last().copied();
    conn.state.watched.iter().any(|w| Some(w.0) == last)
}

/// No command of the transaction runs in phases or calls into other cores
/// itself: what goes to other shards goes in batches.
fn only_batches(q: &Queued) -> bool {
    q.commands.iter().all(|(spec, ..)| !matches!(spec.route, Route::Proxy) || is_connection_command(spec))
}

/// After the queued commands: every reply in, the unit released, the
/// watches forgotten.
pub async fn exec_end(conn: &mut Connection, mut exec: Exec) {
    if exec.unit.is_none() && exec.queued.is_some() {
        if let Some(feed) = conn.core.shard.borrow_mut().repl_feed() {
            feed.end_group();
        }
    }
    // The blocked clients its commands made ready are served now, after
    // the whole transaction (their pops follow it in the feed).
    drop(exec.hold.take());
    conn.pipeline.flush(&conn.core).await;
    conn.pipeline.unit = None;
    conn.pipeline.lock_with = None;
    if let Some(unit) = exec.unit {
        unit.release().await;
    }
    forget_watches(conn).await;
}

/// Redis Cluster: every key of the transaction in one slot.
fn crosses_slots(q: &Queued) -> bool {
    let mut slot = None;
    for &(spec, first, count) in &q.commands {
        let args = Args::new(&q.data, &q.ranges[first as usize..(first + count) as usize]);
        for i in spec.key_indexes(&args) {
            let s = crate::slot::key_slot(args.get(i));
            if *slot.get_or_insert(s) != s {
                return true;
            }
        }
    }
    false
}
