//! Client-side caching's deliveries (Redis's tracking.c, sending side).
//! The shard that owns a key keeps who read it (`shard::tracking`); after
//! each command or batch its invalidations go to each client's own core,
//! which alone knows the client's mode (BCAST, NOLOOP, REDIRECT, RESP3),
//! and from there, with REDIRECT, to the target's core. Bytes reach a
//! connection through its push queue (`push`).
//!
//! Two kinds travel with the reply of the command that raised them, as
//! Redis orders them:
//! - A client's *own* invalidations (raised while its own command ran:
//!   Redis's `tracking_pending_keys`) follow that command's reply, and
//!   those of the eviction ahead of it precede it. A batch's reply carries
//!   them per command ([`Returned`]); the connection places them
//!   (`Pipeline`), or, for a command of this core, takes them from its
//!   queue right after the command.
//! - BCAST keys changed are gathered per pass on the core of the client
//!   whose commands changed them (replies and [`call`] results bring them
//!   back), and sent once the pass's replies are in: one message per
//!   prefix with every key changed in it (Redis's
//!   trackingBroadcastInvalidationMessages from beforeSleep).
//!
//! [`call`]: crate::coordinator::dispatch::call

use crate::core::Core;
use crate::mesh::{CallFn, Request};
use crate::push::deliver::push_to;
use crate::push::queue::core_of;
use shard::tracking::Invalidation;
pub use shard::tracking::{Changed, Returned};
use shard::Shard;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

/// Runs `f` on core `target` without waiting for it (here when it is this
/// core). Calls from one core to another run in the order posted.
fn post(core: &Rc<Core>, target: usize, f: impl FnOnce(&Rc<Core>) + Send + 'static) {
    if target == core.index {
        return f(core);
    }
    let run: CallFn<Core> = Box::new(move |c| {
        f(c);
        Box::new(())
    });
    if let Err(Some(request)) = core.mesh.try_post(target, Request::Call(run)) {
        let core = core.clone();
        glommio::spawn_local(async move { core.mesh.post(target, request).await }).detach();
    }
}

impl Core {
    /// Hands the shard's pending invalidations to their clients' cores
    /// (one call per core, in the order raised). Own invalidations of
    /// another core's client wait for the reply that goes back there
    /// ([`take_returned`]); BCAST changes join this core's pass.
    pub fn send_invalidations(&self) {
        let Some(me) = self.me.upgrade() else { return };
        let (out, changed) = match self.shard.borrow_mut().tracking.as_mut() {
            Some(t) => (std::mem::take(&mut t.out), std::mem::take(&mut t.changed)),
            None => return,
        };
        let gather = &self.push.tracking;
        let mut per_core: Vec<Vec<Invalidation>> = (0..self.count).map(|_| Vec::new()).collect();
        for inv in out {
            if inv.client == 0 {
                // A flush: every core's tracking clients hear it.
                for list in per_core.iter_mut() {
                    list.push(inv.clone());
                }
            } else if inv.own() && core_of(inv.client, self.count) != self.index {
                gather.own.borrow_mut().push(inv);
            } else {
                per_core[core_of(inv.client, self.count)].push(inv);
            }
        }
        gather.changed.borrow_mut().extend(changed);
        for (target, list) in per_core.into_iter().enumerate() {
            if !list.is_empty() {
                post(&me, target, move |core| receive(core, list));
            }
        }
        if !gather.is_empty() {
            schedule(&me);
        }
    }
}

/// Where this core's gathered invalidations stand, so that what a
/// request raises can be handed back with its reply ([`take_returned`]).
pub fn mark(core: &Core) -> (usize, usize) {
    let gather = &core.push.tracking;
    (gather.changed.borrow().len(), gather.own.borrow().len())
}

/// The BCAST changes this core gathered since `mark` (a peer's request
/// ran meanwhile), for its reply to carry back to the peer's pass.
pub fn take_changed(core: &Core, mark: (usize, usize)) -> Vec<Changed> {
    split_off(&mut core.push.tracking.changed.borrow_mut(), mark.0)
}

/// What this core gathered since `mark` while it ran a closure for core
/// `peer` ([`call`]): BCAST changes, and the own invalidations of `peer`'s
/// clients (others stay, sent at the turn's end).
///
/// [`call`]: crate::coordinator::dispatch::call
pub fn take_returned(core: &Core, mark: (usize, usize), peer: usize) -> Option<Box<Returned>> {
    let changed = take_changed(core, mark);
    let mut own = Vec::new();
    let mut waiting = core.push.tracking.own.borrow_mut();
    for inv in split_off(&mut waiting, mark.1) {
        if core_of(inv.client, core.count) == peer {
            own.push((0, inv));
        } else {
            waiting.push(inv);
        }
    }
    Returned { changed, own }.boxed()
}

