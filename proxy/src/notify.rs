//! Keyspace notifications, the proxy's half: the shard raises events into
//! its outbox (`shard::notify`) where the change happens; this core takes
//! them out after each command or batch it runs, and a per-core task takes
//! whatever else was raised (cross-shard steps, the cron's expiry and
//! eviction). Each event goes out through Pub/Sub as Redis's
//! notifyKeyspaceEvent publishes it: `__keyspace@<db>__:<key>` with the
//! event, then `__keyevent@<db>__:<event>` with the key, by K and E.

use crate::core::Core;
use shard::notify::{Outbox, KEYEVENT, KEYSPACE};
use std::rc::Rc;
use std::task::Poll;

/// Calls `publish(channel, message)` for every event in `out`, in order,
/// with the channels `flags` (the setting) asks for.
pub fn channels(out: &Outbox, flags: u32, mut publish: impl FnMut(&[u8], &[u8])) {
    let mut channel = Vec::with_capacity(64);
    let mut n = itoa::Buffer::new();
    for e in out.iter() {
        let db = n.format(e.db);
        if flags & KEYSPACE != 0 {
            channel.clear();
            channel.extend_from_slice(b"__keyspace@");
            channel.extend_from_slice(db.as_bytes());
            channel.extend_from_slice(b"__:");
            channel.extend_from_slice(e.key);
            publish(&channel, e.event.as_bytes());
        }
        if flags & KEYEVENT != 0 {
            channel.clear();
            channel.extend_from_slice(b"__keyevent@");
            channel.extend_from_slice(db.as_bytes());
            channel.extend_from_slice(b"__:");
            channel.extend_from_slice(e.event.as_bytes());
            publish(&channel, e.key);
        }
    }
}

thread_local! {
    /// The outbox swapped in while this core publishes the taken one: the
    /// two keep their room, so draining allocates nothing in steady state.
    static SPARE: std::cell::RefCell<Outbox> = Default::default();
}

/// Publishes every event this core's shard raised so far. One branch when
/// notifications are off.
pub fn drain(core: &Core) {
    let flags = {
        let mut shard = core.shard.borrow_mut();
        if shard.notify_mask == 0 || shard.notifications().is_empty() {
            return;
        }
        shard.config.notify_keyspace_events
    };
    let Some(me) = core.me.upgrade() else { return };
    SPARE.with(|spare| {
        let Ok(mut taken) = spare.try_borrow_mut() else { return };
        std::mem::swap(core.shard.borrow_mut().notifications(), &mut taken);
        channels(&taken, flags, |channel, message| publish(&me, channel, message));
        taken.clear();
    });
}

fn publish(core: &Rc<Core>, channel: &[u8], message: &[u8]) {
    crate::pubsub::publish::publish_fire(core, crate::pubsub::state::Kind::Channel, channel, message);
}

/// The per-core task that publishes events raised outside a command this
/// core ran (cross-shard steps, the cron's expiry and eviction): woken by
/// the first event after a drain.
pub async fn run(core: Rc<Core>) {
    loop {
        std::future::poll_fn(|cx| {
            let mut shard = core.shard.borrow_mut();
            let out = shard.notifications();
            if out.is_empty() {
                out.waker = Some(cx.waker().clone());
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
        .await;
        drain(&core);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shard::{Config, Shard};

    #[test]
    fn events_become_redis_channels() {
        let config =
            Config { notify_keyspace_events: shard::notify::parse_flags("KEA").unwrap(), ..Default::default() };
        let mut s = Shard::new(0, 1, config.clone());
        s.notify(shard::notify::GENERIC, "del", 3, b"k");
        let mut got = Vec::new();
        channels(s.notifications(), config.notify_keyspace_events, |c, m| {
            got.push((String::from_utf8_lossy(c).into_owned(), String::from_utf8_lossy(m).into_owned()))
        });
        let want = [("__keyspace@3__:k", "del"), ("__keyevent@3__:del", "k")];
        assert_eq!(got, want.map(|(c, m)| (c.to_string(), m.to_string())));
    }
}
