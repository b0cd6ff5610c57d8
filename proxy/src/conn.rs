//! One client connection: read, parse every complete command in the buffer,
//! route each to its shard, then write all replies with one send.

use crate::blocking;
use crate::clients::ClientInfo;
use crate::cluster::Owner;
use crate::commands::{self, Deferred};
use crate::core::{Core, CoreStats};
use crate::log;
use crate::pipeline::Pipeline;
use crate::resp::{Limits, Parsed, RequestParser};
use crate::slot::key_slot;
use crate::stream::ClientStream;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use shard::commands::{arity_error, flags};
use shard::reply::errors::NOAUTH;
use shard::{Args, CommandSpec, Merge, Route};
use std::rc::Rc;
use std::time::Instant;

const READ_CHUNK: usize = 16 * 1024;

/// Replies buffered beyond this are sent before the rest of the batch runs,
/// so a client pipelining reads of large values without reading its replies
/// is held back by TCP instead of growing this buffer without bound.
const OUTPUT_HIGH_WATER: usize = 1 << 20;

/// What a connection carries from one command to the next.
pub struct ConnState {
    pub id: u64,
    /// This connection's entry in the core's client registry.
    pub registry_key: usize,
    pub db: usize,
    pub resp3: bool,
    pub authenticated: bool,
    /// Close once the replies gathered so far are written (QUIT, errors).
    pub close: bool,
    /// The cluster node this connection's port stands for (per-core shard
    /// ports, and the client port in emulated mode); keys of other nodes'
    /// slots get MOVED.
    pub port_node: Option<u16>,
    /// Accepted on this core's own per-core node port: server-wide commands
    /// (DBSIZE, KEYS, SCAN...) cover this shard only, as on a cluster node.
    pub shard_port: bool,
    /// Commands queued since MULTI.
    pub multi: Option<commands::transactions::Queued>,
    /// Keys this connection WATCHes: (shard, db, key).
    pub watched: Vec<(usize, usize, Vec<u8>)>,
    /// Watched keys that were absent or expired when watched: running out
    /// of time does not change them (Redis 7.0).
    pub watched_absent: Vec<(usize, usize, Vec<u8>)>,
}

/// Which listener accepted a connection.
#[derive(Clone, Copy, PartialEq)]
pub enum Port {
    /// The shared client port (SO_REUSEPORT on every core).
    Client,
    /// This core's own node port in per-core cluster mode.
    Node,
}

pub struct Connection {
    pub core: Rc<Core>,
    pub state: ConnState,
    pub pipeline: Pipeline,
    /// Unix ms of the current read batch (Redis's cached command time).
    pub now: u64,
    last_cmd: &'static str,
    /// Cluster key checks (CROSSSLOT, MOVED) apply.
    cluster: bool,
}

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
        let (id, registry_key) = {
            let mut clients = core.clients.borrow_mut();
            let id = clients.next_id(core.index, core.count);
            let key = clients.list.insert(ClientInfo {
                id,
                addr,
                laddr,
                fd: stream.fd(),
                name: Vec::new(),
                lib_name: Vec::new(),
                lib_ver: Vec::new(),
                db: 0,
                resp: 2,
                created: now,
                last_active: now,
                last_cmd: "NULL",
                qbuf: 0,
                multi: (-1, 0),
            });
            (id, key)
        };
        let authenticated = core.config().requirepass.is_empty();
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
            },
            now: 0,
            last_cmd: "NULL",
            cluster: view.enabled(),
        };
        drop(view);
        conn.run(&mut stream).await;
        commands::transactions::forget_watches(&mut conn).await;
        core.clients.borrow_mut().list.remove(registry_key);
    }
    let _ = stream.close().await;
    process.connected_clients.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
}