fn split_off<T>(v: &mut Vec<T>, at: usize) -> Vec<T> {
    if v.len() > at {
        v.split_off(at)
    } else {
        Vec::new()
    }
}

/// A reply came back with what its request raised on the owner: BCAST
/// changes join this core's pass; own invalidations are delivered here,
/// for the connection to take after its command (`call`'s commands).
pub fn returned(core: &Rc<Core>, back: Option<Box<Returned>>) {
    let Some(back) = back else { return };
    let Returned { changed, own } = *back;
    if !own.is_empty() {
        receive(core, own.into_iter().map(|(_, inv)| inv).collect());
    }
    if !changed.is_empty() {
        core.push.tracking.changed.borrow_mut().extend(changed);
        schedule(core);
    }
}

/// While a [`Hold`] is alive this core's BCAST changes wait: a pass is
/// waiting for replies that bring more of them.
pub struct Hold(Rc<Core>);

/// Holds this core's BCAST messages until the returned guard is dropped.
pub fn hold(core: &Rc<Core>) -> Hold {
    let holds = &core.push.tracking.holds;
    holds.set(holds.get() + 1);
    Hold(core.clone())
}

impl Drop for Hold {
    fn drop(&mut self) {
        let gather = &self.0.push.tracking;
        gather.holds.set(gather.holds.get() - 1);
        if gather.holds.get() == 0 && !gather.is_empty() {
            flush(&self.0);
        }
    }
}

/// Sends what was gathered once the current task yields (the pass that
/// raised it has then run all it could), unless a pass holds it.
fn schedule(core: &Rc<Core>) {
    let gather = &core.push.tracking;
    if gather.holds.get() > 0 || gather.scheduled.replace(true) {
        return;
    }
    let core = core.clone();
    glommio::spawn_local(async move {
        // Spawned tasks start at once: let the current one finish first.
        futures_lite::future::yield_now().await;
        let gather = &core.push.tracking;
        gather.scheduled.set(false);
        if gather.holds.get() == 0 {
            flush(&core);
        }
    })
    .detach();
}

/// The end of a pass: own invalidations nobody carried back go to their
/// clients' cores; BCAST changes go out per prefix, each prefix's keys
/// once (the last change's client for NOLOOP), in Redis's sorted order.
fn flush(core: &Rc<Core>) {
    let gather = &core.push.tracking;
    let own = std::mem::take(&mut *gather.own.borrow_mut());
    let changed = std::mem::take(&mut *gather.changed.borrow_mut());
    let mut per_core: Vec<Vec<Invalidation>> = (0..core.count).map(|_| Vec::new()).collect();
    for inv in own {
        per_core[core_of(inv.client, core.count)].push(inv);
    }
    for (target, list) in per_core.into_iter().enumerate() {
        if !list.is_empty() {
            post(core, target, move |core| receive(core, list));
        }
    }
    if changed.is_empty() {
        return;
    }
    type Message = (u64, Arc<Vec<Changed>>);
    let mut per_core: Vec<Vec<Message>> = (0..core.count).map(|_| Vec::new()).collect();
    {
        let shard = core.shard.borrow();
        let Some(table) = shard.tracking.as_ref() else { return };
        for (prefix, clients) in table.prefix_clients() {
            let keys: BTreeMap<&[u8], u64> =
                changed.iter().filter(|(k, _)| k.starts_with(prefix)).map(|(k, w)| (k.as_slice(), *w)).collect();
            if keys.is_empty() {
                continue;
            }
            let keys = Arc::new(keys.into_iter().map(|(k, w)| (k.to_vec(), w)).collect::<Vec<_>>());
            for &client in clients {
                per_core[core_of(client, core.count)].push((client, keys.clone()));
            }
        }
    }
    for (target, list) in per_core.into_iter().enumerate() {
        if !list.is_empty() {
            post(core, target, move |core| {
                for (client, keys) in list {
                    broadcast_to(core, client, &keys);
                }
            });
        }
    }
}

/// On the clients' core: each invalidation checked against its client's
/// current mode, then sent (to the client or its REDIRECT target), one
/// message per key as Redis.
fn receive(core: &Rc<Core>, list: Vec<Invalidation>) {
    for inv in list {
        if inv.client == 0 {
            flushed_here(core, inv.current);
            continue;
        }
        if let Some((mode, value)) = key_message(core, &inv) {
            send(core, inv.client, mode.redirect, mode.resp3, value);
        }
    }
}

/// What a tracking client of this core is, as an invalidation needs it.
struct Mode {
    redirect: u64,
    resp3: bool,
    bcast: bool,
    noloop: bool,
}

