//! A connection's session as commands see it: its state (database,
//! protocol, MULTI, WATCH...), its pipeline of replies, and the routing
//! helpers commands use to reach the owners of keys. The socket loop is in
//! `conn.rs`, the router in `router.rs`.

use crate::acl::user::User;
use crate::cluster::Owner;
use crate::core::Core;
use crate::pipeline::Pipeline;
use crate::pubsub::state::ConnSubscriptions;
use crate::push::queue::PushQueue;
use crate::replication::handoff::{ReplicaHello, SyncRequest};
use crate::slot::key_slot;
use shard::{Args, CommandSpec, Merge, Route};
use std::rc::Rc;
use std::time::{Duration, Instant};

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
    pub multi: Option<Queued>,
    /// Keys this connection WATCHes: (shard, db, key).
    pub watched: Vec<(usize, usize, Vec<u8>)>,
    /// Watched keys that were absent or expired when watched: running out
    /// of time does not change them (Redis 7.0).
    pub watched_absent: Vec<(usize, usize, Vec<u8>)>,
    /// What a replica announced with REPLCONF.
    pub repl_hello: ReplicaHello,
    /// SYNC/PSYNC: the socket becomes a replica's link after this batch.
    pub sync: Option<SyncRequest>,
    /// The primary's stream applied on a replica: exempt from READONLY,
    /// MASTERDOWN and LOADING.
    pub master: bool,
    /// The ACL user, from the core's table of generation `acl_generation`.
    pub user: Rc<User>,
    pub acl_generation: u64,
    /// The user may run anything: the router skips the ACL check.
    pub unrestricted: bool,
    /// EXEC is running the queued commands (ACL's "rules changed" error).
    pub in_exec: bool,
    /// Where pushes for this connection wait (Pub/Sub messages, tracking
    /// invalidations, MONITOR): created on first need (`push::attach`).
    pub push: Option<Rc<PushQueue>>,
    /// Channels, patterns and shard channels subscribed to.
    pub subscriptions: ConnSubscriptions,
    /// CLIENT TRACKING is on (its mode is in the registry entry).
    pub tracking: bool,
    /// CLIENT REPLY's state.
    pub reply: ReplyMode,
}

/// CLIENT REPLY: OFF, and SKIP's two steps (Redis's CLIENT_REPLY_SKIP_NEXT,
/// then CLIENT_REPLY_SKIP for the one command after it).
#[derive(Clone, Copy, Default)]
pub struct ReplyMode {
    pub off: bool,
    pub skip_next: bool,
    pub skip: bool,
}

impl ReplyMode {
    /// The reply of the command about to run is dropped.
    pub fn silent(self) -> bool {
        self.off || self.skip
    }

    /// After each command (Redis's resetClient): SKIP covers one command.
    pub fn command_done(&mut self) {
        self.skip = std::mem::take(&mut self.skip_next);
    }
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
    pub last_cmd: &'static str,
    /// Cluster key checks (CROSSSLOT, MOVED) apply.
    pub cluster: bool,
    /// The current command, for its statistics (`observe.rs`).
    pub tally: Tally,
}

/// What the router learnt of the command it handles now, for its
/// statistics (`observe.rs`).
pub struct Tally {
    /// Where the current command's time starts.
    pub clock: Instant,
    /// The (sub)command, once looked up.
    pub spec: Option<&'static CommandSpec>,
    /// It passed the router's checks (an error before is a rejection).
    pub routed: bool,
    /// A script's error reply raised by a command it called: counted
    /// already where that command ran.
    pub error_counted: bool,
    /// A blocked command's slow-log entry, logged once it is served.
    pub blocked: Option<Box<Blocked>>,
    /// Time another core spent running this (deferred) command for it: a
    /// script run on its keys' core.
    pub elsewhere: Duration,
}

/// A blocked command's part of its statistics, for when it is served.
pub struct Blocked {
    pub spec: &'static CommandSpec,
    pub usec: u64,
    pub args: Option<Vec<Vec<u8>>>,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            clock: Instant::now(),
            spec: None,
            routed: false,
            error_counted: false,
            blocked: None,
            elsewhere: Duration::ZERO,
        }
    }
}

impl Tally {
    /// Before the router looks at a command.
    #[inline]
    pub fn begin(&mut self) {
        self.spec = None;
        self.routed = false;
        self.error_counted = false;
    }
}

