//! One core's AOF state, held by `Core`: the open incr file, how far the
//! effects are written and fsynced, statistics and write errors.

use super::manifest::FileEntry;
use glommio::io::BufferedFile;
use glommio::sync::Semaphore;
use shard::config::AppendFsync;
use shard::Shard;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::task::Waker;
use std::time::Instant;

/// INFO persistence's aof_* figures of one shard.
#[derive(Clone, Debug)]
pub struct AofStats {
    pub rewrite_in_progress: bool,
    pub rewrite_started: Option<Instant>,
    pub rewrites: u64,
    pub last_rewrite_secs: i64,
    pub last_rewrite_ok: bool,
    pub last_write_ok: bool,
    pub current_size: u64,
    pub base_size: u64,
}

impl Default for AofStats {
    fn default() -> Self {
        AofStats {
            rewrite_in_progress: false,
            rewrite_started: None,
            rewrites: 0,
            last_rewrite_secs: -1,
            last_rewrite_ok: true,
            last_write_ok: true,
            current_size: 0,
            base_size: 0,
        }
    }
}

/// One core's AOF: its open incr file and how far effects are on disk.
pub struct Aof {
    pub enabled: Cell<bool>,
    pub(super) file: RefCell<Option<Rc<BufferedFile>>>,
    /// Where the next write goes in the incr file.
    pub(super) pos: Cell<u64>,
    /// Effects (positions in the shard's effect stream) written / fsynced.
    pub(super) written: Cell<u64>,
    pub(super) durable: Cell<u64>,
    pub(super) waiters: RefCell<Vec<Waker>>,
    /// Held while the incr file is written, synced or switched.
    pub(super) lock: Semaphore,
    /// This shard's files, as the manifest names them.
    pub files: RefCell<Vec<FileEntry>>,
    /// The next incr file, created by a rewrite's first step.
    pub(super) next: RefCell<Option<(FileEntry, BufferedFile)>>,
    pub stats: RefCell<AofStats>,
    /// Effects taken from the log whose write failed or fell short: written
    /// before anything newer (a copy per batch, so a failed write loses
    /// nothing; the buffer is reused).
    pub(super) unwritten: RefCell<Vec<u8>>,
    pub(super) health: RefCell<Health>,
    /// Every shard's AOF errors as this core knows them (MISCONF).
    pub refusals: Refusals,
}

impl Default for Aof {
    fn default() -> Self {
        Aof {
            enabled: Cell::new(false),
            file: RefCell::new(None),
            pos: Cell::new(0),
            written: Cell::new(0),
            durable: Cell::new(0),
            waiters: RefCell::new(Vec::new()),
            lock: Semaphore::new(1),
            files: RefCell::new(Vec::new()),
            next: RefCell::new(None),
            stats: RefCell::new(AofStats::default()),
            unwritten: RefCell::new(Vec::new()),
            health: RefCell::new(Health::default()),
            refusals: Refusals::default(),
        }
    }
}

impl Aof {
    pub(super) fn set_durable(&self, end: u64) {
        self.durable.set(end);
        self.wake_waiters();
    }

    pub(super) fn wake_waiters(&self) {
        for w in self.waiters.borrow_mut().drain(..) {
            w.wake();
        }
    }

    /// Whether replies to effects up to `target` may leave: fsynced with
    /// `always`; otherwise written to the file, so a crash of the process
    /// loses no acknowledged write (Redis too writes before it replies), or
    /// at once while this shard's writes fail (its replies go out and later
    /// writes get MISCONF, as Redis).
    pub(super) fn acknowledged(&self, policy: AppendFsync, target: u64) -> bool {
        match policy {
            AppendFsync::Always => self.durable.get() >= target,
            _ => self.written.get().max(self.durable.get()) >= target || self.health.borrow().write_failing(),
        }
    }

    /// Moves the log's new effects behind those a failed write left;
    /// returns what to write and the log position it ends at.
    pub(super) fn take_effects(&self, shard: &mut Shard) -> Option<(Vec<u8>, u64)> {
        let log = shard.effects.as_deref_mut()?;
        let new = log.take();
        let mut unwritten = self.unwritten.borrow_mut();
        unwritten.extend_from_slice(&new);
        let bytes = if unwritten.len() == new.len() { new } else { unwritten.clone() };
        Some((bytes, log.taken))
    }

    /// `n` bytes of `unwritten` reached the file.
    pub(super) fn wrote(&self, n: u64) {
        let mut unwritten = self.unwritten.borrow_mut();
        unwritten.drain(..n as usize);
        if unwritten.is_empty() && unwritten.capacity() > 4 << 20 {
            *unwritten = Vec::new();
        }
        self.pos.set(self.pos.get() + n);
        self.stats.borrow_mut().current_size += n;
    }
}

/// One shard's AOF errors.
#[derive(Default)]
pub struct Health {
    /// strerror of the last failed write; none once a write succeeds.
    pub(super) write_error: Option<String>,
    /// strerror of the last failed fsync; none once one succeeds.
    pub(super) fsync_error: Option<String>,
    /// Bumped at every change, so that other cores apply them in order.
    pub(super) version: u64,
    pub(super) last_logged: Option<Instant>,
}

impl Health {
    /// The last write failed (`everysec`/`no`): replies do not wait for it.
    pub(super) fn write_failing(&self) -> bool {
        self.write_error.is_some()
    }

    /// What MISCONF names: the write error first, as Redis.
    pub(super) fn error(&self) -> Option<String> {
        self.write_error.clone().or_else(|| self.fsync_error.clone())
    }
}

/// This core's view of every shard's AOF errors: (version, strerror).
#[derive(Default)]
pub struct Refusals {
    pub(super) shards: RefCell<Vec<(u64, Option<String>)>>,
    /// Some shard's AOF fails: writes are refused (one check per command).
    pub any: Cell<bool>,
}
