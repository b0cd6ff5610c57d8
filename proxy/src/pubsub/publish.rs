//! Publishing from any core, and keeping the other cores' summaries of
//! this core's subscriptions current.
//!
//! A core reaches only the cores whose summary (`state::Summary`) says they
//! have a subscriber for the channel or a pattern matching it. A core that
//! gets its first subscriber for a name tells every other core before the
//! SUBSCRIBE is answered ([`announce`]); one that loses its last tells them
//! without waiting ([`retract`]): a stale entry costs one wasted hop, never
//! a lost message.

use super::fanout::publish_here;
use super::state::{Kind, PublishOutbox};
use crate::coordinator::dispatch::call_all;
use crate::core::Core;
use crate::mesh::{CallFn, Request, Response};
use std::rc::Rc;

/// Publishes `message` to `channel` (`Kind::Channel`, or `Kind::Shard` for
/// a shard channel) from any core and returns the number of receivers on
/// all cores, as PUBLISH replies. Each core with subscribers is reached
/// once, concurrently.
pub async fn publish(core: &Rc<Core>, kind: Kind, channel: &[u8], message: &[u8]) -> usize {
    let mut receivers = publish_here(core, kind, channel, message, 0, &mut Vec::new());
    let targets: Vec<usize> = core.pubsub.borrow().targets(core.index, kind, channel).collect();
    if targets.is_empty() {
        return receivers;
    }
    let mut tickets = Vec::with_capacity(targets.len());
    for target in targets {
        let (channel, message) = (channel.to_vec(), message.to_vec());
        let run: CallFn<Core> =
            Box::new(move |c| Box::new(publish_here(c, kind, &channel, &message, 0, &mut Vec::new())));
        tickets.push(core.mesh.send(target, Request::Call(run)).await);
    }
    for ticket in tickets {
        if let Response::Call(n) = ticket.await {
            receivers += n.downcast::<usize>().map_or(0, |n| *n);
        }
    }
    receivers
}

/// Publishes without waiting for the count (messages the server raises:
/// keyspace notifications). Delivered here at once; for other cores with
/// subscribers, batched with this turn's other publishes into one mesh
/// message per destination, sent once the current task yields. Publishes
/// from one core arrive at each other core in order.
pub fn publish_fire(core: &Rc<Core>, kind: Kind, channel: &[u8], message: &[u8]) {
    publish_here(core, kind, channel, message, 0, &mut Vec::new());
    let mut subs = core.pubsub.borrow_mut();
    let targets: Vec<usize> = subs.targets(core.index, kind, channel).collect();
    if targets.is_empty() {
        return;
    }
    for t in targets {
        subs.outbox[t].push(kind, channel, message);
    }
    if !subs.flush_scheduled {
        subs.flush_scheduled = true;
        let core = core.clone();
        glommio::spawn_local(async move { flush(&core).await }).detach();
    }
}

/// Sends each destination's publishes as one message; rounds until no more
/// were added meanwhile (the order holds).
async fn flush(core: &Rc<Core>) {
    loop {
        let boxes: Vec<(usize, PublishOutbox)> = {
            let mut subs = core.pubsub.borrow_mut();
            let boxes: Vec<_> = subs
                .outbox
                .iter_mut()
                .enumerate()
                .filter(|(_, b)| !b.is_empty())
                .map(|(i, b)| (i, std::mem::take(b)))
                .collect();
            if boxes.is_empty() {
                subs.flush_scheduled = false;
            }
            boxes
        };
        if boxes.is_empty() {
            return;
        }
        for (target, publishes) in boxes {
            let run: CallFn<Core> = Box::new(move |c| {
                for (kind, channel, message) in publishes.iter() {
                    publish_here(c, kind, channel, message, 0, &mut Vec::new());
                }
                Box::new(())
            });
            core.mesh.post(target, Request::Call(run)).await;
        }
    }
}

/// Tells every other core that this one now has subscribers for `names`
/// of `kind`; returns once all know, so a publish anywhere after it
/// reaches them.
pub async fn announce(core: &Rc<Core>, kind: Kind, names: Vec<Vec<u8>>) {
    if core.count == 1 || names.is_empty() {
        return;
    }
    let origin = core.index;
    call_all(core, move |c| change(c, origin, kind, &names, 1)).await;
}

/// Tells every other core that this one has no subscriber left for
/// `names` of `kind`, without waiting.
pub fn retract(core: &Rc<Core>, kind: Kind, names: Vec<Vec<u8>>) {
    if core.count == 1 || names.is_empty() {
        return;
    }
    let (me, origin) = (core.clone(), core.index);
    glommio::spawn_local(async move {
        for target in (0..me.count).filter(|&t| t != origin) {
            let names = names.clone();
            let run: CallFn<Core> = Box::new(move |c| {
                change(c, origin, kind, &names, -1);
                Box::new(())
            });
            me.mesh.post(target, Request::Call(run)).await;
        }
    })
    .detach();
}

fn change(core: &Core, origin: usize, kind: Kind, names: &[Vec<u8>], delta: i32) {
    if core.index == origin {
        return;
    }
    let mut subs = core.pubsub.borrow_mut();
    for name in names {
        subs.remote[origin].change(kind, name, delta);
    }
}