fn mode_of(core: &Core, id: u64) -> Option<Mode> {
    let queue = core.push.get(id)?;
    let clients = core.clients.borrow();
    let t = clients.list.get(queue.registry_key)?.tracking.as_ref()?;
    Some(Mode { redirect: t.redirect, resp3: queue.resp3.get(), bcast: t.bcast, noloop: t.noloop })
}

/// The message for a key its client read, if it still wants one: tracking
/// on, not BCAST, and not its own command's under NOLOOP (Redis's
/// trackingInvalidateKey); a flush's null for any tracking client.
fn key_message(core: &Core, inv: &Invalidation) -> Option<(Mode, Vec<u8>)> {
    let mode = mode_of(core, inv.client)?;
    let Some(key) = inv.key.as_deref() else {
        let null = if mode.resp3 { b"_\r\n".to_vec() } else { b"$-1\r\n".to_vec() };
        return Some((mode, null));
    };
    if mode.bcast || (mode.noloop && inv.own()) {
        return None;
    }
    let mut value = Vec::new();
    encode_keys(&mut value, &[key]);
    Some((mode, value))
}

/// A BCAST client's message for one prefix: its keys but those it changed
/// last itself under NOLOOP (Redis's trackingBuildBroadcastReply).
fn broadcast_to(core: &Rc<Core>, client: u64, keys: &[Changed]) {
    let Some(mode) = mode_of(core, client).filter(|m| m.bcast) else { return };
    let keys: Vec<&[u8]> =
        keys.iter().filter(|(_, writer)| !(mode.noloop && *writer == client)).map(|(k, _)| k.as_slice()).collect();
    if keys.is_empty() {
        return;
    }
    let mut value = Vec::new();
    encode_keys(&mut value, &keys);
    send(core, client, mode.redirect, mode.resp3, value);
}

/// A connection's own invalidations from a command that ran on another
/// core, as it places them among its replies: the bytes it writes itself
/// (RESP3 pushes); those for a REDIRECT target are sent there now.
pub fn own_pushes(core: &Rc<Core>, list: impl IntoIterator<Item = Invalidation>) -> Vec<u8> {
    let mut out = Vec::new();
    for inv in list {
        let Some((mode, value)) = key_message(core, &inv) else { continue };
        if mode.redirect == 0 {
            if mode.resp3 {
                out.extend_from_slice(b">2\r\n$10\r\ninvalidate\r\n");
                out.extend_from_slice(&value);
            }
        } else if is_gone(core, mode.redirect) {
            out.extend(broken(core, inv.client, mode.redirect).unwrap_or_default());
        } else {
            send(core, inv.client, mode.redirect, mode.resp3, value);
        }
    }
    out
}

/// FLUSHALL / FLUSHDB: every tracking client of this core gets a null,
/// but the one that flushed (`current`: its own follows its reply).
fn flushed_here(core: &Rc<Core>, current: u64) {
    let targets: Vec<(u64, u64, bool)> = {
        let clients = core.clients.borrow();
        clients
            .list
            .iter()
            .filter(|(_, c)| c.id != current)
            .filter_map(|(_, c)| c.tracking.as_ref().map(|t| (c.id, t.redirect, c.resp == 3)))
            .collect()
    };
    for (id, redirect, resp3) in targets {
        // The queue follows HELLO at once; the registry at the next read.
        let resp3 = core.push.get(id).map_or(resp3, |q| q.resp3.get());
        // The null is the tracking client's own protocol's.
        let null = if resp3 { b"_\r\n".to_vec() } else { b"$-1\r\n".to_vec() };
        send(core, id, redirect, resp3, null);
    }
}

