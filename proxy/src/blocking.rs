//! Blocking pops (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN,
//! BZPOPMAX, BZMPOP): the waiters are kept by the core that owns the keys. A blocking request that finds
//! nothing to pop is registered there with its mesh ticket left unanswered;
//! a write to one of its keys marks the key ready on the shard
//! (`Shard::signal_ready`), and right after the command that wrote, the
//! owner serves the key's waiters of the key's type in the order they
//! blocked (as Redis, a waiter for a list ignores a key now holding a
//! sorted set, and the other way round), answering their
//! tickets with the reply. A waiter that times out or whose client hangs up
//! is withdrawn (`Unblock`); if it had just been served, the served reply is
//! already on its ticket and wins, so nothing is lost or given twice.
//!
//! Keys spread over several shards (possible only outside cluster modes)
//! block in "notify" mode: each owner only says that a key got data, and the
//! client's core retries the pop itself.

use crate::core::Core;
use crate::mesh::Response;
use shard::commands::list::{lmove_put, lmove_take, try_bpop, try_mpop};
use shard::commands::zset::pop::{try_pop, Shape};
use shard::commands::Ctx;
use shard::value::Value;
use shard::{Reply, Shard};
use std::collections::{HashMap, VecDeque};

/// What a waiter does when one of its keys gets data.
#[derive(Clone, Debug)]
pub enum BlockOp {
    /// BLPOP/BRPOP: `[key, element]`.
    Pop { from_head: bool },
    /// BLMOVE/BRPOPLPUSH: move one element to `dst` (on `dst_shard`),
    /// replying with it.
    Move { dst: Vec<u8>, dst_shard: usize, from_head: bool, to_head: bool },
    /// BLMPOP: `[key, [elements]]`.
    MPop { from_head: bool, count: usize },
    /// BZPOPMIN/BZPOPMAX: `[key, member, score]`.
    ZPop { max: bool },
    /// BZMPOP: `[key, [[member, score], ...]]`.
    ZMPop { max: bool, count: usize },
    /// Only report that a key has data (keys on several shards).
    Notify { zset: bool },
}

impl BlockOp {
    /// Whether the op waits for a sorted set (else a list).
    fn wants_zset(&self) -> bool {
        matches!(self, BlockOp::ZPop { .. } | BlockOp::ZMPop { .. } | BlockOp::Notify { zset: true })
    }

    /// The same wait, reduced to being told that a key has data.
    pub fn notify(&self) -> BlockOp {
        BlockOp::Notify { zset: self.wants_zset() }
    }
}

pub struct BlockRequest {
    pub id: u64,
    /// Core of the blocked connection, and the ticket it awaits there.
    pub origin: usize,
    pub ticket: u32,
    pub db: usize,
    pub resp3: bool,
    pub keys: Vec<Vec<u8>>,
    pub op: BlockOp,
    /// The coordinator unit the pop runs in (inside EXEC), if any.
    pub unit: Option<crate::coordinator::UnitId>,
}

/// The waiters this core owns, by key, in blocking order.
#[derive(Default)]
pub struct Waiters {
    by_key: HashMap<(usize, Vec<u8>), VecDeque<u64>>,
    waiters: HashMap<u64, BlockRequest>,
}

impl Waiters {
    pub fn len(&self) -> usize {
        self.waiters.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }
}

