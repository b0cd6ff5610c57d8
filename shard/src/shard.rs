//! One shard: the part of the keyspace a single core owns, with its own
//! configuration copy and statistics. Only its core ever touches it.

use crate::config::Config;
use crate::db::Db;

#[derive(Default, Clone, Debug)]
pub struct Stats {
    /// Commands executed on this shard (parts of split commands included).
    pub commands: u64,
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
    /// Batches executed here on behalf of another core.
    pub remote_batches: u64,
    /// Values Redis would have handed to its lazy-free thread (UNLINK of a
    /// big value, FLUSHDB/FLUSHALL ASYNC's keys), freed here at once: INFO's
    /// `lazyfreed_objects`.
    pub lazyfreed: u64,
}

pub struct Shard {
    /// Keys (any database) some client is blocked on: pushes to them are
    /// recorded in `ready`, for the proxy to serve the waiters.
    pub watched: std::collections::HashMap<Vec<u8>, usize>,
    /// (db, key) pushed to since the proxy last served waiters.
    pub ready: Vec<(usize, Vec<u8>)>,
    pub index: usize,
    pub count: usize,
    pub dbs: Vec<Db>,
    pub config: Config,
    pub stats: Stats,
    /// Effects of writes for the AOF (and replicas); `None` when nothing
    /// consumes them.
    pub effects: Option<Box<crate::propagate::EffectLog>>,
    /// Writes executed since the last successful save (Redis's
    /// `rdb_changes_since_last_save`): write commands, counted once each.
    pub dirty: u64,
    pub(crate) snapshot: crate::snapshot::SnapshotState,
    pub(crate) eviction: crate::evict::Eviction,
    pub(crate) rng: u64,
    /// Keyspace notification classes that publish (`notify::effective`):
    /// 0 when off, so a raise point is one branch.
    pub notify_mask: u32,
    /// Events raised since the proxy last drained them.
    pub(crate) outbox: crate::notify::Outbox,
    /// Client-side caching: who read what here, BCAST prefixes, pending
    /// invalidations (`None` until a tracking client reads here).
    pub tracking: Option<Box<crate::tracking::TrackingTable>>,
    /// The tracking client whose command runs now (set around each
    /// command by the proxy; 0 for a client without tracking).
    pub caller: crate::tracking::Caller,
    /// Commands, errors, slow log and latency events of this core.
    pub observe: crate::observe::Observe,
    /// Keys whose time ran out are swept in the background (DEBUG
    /// SET-ACTIVE-EXPIRE 0 leaves them until they are accessed).
    pub active_expire_enabled: bool,
    /// The running command comes from a script (Redis's CLIENT_SCRIPT: SORT
    /// makes its output deterministic there); set around it by the proxy.
    pub scripted: bool,
}

impl Shard {
    pub fn new(index: usize, count: usize, config: Config) -> Self {
        let dbs = (0..config.databases).map(|_| Db::default()).collect();
        crate::memory::register_shard(index, count);
        let mut shard = Shard {
            watched: Default::default(),
            ready: Vec::new(),
            index,
            count,
            dbs,
            config,
            stats: Stats::default(),
            effects: None,
            dirty: 0,
            snapshot: Default::default(),
            eviction: Default::default(),
            rng: 0x9e37_79b9_7f4a_7c15 ^ ((index as u64 + 1) << 17) ^ unix_ms(),
            notify_mask: 0,
            outbox: Default::default(),
            tracking: None,
            caller: Default::default(),
            observe: Default::default(),
            active_expire_enabled: true,
            scripted: false,
        };
        shard.apply_config();
        shard
    }

    /// xorshift64*: cheap per-shard randomness for sampling.
    pub fn random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// One active-expiry tick (called `hz` times a second): sweeps part of
    /// each database holding keys with a TTL, continuing while more than a
    /// quarter of what it examined had expired, as Redis's cycle does.
    pub fn active_expire(&mut self, now: u64) -> usize {
        const BUDGET: usize = 2048;
        let threshold = self.config.latency_monitor_threshold;
        let started = (threshold != 0).then(std::time::Instant::now);
        if !self.active_expire_enabled {
            return 0;
        }
        let mut total = 0;
        for db in &mut self.dbs {
            for _ in 0..8 {
                let expired = db.expire_step(now, BUDGET);
                total += expired;
                if expired < BUDGET / 4 {
                    break;
                }
            }
        }
        if total > 0 {
            self.log_expired_keys();
            self.collect_db_notes();
        }
        if let Some(started) = started {
            self.observe.latency.add_if_needed(threshold, "expire-cycle", started.elapsed().as_millis() as u64);
        }
        total
    }

    /// Notes that `key` may now feed a blocked client (a list push). Costs one
    /// emptiness check unless some client is blocked on this shard.
    #[inline]
    pub fn signal_ready(&mut self, db: usize, key: &[u8]) {
        if !self.watched.is_empty()
            && self.watched.contains_key(key)
            && !self.ready.iter().any(|(d, k)| *d == db && k == key)
        {
            self.ready.push((db, key.to_vec()));
        }
    }

    pub fn expired_keys(&self) -> u64 {
        self.dbs.iter().map(|d| d.expired_keys).sum()
    }

    pub fn keys(&self) -> usize {
        self.dbs.iter().map(Db::len).sum()
    }

    pub fn reset_stats(&mut self) {
        self.stats = Stats::default();
        self.observe.reset_stats();
        self.eviction.evicted_keys = 0;
        for db in &mut self.dbs {
            db.expired_keys = 0;
        }
    }
}

/// Wall-clock unix time in milliseconds.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
