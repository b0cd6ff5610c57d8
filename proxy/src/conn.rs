//! One connection's socket loop: read, parse every complete command in the
//! buffer, route each (`router.rs`), then write all replies with one send.

use crate::blocking;
use crate::clients::ClientInfo;
use crate::commands::{pubsub, transactions};
use crate::core::{Core, CoreStats};
use crate::log;
use crate::persistence::aof::durable;
use crate::pipeline::Pipeline;
use crate::prefetch;
use crate::push::PushQueue;
use crate::replication::handoff::SyncRequest;
use crate::replication::sync::{serve_replica, Peer};
use crate::resp::{Limits, Parsed, RequestParser};
use crate::session::{ConnState, Connection, Deferred, Port};
use crate::stream::ClientStream;
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use shard::Args;
use std::cell::RefCell;
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

const READ_CHUNK: usize = 16 * 1024;

/// Read buffers of idle connections, kept for the next connection with
/// input (a connection waiting for a request holds none).
const POOLED_READ_BUFFERS: usize = 64;

thread_local! {
    static READ_BUFFERS: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

fn take_read_buffer() -> Vec<u8> {
    READ_BUFFERS.with(|p| p.borrow_mut().pop()).unwrap_or_else(|| vec![0u8; READ_CHUNK])
}

fn give_back_read_buffer(buf: Vec<u8>) {
    if buf.len() == READ_CHUNK {
        READ_BUFFERS.with(|p| {
            let mut pool = p.borrow_mut();
            if pool.len() < POOLED_READ_BUFFERS {
                pool.push(buf);
            }
        });
    }
}

/// A read buffer of `len` bytes holding `filled`, from fresh zeroed memory
/// (pages the kernel maps as they are first written).
fn regrow(filled: &[u8], len: usize) -> Vec<u8> {
    let mut bigger = vec![0u8; len];
    bigger[..filled.len()].copy_from_slice(filled);
    bigger
}

/// Replies buffered beyond this are sent before the rest of the batch runs,
/// so a client pipelining reads of large values without reading its replies
/// is held back by TCP instead of growing this buffer without bound.
const OUTPUT_HIGH_WATER: usize = 1 << 20;

/// Serves one accepted connection until it closes.
pub async fn serve(core: Rc<Core>, stream: ClientStream, port: Port) {
    let process = core.process.clone();
    let maxclients = core.config().maxclients as usize;
    let connected = process.connected_clients.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    CoreStats::add(&core.stats.connections_received, 1);
    let mut stream = stream;
    if connected > maxclients {
        CoreStats::add(&core.stats.rejected_connections, 1);
        let _ = stream.write_all(b"-ERR max number of clients reached\r\n").await;
    } else {
        let _ = stream.set_nodelay(true);
        stream.set_keepalive(core.config().tcp_keepalive);
        let now = Instant::now();
        let (addr, laddr) = match (stream.peer_addr(), stream.local_addr()) {
            (Ok(a), Ok(l)) => (a, l),
            _ => {
                process.connected_clients.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                return;
            }
        };
        let default_user = core.acl.users().default_user();
        if crate::acl::protected::refuses(core.config().protected_mode, default_user.nopass, addr) {
            CoreStats::add(&core.stats.rejected_connections, 1);
            let _ = stream.write_all(crate::acl::protected::DENIED).await;
            let _ = stream.close().await;
            process.connected_clients.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        let (id, registry_key) = {
            let mut clients = core.clients.borrow_mut();
            let id = clients.next_id(core.index, core.count);
            let key = clients.list.insert(Box::new(ClientInfo {
                id,
                addr,
                laddr,
                fd: stream.fd(),
                name: Vec::new(),
                db: 0,
                resp: 2,
                created: now,
                last_active: now,
                last_cmd: "NULL",
                qbuf: 0,
                qbuf_free: 0,
                omem: 0,
                multi: (-1, 0),
                replica: false,
                user: b"default".to_vec(),
                subscriptions: [0; 3],
                tracking: None,
                monitor: false,
                no_evict: false,
                blocked: false,
                unblock: None,
                killed: Default::default(),
                soft_limit_since: None,
                counted_memory: 0,
                output: stream.output_probe(),
                rbs: 0,
                rbp: 0,
                argv_mem: 0,
            }));
            (id, key)
        };
        let authenticated = default_user.nopass && default_user.enabled;
        let view = core.cluster();
        let port_node = match (port, view.mode) {
            (Port::Node, _) => Some(view.shard_nodes[core.index]),
            (Port::Client, shard::config::ClusterMode::Emulated) => Some(view.shard_nodes[0]),
            _ => None,
        };
        let mut conn = Connection {
            pipeline: Pipeline::new(core.count),
            core: core.clone(),
            state: ConnState {
                id,
                registry_key,
                db: 0,
                resp3: false,
                authenticated,
                close: false,
                port_node,
                shard_port: port == Port::Node,
                multi: None,
                watched: Vec::new(),
                watched_absent: Vec::new(),
                repl_hello: Default::default(),
                sync: None,
                master: false,
                unrestricted: default_user.unrestricted(),
                user: default_user,
                acl_generation: core.acl.generation.get(),
                in_exec: false,
                push: None,
                subscriptions: Default::default(),
                tracking: false,
                reply: Default::default(),
            },
            now: 0,
            last_cmd: "NULL",
            cluster: view.enabled(),
            tally: Default::default(),
        };
        drop(view);
        conn.run(&mut stream).await;
        Box::pin(transactions::forget_watches(&mut conn)).await;
        Box::pin(crate::commands::leave_push_modes(&mut conn)).await;
        // CLIENT TRACKING: clients redirecting here learn it is gone.
        crate::tracking::closed(&core, id);
        pubsub::forget(&mut conn);
        let gone = core.clients.borrow_mut().list.remove(registry_key);
        crate::client_evict::forget(&core, &gone);
    }
    let _ = stream.close().await;
    process.connected_clients.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
}

impl Connection {
    async fn run(&mut self, stream: &mut ClientStream) {
        let mut parser = RequestParser::new();
        let mut buf = Vec::new();
        let mut filled = 0usize;
        // After a blocking pop, commands the client pipelined meanwhile are
        // already in the buffer: parse them before reading again.
        let mut read_first = true;
        loop {
            if read_first {
                if filled == 0 {
                    // Idle: the read buffer goes back to the core's pool
                    // until input arrives.
                    give_back_read_buffer(std::mem::take(&mut buf));
                    match readable_or_push(stream, self.state.push.as_deref()).await {
                        Some(true) => {}
                        Some(false) => return,
                        None => {
                            if !self.send_pushes(stream).await {
                                return;
                            }
                            continue;
                        }
                    }
                    buf = take_read_buffer();
                } else if filled == buf.len() {
                    // One byte past the limit is enough to know it is passed.
                    let cap = (self.core.config().client_query_buffer_limit as usize).saturating_add(1);
                    match parser.big_bulk_end() {
                        // Redis's big-argument read: room for the rest of the
                        // argument at once (and a read's worth after it),
                        // so the buffer is not grown and copied again and
                        // again for it, leaving the allocator every smaller
                        // copy (a 60 MB argument held ~125 MB). Fresh zeroed
                        // pages: resident only as the bytes arrive, not as
                        // long as the header announces.
                        Some(end) if end > buf.len() => {
                            buf = regrow(&buf[..filled], (end + READ_CHUNK).min(cap).max(filled + 1))
                        }
                        // Doubling: memory follows the bytes that arrive.
                        _ => buf.resize((buf.len() * 2).min(cap).max(filled + 1), 0),
                    }
                }
                let read = match self.state.push.clone() {
                    None => stream.read(&mut buf[filled..]).await,
                    Some(queue) => match read_or_push(stream, &queue, &mut buf[filled..]).await {
                        Some(read) => read,
                        None => {
                            if !self.send_pushes(stream).await {
                                return;
                            }
                            continue;
                        }
                    },
                };
                let n = match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                filled += n;
                CoreStats::add(&self.core.stats.net_input_bytes, n as u64);
                let pending = filled - parser.consumed();
                if pending as u64 > self.core.config().client_query_buffer_limit {
                    self.update_registry(pending, buf.len() - filled);
                    let bytes = shard::config::repr(&buf[parser.consumed()..filled.min(parser.consumed() + 64)]);
                    log::warning(&format!(
                        "Closing client that reached max query buffer length: {} (qbuf initial bytes: {bytes})",
                        self.client_line()
                    ));
                    return;
                }
            }
            read_first = true;
            self.now = self.core.now_ms();
            // The first command's time starts here (not at the turn's
            // clock, which other connections' work may have aged); each
            // command's end is the next one's start (observe.rs), and the
            // last one's ends the batch: one clock read per command.
            let started = Instant::now();
            self.tally.clock = started;
            let mut commands = 0u64;
            let mut blocked = None;
            let proto_max_bulk_len = self.core.config().proto_max_bulk_len;
            // Pushes that came before these commands go out before their replies.
            self.take_pushes();
            // While this batch runs the query buffer holds all of it (Redis
            // trims what its commands consumed only after the last one):
            // CLIENT INFO/LIST count the command being run in qbuf=.
            self.show_query_buffer(filled, buf.len() - filled);
            let mut look_ahead_at = 0;
            loop {
                if parser.consumed() >= look_ahead_at {
                    look_ahead_at = prefetch::ahead(&self.core, self.state.db, &buf[..filled], parser.consumed());
                }
                let limits = Limits { proto_max_bulk_len, unauthenticated: !self.state.authenticated };
                // CLIENT REPLY OFF/SKIP: this command's reply (or protocol
                // error) is dropped.
                self.pipeline.set_silent(self.state.reply.silent());
                match parser.next(&buf[..filled], &limits) {
                    Parsed::Command { inline } => {
                        commands += 1;
                        let src: &[u8] = if inline { parser.inline_buf() } else { &buf[..filled] };
                        let args = Args::new(src, parser.args());
                        let mut deferred = self.handle(args);
                        while matches!(deferred, Some(Deferred::Paused)) {
                            if !Box::pin(self.hold_for_pause(stream, &args)).await {
                                return;
                            }
                            deferred = self.handle(args);
                        }
                        if let Some(deferred) = deferred {
                            // Boxed, as every rare path here: the task's
                            // future stays small for idle connections.
                            blocked = Box::pin(self.run_deferred(deferred, args)).await;
                            if blocked.is_some() {
                                self.show_blocked(true, &args);
                                break;
                            }
                        }
                        if self.state.tracking {
                            // Invalidations its own command raised follow
                            // its reply, ahead of the next one's (Redis's
                            // pending keys).
                            self.pipeline.command_end();
                            self.take_pushes_now();
                            crate::commands::tracking::after_command(self);
                        }
                        self.state.reply.command_done();
                        if self.state.close || self.state.sync.is_some() {
                            break;
                        }
                        if self.pipeline.out.len() >= OUTPUT_HIGH_WATER {
                            self.update_registry(filled - parser.consumed(), buf.len() - filled);
                            if !self.send_replies(stream).await {
                                return;
                            }
                            self.tally.clock = Instant::now();
                        }
                    }
                    Parsed::Incomplete => break,
                    Parsed::Error(msg) => {
                        self.pipeline.local(|out| {
                            out.push(b'-');
                            out.extend(msg.iter().map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }));
                            out.extend_from_slice(b"\r\n");
                        });
                        log::verbose(&format!("Protocol error from client id={}", self.state.id));
                        self.state.close = true;
                        break;
                    }
                }
            }
            CoreStats::add(&self.core.stats.commands, commands);
            // A blocked command's reply, when it comes, is as silent as
            // the command was; pushes never are.
            let silent = self.pipeline.silent();
            self.pipeline.set_silent(false);
            self.take_pushes();
            if !self.send_replies(stream).await {
                return;
            }
            if !self.pipeline.slow.is_empty() {
                self.take_remote_slow();
            }
            if commands > 0 {
                self.core.stats.latency.record(self.tally.clock.saturating_duration_since(started), commands);
            }
            if self.state.close {
                return;
            }
            if let Some(request) = self.state.sync.take() {
                let input = buf[parser.consumed()..filled].to_vec();
                return Box::pin(self.become_replica_link(stream, request, input)).await;
            }
            let consumed = parser.consumed();
            buf.copy_within(consumed..filled, 0);
            filled -= consumed;
            parser.shift(consumed);
            if let Some(wait) = blocked {
                self.update_registry(filled, buf.len() - filled);
                self.pipeline.set_silent(silent);
                let served = Box::pin(blocking::wait(self, wait, stream, &mut buf, &mut filled)).await;
                self.pipeline.set_silent(false);
                if self.state.tracking {
                    crate::commands::tracking::after_command(self);
                }
                self.state.reply.command_done();
                if !served {
                    return;
                }
                read_first = false;
                continue;
            }
            self.update_registry(filled, buf.len() - filled);
        }
    }

    /// Waits for this batch's remote replies and sends every reply so far,
    /// a round of remote replies at a time (`Pipeline::flush_some`): an
    /// owner that stopped at its reply cap is asked for the rest only once
    /// what came is queued, and a queue past the ring's high-water mark
    /// holds the connection here. False when the client is gone or went
    /// over its output buffer limit.
    async fn send_replies(&mut self, stream: &mut ClientStream) -> bool {
        loop {
            // Boxed (only batches with remote commands, which allocate
            // anyway): an idle connection's task does not carry its state.
            let more = self.pipeline.has_remote() && Box::pin(self.pipeline.flush_some(&self.core)).await;
            durable(&self.core).await;
            if !self.pipeline.out.is_empty() && !self.write_out(stream).await {
                return false;
            }
            if !more {
                return true;
            }
        }
    }

    /// CLIENT PAUSE holds the next command: the replies so far go out, then
    /// the connection waits. False when it was killed meanwhile.
    async fn hold_for_pause(&mut self, stream: &mut ClientStream, args: &Args<'_>) -> bool {
        self.send_replies(stream).await && {
            self.pause_wait(args).await;
            !self.killed()
        }
    }

    /// Moves waiting pushes (Pub/Sub messages...) into the output, after
    /// the replies so far.
    fn take_pushes(&mut self) {
        if let Some(queue) = self.state.push.clone() {
            if !queue.is_empty() {
                self.pipeline.local(|out| queue.take_into(out));
            }
        }
    }

    /// Moves waiting pushes into the output now, even under CLIENT REPLY
    /// OFF (pushes are never silenced).
    pub(crate) fn take_pushes_now(&mut self) {
        if let Some(queue) = self.state.push.clone() {
            if !queue.is_empty() {
                self.pipeline.push_local(|out| queue.take_into(out));
            }
        }
    }

    /// Sends the pushes that woke an idle connection. False when it is to
    /// be closed (it went over its output buffer limit while waiting).
    async fn send_pushes(&mut self, stream: &mut ClientStream) -> bool {
        if self.state.push.as_ref().is_some_and(|q| q.overflowed.get()) {
            return false;
        }
        self.take_pushes();
        self.send_replies(stream).await
    }

    /// Queues `pipeline.out` on the socket, under the output buffer limit.
    async fn write_out(&mut self, stream: &mut ClientStream) -> bool {
        let len = self.pipeline.out.len();
        loop {
            // The socket layer's queue is read live by CLIENT LIST and the
            // cron; what the connection itself holds is recorded.
            let socket = stream.pending_output();
            let mut own = self.pipeline.held_bytes();
            if let Some(queue) = &self.state.push {
                // Pushes arriving while this write waits count with it.
                queue.held_by_conn.set(own + socket);
                if queue.overflowed.get() {
                    return false;
                }
                own += queue.len();
            }
            let held = own + socket;
            let Some(soft_deadline) = self.output_limit_check(held) else {
                return false;
            };
            if held > len {
                // CLIENT LIST shows what a lagging reader holds.
                self.set_registry_omem(own);
            }
            let written = match soft_deadline {
                None => Some(stream.write_vec(&mut self.pipeline.out).await),
                Some(at) => {
                    let write = async { Some(stream.write_vec(&mut self.pipeline.out).await) };
                    let timer = async {
                        glommio::timer::sleep(at.saturating_duration_since(Instant::now())).await;
                        None
                    };
                    futures_lite::future::or(write, timer).await
                }
            };
            match written {
                Some(Ok(())) => break,
                Some(Err(_)) => return false,
                // Over the soft limit all that time: checked again.
                None => continue,
            }
        }
        if let Some(c) = self.core.clients.borrow_mut().list.get_mut(self.state.registry_key) {
            c.omem = 0;
            (c.rbs, c.rbp) = (self.pipeline.out.capacity(), len);
        }
        if let Some(queue) = &self.state.push {
            queue.held_by_conn.set(stream.pending_output());
        }
        CoreStats::add(&self.core.stats.net_output_bytes, len as u64);
        self.pipeline.out.clear();
        if self.pipeline.out.capacity() > OUTPUT_HIGH_WATER {
            self.pipeline.out = Vec::new();
        }
        true
    }

    /// `client-output-buffer-limit` (Redis's checkClientOutputBufferLimits,
    /// the pubsub class while subscribed) for `held` bytes of output:
    /// `None` when the client is to be closed (logged as Redis does), else
    /// when the output, if it stays over the soft limit, is over it for too
    /// long (the time over it is the client's, kept in the registry).
    fn output_limit_check(&mut self, held: usize) -> Option<Option<Instant>> {
        let limits = self.core.config().client_output_buffer_limit;
        let now_ms = shard::unix_ms();
        let mut clients = self.core.clients.borrow_mut();
        let Some(c) = clients.list.get_mut(self.state.registry_key) else { return Some(None) };
        let Some(limit) = c.output_limit(&limits) else { return Some(None) };
        if c.output_limit_reached(held as u64, limit, now_ms / 1000) {
            let line = c.line(Instant::now());
            drop(clients);
            log::warning(&format!("Client {line} scheduled to be closed ASAP for overcoming of output buffer limits."));
            return None;
        }
        let deadline = c.soft_limit_deadline_ms(limit);
        Some(deadline.map(|at| Instant::now() + Duration::from_millis(at.saturating_sub(now_ms))))
    }

    /// This connection's CLIENT LIST line, for log lines.
    fn client_line(&self) -> String {
        let clients = self.core.clients.borrow();
        clients.list.get(self.state.registry_key).map_or_else(String::new, |c| c.line(Instant::now()))
    }

    fn set_registry_omem(&self, omem: usize) {
        if let Some(c) = self.core.clients.borrow_mut().list.get_mut(self.state.registry_key) {
            c.omem = omem;
        }
        crate::client_evict::recount(&self.core, self.state.registry_key);
    }

    /// SYNC/PSYNC: from here on the socket carries the replication stream.
    async fn become_replica_link(&mut self, stream: &mut ClientStream, request: SyncRequest, input: Vec<u8>) {
        // CLIENT LIST shows it (flags=S cmd=psync) from here on.
        self.update_registry(0, 0);
        // Its output buffer is what the shared stream holds for it (on
        // core 0) beyond what its socket queues, as Redis counts a replica's.
        let held = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        if let Some(c) = self.core.clients.borrow_mut().list.get_mut(self.state.registry_key) {
            c.replica = true;
            let (socket, gauge) = (c.output.take(), held.clone());
            let stream = move || gauge.load(std::sync::atomic::Ordering::Relaxed) as usize;
            c.output = Some(Box::new(move || socket.as_ref().map_or(0, |queued| queued()) + stream()));
        }
        let peer = Peer {
            id: self.state.id,
            fd: stream.fd(),
            ip: self.state.repl_hello.ip.clone().unwrap_or_else(|| match stream.peer_addr() {
                Ok(a) => a.ip().to_string(),
                Err(_) => "?".into(),
            }),
            hello: self.state.repl_hello.clone(),
            held,
        };
        serve_replica(&self.core, stream, peer, request, input).await
    }

    /// qbuf= and qbuf-free= as a batch starts.
    fn show_query_buffer(&self, qbuf: usize, qbuf_free: usize) {
        if let Some(c) = self.core.clients.borrow_mut().list.get_mut(self.state.registry_key) {
            (c.qbuf, c.qbuf_free) = (qbuf, qbuf_free);
        }
    }

    /// The registry entry after a batch (or before a wait): the pipeline
    /// holds no replies then (`omem`; the socket layer's are read live).
    fn update_registry(&self, qbuf: usize, qbuf_free: usize) {
        let mut clients = self.core.clients.borrow_mut();
        if let Some(c) = clients.list.get_mut(self.state.registry_key) {
            // The batch's clock: its start or its last command's end.
            c.last_active = self.tally.clock;
            c.last_cmd = self.last_cmd;
            c.db = self.state.db;
            c.resp = if self.state.resp3 { 3 } else { 2 };
            c.qbuf = qbuf;
            c.qbuf_free = qbuf_free;
            c.omem = 0;
            c.multi = self.state.multi.as_ref().map_or((-1, 0), |q| q.size());
        }
        drop(clients);
        crate::client_evict::recount(&self.core, self.state.registry_key);
    }
}

/// Waits for input (true), the end of the socket (false) or, with a push
/// queue, pushes to send (`None`), holding no read buffer.
async fn readable_or_push(stream: &ClientStream, push: Option<&PushQueue>) -> Option<bool> {
    let Some(queue) = push else { return Some(stream.readable().await) };
    std::future::poll_fn(|cx| {
        if queue.poll_ready(cx).is_ready() {
            return Poll::Ready(None);
        }
        stream.poll_readable(cx).map(Some)
    })
    .await
}

/// Reads into `buf`, or returns `None` first when pushes wait (nothing is
/// read then: the read is simply not polled again).
async fn read_or_push(stream: &mut ClientStream, queue: &PushQueue, buf: &mut [u8]) -> Option<std::io::Result<usize>> {
    std::future::poll_fn(|cx| {
        if queue.poll_ready(cx).is_ready() {
            return Poll::Ready(None);
        }
        Pin::new(&mut *stream).poll_read(cx, buf).map(Some)
    })
    .await
}