/// Runs a waiter's op against `keys` (all owned here). `Some(reply)` when
/// it was served (or failed for good, e.g. WRONGTYPE).
fn attempt(core: &Core, shard: &mut Shard, req: &BlockRequest, keys: &[&[u8]], now: u64) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut ctx = Ctx { db: req.db, now, reply: Reply::new(&mut out, req.resp3) };
    let served = match &req.op {
        BlockOp::Pop { from_head } => try_bpop(shard, &mut ctx, keys, *from_head),
        BlockOp::MPop { from_head, count } => try_mpop(shard, &mut ctx, keys, *from_head, *count),
        BlockOp::Move { dst, dst_shard, from_head, to_head } => {
            let local_dst = (*dst_shard == core.index).then_some(dst.as_slice());
            match lmove_take(shard, &mut ctx, keys[0], local_dst, *from_head) {
                Err(_) => true,
                Ok(None) => false,
                Ok(Some(v)) => {
                    if local_dst.is_some() {
                        lmove_put(shard, req.db, now, dst, &v, *to_head);
                    } else {
                        push_elsewhere(core, *dst_shard, req.db, dst.clone(), v.clone(), *to_head);
                    }
                    ctx.reply.bulk(&v);
                    true
                }
            }
        }
        BlockOp::ZPop { max } => {
            let db = &mut shard.dbs[req.db];
            keys.iter().any(|k| try_pop(db, k, now, *max, 1, Shape::KeyFlat, &mut ctx.reply))
        }
        BlockOp::ZMPop { max, count } => {
            let db = &mut shard.dbs[req.db];
            keys.iter().any(|k| try_pop(db, k, now, *max, *count, Shape::KeyNested, &mut ctx.reply))
        }
        BlockOp::Notify { .. } => keys.iter().any(|k| fits(shard, req, k, now)),
    };
    if served && shard.effects.is_some() && out.first() != Some(&b'-') {
        log_pop(core, shard, req, keys, &out);
    }
    served.then_some(out)
}

/// A served blocking pop's effect, as Redis propagates it: the non-blocking
/// pop it amounts to (BLPOP -> LPOP key, BZMPOP -> ZPOPMIN key n, BLMOVE ->
/// the pop plus, for a local destination, the push), read off the reply.
fn log_pop(core: &Core, shard: &mut Shard, req: &BlockRequest, keys: &[&[u8]], reply: &[u8]) {
    let leaves = shard::propagate::leaves(reply);
    let side = |head: bool| -> &'static [u8] {
        if head {
            b"LPOP"
        } else {
            b"RPOP"
        }
    };
    let zside = |max: bool| -> &'static [u8] {
        if max {
            b"ZPOPMAX"
        } else {
            b"ZPOPMIN"
        }
    };
    let mut n = itoa::Buffer::new();
    match (&req.op, leaves.as_slice()) {
        (BlockOp::Pop { from_head }, [key, ..]) => shard.log_effect(req.db, &[side(*from_head), key]),
        (BlockOp::ZPop { max }, [key, ..]) => shard.log_effect(req.db, &[zside(*max), key]),
        (BlockOp::MPop { from_head, .. }, [key, elems @ ..]) => {
            shard.log_effect(req.db, &[side(*from_head), key, n.format(elems.len()).as_bytes()])
        }
        (BlockOp::ZMPop { max, .. }, [key, pairs @ ..]) => {
            shard.log_effect(req.db, &[zside(*max), key, n.format(pairs.len() / 2).as_bytes()])
        }
        (BlockOp::Move { dst, dst_shard, to_head, from_head }, [value]) => {
            shard.log_effect(req.db, &[side(*from_head), keys[0]]);
            if *dst_shard == core.index {
                shard.log_effect(req.db, &[if *to_head { b"LPUSH" } else { b"RPUSH" }, dst, value]);
            }
        }
        _ => {}
    }
}

/// Whether `key` holds data of the type `req` waits for.
fn fits(shard: &mut Shard, req: &BlockRequest, key: &[u8], now: u64) -> bool {
    match shard.dbs[req.db].find(key, now).map(|e| &e.value) {
        Some(Value::List(l)) => !l.is_empty() && !req.op.wants_zset(),
        Some(Value::ZSet(_)) => req.op.wants_zset(),
        _ => false,
    }
}

/// LMOVE's push on the destination's shard, logged as LPUSH/RPUSH.
pub fn put_logged(s: &mut shard::Shard, db: usize, key: &[u8], value: &[u8], to_head: bool) -> bool {
    let pushed = lmove_put(s, db, shard::unix_ms(), key, value, to_head);
    if pushed {
        s.log_effect(db, &[if to_head { b"LPUSH" } else { b"RPUSH" }, key, value]);
    }
    pushed
}

