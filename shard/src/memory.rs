//! Used memory as the allocator counts it (the binary's global allocator
//! reports every block's usable size here), readable from every core without
//! locks: each thread adds to its own cache-line slot (one writer, relaxed
//! load + store, no read-modify-write), and the process total is the sum of
//! the slots, read relaxed. A block freed on another thread than the one that
//! allocated it moves bytes between slots, so only the sum is meaningful
//! (a thread's own delta over one command is: what that command added).
//! Also here: each shard's evictable-key weight and "nothing left to evict"
//! flag, so any core can tell whether the process is out of memory.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Threads with a slot of their own; later ones share the last slot with
/// atomic adds (short-lived helper threads).
const SLOTS: usize = 256;
const SHARED: usize = SLOTS - 1;
/// Most shards whose slots and eviction state are tracked.
pub const MAX_SHARDS: usize = 1024;

#[repr(align(64))]
struct Slot(AtomicI64);

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: Slot = Slot(AtomicI64::new(0));
static COUNTERS: [Slot; SLOTS] = [ZERO; SLOTS];
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);
static SHARD_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Shards whose last eviction found nothing left to evict while over their
/// share (Redis's EVICT_FAIL): denyoom commands are refused.
static EVICT_FAILED: [AtomicBool; MAX_SHARDS] = [const { AtomicBool::new(false) }; MAX_SHARDS];
thread_local! {
    static MY_SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

#[inline]
fn my_slot() -> usize {
    MY_SLOT
        .try_with(|s| {
            let mut i = s.get();
            if i == usize::MAX {
                i = NEXT_SLOT.fetch_add(1, Relaxed).min(SHARED);
                s.set(i);
            }
            i
        })
        .unwrap_or(SHARED)
}

/// Called by the global allocator for every block: `delta` usable bytes.
/// Never allocates.
#[inline]
pub fn account(delta: i64) {
    let i = my_slot();
    let c = &COUNTERS[i].0;
    if i == SHARED {
        c.fetch_add(delta, Relaxed);
    } else {
        c.store(c.load(Relaxed) + delta, Relaxed);
    }
}

/// Net bytes allocated by the calling thread.
#[inline]
pub fn thread_used() -> i64 {
    COUNTERS[my_slot()].0.load(Relaxed)
}

/// The process's used memory: every thread's net allocations.
#[inline]
pub fn used() -> u64 {
    let n = NEXT_SLOT.load(Relaxed).min(SLOTS);
    let mut total: i64 = COUNTERS[..n].iter().map(|s| s.0.load(Relaxed)).sum();
    if n < SLOTS {
        total += COUNTERS[SHARED].0.load(Relaxed);
    }
    total.max(0) as u64
}

/// Records that the calling thread runs shard `index` (of `count`).
pub fn register_shard(index: usize, count: usize) {
    if index < MAX_SHARDS {
        SHARD_COUNT.fetch_max(count.min(MAX_SHARDS), Relaxed);
    }
}

/// Keys each shard may evict (all its keys, or those with a TTL under a
/// volatile policy), published by the shard as it checks the limit.
static SHARD_WEIGHT: [AtomicU64; MAX_SHARDS] = [const { AtomicU64::new(0) }; MAX_SHARDS];

pub fn set_weight(index: usize, evictable_keys: u64) {
    if index < MAX_SHARDS && SHARD_WEIGHT[index].load(Relaxed) != evictable_keys {
        SHARD_WEIGHT[index].store(evictable_keys, Relaxed);
    }
}

/// Shard `index`'s part of `excess`: in proportion to the keys it may evict
/// (threads' counters would not do: blocks freed on another core, such as
/// the mesh's batches, move bytes between them), among the shards that still
/// have something to evict (a shard with nothing left hands its part to the
/// others); at least an equal split's hundredth so every shard gives some.
pub fn share_of(index: usize, excess: u64) -> u64 {
    let count = SHARD_COUNT.load(Relaxed).clamp(1, MAX_SHARDS);
    if count == 1 || index >= MAX_SHARDS {
        return excess;
    }
    let evicting = |j: &usize| *j == index || !EVICT_FAILED[*j].load(Relaxed);
    let weight = |j: usize| SHARD_WEIGHT[j].load(Relaxed);
    let all: u64 = (0..count).filter(evicting).map(weight).sum();
    let mine = weight(index);
    let share = if all == 0 { excess / count as u64 } else { (excess as u128 * mine as u128 / all as u128) as u64 };
    share.max(excess / count as u64 / 100)
}

pub fn set_evict_failed(index: usize, failed: bool) {
    if index < MAX_SHARDS && EVICT_FAILED[index].load(Relaxed) != failed {
        EVICT_FAILED[index].store(failed, Relaxed);
    }
}

/// True when no shard has anything left to evict (Redis's EVICT_FAIL for
/// the process).
pub fn evict_failed() -> bool {
    let count = SHARD_COUNT.load(Relaxed).clamp(1, MAX_SHARDS);
    EVICT_FAILED[..count].iter().all(|f| f.load(Relaxed))
}

/// Each shard's memory left out of the comparison with `maxmemory`
/// (Redis's freeMemoryGetNotCountedMemory: its AOF buffer), published by
/// the shard as it checks the limit; INFO's mem_not_counted_for_evict.
static NOT_COUNTED: [AtomicU64; MAX_SHARDS] = [const { AtomicU64::new(0) }; MAX_SHARDS];

pub fn set_not_counted(index: usize, bytes: u64) {
    if index < MAX_SHARDS && NOT_COUNTED[index].load(Relaxed) != bytes {
        NOT_COUNTED[index].store(bytes, Relaxed);
    }
}

/// What `maxmemory` is compared with: used memory less what is not counted.
pub fn counted() -> u64 {
    let count = SHARD_COUNT.load(Relaxed).clamp(1, MAX_SHARDS);
    let not_counted: u64 = NOT_COUNTED[..count].iter().map(|n| n.load(Relaxed)).sum();
    used().saturating_sub(not_counted)
}

/// Redis's out-of-memory state for refusing `denyoom` commands: over
/// `maxmemory` and eviction cannot bring it back (noeviction, or no shard
/// with anything left to evict).
pub fn out_of_memory(maxmemory: u64, noeviction: bool) -> bool {
    maxmemory > 0 && counted() > maxmemory && (noeviction || evict_failed())
}

static RETURN_HOOK: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Installs the allocator's "return free pages to the OS now" for the
/// calling thread's heap (the binary owns the allocator).
pub fn set_return_hook(hook: fn()) {
    let _ = RETURN_HOOK.set(hook);
}

/// Returns the calling thread's free pages to the OS, when a hook is set.
pub fn return_to_os() {
    if let Some(hook) = RETURN_HOOK.get() {
        hook()
    }
}

static STARTUP: AtomicU64 = AtomicU64::new(0);
static LOADED_AT_START: AtomicI64 = AtomicI64::new(0);

/// What loading the dataset at start (dump, AOF) allocated on a core's
/// thread: not part of the start-up memory.
pub fn loaded_at_start(bytes: i64) {
    LOADED_AT_START.fetch_add(bytes, Relaxed);
}

/// Records used memory once every core is up and before any client
/// (INFO's used_memory_startup; Redis takes it before loading its data,
/// this subtracts what the load took).
pub fn mark_startup() {
    let startup = used() as i64 - LOADED_AT_START.load(Relaxed);
    let _ = STARTUP.compare_exchange(0, startup.max(1) as u64, Relaxed, Relaxed);
}

pub fn startup() -> u64 {
    STARTUP.load(Relaxed)
}

/// What the binary's allocator tells about itself (MEMORY USAGE, STATS,
/// MALLOC-STATS), installed once before the executors start.
pub struct Allocator {
    /// The usable size of a block asked for with `n` bytes (mimalloc's
    /// `mi_good_size`: the size class it would come from).
    pub good_size: fn(usize) -> usize,
    /// The calling thread's statistics as the allocator prints them.
    pub thread_stats: fn() -> String,
    /// The whole process's statistics as the allocator prints them.
    pub process_stats: fn() -> String,
    /// Bytes the allocator has committed from the OS (its active pages).
    pub committed: fn() -> u64,
}

static ALLOCATOR: std::sync::OnceLock<Allocator> = std::sync::OnceLock::new();

pub fn set_allocator(allocator: Allocator) {
    let _ = ALLOCATOR.set(allocator);
}

pub fn allocator() -> Option<&'static Allocator> {
    ALLOCATOR.get()
}

/// The bytes a heap block of `n` requested bytes really takes (`n` itself
/// when no allocator is installed, as in unit tests); 0 for no block.
pub fn block_size(n: usize) -> usize {
    match (n, ALLOCATOR.get()) {
        (0, _) => 0,
        (n, Some(a)) => (a.good_size)(n),
        (n, None) => n,
    }
}
