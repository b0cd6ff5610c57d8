//! Publishing from any core, and keeping the other cores' summaries of
//! this core's subscriptions current.
//!
//! A core reaches only the cores whose summary (`state::Summary`) says they
//! have a subscriber for the channel or a pattern matching it. Each
//! subscription is counted on every other core ([`announce`]): a core's
//! first subscriber of a name is known everywhere before the SUBSCRIBE is
//! answered, later ones follow without waiting, as do removals
//! ([`retract`]): a stale entry costs one wasted hop, never a lost message.

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

/// Publishes without waiting for the other cores (messages the server
/// raises: keyspace notifications; PUBLISH from a script). Delivered here
/// at once; for other cores with subscribers, batched with this turn's
/// other publishes into one mesh message per destination, sent once the
/// current task yields. Publishes from one core arrive at each other core
/// in order. Returns the receivers on this core.
pub fn publish_fire(core: &Rc<Core>, kind: Kind, channel: &[u8], message: &[u8]) -> usize {
    let here = publish_here(core, kind, channel, message, 0, &mut Vec::new());
    let mut subs = core.pubsub.borrow_mut();
    let targets: Vec<usize> = subs.targets(core.index, kind, channel).collect();
    if targets.is_empty() {
        return here;
    }
    for t in targets {
        subs.outbox[t].push(kind, channel, message);
    }
    if !subs.flush_scheduled {
        subs.flush_scheduled = true;
        // glommio may run the spawned task at once: let go of the borrow.
        drop(subs);
        let core = core.clone();
        glommio::spawn_local(async move { flush(&core).await }).detach();
    }
    here
}

/// PUBLISH from a script, which cannot wait for other cores: delivered as
/// [`publish_fire`] does, the count being this core's receivers plus the
/// other cores' as their summaries say.
pub fn publish_counted(core: &Rc<Core>, kind: Kind, channel: &[u8], message: &[u8]) -> usize {
    let remote = core.pubsub.borrow().remote_receivers(core.index, kind, channel);
    publish_fire(core, kind, channel, message) + remote
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

/// Tells every other core of this one's new subscriptions to names of
/// `kind`: `first` (the core's first subscriber of the name) before
/// returning, so a publish anywhere after it reaches them; `more` (names
/// the core already had) without waiting, for the counts.
pub async fn announce(core: &Rc<Core>, kind: Kind, first: Vec<Vec<u8>>, more: Vec<Vec<u8>>) {
    if core.count == 1 || (first.is_empty() && more.is_empty()) {
        return;
    }
    if first.is_empty() {
        return tell(core, kind, more, 1);
    }
    let origin = core.index;
    call_all(core, move |c| {
        change(c, origin, kind, &first, 1);
        change(c, origin, kind, &more, 1);
    })
    .await;
}

/// Tells every other core that this one lost a subscriber of each of
/// `names` of `kind`, without waiting.
pub fn retract(core: &Rc<Core>, kind: Kind, names: Vec<Vec<u8>>) {
    tell(core, kind, names, -1);
}

/// Posts a count change for `names` to every other core.
pub fn tell(core: &Rc<Core>, kind: Kind, names: Vec<Vec<u8>>, delta: i32) {
    if core.count == 1 || names.is_empty() {
        return;
    }
    let (me, origin) = (core.clone(), core.index);
    glommio::spawn_local(async move {
        for target in (0..me.count).filter(|&t| t != origin) {
            let names = names.clone();
            let run: CallFn<Core> = Box::new(move |c| {
                change(c, origin, kind, &names, delta);
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