/// BLMOVE's push when the destination lives on another shard.
fn push_elsewhere(core: &Core, shard: usize, db: usize, dst: Vec<u8>, value: Vec<u8>, to_head: bool) {
    if let Some(me) = core.me.upgrade() {
        glommio::spawn_local(async move {
            crate::mesh::call(&me, shard, move |c| {
                put_logged(&mut c.shard.borrow_mut(), db, &dst, &value, to_head);
            })
            .await;
        })
        .detach();
    }
}

impl Core {
    /// A blocking request arriving at the keys' owner: served at once
    /// (`Some(reply)`) or registered to wait (`None`: the ticket stays open).
    pub fn block(&self, req: BlockRequest) -> Option<Response> {
        let now = shard::unix_ms();
        // A key a unit holds is not served now: its release signals it.
        let held = {
            let locks = self.locks.borrow();
            !locks.is_idle() && req.keys.iter().any(|k| locks.blocks(req.db, k, req.unit))
        };
        let served = if held {
            None
        } else {
            let mut shard = self.shard.borrow_mut();
            let keys: Vec<&[u8]> = req.keys.iter().map(Vec::as_slice).collect();
            attempt(self, &mut shard, &req, &keys, now)
        };
        if let Some(reply) = served {
            self.serve_ready();
            return Some(if matches!(req.op, BlockOp::Notify { .. }) {
                Response::Notified
            } else {
                Response::Served(reply)
            });
        }
        let mut shard = self.shard.borrow_mut();
        let mut w = self.blocked.borrow_mut();
        for key in &req.keys {
            w.by_key.entry((req.db, key.clone())).or_default().push_back(req.id);
            *shard.watched.entry(key.clone()).or_default() += 1;
        }
        w.waiters.insert(req.id, req);
        None
    }

    fn forget(&self, id: u64) -> Option<BlockRequest> {
        let mut w = self.blocked.borrow_mut();
        let req = w.waiters.remove(&id)?;
        let mut shard = self.shard.borrow_mut();
        for key in &req.keys {
            let slot = (req.db, key.clone());
            if let Some(q) = w.by_key.get_mut(&slot) {
                q.retain(|&x| x != id);
                if q.is_empty() {
                    w.by_key.remove(&slot);
                }
            }
            if let Some(n) = shard.watched.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    shard.watched.remove(key);
                }
            }
        }
        Some(req)
    }

    /// Withdraws a waiter (timeout, hang-up, or another shard served it).
    /// Its ticket is answered `Unblocked` unless it was served already.
    pub fn unblock(&self, id: u64) {
        if let Some(req) = self.forget(id) {
            self.deliver(req.origin, req.ticket, Response::Unblocked);
        }
    }

    /// Serves the waiters of every key pushed to since the last call, in
    /// the order they blocked.
    pub fn serve_ready(&self) {
        loop {
            let next = {
                let mut shard = self.shard.borrow_mut();
                if shard.ready.is_empty() {
                    return;
                }
                shard.ready.remove(0)
            };
            let (db, key) = next;
            if self.locks.borrow().blocks(db, &key, None) {
                continue;
            }
            let queue: Vec<u64> = self
                .blocked
                .borrow()
                .by_key
                .get(&(db, key.clone()))
                .map(|q| q.iter().copied().collect())
                .unwrap_or_default();
            for id in queue {
                let served = {
                    let w = self.blocked.borrow();
                    let Some(req) = w.waiters.get(&id) else { continue };
                    let mut shard = self.shard.borrow_mut();
                    let now = shard::unix_ms();
                    if !fits(&mut shard, req, &key, now) {
                        continue;
                    }
                    attempt(self, &mut shard, req, &[key.as_slice()], now)
                };
                let Some(reply) = served else { break };
                if let Some(req) = self.forget(id) {
                    let response = if matches!(req.op, BlockOp::Notify { .. }) {
                        Response::Notified
                    } else {
                        Response::Served(reply)
                    };
                    self.deliver_durable(req.origin, req.ticket, response);
                }
            }
        }
    }
}

