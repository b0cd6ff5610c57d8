//! One connection's socket loop: read, parse every complete command in the
//! buffer, route each (`router.rs`), then write all replies with one send.

use crate::blocking;
use crate::clients::ClientInfo;
use crate::commands::transactions;
use crate::core::{Core, CoreStats};
use crate::log;
use crate::persistence::aof::durable;
use crate::pipeline::Pipeline;
use crate::replication::handoff::SyncRequest;
use crate::replication::sync::{serve_replica, Peer};
use crate::resp::{Limits, Parsed, RequestParser};
use crate::session::{ConnState, Connection, Port};
use crate::stream::ClientStream;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use shard::Args;
use std::rc::Rc;
use std::time::Instant;

const READ_CHUNK: usize = 16 * 1024;

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
                replica: false,
                user: b"default".to_vec(),
            });
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
            },
            now: 0,
            last_cmd: "NULL",
            cluster: view.enabled(),
        };
        drop(view);
        conn.run(&mut stream).await;
        transactions::forget_watches(&mut conn).await;
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
                        if self.state.close || self.state.sync.is_some() {
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
            if let Some(request) = self.state.sync.take() {
                let input = buf[parser.consumed()..filled].to_vec();
                return self.become_replica_link(stream, request, input).await;
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
        durable(&self.core).await;
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

    /// SYNC/PSYNC: from here on the socket carries the replication stream.
    async fn become_replica_link(&mut self, stream: &mut ClientStream, request: SyncRequest, input: Vec<u8>) {
        // CLIENT LIST shows it (flags=S cmd=psync) from here on.
        self.update_registry(0);
        if let Some(c) = self.core.clients.borrow_mut().list.get_mut(self.state.registry_key) {
            c.replica = true;
        }
        let peer = Peer {
            id: self.state.id,
            fd: stream.fd(),
            ip: self.state.repl_hello.ip.clone().unwrap_or_else(|| match stream.peer_addr() {
                Ok(a) => a.ip().to_string(),
                Err(_) => "?".into(),
            }),
            hello: self.state.repl_hello.clone(),
        };
        serve_replica(&self.core, stream, peer, request, input).await
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
}
