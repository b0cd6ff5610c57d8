//! The keys' owner's side of blocking pops: it serves a pop at once or
//! keeps the waiter, and after every command serves the ready keys' waiters
//! in the order they blocked, from what the keys hold then. As Redis's
//! handleClientsBlockedOnKeys runs only after a whole command, an EXEC
//! running inline or a script holds serving back on its core
//! (`hold_serving`) until it ends; a unit's keys wait for its release.

use super::request::{BlockOp, BlockRequest};
use crate::core::Core;
use crate::mesh::Response;
use crate::persistence::aof::durable::{durable, must_wait};
use shard::commands::list::{lmove_put, lmove_take, lmove_taken, try_bpop, try_mpop};
use shard::commands::stream::read;
use shard::commands::zset::pop::{try_pop, Shape};
use shard::commands::Ctx;
use shard::value::Value;
use shard::{Reply, Shard};
use std::rc::Rc;

/// Redis 7.0's answer to an XREADGROUP whose key was deleted or now holds
/// another type (unblockDeletedStreamReadgroupClients).
const STREAM_GONE: &str = "UNBLOCKED the stream key no longer exists";

/// Runs a waiter's op against `keys` (all owned here). `Some(reply)` when
/// it was served (or failed for good, e.g. WRONGTYPE).
pub(crate) fn attempt(core: &Core, shard: &mut Shard, req: &BlockRequest, keys: &[&[u8]], now: u64) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut ctx = Ctx { db: req.db, now, reply: Reply::new(&mut out, req.resp3) };
    let served = match &req.op {
        BlockOp::Pop { from_head } => try_bpop(shard, &mut ctx, keys, *from_head),
        BlockOp::MPop { from_head, count } => try_mpop(shard, &mut ctx, keys, *from_head, *count),
        // A destination on another shard waits in notify mode and moves as
        // a unit (across.rs): only a move within this shard is served here.
        BlockOp::Move { dst_shard, .. } if *dst_shard != core.index => false,
        BlockOp::Move { dst, from_head, to_head, .. } => {
            match lmove_take(shard, &mut ctx, keys[0], Some(dst), *from_head) {
                Err(_) => true,
                Ok(None) => false,
                Ok(Some(v)) => {
                    lmove_put(shard, req.db, now, dst, &v, *to_head);
                    lmove_taken(shard, &ctx, keys[0], *from_head);
                    ctx.reply.bulk(&v);
                    true
                }
            }
        }
        BlockOp::ZPop { max } => keys.iter().any(|k| try_pop(shard, &mut ctx, k, *max, 1, Shape::KeyFlat)),
        BlockOp::ZMPop { max, count } => {
            keys.iter().any(|k| try_pop(shard, &mut ctx, k, *max, *count, Shape::KeyNested))
        }
        BlockOp::Notify { .. } | BlockOp::NotifyStream(_) => keys.iter().any(|k| fits(shard, req, k, now)),
        BlockOp::XRead(w) => keys.iter().any(|k| {
            let Some(from) = w.start_of(k) else { return false };
            if w.read.group.is_some() && !holds_stream(shard, req.db, k, now) {
                ctx.reply.error(STREAM_GONE);
                return true;
            }
            let Some(piece) = read::serve(shard, req.db, now, req.resp3, &w.read, k, from, true) else { return false };
            if piece.first() == Some(&b'-') {
                ctx.reply.raw(&piece);
            } else {
                ctx.reply.raw(&read::join(req.resp3, &[(0, piece)]));
            }
            true
        }),
    };
    if served && shard.effects.is_some() && out.first() != Some(&b'-') {
        log_pop(shard, req, keys, &out);
    }
    served.then_some(out)
}

/// A served blocking pop's effect, as Redis propagates it: the non-blocking
/// pop it amounts to (BLPOP -> LPOP key, BZMPOP -> ZPOPMIN key n, BLMOVE
/// within this shard -> the pop plus the push), read off the reply.
fn log_pop(shard: &mut Shard, req: &BlockRequest, keys: &[&[u8]], reply: &[u8]) {
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
        (BlockOp::Move { dst, to_head, from_head, .. }, [value]) => {
            shard.log_effect(req.db, &[side(*from_head), keys[0]]);
            shard.log_effect(req.db, &[if *to_head { b"LPUSH" } else { b"RPUSH" }, dst, value]);
        }
        _ => {}
    }
}

