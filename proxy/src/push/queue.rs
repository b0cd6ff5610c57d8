//! A connection's push queue and the core's registry of them (a leaf:
//! plain data, no I/O). Whoever raises a push on the connection's core
//! appends bytes and wakes the connection; its socket loop takes them.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Bytes waiting for one connection, appended by anyone on its core.
pub struct PushQueue {
    pub client_id: u64,
    /// The connection's entry in the core's client registry.
    pub registry_key: usize,
    bytes: RefCell<Vec<u8>>,
    waker: Cell<Option<Waker>>,
    /// The connection speaks RESP3 (push messages start with `>`).
    pub resp3: Cell<bool>,
    /// Output the connection itself still holds (its unsent replies and the
    /// socket's queue) as of its last write: counted with the queue against
    /// the output buffer limit.
    pub held_by_conn: Cell<usize>,
    /// Subscribed to some channel, pattern or shard channel: the `pubsub`
    /// class of `client-output-buffer-limit` applies.
    pub subscribed: Cell<bool>,
    /// Went over its output buffer limit: it is being closed and gets
    /// nothing more.
    pub overflowed: Cell<bool>,
}

impl PushQueue {
    pub fn new(client_id: u64, registry_key: usize, resp3: bool) -> PushQueue {
        PushQueue {
            client_id,
            registry_key,
            bytes: RefCell::new(Vec::new()),
            waker: Cell::new(None),
            resp3: Cell::new(resp3),
            held_by_conn: Cell::new(0),
            subscribed: Cell::new(false),
            overflowed: Cell::new(false),
        }
    }

    /// Bytes waiting.
    pub fn len(&self) -> usize {
        self.bytes.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.borrow().is_empty()
    }

    /// Appends what `write` writes and wakes the connection; the output it
    /// then holds (the queue and `held_by_conn`), for the caller to hold
    /// against the output buffer limit. Nothing once overflowed.
    pub fn push(&self, write: impl FnOnce(&mut Vec<u8>)) -> usize {
        if self.overflowed.get() {
            return 0;
        }
        let mut bytes = self.bytes.borrow_mut();
        write(&mut bytes);
        let held = bytes.len() + self.held_by_conn.get();
        drop(bytes);
        self.wake();
        held
    }

    /// Over its output buffer limit: the waiting bytes go and nothing more
    /// is taken; the connection is woken to see it.
    pub fn overflow(&self) {
        *self.bytes.borrow_mut() = Vec::new();
        self.overflowed.set(true);
        self.wake();
    }

    fn wake(&self) {
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    /// Moves the waiting bytes to the end of `out`.
    pub fn take_into(&self, out: &mut Vec<u8>) {
        let mut bytes = self.bytes.borrow_mut();
        if out.is_empty() {
            std::mem::swap(out, &mut bytes);
        } else {
            out.extend_from_slice(&bytes);
            bytes.clear();
        }
        if bytes.capacity() > 64 * 1024 {
            *bytes = Vec::new();
        }
    }

    /// Ready when bytes wait or the queue overflowed.
    pub fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.bytes.borrow().is_empty() || self.overflowed.get() {
            return Poll::Ready(());
        }
        self.waker.set(Some(cx.waker().clone()));
        Poll::Pending
    }
}

/// The push queues of this core's connections, by client id, and the
/// pushes waiting to go to other cores' clients.
#[derive(Default)]
pub struct PushRegistry {
    pub queues: RefCell<HashMap<u64, Rc<PushQueue>, ahash::RandomState>>,
    /// Per destination core, sent by one task after the current one yields
    /// (`flush_scheduled`).
    pub outbox: RefCell<Vec<PushOutbox>>,
    pub flush_scheduled: Cell<bool>,
    /// CLIENT TRACKING's state for delivering invalidations (`tracking.rs`).
    pub tracking: TrackingState,
}

/// What this core holds to deliver CLIENT TRACKING's invalidations.
#[derive(Default)]
pub struct TrackingState {
    /// Invalidations a pass on this core waits to send: BCAST keys changed
    /// (with the client that changed each)...
    pub changed: RefCell<Vec<(Vec<u8>, u64)>>,
    /// ...and own invalidations of other cores' clients that no reply has
    /// carried back yet.
    pub own: RefCell<Vec<shard::tracking::Invalidation>>,
    /// Passes waiting for replies that bring more.
    pub holds: Cell<usize>,
    /// A send is due once the current task yields.
    pub scheduled: Cell<bool>,
    /// REDIRECT: the tracking clients (of any core) redirecting to each
    /// client of this core, told when it closes...
    pub watchers: RefCell<HashMap<u64, Vec<u64>, ahash::RandomState>>,
    /// ...and the redirect targets known gone, of this core's trackers.
    pub gone: RefCell<Vec<u64>>,
}

impl TrackingState {
    pub fn is_empty(&self) -> bool {
        self.changed.borrow().is_empty() && self.own.borrow().is_empty()
    }
}

/// Pushes for clients of one other core, sent as one mesh message.
#[derive(Default)]
pub struct PushOutbox {
    pub data: Vec<u8>,
    /// (client id, end of its bytes in `data`).
    pub items: Vec<(u64, u32)>,
}

impl PushOutbox {
    pub fn push(&mut self, client_id: u64, bytes: &[u8]) {
        self.data.extend_from_slice(bytes);
        self.items.push((client_id, self.data.len() as u32));
    }

    /// (client id, bytes) in order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &[u8])> {
        let mut start = 0usize;
        self.items.iter().map(move |&(id, end)| {
            let item = (id, &self.data[start..end as usize]);
            start = end as usize;
            item
        })
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

impl PushRegistry {
    pub fn get(&self, client_id: u64) -> Option<Rc<PushQueue>> {
        self.queues.borrow().get(&client_id).cloned()
    }
}

/// The core that accepted client `client_id`: ids interleave the cores'
/// sequences (`Clients::next_id`).
pub fn core_of(client_id: u64, cores: usize) -> usize {
    (client_id.saturating_sub(1) % cores as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_drops_and_takes_nothing_more() {
        let q = PushQueue::new(1, 0, false);
        q.held_by_conn.set(3);
        assert_eq!(q.push(|b| b.extend_from_slice(b"12345")), 8);
        q.overflow();
        assert!(q.overflowed.get() && q.is_empty());
        assert_eq!(q.push(|b| b.push(b'x')), 0);
        assert!(q.is_empty());
    }

    #[test]
    fn ids_name_their_core() {
        let mut c = crate::clients::Clients::default();
        for _ in 0..5 {
            assert_eq!(core_of(c.next_id(2, 3), 3), 2);
        }
    }
}
