//! The blocked connection's side of blocking pops: it registers waiters
//! with the keys' owners, waits for a reply, a timeout or a hang-up while
//! reading what the client pipelines, and withdraws what is left.

use super::across::{move_across, End, Moved};
use super::owner::attempt;
use super::request::{BlockOp, BlockRequest};
use crate::clients::{Unblock, UnblockHow};
use crate::coordinator::dispatch::call;
use crate::coordinator::{Footprint, Unit};
use crate::mesh::{Request, Response, Ticket};
use crate::session::Connection;
use crate::stream::ClientStream;
use futures_lite::io::AsyncRead;
use shard::reply::errors::WRONGTYPE;
use shard::Reply;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// A connection waiting for a blocking pop.
pub struct BlockWait {
    /// One waiter per shard holding some of the keys: (shard, id, ticket).
    pub waits: Vec<(usize, u64, Ticket)>,
    pub deadline: Option<Instant>,
    /// Sent when the time runs out (a null array or a null bulk).
    pub timeout_reply: Vec<u8>,
    /// Notify mode (keys on several shards): what to retry when told a key
    /// has data.
    pub retry: Option<Retry>,
}

/// The pop a notify-mode client retries itself.
pub struct Retry {
    pub db: usize,
    pub resp3: bool,
    /// Keys with their shards, in the command's order.
    pub keys: Vec<(usize, Vec<u8>)>,
    pub op: BlockOp,
}

/// Registers a waiter for `keys` (all on `shard`) and returns its ticket.
pub async fn register(conn: &Connection, shard: usize, keys: Vec<Vec<u8>>, op: BlockOp) -> (u64, Ticket) {
    let core = &conn.core;
    let id = core.next_waiter_id();
    let (db, resp3, origin, unit) = (conn.state.db, conn.state.resp3, core.index, conn.pipeline.unit);
    let request = move |ticket| BlockRequest { id, origin, ticket, db, resp3, keys, op, unit };
    if shard == core.index {
        let t = core.mesh.ticket();
        if let Some(response) = core.block(request(t.id())) {
            core.mesh.complete(t.id(), response);
        }
        return (id, t);
    }
    let t = core.mesh.send_with(shard, |ticket| Request::Block(Box::new(request(ticket)))).await;
    (id, t)
}

/// Withdraws a waiter and waits for its ticket: the served reply if it was
/// served meanwhile.
async fn withdraw(conn: &Connection, shard: usize, id: u64, ticket: Ticket) -> Response {
    if shard == conn.core.index {
        conn.core.unblock(id);
    } else {
        conn.core.mesh.post(shard, Request::Unblock(id)).await;
    }
    ticket.await
}

/// One non-blocking attempt of `op` on `key` at its shard (notify mode).
async fn try_once(conn: &Connection, shard: usize, retry: &Retry, key: Vec<u8>) -> Option<Vec<u8>> {
    if let BlockOp::Move { dst, dst_shard, from_head, to_head } = &retry.op {
        let from = End { key, shard, head: *from_head };
        let to = End { key: dst.clone(), shard: *dst_shard, head: *to_head };
        return move_as_unit(conn, retry, from, to).await;
    }
    let (db, resp3, op, unit) = (retry.db, retry.resp3, retry.op.clone(), conn.pipeline.unit);
    call(&conn.core, shard, move |core| {
        // Not from a key another unit holds (it is half done): the waiter
        // registered next is looked at when a unit lets go there.
        if core.locks.borrow().blocks(db, &key, unit) {
            return None;
        }
        let req =
            BlockRequest { id: 0, origin: core.index, ticket: 0, db, resp3, keys: vec![key.clone()], op, unit: None };
        let mut s = core.shard.borrow_mut();
        attempt(core, &mut s, &req, &[key.as_slice()], shard::unix_ms())
    })
    .await
    .flatten()
}

/// A BLMOVE across shards: the move under a unit holding both keys (the
/// one its connection already runs in inside EXEC, else its own).
async fn move_as_unit(conn: &Connection, retry: &Retry, from: End, to: End) -> Option<Vec<u8>> {
    let unit = if conn.pipeline.unit.is_some() {
        None
    } else {
        let mut footprint = Footprint::default();
        footprint.add(from.shard, retry.db, &from.key);
        footprint.add(to.shard, retry.db, &to.key);
        Some(Unit::acquire(&conn.core, &footprint).await)
    };
    let moved = move_across(&conn.core, retry.db, from, to).await;
    if let Some(unit) = unit {
        unit.release_touching(true).await;
    }
    let mut out = Vec::new();
    let mut reply = Reply::new(&mut out, retry.resp3);
    match moved {
        Moved::Value(value) => reply.bulk(&value),
        Moved::Empty => return None,
        Moved::WrongType => reply.error(WRONGTYPE),
    }
    Some(out)
}

