//! Cross-core dispatch over glommio's channel mesh. A connection's core sends
//! one [`Batch`] per destination shard per read (every command for that shard
//! from that read), the owner executes it and sends back one [`BatchReply`]
//! holding the encoded replies. Rare multi-phase work ships a closure instead.
//!
//! Requests and responses travel on two separate meshes: the loops that drain
//! responses never send anything, so a full channel can always drain and the
//! two cores can never wait on each other.

use crate::core::Core;
use glommio::channels::channel_mesh::{Full, MeshBuilder, Receivers, Senders};
use shard::{Args, CommandSpec};
use slab::Slab;
use std::any::Any;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// One command (or one shard's part of a split command) to run remotely.
pub struct Op {
    pub spec: &'static CommandSpec,
    pub db: u16,
    pub resp3: bool,
    /// (first, count) into the batch's `ranges`.
    pub args: (u32, u32),
}

/// Commands for one shard, their arguments copied into one buffer.
#[derive(Default)]
pub struct Batch {
    pub data: Vec<u8>,
    pub ranges: Vec<(u32, u32)>,
    pub ops: Vec<Op>,
    /// The coordinator unit these commands belong to: its locks do not stop
    /// them.
    pub unit: Option<crate::coordinator::UnitId>,
}

impl Batch {
    /// Appends a command; returns its index in the batch.
    pub fn push<'a>(
        &mut self,
        spec: &'static CommandSpec,
        db: usize,
        resp3: bool,
        args: impl Iterator<Item = &'a [u8]>,
    ) -> u32 {
        let first = self.ranges.len() as u32;
        for a in args {
            let s = self.data.len() as u32;
            self.data.extend_from_slice(a);
            self.ranges.push((s, self.data.len() as u32));
        }
        self.ops.push(Op { spec, db: db as u16, resp3, args: (first, self.ranges.len() as u32 - first) });
        self.ops.len() as u32 - 1
    }

    pub fn args(&self, op: &Op) -> Args<'_> {
        let (first, count) = (op.args.0 as usize, op.args.1 as usize);
        Args::new(&self.data, &self.ranges[first..first + count])
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// The encoded replies of a batch, in op order.
#[derive(Default)]
pub struct BatchReply {
    pub data: Vec<u8>,
    pub ends: Vec<u32>,
}

impl BatchReply {
    pub fn for_batch(batch: &Batch) -> BatchReply {
        BatchReply { data: Vec::with_capacity(64 * batch.ops.len()), ends: Vec::with_capacity(batch.ops.len()) }
    }

    pub fn get(&self, op: u32) -> &[u8] {
        let i = op as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.data[start..self.ends[i] as usize]
    }
}

pub type CallFn = Box<dyn FnOnce(&Rc<Core>) -> Box<dyn Any + Send> + Send>;

/// Work that awaits on the owner's core (I/O: an AOF rewrite).
pub type TaskFn = Box<dyn FnOnce(Rc<Core>) -> Pin<Box<dyn Future<Output = Box<dyn Any + Send>>>> + Send>;

pub enum Request {
    Batch(Batch),
    Call(CallFn),
    /// Async work, run as a task of its own on the owner; answered when done.
    Task(TaskFn),
    /// A blocking pop: answered when served or withdrawn, not necessarily now.
    Block(Box<crate::blocking::BlockRequest>),
    /// Withdraw a waiter (sent without a ticket).
    Unblock(u64),
}

pub enum Response {
    Batch(BatchReply),
    Call(Box<dyn Any + Send>),
    /// A blocking pop's reply.
    Served(Vec<u8>),
    /// A waiter withdrawn before it was served.
    Unblocked,
    /// A notify-mode waiter's key got data.
    Notified,
    /// The peer is gone (shutting down).
    Lost,
}

pub struct Envelope<T> {
    ticket: u32,
    body: T,
}

pub type RequestMesh = MeshBuilder<Envelope<Request>, Full>;
pub type ResponseMesh = MeshBuilder<Envelope<Response>, Full>;

enum Slot {
    Waiting(Option<Waker>),
    Done(Response),
    /// The reply was handed to the ticket.
    Taken,
    /// The ticket was dropped before the reply came: the slot is freed when
    /// it does, so its id cannot be reused while a reply is in flight.
    Abandoned,
}

/// This core's end of the meshes plus the table of replies it awaits.
pub struct Mesh {
    requests: Senders<Envelope<Request>>,
    responses: Senders<Envelope<Response>>,
    pending: RefCell<Slab<Slot>>,
}

