//! Running work on other cores: a closure on one core (`call`), on every
//! core (`call_all`), an async task on one core or every core
//! (`call_task`, `call_all_tasks`), or a
//! closure another core runs while this thread blocks (`call_blocking`).
//! Each runs against the owner's `Core`; the mesh only carries it.

use crate::core::Core;
use crate::mesh::{CallFn, Request, Response, TaskFn};
use crate::tracking::{self, Returned};
use std::any::Any;
use std::future::Future;
use std::rc::Rc;

/// Runs `f` on `shard`'s core (inline when it is this one) and returns its
/// result.
pub async fn call<T, F>(core: &Rc<Core>, shard: usize, f: F) -> Option<T>
where
    T: Send + 'static,
    F: FnOnce(&Rc<Core>) -> T + Send + 'static,
{
    if shard == core.index {
        let r = f(core);
        core.serve_ready();
        return Some(r);
    }
    // CLIENT TRACKING: what `f` raises for this core comes back with its
    // result, in this core's pass.
    let (origin, _hold) = (core.index, tracking::hold(core));
    let boxed: CallFn<Core> = Box::new(move |c| {
        let mark = tracking::mark(c);
        let r = f(c);
        Box::new((r, tracking::take_returned(c, mark, origin)))
    });
    match core.mesh.send(shard, Request::Call(boxed)).await.await {
        Response::Call(any) => any.downcast::<(T, Option<Box<Returned>>)>().ok().map(|b| {
            let (r, back) = *b;
            tracking::returned(core, back);
            r
        }),
        _ => None,
    }
}

/// Runs the async `f` as a task on `shard`'s core (here when it is this
/// one) and returns its result; `None` when that core is gone.
pub async fn call_task<T, F, Fut>(core: &Rc<Core>, shard: usize, f: F) -> Option<T>
where
    T: Send + 'static,
    Fut: Future<Output = T> + 'static,
    F: FnOnce(Rc<Core>) -> Fut + Send + 'static,
{
    if shard == core.index {
        return Some(f(core.clone()).await);
    }
    let boxed: TaskFn<Core> = Box::new(move |c| {
        let fut = f(c);
        Box::pin(async move { Box::new(fut.await) as Box<dyn Any + Send> })
    });
    match core.mesh.send(shard, Request::Task(boxed)).await.await {
        Response::Call(any) => any.downcast::<T>().ok().map(|b| *b),
        _ => None,
    }
}

/// Runs `f` on `shard`'s core and blocks this thread until it has run: for
/// work that cannot yield (a Lua script calling a command on another
/// shard while every shard is held by its coordinator unit, so nothing on
/// the other core waits for this one). `None` when the peer is gone or the
/// process is stopping.
pub fn call_blocking<T, F>(core: &Core, shard: usize, f: F) -> Option<T>
where
    T: Send + 'static,
    F: FnOnce(&Rc<Core>) -> T + Send + 'static,
{
    use std::sync::{Arc, Condvar, Mutex};
    type Slot<T> = Arc<(Mutex<Option<(T, Option<Box<Returned>>)>>, Condvar)>;
    let slot: Slot<T> = Arc::new((Mutex::new(None), Condvar::new()));
    let answer = slot.clone();
    let origin = core.index;
    let run: CallFn<Core> = Box::new(move |c| {
        // CLIENT TRACKING: what `f` raises for the caller's core goes back
        // with its result.
        let mark = tracking::mark(c);
        let r = (f(c), tracking::take_returned(c, mark, origin));
        *answer.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
        answer.1.notify_one();
        Box::new(())
    });
    // A request with no ticket gets no reply (see `serve`).
    let mut request = Request::Call(run);
    loop {
        match core.mesh.try_post(shard, request) {
            Ok(()) => break,
            Err(Some(back)) => {
                request = back;
                std::thread::yield_now();
            }
            Err(None) => return None,
        }
    }
    let mut guard = slot.0.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some((r, back)) = guard.take() {
            drop(guard);
            if let Some(me) = core.me.upgrade() {
                tracking::returned(&me, back);
            }
            return Some(r);
        }
        if core.process.shutting_down() {
            return None;
        }
        guard = slot.1.wait_timeout(guard, std::time::Duration::from_millis(100)).unwrap_or_else(|e| e.into_inner()).0;
    }
}

/// Runs `f` on every core, results in shard order (`None` for a core that
/// is shutting down).
pub async fn call_all<T, F>(core: &Rc<Core>, f: F) -> Vec<Option<T>>
where
    T: Send + 'static,
    F: Fn(&Rc<Core>) -> T + Send + Clone + 'static,
{
    let mut tickets = Vec::with_capacity(core.count);
    for shard in 0..core.count {
        if shard != core.index {
            let f = f.clone();
            let boxed: CallFn<Core> = Box::new(move |c| Box::new(f(c)));
            tickets.push(Some(core.mesh.send(shard, Request::Call(boxed)).await));
        } else {
            tickets.push(None);
        }
    }
    let mut out = Vec::with_capacity(core.count);
    for t in tickets {
        out.push(match t {
            None => Some(f(core)),
            Some(t) => match t.await {
                Response::Call(any) => any.downcast::<T>().ok().map(|b| *b),
                _ => None,
            },
        });
    }
    out
}

/// Runs the async `f` on every core, each as a task of its own there, and
/// returns the results in shard order (`None` for a core that is gone).
pub async fn call_all_tasks<T, F, Fut>(core: &Rc<Core>, f: F) -> Vec<Option<T>>
where
    T: Send + 'static,
    Fut: Future<Output = T> + 'static,
    F: Fn(Rc<Core>) -> Fut + Send + Clone + 'static,
{
    let mut tickets = Vec::with_capacity(core.count);
    for shard in 0..core.count {
        if shard != core.index {
            let f = f.clone();
            let boxed: TaskFn<Core> = Box::new(move |c| {
                let fut = f(c);
                Box::pin(async move { Box::new(fut.await) as Box<dyn Any + Send> })
            });
            tickets.push(Some(core.mesh.send(shard, Request::Task(boxed)).await));
        } else {
            tickets.push(None);
        }
    }
    let mut out = Vec::with_capacity(core.count);
    for t in tickets {
        out.push(match t {
            None => Some(f(core.clone()).await),
            Some(t) => match t.await {
                Response::Call(any) => any.downcast::<T>().ok().map(|b| *b),
                _ => None,
            },
        });
    }
    out
}