enum Event {
    Ticket(usize, Response),
    Timeout,
    Read(std::io::Result<usize>),
    Unblocked(UnblockHow),
}

/// CLIENT UNBLOCK ... ERROR's reply to the blocked client.
const UNBLOCKED: &[u8] = b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n";

/// The registry entry shows the wait (flags=b) and holds CLIENT UNBLOCK's
/// door while it lasts.
fn set_waiting(conn: &Connection, door: Option<Rc<Unblock>>) {
    if let Some(c) = conn.core.clients.borrow_mut().list.get_mut(conn.state.registry_key) {
        c.blocked = door.is_some();
        if door.is_none() {
            c.argv_mem = 0;
        }
        c.unblock = door;
    }
}

/// Waits until the pop is served, times out or the client hangs up, reading
/// whatever the client pipelines meanwhile into `buf`. The reply goes to
/// the connection's output. Returns false when the client is gone.
pub async fn wait(
    conn: &mut Connection,
    mut w: BlockWait,
    stream: &mut ClientStream,
    buf: &mut Vec<u8>,
    filled: &mut usize,
) -> bool {
    conn.core.blocked_here.set(conn.core.blocked_here.get() + 1);
    let door = Rc::new(Unblock::default());
    set_waiting(conn, Some(door.clone()));
    let mut timer = w.deadline.map(|d| Box::pin(glommio::timer::sleep(d.saturating_duration_since(Instant::now()))));
    let limit = conn.core.config().client_query_buffer_limit as usize;
    let outcome = loop {
        // The query buffer limit, exact as in conn.rs: grown up to one
        // byte past it, closed once past.
        if *filled > limit {
            break None;
        }
        if *filled == buf.len() {
            buf.resize((buf.len() * 2).min(limit.saturating_add(1)).max(*filled + 1), 0);
        }
        let event = futures_lite::future::poll_fn(|cx| {
            for (i, (_, _, t)) in w.waits.iter_mut().enumerate() {
                if let Poll::Ready(r) = Pin::new(t).poll(cx) {
                    return Poll::Ready(Event::Ticket(i, r));
                }
            }
            if let Some(how) = door.how.get() {
                return Poll::Ready(Event::Unblocked(how));
            }
            door.waker.set(Some(cx.waker().clone()));
            if let Some(timer) = timer.as_mut() {
                if timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Event::Timeout);
                }
            }
            match Pin::new(&mut *stream).poll_read(cx, &mut buf[*filled..]) {
                Poll::Ready(r) => Poll::Ready(Event::Read(r)),
                Poll::Pending => Poll::Pending,
            }
        })
        .await;
        match event {
            Event::Read(Ok(0)) | Event::Read(Err(_)) => break None,
            Event::Read(Ok(n)) => *filled += n,
            Event::Timeout | Event::Unblocked(UnblockHow::Timeout) => break Some(w.timeout_reply.clone()),
            Event::Unblocked(UnblockHow::Error) => break Some(UNBLOCKED.to_vec()),
            Event::Ticket(i, response) => {
                w.waits.swap_remove(i);
                match response {
                    Response::Served(reply) => break Some(reply),
                    Response::Notified => {
                        if let Some(reply) = retry(conn, &mut w).await {
                            break Some(reply);
                        }
                    }
                    // Withdrawn without being asked (the owner is shutting
                    // down): give up as on a timeout.
                    _ if w.waits.is_empty() => break Some(w.timeout_reply.clone()),
                    _ => {}
                }
            }
        }
    };
    // Withdraw what is still registered. After a timeout or CLIENT UNBLOCK,
    // a reply served in the meantime wins; after a hang-up it is lost, as
    // with Redis.
    let timed_out = outcome.as_ref().is_some_and(|r| *r == w.timeout_reply || r == UNBLOCKED);
    let mut reply = outcome;
    for (shard, id, t) in std::mem::take(&mut w.waits) {
        if let Response::Served(served) = withdraw(conn, shard, id, t).await {
            if timed_out {
                reply = Some(served);
            }
        }
    }
    conn.core.blocked_here.set(conn.core.blocked_here.get() - 1);
    conn.unblocked(reply.as_ref().is_some_and(|r| *r != w.timeout_reply));
    set_waiting(conn, None);
    match reply {
        Some(bytes) => {
            conn.pipeline.local(|out| out.extend_from_slice(&bytes));
            true
        }
        None => false,
    }
}