fn encode_keys(out: &mut Vec<u8>, keys: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", keys.len()).as_bytes());
    for k in keys {
        out.extend_from_slice(format!("${}\r\n", k.len()).as_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(b"\r\n");
    }
}

/// Sends an invalidation `value` (an array of keys or a null) for tracking
/// client `id` (on this core): to itself, or to its REDIRECT target.
fn send(core: &Rc<Core>, id: u64, redirect: u64, resp3: bool, value: Vec<u8>) {
    if redirect != 0 && is_gone(core, redirect) {
        if let Some(queue) = core.push.get(id) {
            if let Some(bytes) = broken(core, id, redirect) {
                push_to(core, &queue, |out, _| out.extend_from_slice(&bytes));
            }
        }
        return;
    }
    if redirect == 0 {
        // RESP2 without REDIRECT: no way to push (Redis sends nothing).
        if resp3 {
            deliver(core, id, &value, false);
        }
        return;
    }
    post(core, core_of(redirect, core.count), move |target_core| {
        if !deliver(target_core, redirect, &value, true) {
            // The target is gone: tell the tracking client (Redis's
            // tracking-redir-broken) and flag it.
            post(target_core, core_of(id, target_core.count), move |core| redirect_broken(core, id, redirect));
        }
    });
}

/// Writes the invalidation message to client `to` of this core, in its
/// protocol. False when `to` is not connected (here).
fn deliver(core: &Rc<Core>, to: u64, value: &[u8], redirected: bool) -> bool {
    let Some(queue) = core.push.get(to) else {
        return core.clients.borrow().list.iter().any(|(_, c)| c.id == to);
    };
    let subscribed = queue.subscribed.get();
    push_to(core, &queue, |out, resp3| {
        if resp3 {
            out.extend_from_slice(b">2\r\n$10\r\ninvalidate\r\n");
        } else if redirected && subscribed {
            out.extend_from_slice(b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n");
        } else {
            return;
        }
        out.extend_from_slice(value);
    });
    true
}

fn redirect_broken(core: &Rc<Core>, id: u64, redirect: u64) {
    let Some(queue) = core.push.get(id) else { return };
    if let Some(bytes) = broken(core, id, redirect) {
        push_to(core, &queue, |out, _| out.extend_from_slice(&bytes));
    }
}

/// Tracking client `id` of this core found its REDIRECT target `redirect`
/// gone: it is flagged, and (in RESP3) told so (Redis's
/// tracking-redir-broken, once per message it could not send). `None`
/// when it no longer redirects there.
fn broken(core: &Core, id: u64, redirect: u64) -> Option<Vec<u8>> {
    let queue = core.push.get(id)?;
    let mut clients = core.clients.borrow_mut();
    let t = clients.list.get_mut(queue.registry_key)?.tracking.as_mut().filter(|t| t.redirect == redirect)?;
    t.broken_redirect = true;
    let resp3 = queue.resp3.get();
    Some(if resp3 { format!(">2\r\n$21\r\ntracking-redir-broken\r\n:{redirect}\r\n").into_bytes() } else { Vec::new() })
}

/// REDIRECT: tracking client `tracker` redirects to client `target` of
/// this core, and hears when it closes ([`closed`]). False when `target`
/// is not connected here.
pub fn watch(core: &Core, target: u64, tracker: u64) -> bool {
    if !core.clients.borrow().list.iter().any(|(_, c)| c.id == target) {
        return false;
    }
    let mut watchers = core.push.tracking.watchers.borrow_mut();
    let list = watchers.entry(target).or_default();
    if !list.contains(&tracker) {
        list.push(tracker);
    }
    true
}

/// `tracker` no longer redirects to client `target` of this core.
pub fn unwatch(core: &Core, target: u64, tracker: u64) {
    let mut watchers = core.push.tracking.watchers.borrow_mut();
    if let Some(list) = watchers.get_mut(&target) {
        list.retain(|&t| t != tracker);
        if list.is_empty() {
            watchers.remove(&target);
        }
    }
}

/// Client `id` of this core closed: the cores of the tracking clients
/// redirecting to it learn it is gone. Redis finds that out when an
/// invalidation is due; knowing it there answers at once, in order with
/// the tracking client's own replies.
pub fn closed(core: &Rc<Core>, id: u64) {
    let Some(trackers) = core.push.tracking.watchers.borrow_mut().remove(&id) else { return };
    let mut per_core: Vec<Vec<u64>> = (0..core.count).map(|_| Vec::new()).collect();
    for tracker in trackers {
        per_core[core_of(tracker, core.count)].push(tracker);
    }
    for (target, trackers) in per_core.into_iter().enumerate() {
        if !trackers.is_empty() {
            post(core, target, move |core| {
                let redirected = trackers.iter().any(|&t| mode_of(core, t).is_some_and(|m| m.redirect == id));
                let mut gone = core.push.tracking.gone.borrow_mut();
                if redirected && !gone.contains(&id) {
                    gone.push(id);
                }
            });
        }
    }
}

fn is_gone(core: &Core, redirect: u64) -> bool {
    let gone = core.push.tracking.gone.borrow();
    !gone.is_empty() && gone.contains(&redirect)
}

/// No tracking client of this core redirects to `redirect` any more: its
/// being gone is forgotten.
pub fn forget_gone(core: &Core, redirect: u64) {
    if !is_gone(core, redirect) {
        return;
    }
    let used =
        core.clients.borrow().list.iter().any(|(_, c)| c.tracking.as_ref().is_some_and(|t| t.redirect == redirect));
    if !used {
        core.push.tracking.gone.borrow_mut().retain(|&g| g != redirect);
    }
}

/// INFO: (tracking clients of this core, keys, items and prefixes of its
/// shard).
pub fn report(core: &Core, shard: &Shard) -> (u64, u64, u64, u64) {
    let clients = core.clients.borrow().list.iter().filter(|(_, c)| c.tracking.is_some()).count() as u64;
    match &shard.tracking {
        Some(t) => (clients, t.keys() as u64, t.items(), t.prefixes() as u64),
        None => (clients, 0, 0, 0),
    }
}
