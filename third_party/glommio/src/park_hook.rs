//! corekv: lets the embedder park the executor in its own io_uring.
//!
//! Upstream parks in its main ring with a poll on the latency ring's fd.
//! An embedder that drives its own ring (corekv's client ring) then needs
//! that ring's eventfd polled by glommio, and every park costs several
//! `io_uring_enter`s on rings that carry no work. With a hook installed
//! the executor instead asks the hook to wait: it submits its own pending
//! entries and blocks in one `io_uring_enter` until its ring has work, one
//! of glommio's ring fds (`wake_fds`: the main ring, which holds the
//! remote-wake eventfd read, and the latency ring) is readable, or the
//! next timer is due.

use std::{cell::RefCell, os::fd::RawFd, rc::Rc, time::Duration};

/// What the executor asks of an installed hook, all on its own thread.
pub trait ParkHook {
    /// Non-blocking: wakes whatever tasks the hook's own completions are
    /// for; returns how many it woke (a non-zero count keeps the executor
    /// from sleeping).
    fn poll(&self) -> usize;
    /// The executor goes on without sleeping: submit what is pending.
    fn flush(&self);
    /// Blocks until the hook's ring has work, a `wake_fds` entry is
    /// readable, or `timeout` passes, and wakes the tasks its work is for.
    fn park(&self, timeout: Option<Duration>, wake_fds: [RawFd; 2]);
}

thread_local! {
    static HOOK: RefCell<Option<Rc<dyn ParkHook>>> = const { RefCell::new(None) };
}

/// Installs (or with `None` removes) this thread's park hook.
pub fn set_park_hook(hook: Option<Rc<dyn ParkHook>>) {
    HOOK.with(|h| *h.borrow_mut() = hook);
}

pub(crate) fn park_hook() -> Option<Rc<dyn ParkHook>> {
    HOOK.with(|h| h.borrow().clone())
}
