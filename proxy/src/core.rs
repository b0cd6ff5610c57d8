//! Per-core state: the shard this core owns, its connections, statistics and
//! its end of the mesh. Everything here is touched by one thread only; the
//! few process-wide facts live in [`Process`] and are read-mostly. This
//! file holds state only: what runs against it lives in the layers above
//! (ARCHITECTURE.md, "Layers").

use crate::acl::state::AclState;
use crate::acl::users::Users;
use crate::blocking::request::Waiters;
use crate::clients::Clients;
use crate::cluster::ClusterView;
use crate::coordinator::locks::LockTable;
use crate::mesh::{Mesh, Response};
use crate::persistence::aof::state::Aof;
use crate::persistence::status::{CoreSave, SaveStatus};
use crate::pubsub::state::Subscriptions;
use crate::push::queue::PushRegistry;
use crate::replication::state::ReplState;
use crate::slot::key_slot;
use shard::commands::all;
use shard::{CommandSpec, Shard};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Memory figures for INFO, provided by the binary that owns the allocator.
#[derive(Clone, Default, Debug)]
pub struct MemoryInfo {
    pub rss: u64,
    pub peak_rss: u64,
    pub allocator: String,
}

/// Process-wide facts. Only connection accept/close and shutdown write here
/// (never a request), so sharing it costs the data path nothing.
pub struct Process {
    pub shutdown: AtomicBool,
    /// Bytes the replication stream holds beyond `repl-backlog-size` for
    /// connected replicas (INFO memory's mem_clients_slaves, as Redis 7.0
    /// counts its shared replication buffer), written by core 0.
    pub replicas_held: AtomicU64,
    /// SIGHUP asked for the topology file to be read again.
    pub reload_requested: AtomicBool,
    /// Open client connections on all cores, for `maxclients`.
    pub connected_clients: AtomicUsize,
    pub started: Instant,
    pub run_id: String,
    pub executable: String,
    pub config_file: String,
    /// CPU of each shard.
    pub cpus: Vec<usize>,
    /// The client port listened on (INFO's tcp_port; CONFIG SET port
    /// changes it, 0: none).
    pub tcp_port: AtomicU16,
    pub memory: fn() -> MemoryInfo,
    /// Net bytes allocated by the calling thread (each core reports its own).
    pub thread_allocated: fn() -> i64,
    /// Highest total of allocated bytes INFO has seen.
    pub memory_peak: std::sync::atomic::AtomicU64,
    /// Saves: the one-at-a-time lock, LASTSAVE, INFO persistence.
    pub save_status: SaveStatus,
    /// SIGTERM/SIGINT asked for a shutdown; core 0 saves first if it must.
    pub signal_shutdown: AtomicBool,
    /// Each core's running script, for SCRIPT KILL / FUNCTION KILL.
    pub scripts: Vec<crate::scripting::context::ScriptStatus>,
    /// Each core's client memory, for client eviction.
    pub client_memory: Vec<ClientMemory>,
}

/// One core's client memory for `maxmemory-clients` (client_evict.rs),
/// read by every core.
#[derive(Default)]
pub struct ClientMemory {
    /// Memory of the core's normal and pubsub clients.
    pub total: AtomicU64,
    /// The largest evictable client's memory (0: none); refreshed by the
    /// cron, raised as clients grow.
    pub largest: AtomicU64,
}

/// 40 random hex digits: the run id, replication ids, EOF marks (as Redis's
/// getRandomHexChars).
pub fn random_id() -> String {
    let mut bytes = [0u8; 20];
    // SAFETY: getrandom writes at most `len` bytes into the buffer.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        let t = shard::unix_ms() ^ ((std::process::id() as u64) << 32);
        bytes[..8].copy_from_slice(&t.to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Process {
    pub fn request_shutdown(&self) {
        self.shutdown.store(true, Ordering::Relaxed);
    }

    pub fn shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::Relaxed)
    }

    /// The client port listened on (0: none).
    pub fn tcp_port(&self) -> u16 {
        self.tcp_port.load(Ordering::Relaxed)
    }
}

/// Counters kept by the proxy side of a core.
#[derive(Default)]
pub struct CoreStats {
    /// Client commands parsed on this core (each counted once, however it
    /// was split).
    pub commands: Cell<u64>,
    pub connections_received: Cell<u64>,
    pub rejected_connections: Cell<u64>,
    pub net_input_bytes: Cell<u64>,
    pub net_output_bytes: Cell<u64>,
    /// Batches this core sent to other cores (cross-core hops).
    pub hops_sent: Cell<u64>,
    /// Commands carried by those batches.
    pub remote_commands: Cell<u64>,
    /// Clients closed by `maxmemory-clients` (INFO's evicted_clients).
    pub evicted_clients: Cell<u64>,
    /// Samples of total commands for instantaneous_ops_per_sec.
    pub ops_samples: RefCell<OpsSamples>,
    /// Command latency for the metrics endpoint.
    pub latency: crate::latency::LatencyHistogram,
}