impl Connection {
    async fn run(&mut self, stream: &mut ClientStream) {
        let mut parser = RequestParser::new();
        let mut buf = vec![0u8; READ_CHUNK];
        let mut filled = 0usize;
        // After a blocking pop, commands the client pipelined meanwhile are
        // already in the buffer: parse them before reading again.
        let mut read_first = true;
        loop {
            if read_first {
                if filled == buf.len() {
                    let pending = filled - parser.consumed();
                    if pending as u64 > self.core.config().client_query_buffer_limit {
                        log::warning(&format!(
                            "Closing client that reached max query buffer length: id={} (qbuf={pending})",
                            self.state.id
                        ));
                        return;
                    }
                    // Doubling: memory follows the bytes that actually arrive,
                    // not the length a bulk header announces.
                    buf.resize(buf.len() * 2, 0);
                }
                let n = match stream.read(&mut buf[filled..]).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                filled += n;
                CoreStats::add(&self.core.stats.net_input_bytes, n as u64);
            }
            read_first = true;
            self.now = self.core.now_ms();
            let mut commands = 0u64;
            let mut blocked = None;
            let proto_max_bulk_len = self.core.config().proto_max_bulk_len;
            loop {
                let limits = Limits { proto_max_bulk_len, unauthenticated: !self.state.authenticated };
                match parser.next(&buf[..filled], &limits) {
                    Parsed::Command { inline } => {
                        commands += 1;
                        let src: &[u8] = if inline { parser.inline_buf() } else { &buf[..filled] };
                        let args = Args::new(src, parser.args());
                        if let Some(deferred) = self.handle(args) {
                            blocked = self.run_deferred(deferred, args).await;
                            if blocked.is_some() {
                                break;
                            }
                        }
                        if self.state.close {
                            break;
                        }
                        if self.pipeline.out.len() >= OUTPUT_HIGH_WATER && !self.send_replies(stream).await {
                            return;
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
            if !self.send_replies(stream).await {
                return;
            }
            if self.state.close {
                return;
            }
            let consumed = parser.consumed();
            buf.copy_within(consumed..filled, 0);
            filled -= consumed;
            parser.shift(consumed);
            if let Some(wait) = blocked {
                self.update_registry(filled);
                if !blocking::wait(self, wait, stream, &mut buf, &mut filled).await {
                    return;
                }
                read_first = false;
                continue;
            }
            if filled == 0 && buf.len() > 4 * READ_CHUNK {
                buf = vec![0u8; READ_CHUNK];
            }
            self.update_registry(filled);
        }
    }

    /// Waits for this batch's remote replies and sends every reply so far
    /// with one write. False when the client is gone.
    async fn send_replies(&mut self, stream: &mut ClientStream) -> bool {
        self.pipeline.flush(&self.core).await;
        crate::persistence::aof::durable(&self.core).await;
        if self.pipeline.out.is_empty() {
            return true;
        }
        if stream.write_all(&self.pipeline.out).await.is_err() {
            return false;
        }
        CoreStats::add(&self.core.stats.net_output_bytes, self.pipeline.out.len() as u64);
        self.pipeline.out.clear();
        if self.pipeline.out.capacity() > OUTPUT_HIGH_WATER {
            self.pipeline.out = Vec::with_capacity(READ_CHUNK);
        }
        true
    }

    fn update_registry(&self, qbuf: usize) {
        let mut clients = self.core.clients.borrow_mut();
        if let Some(c) = clients.list.get_mut(self.state.registry_key) {
            c.last_active = self.core.now_instant();
            c.last_cmd = self.last_cmd;
            c.db = self.state.db;
            c.resp = if self.state.resp3 { 3 } else { 2 };
            c.qbuf = qbuf;
            c.multi = self.state.multi.as_ref().map_or((-1, 0), |q| q.size());
        }
    }

    pub fn error(&mut self, msg: &str) {
        self.pipeline.local(|out| shard::Reply::new(out, false).error(msg));
    }

    /// An error that refuses a command; inside MULTI it also dooms the
    /// transaction (EXECABORT), as Redis's `rejectCommand`.
    fn reject(&mut self, msg: &str) {
        if let Some(q) = &mut self.state.multi {
            q.failed = true;
        }
        self.error(msg);
    }

    /// Runs what `handle` deferred, after every earlier reply is in: waits
    /// out a unit holding the command's keys, then handles it again.
    pub async fn run_deferred(&mut self, mut deferred: Deferred, args: Args<'_>) -> Option<blocking::BlockWait> {
        loop {
            self.pipeline.flush(&self.core).await;
            match deferred {
                Deferred::Locked => {
                    crate::coordinator::wait_for_release(&self.core).await;
                    deferred = self.handle(args)?;
                }
                Deferred::Command(spec) => return commands::run_deferred(self, spec, args).await,
            }
        }
    }

    /// Routes one command. Returns the work that must wait for earlier
    /// replies (multi-phase and server-wide commands).
    pub(crate) fn handle(&mut self, args: Args) -> Option<Deferred> {
        let name = args.get(0);
        let Some(mut spec) = self.core.commands.lookup(name) else {
            if name.eq_ignore_ascii_case(b"host:") || name.eq_ignore_ascii_case(b"post") {
                log::warning("Possible SECURITY ATTACK detected. It looks like somebody is sending POST or Host: commands to Redis. Connection aborted.");
                self.state.close = true;
                return None;
            }
            self.reject(&unknown_command(&args));
            return None;
        };
        if !spec.arity_ok(args.len()) {
            if spec.name == "exec" {
                // EXECABORT, with or without MULTI, as Redis's rejectCommand.
                return Some(Deferred::Command(spec));
            }
            self.reject(&arity_error(spec.name));
            return None;
        }
        if !spec.subcommands.is_empty() && args.len() >= 2 {
            match spec.subcommand(args.get(1)) {
                Some(sub) => spec = sub,
                None => {
                    let msg = format!(
                        "ERR unknown subcommand '{}'. Try {} HELP.",
                        truncated(args.get(1), 128),
                        spec.name.to_uppercase()
                    );
                    self.reject(&msg);
                    return None;
                }
            }
            if !spec.arity_ok(args.len()) {
                self.reject(&arity_error(spec.name));
                return None;
            }
        }
        self.last_cmd = spec.name;
        if !self.state.authenticated && !spec.has_flag(flags::NO_AUTH) {
            self.reject(NOAUTH);
            return None;
        }
        // Redis refuses writes (and PING) after a failed BGSAVE, or while
        // the AOF cannot be written.
        let (rdb_failed, aof_failing) = (self.core.save.deny_writes.get(), self.core.aof.refusals.any.get());
        if (rdb_failed || aof_failing) && (spec.has_flag(flags::WRITE) || spec.name == "ping") {
            match rdb_failed {
                true => self.reject(crate::persistence::MISCONF),
                false => self.reject(&crate::persistence::aof::misconf(&self.core)),
            }
            return None;
        }
        if self.cluster && self.redirected(spec, &args) {
            if let Some(q) = &mut self.state.multi {
                q.failed = true;
            }
            return None;
        }
        if self.state.multi.is_some() && matches!(spec.name, "shutdown" | "save" | "sync" | "psync") {
            self.reject("ERR Command not allowed inside a transaction");
            return None;
        }
        if self.state.multi.is_some() && !commands::transactions::runs_in_multi(spec) {
            commands::transactions::queue(self, spec, &args);
            return None;
        }
        if !self.core.locks.borrow().is_idle() && self.locked_here(spec, &args) {
            return Some(Deferred::Locked);
        }
        let (db, resp3) = (self.state.db, self.state.resp3);
        match spec.route {
            Route::Local => self.run_local(spec, args),
            Route::Keyed => match self.owner_of_keys(spec, &args) {
                Some(shard) if shard == self.core.index => self.run_local(spec, args),
                Some(shard) => self.pipeline.remote(shard, spec, db, resp3, args.iter()),
                None => return Some(Deferred::Command(spec)),
            },
            Route::SplitKeys(merge) => {
                let step = spec.keys.2 as usize;
                if !(args.len() - 1).is_multiple_of(step) {
                    self.reject(&arity_error(spec.name));
                    return None;
                }
                match self.owner_of_keys(spec, &args) {
                    Some(shard) if shard == self.core.index => self.run_local(spec, args),
                    Some(shard) => self.pipeline.remote(shard, spec, db, resp3, args.iter()),
                    // Over several shards: atomically, as a coordinator unit.
                    None if self.pipeline.unit.is_none() => return Some(Deferred::Command(spec)),
                    None => self.split_by_key(spec, merge, args, step),
                }
            }
            Route::AllShards(merge) => {
                if self.core.count == 1 || self.state.shard_port {
                    self.run_local(spec, args);
                } else if spec.has_flag(flags::WRITE) && self.pipeline.unit.is_none() {
                    // FLUSHALL, SWAPDB: every shard at one instant.
                    return Some(Deferred::Command(spec));
                } else {
                    self.split_all(spec, merge, args);
                }
            }
            Route::Proxy => return commands::run_now(self, spec, args),
        }
        None
    }

    /// Redis Cluster's checks: every key in one slot (else CROSSSLOT), and
    /// that slot served by this connection's node (else MOVED to its owner).
    /// Returns true when the command was answered with a redirection.
    fn redirected(&mut self, spec: &CommandSpec, args: &Args) -> bool {
        let mut slot = None;
        for i in spec.key_indexes(args) {
            let s = key_slot(args.get(i));
            match slot {
                None => slot = Some(s),
                Some(first) if first != s => {
                    self.error("CROSSSLOT Keys in request don't hash to the same slot");
                    return true;
                }
                _ => {}
            }
        }
        let Some(slot) = slot else {
            return false;
        };
        let moved = {
            let view = self.core.cluster.borrow();
            let owner = match view.owner(slot) {
                Owner::Remote { node } => Some(node),
                Owner::Local { node, .. } if self.state.port_node.is_some_and(|p| p != node) => Some(node),
                Owner::Local { .. } => None,
            };
            owner.map(|node| format!("MOVED {slot} {}", view.node(node).addr()))
        };
        match moved {
            Some(msg) => {
                self.error(&msg);
                true
            }
            None => false,
        }
    }

    /// True when a coordinator unit other than this connection's holds a
    /// key of this shard that the command touches.
    fn locked_here(&self, spec: &CommandSpec, args: &Args) -> bool {
        let (locks, me, db) = (self.core.locks.borrow(), self.pipeline.unit, self.state.db);
        if matches!(spec.route, Route::AllShards(_)) {
            return locks.blocks_any(me);
        }
        spec.key_indexes(args).any(|i| {
            let key = args.get(i);
            self.core.shard_of(key) == self.core.index && locks.blocks(db, key, me)
        })
    }

    #[inline]
    pub fn run_local(&mut self, spec: &'static CommandSpec, args: Args) {
        let (core, db, resp3, now) = (&self.core, self.state.db, self.state.resp3, self.now);
        self.pipeline.local(|out| core.execute_local(spec, db, resp3, now, args, out));
    }

    /// The one shard owning every key of the command, `None` if they span
    /// several. Keyless commands run here.
    pub fn owner_of_keys(&self, spec: &CommandSpec, args: &Args) -> Option<usize> {
        if self.core.count == 1 {
            return Some(0);
        }
        let mut owner = None;
        for i in spec.key_indexes(args) {
            let shard = self.core.shard_of(args.get(i));
            match owner {
                None => owner = Some(shard),
                Some(o) if o != shard => return None,
                _ => {}
            }
        }
        Some(owner.unwrap_or(self.core.index))
    }

    /// A command for every shard, replies merged.
    pub fn split_all(&mut self, spec: &'static CommandSpec, merge: Merge, args: Args) {
        let all: Vec<usize> = (1..args.len()).collect();
        let groups: Vec<(usize, Vec<usize>)> = (0..self.core.count).map(|s| (s, all.clone())).collect();
        let (db, resp3, now, core) = (self.state.db, self.state.resp3, self.now, self.core.clone());
        self.pipeline.split(&core, spec, merge, db, resp3, now, args, &groups, &[]);
    }

    pub fn split_by_key(&mut self, spec: &'static CommandSpec, merge: Merge, args: Args, step: usize) {
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        let mut key_shards = Vec::new();
        for i in spec.key_indexes(&args) {
            let shard = self.core.shard_of(args.get(i));
            key_shards.push(shard as u16);
            let group = match groups.iter().position(|(s, _)| *s == shard) {
                Some(g) => g,
                None => {
                    groups.push((shard, Vec::new()));
                    groups.len() - 1
                }
            };
            groups[group].1.extend(i..i + step);
        }
        groups.sort_by_key(|(s, _)| *s);
        let (db, resp3, now, core) = (self.state.db, self.state.resp3, self.now, self.core.clone());
        self.pipeline.split(&core, spec, merge, db, resp3, now, args, &groups, &key_shards);
    }
}

fn truncated(b: &[u8], max: usize) -> String {
    String::from_utf8_lossy(&b[..b.len().min(max)]).into_owned()
}

/// Redis's text, quoting up to 128 bytes of arguments.
fn unknown_command(args: &Args) -> String {
    let mut quoted = String::new();
    for a in args.iter().skip(1) {
        if quoted.len() >= 128 {
            break;
        }
        let room = 128 - quoted.len();
        quoted.push_str(&format!("'{}' ", truncated(a, room)));
    }
    format!("ERR unknown command '{}', with args beginning with: {}", truncated(args.get(0), 128), quoted)
}