/// What must wait until every earlier reply of the batch is in.
pub enum Deferred {
    /// A command that awaits other cores itself.
    Command(&'static CommandSpec),
    /// A command whose keys a coordinator unit holds: handled again after
    /// the next release.
    Locked,
    /// A command CLIENT PAUSE holds back: handled again once the pause
    /// ends (the connection shows flags=b meanwhile).
    Paused,
}

/// Commands queued since MULTI, their arguments copied into one buffer.
#[derive(Default)]
pub struct Queued {
    pub data: Vec<u8>,
    pub ranges: Vec<(u32, u32)>,
    /// (spec, first range, count).
    pub commands: Vec<(&'static CommandSpec, u32, u32)>,
    /// A command was refused while queuing: EXEC answers EXECABORT.
    pub failed: bool,
}

impl Queued {
    /// (commands, bytes) for CLIENT LIST's multi= and multi-mem=.
    pub fn size(&self) -> (i64, usize) {
        (self.commands.len() as i64, self.data.len() + self.ranges.len() * 8)
    }
}

impl Connection {
    /// A connection with no socket, its replies discarded: the master
    /// client a replica applies its primary's stream through.
    pub fn master_client(core: Rc<Core>, id: u64) -> Connection {
        let cluster = core.cluster().enabled();
        Connection {
            pipeline: Pipeline::new(core.count),
            state: ConnState {
                id,
                registry_key: usize::MAX,
                db: 0,
                resp3: false,
                authenticated: true,
                close: false,
                port_node: None,
                shard_port: false,
                multi: None,
                watched: Vec::new(),
                watched_absent: Vec::new(),
                repl_hello: Default::default(),
                sync: None,
                master: true,
                user: Rc::new(User::default_user()),
                acl_generation: u64::MAX,
                unrestricted: true,
                in_exec: false,
                push: None,
                subscriptions: Default::default(),
                tracking: false,
                reply: Default::default(),
            },
            core,
            now: 0,
            last_cmd: "NULL",
            cluster,
            tally: Default::default(),
        }
    }

    pub fn error(&mut self, msg: &str) {
        self.pipeline.local(|out| shard::Reply::new(out, false).error(msg));
    }

    /// An error that refuses a command; inside MULTI it also dooms the
    /// transaction (EXECABORT), as Redis's `rejectCommand`.
    pub fn reject(&mut self, msg: &str) {
        if let Some(q) = &mut self.state.multi {
            q.failed = true;
        }
        self.error(msg);
    }

    /// Redis Cluster's checks: every key in one slot (else CROSSSLOT), and
    /// that slot served by this connection's node (else MOVED to its owner).
    /// Returns true when the command was answered with a redirection.
    pub fn redirected(&mut self, spec: &CommandSpec, args: &Args) -> bool {
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
    pub fn locked_here(&self, spec: &CommandSpec, args: &Args) -> bool {
        let (locks, me, db) = (self.core.locks.borrow(), self.pipeline.unit, self.state.db);
        if matches!(spec.route, Route::AllShards(_)) {
            return locks.blocks_any(me);
        }
        spec.key_indexes(args).any(|i| {
            let key = args.get(i);
            self.core.shard_of(key) == self.core.index && locks.blocks(db, key, me)
        })
    }

    /// min-replicas-to-write: fewer replicas acknowledged within
    /// min-replicas-max-lag than it asks for.
    pub fn too_few_replicas(&self) -> bool {
        let config = self.core.config();
        config.min_replicas_to_write > 0
            && config.min_replicas_max_lag > 0
            && self.core.repl.good_replicas.get() < config.min_replicas_to_write
    }

    #[inline]
    pub fn run_local(&mut self, spec: &'static CommandSpec, args: Args) {
        let (core, db, resp3, now, caller) =
            (&self.core, self.state.db, self.state.resp3, self.now, self.pipeline.caller);
        // CLIENT TRACKING: what the eviction ahead of it invalidates for
        // this client goes ahead of its reply.
        if self.state.tracking && core.evict_before(caller, spec, now) {
            self.take_pushes_now();
        }
        let core = &self.core;
        self.pipeline.local(|out| core.execute_local(caller, spec, db, resp3, now, args, out));
        if let Some(line) = self.pipeline.monitor_line.take() {
            self.core.feed_monitors(&line);
        }
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