/// A blocking pop inside EXEC does not block: its waiters are withdrawn at
/// once, and the reply is what they were served, else the timeout reply.
pub async fn give_up(conn: &Connection, mut w: BlockWait) -> Vec<u8> {
    let mut reply = w.timeout_reply.clone();
    for (shard, id, t) in std::mem::take(&mut w.waits) {
        if let Response::Served(served) = withdraw(conn, shard, id, t).await {
            reply = served;
        }
    }
    reply
}

/// Notify mode: a key got data. Withdraw the other waiters, try the keys in
/// order, and wait again (same deadline) if another client was faster.
async fn retry(conn: &Connection, w: &mut BlockWait) -> Option<Vec<u8>> {
    for (shard, id, t) in std::mem::take(&mut w.waits) {
        withdraw(conn, shard, id, t).await;
    }
    start_notify(conn, w).await
}

/// Notify mode: tries every key in order; `Some(reply)` when one served,
/// else registers notify waiters on every shard holding the keys.
pub async fn start_notify(conn: &Connection, w: &mut BlockWait) -> Option<Vec<u8>> {
    let retry = w.retry.as_ref()?;
    for (shard, key) in &retry.keys {
        if let Some(reply) = try_once(conn, *shard, retry, key.clone()).await {
            return Some(reply);
        }
    }
    let mut by_shard: Vec<(usize, Vec<Vec<u8>>)> = Vec::new();
    for (shard, key) in &retry.keys {
        match by_shard.iter_mut().find(|(s, _)| s == shard) {
            Some(g) => g.1.push(key.clone()),
            None => by_shard.push((*shard, vec![key.clone()])),
        }
    }
    for (shard, keys) in by_shard {
        let (id, t) = register(conn, shard, keys, retry.op.notify()).await;
        w.waits.push((shard, id, t));
    }
    None
}

/// Serves a parsed blocking pop at once or returns what to wait on. Keys
/// on one shard wait there; keys on several, or a move to another shard,
/// wait in notify mode. Redis answers every blocking timeout with a null
/// array.
pub async fn start(
    conn: &mut Connection,
    keys: Vec<Vec<u8>>,
    op: BlockOp,
    deadline: Option<Instant>,
) -> Option<BlockWait> {
    let resp3 = conn.state.resp3;
    let timeout_reply = if resp3 { b"_\r\n".to_vec() } else { b"*-1\r\n".to_vec() };
    let shards: Vec<usize> = keys.iter().map(|k| conn.core.shard_of(k)).collect();
    let moves_across = matches!(&op, BlockOp::Move { dst_shard, .. } if *dst_shard != shards[0]);
    if !moves_across && shards.iter().all(|&s| s == shards[0]) {
        let (id, t) = register(conn, shards[0], keys, op).await;
        return Some(BlockWait { waits: vec![(shards[0], id, t)], deadline, timeout_reply, retry: None });
    }
    // Keys on several shards: try each in order now, else wait for word that
    // one has data.
    let retry = Retry { db: conn.state.db, resp3, keys: shards.into_iter().zip(keys).collect(), op };
    let mut w = BlockWait { waits: Vec::new(), deadline, timeout_reply, retry: Some(retry) };
    if let Some(reply) = start_notify(conn, &mut w).await {
        conn.pipeline.local(|out| out.extend_from_slice(&reply));
        return None;
    }
    Some(w)
}

/// Redis 7.0's timeout argument: seconds as a float, rounded up to whole
/// milliseconds (so 0.001 and less, but above 0, wait 1 ms; 0 is for ever).
pub fn parse_timeout(arg: &[u8]) -> Result<Option<Instant>, &'static str> {
    let ms = shard::numbers::timeout_ms(arg).ok_or("ERR timeout is not a float or out of range")?;
    if ms < 0 {
        return Err("ERR timeout is negative");
    }
    // Past what an Instant holds, the wait is as good as for ever.
    Ok((ms > 0).then(|| Instant::now().checked_add(Duration::from_millis(ms as u64))).flatten())
}