impl CoreStats {
    pub fn add(cell: &Cell<u64>, n: u64) {
        cell.set(cell.get() + n)
    }
}

/// Redis's instantaneous metric: the average rate over the last 16 samples.
#[derive(Default)]
pub struct OpsSamples {
    last_count: u64,
    last_time: Option<Instant>,
    rates: [u64; 16],
    next: usize,
}

impl OpsSamples {
    pub fn sample(&mut self, count: u64, now: Instant) {
        if let Some(t) = self.last_time {
            let ms = now.duration_since(t).as_millis().max(1) as u64;
            self.rates[self.next] = (count.saturating_sub(self.last_count)) * 1000 / ms;
            self.next = (self.next + 1) % self.rates.len();
        }
        self.last_count = count;
        self.last_time = Some(now);
    }

    pub fn per_second(&self) -> u64 {
        self.rates.iter().sum::<u64>() / self.rates.len() as u64
    }
}

/// Command names (lower case) to specs.
pub struct CommandTable {
    map: HashMap<&'static [u8], &'static CommandSpec, ahash::RandomState>,
}

impl CommandTable {
    pub fn new() -> Self {
        let map = all().map(|c| (c.name.as_bytes(), c)).collect();
        CommandTable { map }
    }

    /// `rename-command` lines applied: a command under its new name, or
    /// gone for an empty one (Redis's errors for the rest).
    pub fn with_renames(renames: &[(String, String)]) -> Result<Self, String> {
        let mut table = Self::new();
        for (from, to) in renames {
            let spec = table.map.remove(from.as_bytes()).ok_or("No such command in rename-command")?;
            if to.is_empty() {
                continue;
            }
            let to: &'static str = Box::leak(to.to_ascii_lowercase().into_boxed_str());
            if table.map.insert(to.as_bytes(), spec).is_some() {
                return Err("Target command name already exists".into());
            }
        }
        Ok(table)
    }

    #[inline]
    pub fn lookup(&self, name: &[u8]) -> Option<&'static CommandSpec> {
        if name.len() > 24 {
            // Only a renamed command can be this long.
            return self.map.get(&*name.to_ascii_lowercase()).copied();
        }
        let mut lower = [0u8; 24];
        let lower = lower.get_mut(..name.len())?;
        for (d, s) in lower.iter_mut().zip(name) {
            *d = s.to_ascii_lowercase();
        }
        self.map.get(&*lower).copied()
    }
}

impl Default for CommandTable {
    fn default() -> Self {
        Self::new()
    }
}

pub struct Core {
    pub index: usize,
    pub count: usize,
    pub shard: RefCell<Shard>,
    /// Slot ownership; replaced as a whole when the topology is reloaded.
    pub cluster: RefCell<Rc<ClusterView>>,
    pub commands: CommandTable,
    pub clients: RefCell<Clients>,
    pub stats: CoreStats,
    pub mesh: Mesh<Core>,
    pub process: Arc<Process>,
    /// Clients blocked on keys this core owns.
    pub blocked: RefCell<Waiters>,
    /// This core's own connections that are blocked (INFO blocked_clients).
    pub blocked_here: Cell<u64>,
    /// Sequence for waiter ids (interleaved with the other cores').
    pub waiter_seq: Cell<u64>,
    /// A weak handle on itself, for tasks spawned from `&self`.
    pub me: std::rc::Weak<Core>,
    /// This shard's append-only file.
    pub aof: Aof,
    /// This core's part in snapshots.
    pub save: CoreSave,
    /// The clock shared by the connections one busy client-ring turn wakes.
    pub turn_clock: TurnClock,
    /// Keys of this shard held by coordinator units.
    pub locks: RefCell<LockTable>,
    /// Replication: the hub (core 0), this shard's feed, the replica link.
    pub repl: ReplState,
    /// This core's copy of the ACL users and its part of the ACL log.
    pub acl: AclState,
    /// Push queues of this core's connections, pushes for other cores'.
    pub push: PushRegistry,
    /// Pub/Sub: this core's subscribers, the other cores' summaries.
    pub pubsub: RefCell<Subscriptions>,
    /// Every MONITOR client's id (on any core): commands executed here are
    /// fed to them (`monitor.rs`); empty costs one branch per command.
    pub monitors: RefCell<Vec<u64>>,
    /// CLIENT PAUSE, the same on every core.
    pub pause: crate::pause::Pause,
    /// Serves this core's connections from inside a long synchronous run
    /// (a busy script): the client ring's, set by the server; none on
    /// glommio's reactor.
    pub while_blocked: RefCell<Option<Box<dyn Fn()>>>,
    /// This core's client listeners, set by the server once it listens.
    pub listening: RefCell<Option<Rc<dyn Listening>>>,
}

