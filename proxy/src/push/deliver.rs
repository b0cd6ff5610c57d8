//! Pushing bytes to a connection from anywhere: [`deliver_here`] on the
//! client's own core (appends to its queue and wakes it), [`deliver`] from
//! any core (the client's core is in its id; pushes for other cores wait in
//! a per-destination outbox and go as one mesh message per destination
//! once the current task yields), [`attach`]/[`detach`] for the connection
//! itself.
//!
//! Every push counts against the receiving connection's
//! `client-output-buffer-limit` (the `pubsub` class while it is
//! subscribed, `normal` otherwise; the time over the soft limit is the
//! client's, in its registry entry): one over it is closed with Redis's log
//! line and gets nothing more, so a client that does not read costs at
//! most its limit.

use super::queue::{core_of, PushOutbox, PushQueue};
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

/// Whether `held` bytes of output take `queue`'s connection past its output
/// buffer limit. A push raised while the shard or the client registry is
/// borrowed (inside a command's execution) is not checked: the next push,
/// the connection's write or the cron checks again.
fn over_limit(core: &Core, queue: &PushQueue, held: usize) -> bool {
    let Ok(shard) = core.shard.try_borrow() else { return false };
    let limits = shard.config.client_output_buffer_limit;
    drop(shard);
    let Ok(mut clients) = core.clients.try_borrow_mut() else { return false };
    let Some(c) = clients.list.get_mut(queue.registry_key) else { return false };
    let Some(limit) = c.output_limit(&limits) else { return false };
    c.output_limit_reached(held as u64, limit, shard::unix_ms() / 1000)
}

/// Appends what `write` writes (given whether the client speaks RESP3) to
/// the queue of `queue`'s connection, on its own core, under its output
/// buffer limit. False when the push made it overflow (it is closed).
pub fn push_to(core: &Core, queue: &PushQueue, write: impl FnOnce(&mut Vec<u8>, bool)) -> bool {
    if queue.overflowed.get() {
        return false;
    }
    let resp3 = queue.resp3.get();
    let held = queue.push(|out| write(out, resp3));
    if !over_limit(core, queue, held) {
        return true;
    }
    queue.overflow();
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
