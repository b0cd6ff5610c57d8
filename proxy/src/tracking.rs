//! Client-side caching's deliveries (Redis's tracking.c, sending side).
//! The shard that owns a key keeps who read it (`shard::tracking`); after
//! each command or batch its invalidations go to each client's own core,
//! which alone knows the client's mode (BCAST, NOLOOP, REDIRECT, RESP3),
//! and from there, with REDIRECT, to the target's core. Bytes reach a
//! connection through its push queue (`push`).

use crate::core::Core;
use crate::mesh::{CallFn, Request};
use crate::push::deliver::push_to;
use crate::push::queue::core_of;
use shard::tracking::Invalidation;
use shard::Shard;
use std::rc::Rc;

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
    /// Hands the shard's pending invalidations to their clients' cores:
    /// one call per core, in the order they were raised.
    pub fn send_invalidations(&self) {
        let Some(me) = self.me.upgrade() else { return };
        let out = match self.shard.borrow_mut().tracking.as_mut() {
            Some(t) => std::mem::take(&mut t.out),
            None => return,
        };
        let mut per_core: Vec<Vec<Invalidation>> = (0..self.count).map(|_| Vec::new()).collect();
        for inv in out {
            if inv.client == 0 {
                // A flush: every core's tracking clients hear it.
                for list in per_core.iter_mut() {
                    list.push(inv.clone());
                }
            } else {
                per_core[core_of(inv.client, self.count)].push(inv);
            }
        }
        for (target, list) in per_core.into_iter().enumerate() {
            if !list.is_empty() {
                post(&me, target, move |core| receive(core, list));
            }
        }
    }
}

/// On the clients' core: each invalidation checked against its client's
/// current mode, then sent (to the client or its REDIRECT target).
fn receive(core: &Rc<Core>, list: Vec<Invalidation>) {
    let mut i = 0;
    while i < list.len() {
        let inv = &list[i];
        if inv.client == 0 {
            flushed_here(core);
            i += 1;
            continue;
        }
        // A BCAST client's keys from one batch go in one array.
        let mut end = i + 1;
        if inv.bcast {
            while end < list.len() && list[end].bcast && list[end].client == inv.client {
                end += 1;
            }
        }
        invalidate_client(core, inv.client, &list[i..end]);
        i = end;
    }
}

/// The tracking mode of client `id` of this core: (redirect, resp3).
fn mode_of(core: &Core, id: u64, wanted: impl Fn(&crate::clients::Tracking) -> bool) -> Option<(u64, bool)> {
    let queue = core.push.get(id)?;
    let clients = core.clients.borrow();
    let info = clients.list.get(queue.registry_key)?;
    let t = info.tracking.as_ref()?;
    wanted(t).then_some((t.redirect, queue.resp3.get()))
}

fn invalidate_client(core: &Rc<Core>, id: u64, items: &[Invalidation]) {
    let bcast = items[0].bcast;
    let noloop = std::cell::Cell::new(false);
    let Some((redirect, resp3)) = mode_of(core, id, |t| {
        noloop.set(t.noloop);
        t.bcast == bcast
    }) else {
        return;
    };
    let keys: Vec<&[u8]> =
        items.iter().filter(|inv| !(noloop.get() && inv.writer == id)).filter_map(|inv| inv.key.as_deref()).collect();
    if keys.is_empty() {
        return;
    }
    let mut value = Vec::new();
    if bcast {
        encode_keys(&mut value, &keys);
        send(core, id, redirect, resp3, value);
    } else {
        // Redis sends one message per key outside BCAST.
        for key in keys {
            value.clear();
            encode_keys(&mut value, &[key]);
            send(core, id, redirect, resp3, value.clone());
        }
    }
}

/// FLUSHALL / FLUSHDB: every tracking client of this core gets a null.
fn flushed_here(core: &Rc<Core>) {
    let targets: Vec<(u64, u64, bool)> = {
        let clients = core.clients.borrow();
        clients.list.iter().filter_map(|(_, c)| c.tracking.as_ref().map(|t| (c.id, t.redirect, c.resp == 3))).collect()
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
    {
        let mut clients = core.clients.borrow_mut();
        match clients.list.get_mut(queue.registry_key).and_then(|c| c.tracking.as_mut()) {
            Some(t) if t.redirect == redirect => t.broken_redirect = true,
            _ => return,
        }
    }
    push_to(core, &queue, |out, resp3| {
        if resp3 {
            out.extend_from_slice(format!(">2\r\n$21\r\ntracking-redir-broken\r\n:{redirect}\r\n").as_bytes());
        }
    });
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
