//! corekv: lets the embedder park the executor in its own io_uring.
//!
//! Upstream parks in its main ring with a poll on the latency ring's fd.
//! An embedder that drives its own ring (corekv's client ring) then needs
//! that ring's eventfd polled by glommio, and every park costs several
//! `io_uring_enter`s on rings that carry no work. With a hook installed
//! the executor instead asks the hook to wait: it submits its own pending
//! entries and blocks in one `io_uring_enter` until its ring has work, one
//! of glommio's ring fds (`wake_fds`: the main ring, and the latency
//! ring, which holds the remote-wake eventfd read) is readable, or the
//! next timer is due.
//!
//! A hook may also run its own tasks inside `park` and park again, as long
//! as the executor has nothing to do: it runs them in the task queue that
//! installed it (so they spawn, set timers and queue I/O as they would in
//! that queue's task), and goes back to the executor once [`wanted`] says
//! so.

use crate::TaskQueueHandle;
use std::{
    cell::{Cell, RefCell},
    os::fd::RawFd,
    rc::Rc,
    time::Duration,
};

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
    static HOOK: RefCell<Option<(Rc<dyn ParkHook>, TaskQueueHandle)>> = const { RefCell::new(None) };
    /// Timers set and I/O queued on this thread's rings so far.
    static ACTIVITY: Cell<u64> = const { Cell::new(0) };
}

/// Installs (or with `None` removes) this thread's park hook, from a task:
/// the hook parks in that task's queue.
pub fn set_park_hook(hook: Option<Rc<dyn ParkHook>>) {
    let hook = hook.map(|h| (h, crate::executor().current_task_queue()));
    HOOK.with(|h| *h.borrow_mut() = hook);
}

pub(crate) fn park_hook() -> Option<(Rc<dyn ParkHook>, TaskQueueHandle)> {
    HOOK.with(|h| h.borrow().clone())
}

/// A timer was set or I/O queued: the executor's next park must see it.
pub(crate) fn note_activity() {
    ACTIVITY.with(|a| a.set(a.get().wrapping_add(1)));
}

/// A count that moves whenever a timer is set or I/O is queued on the
/// executor's rings.
pub fn activity() -> u64 {
    ACTIVITY.with(Cell::get)
}

/// The executor wants the thread back from a hook's `park`: a task is
/// runnable, or the activity count moved from `since` (a new timer may be
/// due before the park's timeout, queued I/O waits for a submit).
pub fn wanted(since: u64) -> bool {
    activity() != since || crate::executor().others_runnable()
}
