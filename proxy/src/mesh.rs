//! Cross-core dispatch over glommio's channel mesh. A connection's core sends
//! one [`Batch`] per destination shard per read (every command for that shard
//! from that read), the owner executes it and sends back one [`BatchReply`]
//! holding the encoded replies. Rare multi-phase work ships a closure instead.
//!
//! Requests and responses travel on two separate meshes: the loops that drain
//! responses never send anything, so a full channel can always drain and the
//! two cores can never wait on each other.
//!
//! This file is transport only: it is generic over the per-core state `C`
//! that shipped closures run against, and knows nothing of what a core
//! does with a request (`coordinator::serve` executes them).

use crate::blocking::request::BlockRequest;
use crate::coordinator::locks::{DbKey, UnitId};
use glommio::channels::channel_mesh::{Full, MeshBuilder, Receivers, Senders};
use shard::tracking::Caller;
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
    /// The sender's CLIENT TRACKING identity (0: not tracking).
    pub caller: Caller,
    /// Its MONITOR line, fed by the owner once it ran (`monitor.rs`).
    pub monitor: Option<Box<[u8]>>,
    /// A whole command (not a split command's part): the owner counts it
    /// in its command statistics.
    pub whole: bool,
}

/// Commands for one shard, their arguments copied into one buffer.
#[derive(Default)]
pub struct Batch {
    pub data: Vec<u8>,
    pub ranges: Vec<(u32, u32)>,
    pub ops: Vec<Op>,
    /// The coordinator unit these commands belong to: its locks do not stop
    /// them.
    pub unit: Option<UnitId>,
    /// Locks `unit` takes here before the commands run (keys, whole shard):
    /// the last shard of a unit is locked by its first batch, saving a
    /// round trip.
    pub lock: Option<Box<(Vec<DbKey>, bool)>>,
    /// The first op still to run: a batch the owner cut short at
    /// [`REPLY_CAP`] comes back and is sent again from here.
    pub first: u32,
}

/// Encoded replies past which the owner stops running a batch (outside a
/// unit) and answers with what it has and the rest of the batch: the
/// connection sends those replies and asks for more only once its output
/// has drained, so remote replies never pile up for a slow reader.
pub const REPLY_CAP: usize = 256 * 1024;

