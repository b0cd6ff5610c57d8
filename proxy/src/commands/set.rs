//! Set commands whose keys live on different shards: SINTER SUNION SDIFF,
//! their STORE forms, SINTERCARD and SMOVE. The member sets are gathered
//! from their owners over the mesh (one call per owning shard), combined
//! here with the shard's own set algebra, and a STORE result is saved on
//! the destination's owner, all inside one coordinator unit (atomic). One
//! shard, and every other set command: shard/src/commands/set.rs.

use super::gather::{fail, gather, WrongType, LOST};
use super::reply::reply;
use crate::coordinator::dispatch::call;
use crate::session::Connection;
use shard::commands::set::{add_member, inter_card, parse_sintercard, reply_op, save, store_op, Op};
use shard::notify;
use shard::reply::errors::WRONGTYPE;
use shard::types::set::Set;
use shard::value::Value;
use shard::Args;

/// A copy of the set at `key`.
fn read_set(s: &mut shard::Shard, db: usize, key: &[u8], now: u64) -> Result<Option<Box<Set>>, WrongType> {
    match s.dbs[db].get(key, now).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::Set(set)) => Ok(Some(set.clone())),
        Some(_) => Err(WrongType),
    }
}

fn max_intset(conn: &Connection) -> usize {
    conn.core.config().set_max_intset_entries as usize
}

/// SINTER, SUNION, SDIFF over shards.
pub async fn op(conn: &mut Connection, args: Args<'_>, op: Op) {
    let keys: Vec<&[u8]> = args.iter().skip(1).collect();
    match gather(conn, &keys, read_set).await {
        Ok(sets) => {
            let refs: Vec<Option<&Set>> = sets.iter().map(|s| s.as_deref()).collect();
            let max = max_intset(conn);
            reply(conn, |r| reply_op(r, op, &refs, max));
        }
        Err(f) => fail(conn, f),
    }
}

/// SINTERSTORE, SUNIONSTORE, SDIFFSTORE over shards.
pub async fn store(conn: &mut Connection, args: Args<'_>, op: Op) {
    let keys: Vec<&[u8]> = args.iter().skip(2).collect();
    let sets = match gather(conn, &keys, read_set).await {
        Ok(sets) => sets,
        Err(f) => return fail(conn, f),
    };
    let refs: Vec<Option<&Set>> = sets.iter().map(|s| s.as_deref()).collect();
    let result = store_op(op, &refs, max_intset(conn));
    drop(refs);
    let (dst, db) = (args.get(1).to_vec(), conn.state.db);
    let owner = conn.core.shard_of(&dst);
    let saved = call(&conn.core, owner, move |core| {
        let mut s = core.shard.borrow_mut();
        let now = shard::unix_ms();
        let n = save(&mut s, db, &dst, result, now, op);
        s.log_key_state(db, &dst, now);
        n
    })
    .await;
    match saved {
        Some(n) => reply(conn, |r| r.int(n as i64)),
        None => conn.error(LOST),
    }
}

/// SINTERCARD over shards.
pub async fn sintercard(conn: &mut Connection, args: Args<'_>) {
    let (numkeys, limit) = match parse_sintercard(&args) {
        Ok(p) => p,
        Err(e) => return conn.error(e),
    };
    let keys: Vec<&[u8]> = args.iter().skip(2).take(numkeys).collect();
    match gather(conn, &keys, read_set).await {
        Ok(sets) => {
            let refs: Vec<Option<&Set>> = sets.iter().map(|s| s.as_deref()).collect();
            let n = inter_card(&refs, limit);
            reply(conn, |r| r.int(n as i64));
        }
        Err(f) => fail(conn, f),
    }
}

/// What the source's shard did for SMOVE.
enum Taken {
    Missing,
    WrongType,
    NotMember,
    Moved,
}

/// SMOVE with source and destination on different shards: check the
/// destination's type, take the member out of the source, add it to the
/// destination.
pub async fn smove(conn: &mut Connection, args: Args<'_>) {
    let (src, dst, member) = (args.get(1).to_vec(), args.get(2).to_vec(), args.get(3).to_vec());
    let (from, to) = (conn.core.shard_of(&src), conn.core.shard_of(&dst));
    let db = conn.state.db;
    let key = dst.clone();
    let dst_wrong = call(&conn.core, to, move |core| {
        let mut s = core.shard.borrow_mut();
        s.dbs[db].get(&key, shard::unix_ms()).is_some_and(|e| !matches!(e.value, Value::Set(_)))
    })
    .await;
    let Some(dst_wrong) = dst_wrong else { return conn.error(LOST) };
    let m = member.clone();
    let taken = call(&conn.core, from, move |core| {
        let mut s = core.shard.borrow_mut();
        let now = shard::unix_ms();
        let taken = take_member(&mut s, db, &src, &m, dst_wrong, now);
        if matches!(taken, Taken::Moved) {
            s.log_effect(db, &[b"SREM", &src, &m]);
        }
        taken
    })
    .await;
    match taken {
        None => conn.error(LOST),
        Some(Taken::Missing) | Some(Taken::NotMember) => reply(conn, |r| r.int(0)),
        Some(Taken::WrongType) => conn.error(WRONGTYPE),
        Some(Taken::Moved) => {
            let max = max_intset(conn);
            let m = member.clone();
            let added = call(&conn.core, to, move |core| {
                let mut s = core.shard.borrow_mut();
                let added = add_member(&mut s, db, &dst, &m, max, shard::unix_ms());
                if added {
                    s.log_effect(db, &[b"SADD", &dst, &m]);
                }
                added
            })
            .await;
            match added {
                Some(true) => reply(conn, |r| r.int(1)),
                Some(false) => {
                    // The destination changed type in between: put it back.
                    let src = args.get(1).to_vec();
                    call(&conn.core, from, move |core| {
                        let mut s = core.shard.borrow_mut();
                        if add_member(&mut s, db, &src, &member, max, shard::unix_ms()) {
                            s.log_effect(db, &[b"SADD", &src, &member]);
                        }
                    })
                    .await;
                    conn.error(WRONGTYPE)
                }
                None => conn.error(LOST),
            }
        }
    }
}

/// SMOVE's source side: takes `m` out of the set at `src`.
fn take_member(s: &mut shard::Shard, index: usize, src: &[u8], m: &[u8], dst_wrong: bool, now: u64) -> Taken {
    let db = &mut s.dbs[index];
    let set = match db.get(src, now).map(|e| &mut e.value) {
        None => return Taken::Missing,
        Some(Value::Set(set)) => set,
        Some(_) => return Taken::WrongType,
    };
    if dst_wrong {
        return Taken::WrongType;
    }
    if !set.remove(m) {
        return Taken::NotMember;
    }
    let empty = set.is_empty();
    s.notify(notify::SET, "srem", index, src);
    if empty {
        s.dbs[index].remove(src, now);
        s.notify(notify::GENERIC, "del", index, src);
    }
    Taken::Moved
}
