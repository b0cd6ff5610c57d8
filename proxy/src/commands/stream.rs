//! XREAD and XREADGROUP, whose keys may live on several shards: one call
//! to the owner when they share one (checks, `$`, serving, as Redis does
//! in one step), else the checks on every owner first (the first failing
//! key's error wins) and then the reads; the keys served come back in the
//! command's order. BLOCK waits through `crate::blocking` with each key's
//! start resolved when it blocked. The shard side:
//! shard/src/commands/stream/read.rs.

use super::reply::reply;
use crate::blocking::request::XReadWait;
use crate::blocking::{BlockOp, BlockWait};
use crate::coordinator::dispatch::call;
use crate::session::Connection;
use shard::commands::stream::read::{self, From, XRead};
use shard::Args;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LOST: &str = "ERR a shard did not answer";

/// The keys' indexes grouped by owner, in the order owners first appear.
fn by_owner(conn: &Connection, x: &XRead) -> Vec<(usize, Vec<usize>)> {
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    for (i, key) in x.keys.iter().enumerate() {
        let owner = conn.core.shard_of(key);
        match groups.iter_mut().find(|(s, _)| *s == owner) {
            Some(g) => g.1.push(i),
            None => groups.push((owner, vec![i])),
        }
    }
    groups
}

pub async fn xread(conn: &mut Connection, name: &str, args: Args<'_>) -> Option<BlockWait> {
    let x = match read::parse(&args, name == "xreadgroup") {
        Ok(x) => x,
        Err(e) => {
            conn.error(&e);
            return None;
        }
    };
    let (db, resp3) = (conn.state.db, conn.state.resp3);
    let x = Arc::new(x);
    let groups = by_owner(conn, &x);
    let mut pieces: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut starts: Vec<(usize, From)> = Vec::new();
    let counted = |s: &mut shard::Shard, x: &XRead, served: bool| {
        s.stats.commands += 1;
        if x.group.is_some() && served {
            s.dirty += 1;
        }
    };
    if groups.len() == 1 {
        let (owner, which) = groups[0].clone();
        let xr = x.clone();
        let done = call(&conn.core, owner, move |core| {
            let mut s = core.shard.borrow_mut();
            let now = shard::unix_ms();
            let r = read::check(&mut s, db, now, &xr, &which).map(|froms| {
                let pieces = read::serve_resolved(&mut s, db, now, resp3, &xr, &which, &froms);
                (which.into_iter().zip(froms).collect::<Vec<_>>(), pieces)
            });
            counted(&mut s, &xr, matches!(&r, Ok((_, p)) if !p.is_empty()));
            r
        })
        .await;
        match done {
            None => {
                conn.error(LOST);
                return None;
            }
            Some(Err((_, e))) => {
                conn.error(&e);
                return None;
            }
            Some(Ok((s, p))) => {
                starts = s;
                pieces = p;
            }
        }
    } else {
        let mut first_error: Option<(usize, String)> = None;
        for (owner, which) in &groups {
            let (xr, which) = (x.clone(), which.clone());
            let checked = call(&conn.core, *owner, move |core| {
                let mut s = core.shard.borrow_mut();
                let r = read::check(&mut s, db, shard::unix_ms(), &xr, &which);
                r.map(|froms| which.into_iter().zip(froms).collect::<Vec<_>>())
            })
            .await;
            match checked {
                None => first_error = Some((0, LOST.into())),
                Some(Err(e)) => {
                    if first_error.as_ref().is_none_or(|(i, _)| e.0 < *i) {
                        first_error = Some(e);
                    }
                }
                Some(Ok(s)) => starts.extend(s),
            }
        }
        if let Some((_, e)) = first_error {
            conn.error(&e);
            return None;
        }
        for (owner, which) in &groups {
            let xr = x.clone();
            let froms: Vec<From> = which
                .iter()
                .map(|i| starts.iter().find(|(k, _)| k == i).map(|(_, f)| *f).unwrap_or(From::New))
                .collect();
            let which = which.clone();
            let served = call(&conn.core, *owner, move |core| {
                let mut s = core.shard.borrow_mut();
                let p = read::serve_resolved(&mut s, db, shard::unix_ms(), resp3, &xr, &which, &froms);
                counted(&mut s, &xr, !p.is_empty());
                p
            })
            .await;
            pieces.extend(served.unwrap_or_default());
        }
        pieces.sort_by_key(|(i, _)| *i);
    }
    if !pieces.is_empty() || x.block.is_none() {
        let bytes = read::join(resp3, &pieces);
        reply(conn, |r| r.raw(&bytes));
        return None;
    }
    let ms = x.block.unwrap_or(0);
    let deadline = (ms > 0).then(|| Instant::now().checked_add(Duration::from_millis(ms))).flatten();
    starts.sort_by_key(|(i, _)| *i);
    let wait = XReadWait { read: (*x).clone(), starts: starts.iter().map(|(i, f)| (x.keys[*i].clone(), *f)).collect() };
    let keys = x.keys.clone();
    crate::blocking::start(conn, keys, BlockOp::XRead(Arc::new(wait)), deadline).await
}
