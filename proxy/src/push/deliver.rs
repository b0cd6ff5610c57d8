//! Pushing bytes to a connection from anywhere: [`deliver_here`] on the
//! client's own core (appends to its queue and wakes it), [`deliver`] from
//! any core (the client's core is in its id; pushes for other cores wait in
//! a per-destination outbox and go as one mesh message per destination
//! once the current task yields), [`attach`]/[`detach`] for the connection
//! itself.
//!
//! Every push counts against the receiving connection's
//! `client-output-buffer-limit` (the `pubsub` class while it is
//! subscribed, `normal` otherwise): one over it is closed with Redis's log
//! line and gets nothing more, so a client that does not read costs at
//! most its limit.

use super::queue::{core_of, Limit, PushOutbox, PushQueue};
use crate::core::Core;
use crate::log;
use crate::mesh::{CallFn, Request};
use std::rc::Rc;
use std::time::Instant;

/// The push queue of connection `client_id` (its registry entry
/// `registry_key`), created and registered on first use; `slot` is where
/// the connection keeps it. Idempotent.
pub fn attach(
    core: &Core,
    slot: &mut Option<Rc<PushQueue>>,
    client_id: u64,
    registry_key: usize,
    resp3: bool,
) -> Rc<PushQueue> {
    if let Some(q) = slot {
        return q.clone();
    }
    let q = Rc::new(PushQueue::new(client_id, registry_key, resp3));
    core.push.queues.borrow_mut().insert(client_id, q.clone());
    *slot = Some(q.clone());
    q
}

/// Forgets connection `client_id`'s queue (it closed): later pushes to it
/// are dropped.
pub fn detach(core: &Core, client_id: u64) {
    core.push.queues.borrow_mut().remove(&client_id);
}

/// The output buffer limit a push to `queue` is held to. A push raised
/// while the shard is borrowed (inside a command's execution) is checked
/// against none: the next push or the connection's write checks again.
pub fn limit_of(core: &Core, queue: &PushQueue) -> Limit {
    let Ok(shard) = core.shard.try_borrow() else {
        return Limit { hard: 0, soft: 0, soft_seconds: 0 };
    };
    let config = &shard.config;
    let l = if queue.subscribed.get() {
        config.client_output_buffer_limit.pubsub
    } else {
        config.client_output_buffer_limit.normal
    };
    Limit { hard: l.hard, soft: l.soft, soft_seconds: l.soft_seconds }
}

/// Appends what `write` writes (given whether the client speaks RESP3) to
/// the queue of `queue`'s connection, on its own core, under its output
/// buffer limit. False when the push made it overflow (it is closed).
pub fn push_to(core: &Core, queue: &PushQueue, write: impl FnOnce(&mut Vec<u8>, bool)) -> bool {
    let resp3 = queue.resp3.get();
    if queue.push(limit_of(core, queue), core.now_instant(), |out| write(out, resp3)) {
        return true;
    }
    close_overflowed(core, queue);
    false
}

/// A connection went over its output buffer limit while it waited: Redis's
/// log line, and its socket is shut down (its task sees the end).
fn close_overflowed(core: &Core, queue: &PushQueue) {
    let clients = core.clients.borrow();
    if let Some(c) = clients.list.get(queue.registry_key) {
        log::warning(&format!(
            "Client {} scheduled to be closed ASAP for overcoming of output buffer limits.",
            c.line(Instant::now())
        ));
    }
    clients.kill(queue.registry_key);
}

/// Pushes `bytes` to client `client_id` of this core. False when there is
/// no such client with a push queue here, or it overflowed.
pub fn deliver_here(core: &Core, client_id: u64, bytes: &[u8]) -> bool {
    let Some(queue) = core.push.get(client_id) else { return false };
    push_to(core, &queue, |out, _| out.extend_from_slice(bytes))
}

/// Pushes `bytes` to client `client_id` wherever it lives, from any core,
/// without waiting: at once on its own core, else batched with this turn's
/// other pushes for that core into one mesh message. Pushes from one core
/// to one client arrive in order. Dropped if the client has gone (or never
/// attached a queue).
pub fn deliver(core: &Rc<Core>, client_id: u64, bytes: &[u8]) {
    let target = core_of(client_id, core.count);
    if target == core.index {
        deliver_here(core, client_id, bytes);
        return;
    }
    {
        let mut outbox = core.push.outbox.borrow_mut();
        if outbox.is_empty() {
            outbox.resize_with(core.count, PushOutbox::default);
        }
        outbox[target].push(client_id, bytes);
    }
    if !core.push.flush_scheduled.replace(true) {
        let core = core.clone();
        glommio::spawn_local(async move { flush(&core).await }).detach();
    }
}

/// Sends each destination's outbox as one message (runs after the task
/// that filled them yielded). Pushes added while a send waits for room go
/// out in a later round of the same task, so their order holds.
async fn flush(core: &Rc<Core>) {
    loop {
        let boxes: Vec<(usize, PushOutbox)> = {
            let mut outbox = core.push.outbox.borrow_mut();
            outbox.iter_mut().enumerate().filter(|(_, b)| !b.is_empty()).map(|(i, b)| (i, std::mem::take(b))).collect()
        };
        if boxes.is_empty() {
            core.push.flush_scheduled.set(false);
            return;
        }
        for (target, pushes) in boxes {
            let run: CallFn<Core> = Box::new(move |c| {
                for (id, bytes) in pushes.iter() {
                    deliver_here(c, id, bytes);
                }
                Box::new(())
            });
            core.mesh.post(target, Request::Call(run)).await;
        }
    }
}