impl Batch {
    /// Appends a command; returns its index in the batch.
    pub fn push<'a>(
        &mut self,
        spec: &'static CommandSpec,
        db: usize,
        resp3: bool,
        caller: Caller,
        args: impl Iterator<Item = &'a [u8]>,
    ) -> u32 {
        let first = self.ranges.len() as u32;
        for a in args {
            let s = self.data.len() as u32;
            self.data.extend_from_slice(a);
            self.ranges.push((s, self.data.len() as u32));
        }
        self.ops.push(Op {
            spec,
            db: db as u16,
            resp3,
            args: (first, self.ranges.len() as u32 - first),
            caller,
            monitor: None,
            whole: false,
        });
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

/// The encoded replies of a batch's ops `first..first + ends.len()`.
#[derive(Default)]
pub struct BatchReply {
    pub data: Vec<u8>,
    pub ends: Vec<u32>,
    pub first: u32,
    /// The batch, when the owner stopped at [`REPLY_CAP`] before its end.
    pub rest: Option<Batch>,
    /// Slow-log entries of its ops, for the sender to complete with its
    /// client's address and name.
    pub slow: Vec<shard::observe::slowlog::Entry>,
    /// CLIENT TRACKING: what its ops raised for the sender's core (the
    /// sender's own invalidations, BCAST keys changed).
    pub tracking: Option<Box<shard::tracking::Returned>>,
}

impl BatchReply {
    pub fn for_batch(batch: &Batch) -> BatchReply {
        let ops = batch.ops.len() - batch.first as usize;
        BatchReply {
            data: Vec::with_capacity((64 * ops).min(REPLY_CAP)),
            ends: Vec::with_capacity(ops),
            first: batch.first,
            rest: None,
            slow: Vec::new(),
            tracking: None,
        }
    }

    /// Whether op `op` of the batch is answered here.
    pub fn holds(&self, op: u32) -> bool {
        op >= self.first && ((op - self.first) as usize) < self.ends.len()
    }

    pub fn get(&self, op: u32) -> &[u8] {
        let i = (op - self.first) as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.data[start..self.ends[i] as usize]
    }

    /// The next op to run: the batch's end once done.
    pub fn next_op(&self) -> usize {
        self.first as usize + self.ends.len()
    }
}

/// A closure run against the owner's state.
pub type CallFn<C> = Box<dyn FnOnce(&Rc<C>) -> Box<dyn Any + Send> + Send>;

/// Work that awaits on the owner's core (I/O: an AOF rewrite).
pub type TaskFn<C> = Box<dyn FnOnce(Rc<C>) -> Pin<Box<dyn Future<Output = Box<dyn Any + Send>>>> + Send>;

pub enum Request<C> {
    Batch(Batch),
    Call(CallFn<C>),
    /// Async work, run as a task of its own on the owner; answered when done.
    Task(TaskFn<C>),
    /// A blocking pop: answered when served or withdrawn, not necessarily now.
    Block(Box<BlockRequest>),
    /// Withdraw a waiter (sent without a ticket).
    Unblock(u64),
    /// A coordinator unit lets go of its locks here (sent without a
    /// ticket); `true`: its keys count as changed for WATCH.
    Release(UnitId, bool, u16),
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
    /// The sender's ticket (`NO_TICKET`: no reply is awaited).
    pub ticket: u32,
    pub body: T,
}

/// The ticket of a request whose reply nobody awaits.
pub const NO_TICKET: u32 = u32::MAX;

pub type RequestMesh<C> = MeshBuilder<Envelope<Request<C>>, Full>;
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

type Pending = Rc<RefCell<Slab<Slot>>>;

/// This core's end of the meshes plus the table of replies it awaits.
pub struct Mesh<C> {
    /// This core's shard index.
    pub index: usize,
    requests: Senders<Envelope<Request<C>>>,
    responses: Rc<Senders<Envelope<Response>>>,
    pending: Pending,
}

/// A reply this core awaits; dropping it forgets the request.
pub struct Ticket {
    pending: Pending,
    id: u32,
}

impl Future for Ticket {
    type Output = Response;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Response> {
        let mut pending = self.pending.borrow_mut();
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
        let mut pending = self.pending.borrow_mut();
        match pending.get_mut(self.id as usize) {
            Some(slot @ Slot::Waiting(_)) => *slot = Slot::Abandoned,
            Some(_) => {
                pending.remove(self.id as usize);
            }
            None => {}
        }
    }
}

impl Ticket {
    pub fn id(&self) -> u32 {
        self.id
    }
}

fn complete(pending: &Pending, id: u32, response: Response) {
    let mut pending = pending.borrow_mut();
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

impl<C: 'static> Mesh<C> {
    pub async fn join(
        index: usize,
        requests: RequestMesh<C>,
        responses: ResponseMesh,
    ) -> (Mesh<C>, Receivers<Envelope<Request<C>>>, Receivers<Envelope<Response>>) {
        let (req_tx, req_rx) = requests.join().await.unwrap_or_else(|_| panic!("joining the request mesh"));
        let (resp_tx, resp_rx) = responses.join().await.unwrap_or_else(|_| panic!("joining the response mesh"));
        let mesh =
            Mesh { index, requests: req_tx, responses: Rc::new(resp_tx), pending: Rc::new(RefCell::new(Slab::new())) };
        (mesh, req_rx, resp_rx)
    }

    /// Answers ticket `id` of this core.
    pub fn complete(&self, id: u32, response: Response) {
        complete(&self.pending, id, response)
    }

    /// A ticket for a reply that will be completed on this core without a
    /// request being sent from here (a blocking pop owned by this core).
    pub fn ticket(&self) -> Ticket {
        let id = self.pending.borrow_mut().insert(Slot::Waiting(None)) as u32;
        Ticket { pending: self.pending.clone(), id }
    }

    /// Sends `request` to `shard`; await the returned ticket for the reply.
    pub async fn send(&self, shard: usize, request: Request<C>) -> Ticket {
        self.send_with(shard, |_| request).await
    }

    /// Sends to `shard` a request that must carry its own ticket's id (a
    /// blocking pop answers that ticket later, maybe much later).
    pub async fn send_with(&self, shard: usize, request: impl FnOnce(u32) -> Request<C>) -> Ticket {
        let ticket = self.ticket();
        let id = ticket.id;
        if self.requests.send_to(shard, Envelope { ticket: id, body: request(id) }).await.is_err() {
            self.complete(id, Response::Lost);
        }
        ticket
    }

    /// Sends `request` expecting no reply (e.g. `Unblock`).
    pub async fn post(&self, shard: usize, request: Request<C>) {
        let _ = self.requests.send_to(shard, Envelope { ticket: NO_TICKET, body: request }).await;
    }

    /// Sends `request` expecting no reply without waiting: `Err(Some)` gives
    /// it back when the channel is full, `Err(None)` when the peer is gone.
    pub fn try_post(&self, shard: usize, request: Request<C>) -> Result<(), Option<Request<C>>> {
        match self.requests.try_send_to(shard, Envelope { ticket: NO_TICKET, body: request }) {
            Ok(()) => Ok(()),
            Err(glommio::GlommioError::WouldBlock(glommio::ResourceType::Channel(back))) => Err(Some(back.body)),
            Err(_) => Err(None),
        }
    }

    /// Sends the reply to a peer's request, waiting for room; false when
    /// the peer is gone.
    pub async fn respond(&self, peer: usize, ticket: u32, response: Response) -> bool {
        self.responses.send_to(peer, Envelope { ticket, body: response }).await.is_ok()
    }

    /// Answers ticket `ticket` of core `origin` (this core or a peer)
    /// without waiting: a full channel gets it from a task of its own.
    pub fn deliver(&self, origin: usize, ticket: u32, response: Response) {
        if origin == self.index {
            return self.complete(ticket, response);
        }
        if let Err(glommio::GlommioError::WouldBlock(glommio::ResourceType::Channel(env))) =
            self.responses.try_send_to(origin, Envelope { ticket, body: response })
        {
            let responses = self.responses.clone();
            glommio::spawn_local(async move {
                let _ = responses.send_to(origin, env).await;
            })
            .detach();
        }
    }

    /// Drains the replies peers send to this core, each answering a ticket.
    pub fn receive_responses(&self, mut responses: Receivers<Envelope<Response>>) {
        for (_peer, rx) in responses.streams() {
            let pending = self.pending.clone();
            glommio::spawn_local(async move {
                while let Some(env) = rx.recv().await {
                    complete(&pending, env.ticket, env.body);
                }
            })
            .detach();
        }
    }
}