/// A reply this core awaits; dropping it forgets the request.
pub struct Ticket {
    core: Rc<Core>,
    id: u32,
}

impl Future for Ticket {
    type Output = Response;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Response> {
        let mut pending = self.core.mesh.pending.borrow_mut();
        let slot = &mut pending[self.id as usize];
        match slot {
            Slot::Waiting(w) => {
                *w = Some(cx.waker().clone());
                Poll::Pending
            }
            Slot::Done(_) => match std::mem::replace(slot, Slot::Taken) {
                Slot::Done(r) => Poll::Ready(r),
                _ => Poll::Pending,
            },
            Slot::Taken | Slot::Abandoned => Poll::Pending,
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut pending = self.core.mesh.pending.borrow_mut();
        match pending.get_mut(self.id as usize) {
            Some(slot @ Slot::Waiting(_)) => *slot = Slot::Abandoned,
            Some(_) => {
                pending.remove(self.id as usize);
            }
            None => {}
        }
    }
}

impl Mesh {
    pub async fn join(
        requests: RequestMesh,
        responses: ResponseMesh,
    ) -> (Mesh, Receivers<Envelope<Request>>, Receivers<Envelope<Response>>) {
        let (req_tx, req_rx) = requests.join().await.unwrap_or_else(|_| panic!("joining the request mesh"));
        let (resp_tx, resp_rx) = responses.join().await.unwrap_or_else(|_| panic!("joining the response mesh"));
        let mesh = Mesh { requests: req_tx, responses: resp_tx, pending: RefCell::new(Slab::new()) };
        (mesh, req_rx, resp_rx)
    }

    pub(crate) fn complete(&self, id: u32, response: Response) {
        let mut pending = self.pending.borrow_mut();
        match pending.get_mut(id as usize) {
            Some(Slot::Abandoned) => {
                pending.remove(id as usize);
            }
            Some(slot @ Slot::Waiting(_)) => {
                if let Slot::Waiting(Some(w)) = std::mem::replace(slot, Slot::Done(response)) {
                    w.wake();
                }
            }
            _ => {}
        }
    }
}

/// Sends `request` to `shard`; await the returned ticket for the reply.
pub async fn send(core: &Rc<Core>, shard: usize, request: Request) -> Ticket {
    let id = core.mesh.pending.borrow_mut().insert(Slot::Waiting(None)) as u32;
    let ticket = Ticket { core: core.clone(), id };
    if core.mesh.requests.send_to(shard, Envelope { ticket: id, body: request }).await.is_err() {
        core.mesh.complete(id, Response::Lost);
    }
    ticket
}

/// Sends to `shard` a request that must carry its own ticket's id (a
/// blocking pop answers that ticket later, maybe much later).
pub async fn send_with(core: &Rc<Core>, shard: usize, request: impl FnOnce(u32) -> Request) -> Ticket {
    let id = core.mesh.pending.borrow_mut().insert(Slot::Waiting(None)) as u32;
    let ticket = Ticket { core: core.clone(), id };
    if core.mesh.requests.send_to(shard, Envelope { ticket: id, body: request(id) }).await.is_err() {
        core.mesh.complete(id, Response::Lost);
    }
    ticket
}

/// A ticket for a reply that will be completed on this core without a
/// request being sent from here (a blocking pop owned by this core).
pub fn ticket(core: &Rc<Core>) -> Ticket {
    let id = core.mesh.pending.borrow_mut().insert(Slot::Waiting(None)) as u32;
    Ticket { core: core.clone(), id }
}

impl Ticket {
    pub fn id(&self) -> u32 {
        self.id
    }
}

/// Sends `request` expecting no reply (e.g. `Unblock`).
pub async fn post(core: &Rc<Core>, shard: usize, request: Request) {
    let _ = core.mesh.requests.send_to(shard, Envelope { ticket: u32::MAX, body: request }).await;
}

impl Core {
    /// `deliver` once this core's logged effects are durable (a served
    /// blocking pop with `appendfsync always`); at once otherwise.
    pub(crate) fn deliver_durable(&self, origin: usize, ticket: u32, response: Response) {
        match self.me.upgrade() {
            Some(me) if crate::persistence::aof::must_wait(&me) => {
                glommio::spawn_local(async move {
                    crate::persistence::aof::durable(&me).await;
                    me.deliver(origin, ticket, response);
                })
                .detach();
            }
            _ => self.deliver(origin, ticket, response),
        }
    }

