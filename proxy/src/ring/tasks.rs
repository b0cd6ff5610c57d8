//! Connection tasks that the ring's driver polls itself.
//!
//! A connection spawned on the ring (`Ring::spawn`) is not a glommio
//! task: its future lives in the driver's slab, and a wake-up lists it in
//! the ring's ready queue, which the driver runs right after the turn that
//! reaped its input. Input handled that way costs no glommio schedule, no
//! pass of its task queue and no task reference counting: those were ~17%
//! of a shard's user time at pipeline 1 (bench/RESULTS.md, "Connections
//! polled by the driver"). Everything else a connection awaits (timers, the
//! mesh, glommio channels) wakes it through the same waker.
//!
//! A waker is an `Arc<TaskWaker>`, made once per task. Woken on its own
//! thread it queues the task directly; woken from another thread (a
//! `Waker` is `Send`) it goes through a mutex-guarded list and the
//! driver's glommio waker, which is safe to wake from anywhere.

use super::wake::WakeSlot;
use slab::Slab;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};

type BoxedTask = Pin<Box<dyn Future<Output = ()>>>;

thread_local! {
    /// The task queues of the rings driven on this thread, by id: a waker
    /// that finds its queue here is woken locally.
    static QUEUES: RefCell<Vec<(u64, Weak<Queue>)>> = const { RefCell::new(Vec::new()) };
}

static NEXT_QUEUE_ID: AtomicU64 = AtomicU64::new(1);

/// What other threads reach of a ring's tasks.
#[derive(Default)]
struct Foreign {
    woken: Mutex<Vec<Arc<TaskWaker>>>,
    pending: AtomicBool,
    /// The driver task's own (glommio) waker, set when it starts.
    driver: Mutex<Option<Waker>>,
}

/// A ring's ready queue and the tasks spawned since its driver last
/// looked.
pub(super) struct Queue {
    id: u64,
    ready: RefCell<Vec<usize>>,
    spawned: RefCell<Vec<BoxedTask>>,
    foreign: Arc<Foreign>,
    /// The driver, while it waits for work.
    driver: RefCell<WakeSlot>,
}

impl Default for Queue {
    fn default() -> Self {
        Queue {
            id: NEXT_QUEUE_ID.fetch_add(1, Ordering::Relaxed),
            ready: RefCell::default(),
            spawned: RefCell::default(),
            foreign: Arc::default(),
            driver: RefCell::default(),
        }
    }
}

impl Queue {
    /// Work for the driver: ready or new tasks, or wake-ups from elsewhere.
    pub(super) fn has_work(&self) -> bool {
        !self.ready.borrow().is_empty()
            || !self.spawned.borrow().is_empty()
            || self.foreign.pending.load(Ordering::Acquire)
    }

    /// The driver in `cx` waits for work (with whatever else it waits for).
    pub(super) fn wait(&self, cx: &Context<'_>) {
        self.driver.borrow_mut().wait(cx);
    }

    /// The driver stopped waiting.
    pub(super) fn cancel_wait(&self) {
        self.driver.borrow_mut().cancel();
    }

    /// The driver waits again, as it did before `cancel_wait`.
    pub(super) fn resume_wait(&self) {
        self.driver.borrow_mut().resume();
    }

    pub(super) fn spawn(&self, future: BoxedTask) {
        self.spawned.borrow_mut().push(future);
        self.driver.borrow_mut().wake();
    }

    /// Lists the task in the ready queue (once) and wakes a waiting driver.
    fn queue(&self, w: &TaskWaker) {
        if w.done.load(Ordering::Relaxed) || w.queued.load(Ordering::Relaxed) {
            return;
        }
        w.queued.store(true, Ordering::Relaxed);
        self.ready.borrow_mut().push(w.key);
        self.driver.borrow_mut().wake();
    }

    /// Makes this thread's wake-ups of the queue's tasks local, and gives
    /// other threads the driver's waker; undone by the guard's drop.
    pub(super) fn register(self: &Rc<Self>, driver: &Waker) -> Registered {
        *self.foreign.driver.lock().unwrap_or_else(|e| e.into_inner()) = Some(driver.clone());
        QUEUES.with_borrow_mut(|q| q.push((self.id, Rc::downgrade(self))));
        Registered { id: self.id, foreign: self.foreign.clone() }
    }
}

pub(super) struct Registered {
    id: u64,
    foreign: Arc<Foreign>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        QUEUES.with_borrow_mut(|q| q.retain(|(id, _)| *id != self.id));
        *self.foreign.driver.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

struct TaskWaker {
    key: usize,
    queue: u64,
    /// Listed in the ready queue. Only the queue's thread reads or writes
    /// it (a plain load and store), as `done`.
    queued: AtomicBool,
    /// The task finished: a late wake-up finds nothing to run.
    done: AtomicBool,
    foreign: Arc<Foreign>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let queue = QUEUES.with_borrow(|q| q.iter().find(|(id, _)| *id == self.queue).and_then(|(_, q)| q.upgrade()));
        match queue {
            Some(queue) => queue.queue(self),
            None => {
                self.foreign.woken.lock().unwrap_or_else(|e| e.into_inner()).push(self.clone());
                self.foreign.pending.store(true, Ordering::Release);
                if let Some(driver) = self.foreign.driver.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                    driver.wake_by_ref();
                }
            }
        }
    }
}