use crate::conn::Connection;
use crate::mesh::{call, post, send_with, ticket, Request, Ticket};
use crate::stream::ClientStream;
use futures_lite::io::AsyncRead;
use std::future::Future;
use std::pin::Pin;
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
        let t = ticket(core);
        if let Some(response) = core.block(request(t.id())) {
            core.mesh.complete(t.id(), response);
        }
        return (id, t);
    }
    let t = send_with(core, shard, |ticket| Request::Block(Box::new(request(ticket)))).await;
    (id, t)
}

/// Withdraws a waiter and waits for its ticket: the served reply if it was
/// served meanwhile.
async fn withdraw(conn: &Connection, shard: usize, id: u64, ticket: Ticket) -> Response {
    if shard == conn.core.index {
        conn.core.unblock(id);
    } else {
        post(&conn.core, shard, Request::Unblock(id)).await;
    }
    ticket.await
}

/// One non-blocking attempt of `op` on `key` at its shard (notify mode).
async fn try_once(conn: &Connection, shard: usize, retry: &Retry, key: Vec<u8>) -> Option<Vec<u8>> {
    let (db, resp3, op) = (retry.db, retry.resp3, retry.op.clone());
    call(&conn.core, shard, move |core| {
        let req =
            BlockRequest { id: 0, origin: core.index, ticket: 0, db, resp3, keys: vec![key.clone()], op, unit: None };
        let mut s = core.shard.borrow_mut();
        attempt(core, &mut s, &req, &[key.as_slice()], shard::unix_ms())
    })
    .await
    .flatten()
}

enum Event {
    Ticket(usize, Response),
    Timeout,
    Read(std::io::Result<usize>),
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
    let mut timer = w.deadline.map(|d| Box::pin(glommio::timer::sleep(d.saturating_duration_since(Instant::now()))));
    let limit = conn.core.config().client_query_buffer_limit as usize;
    let outcome = loop {
        if *filled == buf.len() {
            if buf.len() >= limit {
                break None;
            }
            buf.resize(buf.len() * 2, 0);
        }
        let event = futures_lite::future::poll_fn(|cx| {
            for (i, (_, _, t)) in w.waits.iter_mut().enumerate() {
                if let Poll::Ready(r) = Pin::new(t).poll(cx) {
                    return Poll::Ready(Event::Ticket(i, r));
                }
            }
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
            Event::Timeout => break Some(w.timeout_reply.clone()),
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
    // Withdraw what is still registered. After a timeout, a reply served in
    // the meantime wins; after a hang-up it is lost, as with Redis.
    let timed_out = outcome.as_ref() == Some(&w.timeout_reply);
    let mut reply = outcome;
    for (shard, id, t) in std::mem::take(&mut w.waits) {
        if let Response::Served(served) = withdraw(conn, shard, id, t).await {
            if timed_out {
                reply = Some(served);
            }
        }
    }
    conn.core.blocked_here.set(conn.core.blocked_here.get() - 1);
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
/// on one shard wait there; keys on several wait in notify mode. Redis
/// answers every blocking timeout with a null array.
pub async fn start(
    conn: &mut Connection,
    keys: Vec<Vec<u8>>,
    op: BlockOp,
    deadline: Option<Instant>,
) -> Option<BlockWait> {
    let resp3 = conn.state.resp3;
    let timeout_reply = if resp3 { b"_\r\n".to_vec() } else { b"*-1\r\n".to_vec() };
    let shards: Vec<usize> = keys.iter().map(|k| conn.core.shard_of(k)).collect();
    if shards.iter().all(|&s| s == shards[0]) {
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

/// Redis 7.0's timeout argument: seconds as a float, truncated to whole
/// milliseconds (so under 1 ms means for ever, like 0).
pub fn parse_timeout(arg: &[u8]) -> Result<Option<Instant>, &'static str> {
    let ms = shard::numbers::timeout_ms(arg).ok_or("ERR timeout is not a float or out of range")?;
    if ms < 0 {
        return Err("ERR timeout is negative");
    }
    // Past what an Instant holds, the wait is as good as for ever.
    Ok((ms > 0).then(|| Instant::now().checked_add(Duration::from_millis(ms as u64))).flatten())
}