/// Whether `key` can answer `req` now: it holds data of the type `req`
/// waits for, or (XREADGROUP) it no longer holds a stream, or the group is
/// gone, which are answers too (errors).
fn fits(shard: &mut Shard, req: &BlockRequest, key: &[u8], now: u64) -> bool {
    let value = shard.dbs[req.db].find(key, now).map(|e| &e.value);
    let (BlockOp::XRead(w) | BlockOp::NotifyStream(w)) = &req.op else {
        return match value {
            Some(Value::List(l)) => !l.is_empty() && !req.op.wants_zset(),
            Some(Value::ZSet(_)) => req.op.wants_zset(),
            _ => false,
        };
    };
    let Some(from) = w.start_of(key) else { return false };
    match (value, &w.read.group) {
        (Some(Value::Stream(s)), Some((g, _))) => s.groups.get(g.as_slice()).is_none_or(|g| s.last_id > g.last_id),
        (_, Some(_)) => true,
        // A plain XREAD waits on: for a stream again, past its start.
        (Some(Value::Stream(s)), None) => matches!(from, read::From::After(id) if s.last_id > id),
        (_, None) => false,
    }
}

fn holds_stream(shard: &mut Shard, db: usize, key: &[u8], now: u64) -> bool {
    matches!(shard.dbs[db].find(key, now).map(|e| &e.value), Some(Value::Stream(_)))
}

/// LMOVE's push on the destination's shard, logged as LPUSH/RPUSH.
pub fn put_logged(s: &mut shard::Shard, db: usize, key: &[u8], value: &[u8], to_head: bool) -> bool {
    let pushed = lmove_put(s, db, shard::unix_ms(), key, value, to_head);
    if pushed {
        s.log_effect(db, &[if to_head { b"LPUSH" } else { b"RPUSH" }, key, value]);
    }
    pushed
}

impl Core {
    /// A blocking request arriving at the keys' owner: served at once
    /// (`Some(reply)`) or registered to wait (`None`: the ticket stays open).
    pub fn block(&self, req: BlockRequest) -> Option<Response> {
        let now = shard::unix_ms();
        // A key a unit holds is not served now: a release looks again.
        let held = {
            let locks = self.locks.borrow();
            !locks.is_idle() && req.keys.iter().any(|k| locks.blocks(req.db, k, req.unit))
        };
        // Nor while a transaction or script running here holds serving back
        // (it yielded): the client would see it half done. Its keys are
        // looked at when the hold ends.
        let on_hold = self.blocked.borrow().holds > 0;
        let served = if held || on_hold {
            None
        } else {
            let mut shard = self.shard.borrow_mut();
            let keys: Vec<&[u8]> = req.keys.iter().map(Vec::as_slice).collect();
            attempt(self, &mut shard, &req, &keys, now)
        };
        if let Some(reply) = served {
            self.serve_ready();
            return Some(if req.op.is_notify() { Response::Notified } else { Response::Served(reply) });
        }
        let mut shard = self.shard.borrow_mut();
        let mut w = self.blocked.borrow_mut();
        for key in &req.keys {
            w.by_key.entry((req.db, key.clone())).or_default().push_back(req.id);
            *shard.watched.entry(key.clone()).or_default() += 1;
            if on_hold {
                shard.signal_ready(req.db, key);
            } else if held && !w.held.iter().any(|(d, k)| *d == req.db && k == key) {
                // Looked at when a unit lets go here: a unit holding the
                // whole shard releases no keys of its own to signal.
                w.held.push((req.db, key.clone()));
            }
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

    /// Holds serving back on this core until the returned guard drops (an
    /// EXEC running inline, a script): what its commands make ready is
    /// served once the last hold ends, from what the keys hold then.
    pub fn hold_serving(&self) -> ServingHold {
        let me = self.me.upgrade();
        if me.is_some() {
            self.blocked.borrow_mut().holds += 1;
        }
        ServingHold(me)
    }

    /// Serves the waiters of every key made ready since the last call, in
    /// the order they blocked (nothing while a hold is on).
    pub fn serve_ready(&self) {
        if self.blocked.borrow().holds > 0 {
            return;
        }
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
                let held = &mut self.blocked.borrow_mut().held;
                if !held.contains(&(db, key.clone())) {
                    held.push((db, key));
                }
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
                    let response = if req.op.is_notify() { Response::Notified } else { Response::Served(reply) };
                    self.deliver_durable(req.origin, req.ticket, response);
                }
            }
        }
    }

    /// `deliver` once this core's logged effects are durable (a served
    /// blocking pop with `appendfsync always`); at once otherwise.
    fn deliver_durable(&self, origin: usize, ticket: u32, response: Response) {
        match self.me.upgrade() {
            Some(me) if must_wait(&me) => {
                glommio::spawn_local(async move {
                    durable(&me).await;
                    me.deliver(origin, ticket, response);
                })
                .detach();
            }
            _ => self.deliver(origin, ticket, response),
        }
    }
}

/// A hold on serving blocked clients (`Core::hold_serving`).
pub struct ServingHold(Option<Rc<Core>>);

impl Drop for ServingHold {
    fn drop(&mut self) {
        let Some(core) = self.0.take() else { return };
        let holds = {
            let mut w = core.blocked.borrow_mut();
            w.holds -= 1;
            w.holds
        };
        if holds == 0 {
            core.serve_ready();
        }
    }
}