struct Task {
    /// Out of the slab while it is being polled: a task polled further up
    /// the stack (a busy script's connection, `Ring::serve_while_blocked`)
    /// is not polled again inside itself.
    future: Option<BoxedTask>,
    waker: Waker,
    handle: Arc<TaskWaker>,
}

/// The driver's tasks: held by the ring, dropped when the driver ends. No
/// borrow is held while a task is polled, so a task may run the ring's
/// other tasks from inside its own poll.
#[derive(Default)]
pub(super) struct Tasks {
    slab: RefCell<Slab<Task>>,
    /// The batch being run (the ready queue's buffer, swapped); empty
    /// while a run uses it.
    batch: Cell<Vec<usize>>,
}

impl Tasks {
    pub(super) fn is_empty(&self) -> bool {
        self.slab.borrow().is_empty()
    }

    /// Polls every task ready when it starts, once: one woken meanwhile
    /// waits for the next call, so a task that wakes itself (a yield)
    /// cannot hold the driver.
    pub(super) fn run(&self, q: &Queue) {
        for future in q.spawned.borrow_mut().drain(..) {
            let mut slab = self.slab.borrow_mut();
            let entry = slab.vacant_entry();
            let handle = Arc::new(TaskWaker {
                key: entry.key(),
                queue: q.id,
                queued: AtomicBool::new(true),
                done: AtomicBool::new(false),
                foreign: q.foreign.clone(),
            });
            q.ready.borrow_mut().push(entry.key());
            entry.insert(Task { future: Some(future), waker: Waker::from(handle.clone()), handle });
        }
        if q.foreign.pending.swap(false, Ordering::Acquire) {
            let woken = std::mem::take(&mut *q.foreign.woken.lock().unwrap_or_else(|e| e.into_inner()));
            for w in woken {
                q.queue(&w);
            }
        }
        let mut batch = self.batch.take();
        std::mem::swap(&mut batch, &mut *q.ready.borrow_mut());
        let mut running_above = None;
        for &key in &batch {
            let (mut future, waker) = {
                let mut slab = self.slab.borrow_mut();
                let Some(task) = slab.get_mut(key) else { continue };
                let Some(future) = task.future.take() else {
                    // Polled further up the stack: it runs again once back.
                    running_above = Some(task.handle.clone());
                    continue;
                };
                task.handle.queued.store(false, Ordering::Relaxed);
                (future, task.waker.clone())
            };
            let done = future.as_mut().poll(&mut Context::from_waker(&waker)).is_ready();
            let mut slab = self.slab.borrow_mut();
            let Some(task) = slab.get_mut(key) else { continue };
            if done {
                task.handle.done.store(true, Ordering::Relaxed);
                let task = slab.remove(key);
                // Dropped once the slab is not borrowed: a connection's
                // cleanup may wake or run other tasks.
                drop(slab);
                drop((task, future));
            } else {
                task.future = Some(future);
            }
        }
        if let Some(handle) = running_above {
            handle.queued.store(false, Ordering::Relaxed);
            q.queue(&handle);
        }
        batch.clear();
        self.batch.set(batch);
    }

    /// Drops every task (the driver ended), taken out first: a
    /// connection's cleanup code must not find the slab borrowed.
    pub(super) fn drop_all(&self) {
        let all = std::mem::take(&mut *self.slab.borrow_mut());
        for (_, task) in all.iter() {
            task.handle.done.store(true, Ordering::Relaxed);
        }
        drop(all);
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        // The driver went first (the executor is ending): wakers still held
        // elsewhere find their tasks done.
        for (_, task) in self.slab.get_mut().iter() {
            task.handle.done.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Ring, RingConfig};
    use glommio::{LocalExecutorBuilder, Placement};
    use std::cell::Cell;
    use std::future::{poll_fn, Future};
    use std::rc::Rc;
    use std::sync::{Arc, Mutex};
    use std::task::{Poll, Waker};
    use std::time::Duration;

    /// Runs `body` on an executor whose ring driver is running, then stops
    /// the ring and waits for its driver (and so every task) to finish.
    fn on_a_ring<F: Future<Output = ()> + 'static>(body: impl FnOnce(Rc<Ring>) -> F + Send + 'static) {
        LocalExecutorBuilder::new(Placement::Unbound)
            .spawn(move || async move {
                let ring = Ring::new(RingConfig::default()).expect("ring");
                let driver = glommio::spawn_local(ring.clone().drive()).detach();
                let timeout = async {
                    glommio::timer::sleep(Duration::from_secs(20)).await;
                    panic!("the test did not finish in 20 s");
                };
                futures_lite::future::or(body(ring.clone()), timeout).await;
                ring.stop();
                driver.await;
            })
            .unwrap()
            .join()
            .unwrap();
    }

