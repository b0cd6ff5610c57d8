//! Geo searches that STORE on another shard than their source's
//! (GEORADIUS[BYMEMBER] STORE/STOREDIST, GEOSEARCHSTORE): the search runs
//! on the source's owner with the shard's own code and hands back the
//! result set, which is saved on the destination's owner, all inside the
//! command's coordinator unit (atomic). Everything else: the shard
//! (shard/src/commands/geo.rs).

use super::gather::LOST;
use super::zset::store_on_owner;
use crate::coordinator::dispatch::call;
use crate::session::Connection;
use shard::commands::geo::{flags_of, search, Outcome, SEARCHSTORE};
use shard::commands::zset::{limits, zset_read};
use shard::reply::errors::WRONGTYPE;
use shard::{Args, CommandSpec, Reply};

pub async fn store(conn: &mut Connection, spec: &CommandSpec, args: Args<'_>) {
    let flags = flags_of(spec.name);
    let src = args.get(if flags & SEARCHSTORE != 0 { 2 } else { 1 }).to_vec();
    let (mut buf, mut ranges) = (Vec::new(), Vec::with_capacity(args.len()));
    for a in args.iter() {
        let start = buf.len() as u32;
        buf.extend_from_slice(a);
        ranges.push((start, buf.len() as u32));
    }
    let (db, resp3, owner) = (conn.state.db, conn.state.resp3, conn.core.shard_of(&src));
    let done = call(&conn.core, owner, move |core| {
        let mut s = core.shard.borrow_mut();
        s.stats.commands += 1;
        let limits = limits(&s);
        let args = Args::new(&buf, &ranges);
        let mut out = Vec::new();
        let found = match zset_read(&mut s, db, &src, shard::unix_ms()) {
            Err(_) => Err(WRONGTYPE.to_string()),
            Ok(z) => search(z.as_deref(), &args, flags, limits, &mut Reply::new(&mut out, resp3)),
        };
        found.map(|outcome| match outcome {
            Outcome::Replied => Err(out),
            Outcome::Store(dest, z) => Ok((dest, z)),
        })
    })
    .await;
    match done {
        None => conn.error(LOST),
        Some(Err(e)) => conn.error(&e),
        Some(Ok(Err(replied))) => conn.pipeline.local(|out| out.extend_from_slice(&replied)),
        Some(Ok(Ok((dest, z)))) => {
            let event = if flags & SEARCHSTORE != 0 { "geosearchstore" } else { "georadiusstore" };
            store_on_owner(conn, args.get(dest).to_vec(), z, event).await
        }
    }
}
