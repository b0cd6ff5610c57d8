//! The state of saves: the process-wide save lock and figures (held by
//! `Process`) and each core's part (held by `Core`).

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering::Relaxed};

/// Process-wide save facts for INFO, LASTSAVE and the schedule. Written by
/// saves only (rare), never on the data path.
pub struct SaveStatus {
    /// The save lock: one snapshot walk at a time, a save's or an AOF
    /// rewrite's (Redis's one child process): `FREE`, `SAVING`, `REWRITING`.
    holder: AtomicU8,
    /// The running save is a BGSAVE (INFO's rdb_bgsave_in_progress).
    pub background: AtomicBool,
    /// BGSAVE SCHEDULE during a rewrite / BGREWRITEAOF during a save: core
    /// 0's cron starts it once the lock is free.
    pub bgsave_scheduled: AtomicBool,
    pub rewrite_scheduled: AtomicBool,
    /// Unix ms when the running save started.
    pub started_ms: AtomicU64,
    /// Unix seconds of the last successful save (LASTSAVE).
    pub last_save: AtomicU64,
    /// Unix seconds of the last attempt, for the retry delay.
    pub last_try: AtomicU64,
    pub last_bgsave_ok: AtomicBool,
    pub last_bgsave_secs: AtomicI64,
    pub saves: AtomicU64,
    /// Saves started, numbering each save's parts.
    pub sequence: AtomicU64,
    /// Keys loaded and keys skipped as expired by the load at start.
    pub loaded_keys: AtomicU64,
    pub load_expired: AtomicU64,
}

impl Default for SaveStatus {
    fn default() -> Self {
        let now = shard::unix_ms() / 1000;
        SaveStatus {
            holder: AtomicU8::new(FREE),
            background: AtomicBool::new(false),
            bgsave_scheduled: AtomicBool::new(false),
            rewrite_scheduled: AtomicBool::new(false),
            started_ms: AtomicU64::new(0),
            last_save: AtomicU64::new(now),
            last_try: AtomicU64::new(0),
            last_bgsave_ok: AtomicBool::new(true),
            last_bgsave_secs: AtomicI64::new(-1),
            saves: AtomicU64::new(0),
            sequence: AtomicU64::new(0),
            loaded_keys: AtomicU64::new(0),
            load_expired: AtomicU64::new(0),
        }
    }
}

/// Who holds the save lock.
const FREE: u8 = 0;
const SAVING: u8 = 1;
const REWRITING: u8 = 2;

impl SaveStatus {
    /// Takes the save lock for a save (`rewrite` false) or an AOF rewrite;
    /// the error says who holds it.
    pub fn lock(&self, rewrite: bool) -> Result<(), SaveError> {
        let me = if rewrite { REWRITING } else { SAVING };
        match self.holder.compare_exchange(FREE, me, Relaxed, Relaxed) {
            Ok(_) => Ok(()),
            Err(REWRITING) => Err(SaveError::Rewriting),
            Err(_) => Err(SaveError::InProgress),
        }
    }

    pub fn unlock(&self) {
        self.holder.store(FREE, Relaxed);
    }

    /// A save (SAVE or BGSAVE) runs.
    pub fn saving(&self) -> bool {
        self.holder.load(Relaxed) == SAVING
    }

    /// An AOF rewrite holds the lock (from BGREWRITEAOF's reply on, before
    /// its first step reaches the shards).
    pub fn rewriting(&self) -> bool {
        self.holder.load(Relaxed) == REWRITING
    }

    /// A save or an AOF rewrite runs (Redis's hasActiveChildProcess).
    pub fn busy(&self) -> bool {
        self.holder.load(Relaxed) != FREE
    }
}

/// A written part: (bytes, CRC-64), or why it failed.
pub type PartResult = Result<(u64, u64), String>;

/// A core's part in saves.
#[derive(Default)]
pub struct CoreSave {
    /// Writes refused with MISCONF (a failed BGSAVE with
    /// stop-writes-on-bgsave-error and a save point): one flag per command.
    pub deny_writes: Cell<bool>,
    /// The finished part of save number `.0`: (bytes, CRC64), or why it
    /// failed. The number keeps a writer of an abandoned save from
    /// answering for the next one.
    pub(crate) part: RefCell<Option<(u64, PartResult)>>,
    /// The shard's dirty counter at the cut.
    pub(crate) dirty_at_cut: Cell<u64>,
}

/// Redis 7.0's reply to writes after a failed background save.
pub const MISCONF: &str = "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk. Commands that may modify the data set are disabled, because this instance is configured to report errors during writes if RDB snapshotting fails (stop-writes-on-bgsave-error option). Please check the Redis logs for details about the RDB error.";

#[derive(Debug, PartialEq)]
pub enum SaveError {
    /// Another save runs.
    InProgress,
    /// An AOF rewrite holds the save lock.
    Rewriting,
    Failed(String),
}