    /// Ready once `flag` is set; wakes go through `waiter`.
    fn until(flag: Rc<Cell<bool>>, waiter: Rc<Cell<Option<Waker>>>) -> impl Future<Output = ()> {
        poll_fn(move |cx| {
            if flag.get() {
                return Poll::Ready(());
            }
            waiter.set(Some(cx.waker().clone()));
            Poll::Pending
        })
    }

    fn set_and_wake(flag: &Cell<bool>, waiter: &Cell<Option<Waker>>) {
        flag.set(true);
        if let Some(w) = waiter.take() {
            w.wake();
        }
    }

    #[test]
    fn a_task_woken_from_another_thread_runs() {
        on_a_ring(|ring| async move {
            // Only the other thread's wake-up can end this: no timer of
            // the test's wakes the executor meanwhile.
            let shared: Arc<Mutex<(bool, Option<Waker>)>> = Arc::default();
            let (done, body) = (Rc::new(Cell::new(false)), Rc::new(Cell::new(None)));
            let (task_shared, task_done, task_body) = (shared.clone(), done.clone(), body.clone());
            ring.spawn(Box::pin(async move {
                poll_fn(|cx| {
                    let mut s = task_shared.lock().unwrap();
                    if s.0 {
                        return Poll::Ready(());
                    }
                    s.1 = Some(cx.waker().clone());
                    Poll::Pending
                })
                .await;
                set_and_wake(&task_done, &task_body);
            }));
            let waker = std::thread::spawn(move || loop {
                let mut s = shared.lock().unwrap();
                if let Some(w) = s.1.take() {
                    s.0 = true;
                    drop(s);
                    std::thread::sleep(Duration::from_millis(20));
                    w.wake();
                    return;
                }
                drop(s);
                std::thread::sleep(Duration::from_millis(1));
            });
            until(done, body).await;
            waker.join().unwrap();
        });
    }

    #[test]
    fn a_task_that_keeps_yielding_lets_the_others_run() {
        on_a_ring(|ring| async move {
            let (b_done, a_done) = (Rc::new(Cell::new(false)), Rc::new(Cell::new(false)));
            let body = Rc::new(Cell::new(None));
            let (b, a, waiter) = (b_done.clone(), a_done.clone(), body.clone());
            ring.spawn(Box::pin(async move {
                let mut yields = 0;
                while !b.get() {
                    yields += 1;
                    assert!(yields < 10_000, "the other task never ran");
                    futures_lite::future::yield_now().await;
                }
                set_and_wake(&a, &waiter);
            }));
            let b = b_done.clone();
            ring.spawn(Box::pin(async move {
                futures_lite::future::yield_now().await;
                b.set(true);
            }));
            until(a_done, body).await;
        });
    }

    #[test]
    fn a_finished_tasks_waker_does_not_run_the_task_in_its_slot() {
        on_a_ring(|ring| async move {
            let stale: Rc<Cell<Option<Waker>>> = Rc::default();
            let (first_done, body) = (Rc::new(Cell::new(false)), Rc::new(Cell::new(None)));
            let (keep, done, waiter) = (stale.clone(), first_done.clone(), body.clone());
            ring.spawn(Box::pin(async move {
                poll_fn(|cx| {
                    keep.set(Some(cx.waker().clone()));
                    Poll::Ready(())
                })
                .await;
                set_and_wake(&done, &waiter);
            }));
            until(first_done, body.clone()).await;
            // The second task takes the first one's slot; it counts its polls.
            let (polls, release) = (Rc::new(Cell::new(0)), Rc::new(Cell::new(false)));
            let second_waker: Rc<Cell<Option<Waker>>> = Rc::default();
            let second_done = Rc::new(Cell::new(false));
            let (p, r, w, d, waiter) =
                (polls.clone(), release.clone(), Rc::clone(&second_waker), second_done.clone(), body.clone());
            ring.spawn(Box::pin(async move {
                poll_fn(|cx| {
                    p.set(p.get() + 1);
                    if r.get() {
                        return Poll::Ready(());
                    }
                    w.set(Some(cx.waker().clone()));
                    Poll::Pending
                })
                .await;
                set_and_wake(&d, &waiter);
            }));
            while polls.get() == 0 {
                futures_lite::future::yield_now().await;
            }
            stale.take().expect("the first task's waker").wake();
            for _ in 0..100 {
                futures_lite::future::yield_now().await;
            }
            assert_eq!(polls.get(), 1, "the stale waker polled the task in its slot");
            set_and_wake(&release, &second_waker);
            until(second_done, body).await;
        });
    }
}