    /// Answers ticket `ticket` of core `origin` (this core or a peer).
    pub(crate) fn deliver(&self, origin: usize, ticket: u32, response: Response) {
        if origin == self.index {
            return self.mesh.complete(ticket, response);
        }
        if let Err(glommio::GlommioError::WouldBlock(glommio::ResourceType::Channel(env))) =
            self.mesh.responses.try_send_to(origin, Envelope { ticket, body: response })
        {
            // The channel is full: wait for room in a task of its own.
            if let Some(me) = self.me.upgrade() {
                glommio::spawn_local(async move {
                    let _ = me.mesh.responses.send_to(origin, env).await;
                })
                .detach();
            }
        }
    }
}

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
    let boxed: CallFn = Box::new(move |c| Box::new(f(c)));
    match send(core, shard, Request::Call(boxed)).await.await {
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
    type Slot<T> = Arc<(Mutex<Option<T>>, Condvar)>;
    let slot: Slot<T> = Arc::new((Mutex::new(None), Condvar::new()));
    let answer = slot.clone();
    let run: CallFn = Box::new(move |c| {
        let r = f(c);
        *answer.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
        answer.1.notify_one();
        Box::new(())
    });
    // The reply to this envelope (ticket u32::MAX) is ignored on arrival.
    let mut env = Envelope { ticket: u32::MAX, body: Request::Call(run) };
    loop {
        match core.mesh.requests.try_send_to(shard, env) {
            Ok(()) => break,
            Err(glommio::GlommioError::WouldBlock(glommio::ResourceType::Channel(back))) => {
                env = back;
                std::thread::yield_now();
            }
            Err(_) => return None,
        }
    }
    let mut guard = slot.0.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some(r) = guard.take() {
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
            let boxed: CallFn = Box::new(move |c| Box::new(f(c)));
            tickets.push(Some(send(core, shard, Request::Call(boxed)).await));
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
            let boxed: TaskFn = Box::new(move |c| {
                let fut = f(c);
                Box::pin(async move { Box::new(fut.await) as Box<dyn Any + Send> })
            });
            tickets.push(Some(send(core, shard, Request::Task(boxed)).await));
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

/// Serves requests from every peer: execute, send the reply back.
pub fn serve(
    core: &Rc<Core>,
    mut requests: Receivers<Envelope<Request>>,
    mut responses: Receivers<Envelope<Response>>,
) {
    for (peer, rx) in requests.streams() {
        let core = core.clone();
        glommio::spawn_local(async move {
            while let Some(env) = rx.recv().await {
                let body = match env.body {
                    Request::Batch(batch) => {
                        let mut reply = BatchReply::for_batch(&batch);
                        if !core.execute_batch(&batch, &mut reply) {
                            // Held by a unit: finish once it lets go, while
                            // this channel keeps draining (the release may be
                            // behind us on it).
                            let (me, ticket) = (core.clone(), env.ticket);
                            glommio::spawn_local(async move {
                                while !me.execute_batch(&batch, &mut reply) {
                                    crate::coordinator::wait_for_release(&me).await;
                                }
                                crate::persistence::aof::durable(&me).await;
                                me.deliver(peer, ticket, Response::Batch(reply));
                            })
                            .detach();
                            continue;
                        }
                        Response::Batch(reply)
                    }
                    Request::Call(f) => {
                        let r = Response::Call(f(&core));
                        core.serve_ready();
                        r
                    }
                    Request::Task(f) => {
                        let (fut, me, ticket) = (f(core.clone()), core.clone(), env.ticket);
                        glommio::spawn_local(async move {
                            let r = fut.await;
                            me.deliver(peer, ticket, Response::Call(r));
                        })
                        .detach();
                        continue;
                    }
                    Request::Block(req) => match core.block(*req) {
                        Some(r) => r,
                        None => continue,
                    },
                    Request::Unblock(id) => {
                        core.unblock(id);
                        continue;
                    }
                };
                // appendfsync always: what this request wrote is on disk
                // before its reply leaves.
                crate::persistence::aof::durable(&core).await;
                let reply = Envelope { ticket: env.ticket, body };
                if core.mesh.responses.send_to(peer, reply).await.is_err() {
                    break;
                }
            }
        })
        .detach();
    }
    for (_peer, rx) in responses.streams() {
        let core = core.clone();
        glommio::spawn_local(async move {
            while let Some(env) = rx.recv().await {
                core.mesh.complete(env.ticket, env.body);
            }
        })
        .detach();
    }
}