/// A core's client listeners as CONFIG SET port and bind change them at
/// run time (Redis's changeListenPort and changeBindAddr), in two steps
/// over every core, so that a failure anywhere keeps the old ones
/// everywhere. Held by `server.rs`, which knows how to accept.
pub trait Listening {
    /// Opens, listening but not accepted on yet, the sockets that bind
    /// addresses `bind` and client port `port` (0: none) need beyond those
    /// open. `probe`: first makes sure, with plain binds, that no other
    /// process holds the new addresses (every core's SO_REUSEPORT would
    /// share them with it silently). False, with Redis's warning logged,
    /// when one cannot be opened; nothing stays opened then.
    fn prepare(&self, bind: &[String], port: u16, probe: bool) -> bool;
    /// Accepts on what `prepare` opened and closes the listeners no longer
    /// wanted; the connections they accepted go on.
    fn commit(&self);
    /// Closes what `prepare` opened.
    fn abort(&self);
}

impl Core {
    pub fn new(
        shard: Shard,
        cluster: ClusterView,
        mesh: Mesh<Core>,
        process: Arc<Process>,
        me: std::rc::Weak<Core>,
    ) -> Self {
        // Checked at start (main refuses a bad ACL), so a default is moot.
        let acl = AclState::new(Users::from_config(&shard.config).unwrap_or_default());
        let commands = CommandTable::with_renames(&shard.config.rename_commands).unwrap_or_default();
        Core {
            acl,
            monitors: Default::default(),
            pause: Default::default(),
            while_blocked: Default::default(),
            listening: Default::default(),
            blocked: Default::default(),
            blocked_here: Cell::new(0),
            waiter_seq: Cell::new(0),
            me,
            aof: Default::default(),
            save: Default::default(),
            turn_clock: TurnClock::default(),
            locks: Default::default(),
            repl: Default::default(),
            push: Default::default(),
            pubsub: RefCell::new(Subscriptions::new(shard.count)),
            index: shard.index,
            count: shard.count,
            cluster: RefCell::new(Rc::new(cluster)),
            shard: RefCell::new(shard),
            commands,
            clients: RefCell::new(Clients::default()),
            stats: CoreStats::default(),
            mesh,
            process,
        }
    }

    /// Answers ticket `ticket` of core `origin` (this core or a peer).
    pub fn deliver(&self, origin: usize, ticket: u32, response: Response) {
        self.mesh.deliver(origin, ticket, response)
    }

    pub fn cluster(&self) -> Rc<ClusterView> {
        self.cluster.borrow().clone()
    }

    /// The local shard owning `key` (the connection's own core for keys of
    /// slots served by other hosts, which the router answers with MOVED).
    #[inline]
    pub fn shard_of(&self, key: &[u8]) -> usize {
        if self.count == 1 {
            return 0;
        }
        self.cluster.borrow().local_shard(key_slot(key)).unwrap_or(self.index)
    }

    /// Unix ms for a batch of requests: the turn's clock when there is one.
    #[inline]
    pub fn now_ms(&self) -> u64 {
        self.turn_clock.ms()
    }

    #[inline]
    pub fn now_instant(&self) -> Instant {
        self.turn_clock.instant()
    }

    /// A waiter id no other core will hand out.
    pub fn next_waiter_id(&self) -> u64 {
        let n = self.waiter_seq.get() + 1;
        self.waiter_seq.set(n);
        (n << 10) | self.index as u64
    }

    /// Serves this core's connections while a script runs past the busy
    /// threshold (`while_blocked`): they get BUSY, or what Redis allows
    /// then (SCRIPT KILL, SHUTDOWN NOSAVE...). Taken out meanwhile, so a
    /// nested call does nothing.
    pub fn serve_while_blocked(&self) {
        let Some(serve) = self.while_blocked.take() else { return };
        // The turn's cached clock may be old: the script has run for a while.
        self.turn_clock.turn(false);
        serve();
        *self.while_blocked.borrow_mut() = Some(serve);
    }

    pub fn config(&self) -> std::cell::Ref<'_, shard::Config> {
        std::cell::Ref::map(self.shard.borrow(), |s| &s.config)
    }
}

/// Unix ms and an instant read at most once per busy client-ring turn, at
/// their first use, and forgotten when the next turn starts or the ring's
/// driver waits (so never older than one turn): the connections a busy turn
/// wakes share one clock read, as Redis caches its time per event-loop
/// iteration, and a turn that runs no command reads no clock.
#[derive(Default)]
pub struct TurnClock {
    open: Cell<bool>,
    ms: Cell<Option<u64>>,
    at: Cell<Option<Instant>>,
}

impl TurnClock {
    /// A busy turn starts (`true`), or the driver is about to wait.
    pub fn turn(&self, busy: bool) {
        self.open.set(busy);
        self.ms.set(None);
        self.at.set(None);
    }

    #[inline]
    fn ms(&self) -> u64 {
        self.cached(&self.ms, shard::unix_ms)
    }

    #[inline]
    fn instant(&self) -> Instant {
        self.cached(&self.at, Instant::now)
    }

    #[inline]
    fn cached<T: Copy>(&self, slot: &Cell<Option<T>>, read: impl FnOnce() -> T) -> T {
        if let Some(value) = slot.get() {
            return value;
        }
        let value = read();
        if self.open.get() {
            slot.set(Some(value));
        }
        value
    }
}
