//! A task's waker kept across its waits.

use std::task::{Context, Waker};

/// Where a task waits for the ring: the waker is cloned only when another
/// task (or a new waker) waits here, and a wake-up goes by reference. A
/// connection waits for input once per request, and glommio's waker clone
/// and drop are an atomic count each: with a fresh clone per wait they were
/// ~3% of a shard's user time at pipeline 1.
#[derive(Default)]
pub(super) struct WakeSlot {
    waker: Option<Waker>,
    waiting: bool,
}

impl WakeSlot {
    /// The task in `cx` waits here until the next `wake`.
    pub fn wait(&mut self, cx: &Context<'_>) {
        match &self.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => self.waker = Some(cx.waker().clone()),
        }
        self.waiting = true;
    }

    /// Wakes the task that waits here; `true` if one did.
    pub fn wake(&mut self) -> bool {
        if !std::mem::take(&mut self.waiting) {
            return false;
        }
        if let Some(w) = &self.waker {
            w.wake_by_ref();
        }
        true
    }

    /// The task no longer waits here (it was woken some other way).
    pub fn cancel(&mut self) {
        self.waiting = false;
    }

    /// The task waits here again, with the waker it left.
    pub fn resume(&mut self) {
        self.waiting = self.waker.is_some();
    }

    /// Lets go of the waker: the task is done with the ring.
    pub fn clear(&mut self) {
        *self = WakeSlot::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn wakes_only_a_waiting_task_and_keeps_its_waker() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let cx = Context::from_waker(&waker);
        let mut slot = WakeSlot::default();
        assert!(!slot.wake(), "nobody waits yet");
        slot.wait(&cx);
        slot.wait(&cx);
        assert_eq!(Arc::strong_count(&count), 3, "one clone kept, not one per wait");
        assert!(slot.wake());
        assert!(!slot.wake(), "one wake per wait");
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        slot.wait(&cx);
        slot.cancel();
        assert!(!slot.wake());
        slot.clear();
        assert_eq!(Arc::strong_count(&count), 2);
    }
}
