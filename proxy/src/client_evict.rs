//! `maxmemory-clients`: Redis 7.0's client eviction (networking.c's
//! evictClients, server.c's clientEvictionAllowed and
//! updateClientMemUsageAndBucket). Every normal and pubsub client's memory
//! (CLIENT LIST's tot-mem, its queued pushes included) is counted into its
//! core's total, no-evict clients' too; each core publishes its total and
//! its largest evictable client in `Process::client_memory`. While the
//! cores' totals together reach the limit, the largest evictable client
//! goes (the largest by Redis's memory buckets, powers of two, then by
//! bytes), closed by the core it is on: a core that sees another core hold
//! a larger one leaves it to that core, whose cron (at most `1/hz` later)
//! or next batch sees the same total. Counted after every batch and read
//! (so a query buffer growing for a big argument is seen as it grows),
//! before a write waits, and for every client in the cron.

use crate::clients::ClientInfo;
use crate::core::{ClientMemory, Core, CoreStats};
use crate::log;
use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Redis's getClientEvictionLimit: `maxmemory-clients` in bytes, or its
/// percentage of `maxmemory` (none without one), at least 128 KiB; 0: no
/// client eviction.
pub fn limit(core: &Core) -> u64 {
    let config = core.config();
    let bytes = match config.maxmemory_clients {
        0 => return 0,
        n if n < 0 => {
            if config.maxmemory == 0 {
                return 0;
            }
            (config.maxmemory as f64 * (-n) as f64 / 100.0) as u64
        }
        n => n as u64,
    };
    bytes.max(128 << 10)
}

/// Redis's CLIENT_MEM_USAGE_BUCKET_MIN_LOG and _MAX_LOG: a client's bucket
/// is its memory's bit length, within these.
fn bucket(mem: u64) -> u32 {
    (u64::BITS - mem.leading_zeros()).clamp(15, 33)
}

/// Whether a client's memory is counted (Redis's normal and pubsub types:
/// not a replica's link); a client being closed holds none (Redis frees
/// it at once).
fn counted(c: &ClientInfo) -> bool {
    !c.replica && !c.killed.get()
}

/// Redis's clientEvictionAllowed (with the limit on): counted and not
/// CLIENT NO-EVICT.
fn evictable(c: &ClientInfo) -> bool {
    counted(c) && !c.no_evict
}

/// A client's memory as eviction counts it.
fn memory(core: &Core, c: &ClientInfo) -> u64 {
    let pushes = core.push.get(c.id).map_or(0, |q| q.len());
    (c.total_memory() + pushes) as u64
}

fn gauge(core: &Core) -> &ClientMemory {
    &core.process.client_memory[core.index]
}

/// Client `key`'s memory counted again (after a batch, a read, before a
/// write waits), then clients evicted if the limit is reached.
pub fn recount(core: &Core, key: usize) {
    if limit(core) == 0 {
        return;
    }
    {
        let mut clients = core.clients.borrow_mut();
        let Some(c) = clients.list.get_mut(key) else { return };
        let mem = if counted(c) { memory(core, c) } else { 0 };
        let g = gauge(core);
        let total = g.total.load(Ordering::Relaxed).saturating_sub(c.counted_memory) + mem;
        g.total.store(total, Ordering::Relaxed);
        c.counted_memory = mem;
        if evictable(c) {
            g.largest.fetch_max(mem, Ordering::Relaxed);
        }
    }
    evict(core);
}

/// A client's registry entry goes: its memory is no longer counted.
pub fn forget(core: &Core, c: &ClientInfo) {
    let g = gauge(core);
    let total = g.total.load(Ordering::Relaxed).saturating_sub(c.counted_memory);
    g.total.store(total, Ordering::Relaxed);
}

/// The cron's part (Redis's clientsCron keeping every client's memory
/// counted): every client of this core counted again, its total and
/// largest evictable client published, then clients evicted if the limit
/// is reached.
pub fn cron(core: &Core) {
    if limit(core) == 0 {
        return;
    }
    let (mut total, mut largest) = (0, 0);
    {
        let mut clients = core.clients.borrow_mut();
        for (_, c) in clients.list.iter_mut() {
            let mem = if counted(c) { memory(core, c) } else { 0 };
            c.counted_memory = mem;
            total += mem;
            if evictable(c) {
                largest = largest.max(mem);
            }
        }
    }
    let g = gauge(core);
    g.total.store(total, Ordering::Relaxed);
    g.largest.store(largest, Ordering::Relaxed);
    evict(core);
}

thread_local! {
    /// When "Over client maxmemory..." was last logged by this core.
    static OVER_LOGGED: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Redis's evictClients: while all clients together hold the limit or
/// more, this core closes its largest evictable client, as long as no
/// other core holds a larger one (by bucket, then bytes; the lower core
/// on a tie). Logged as Redis does ("Evicting client: ..."), counted in
/// INFO stats' evicted_clients.
pub fn evict(core: &Core) {
    let limit = limit(core);
    if limit == 0 {
        return;
    }
    let all = &core.process.client_memory;
    let rank = |mem: u64| (bucket(mem), mem);
    let g = gauge(core);
    loop {
        let total: u64 = all.iter().map(|g| g.total.load(Ordering::Relaxed)).sum();
        if total < limit {
            return;
        }
        // What each core published decides who evicts; a core scans its
        // own clients only when it is the one.
        let own = g.largest.load(Ordering::Relaxed);
        let larger_elsewhere = all.iter().enumerate().any(|(i, other)| {
            let theirs = other.largest.load(Ordering::Relaxed);
            i != core.index && theirs > 0 && (rank(theirs) > rank(own) || (rank(theirs) == rank(own) && i < core.index))
        });
        if larger_elsewhere {
            return;
        }
        if own == 0 {
            let now = Instant::now();
            if OVER_LOGGED.get().is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1)) {
                OVER_LOGGED.set(Some(now));
                log::warning("Over client maxmemory after evicting all evictable clients");
            }
            return;
        }
        let mut clients = core.clients.borrow_mut();
        let mine = clients
            .list
            .iter()
            .filter(|(_, c)| evictable(c))
            .map(|(key, c)| (key, c.counted_memory))
            .max_by_key(|&(_, mem)| rank(mem));
        let Some((key, mem)) = mine.filter(|&(_, mem)| rank(mem) >= rank(own)) else {
            // What was published was larger than what is here now: the
            // choice again, with what is.
            g.largest.store(mine.map_or(0, |(_, mem)| mem), Ordering::Relaxed);
            continue;
        };
        let c = &mut clients.list[key];
        log::notice(&format!("Evicting client: {}", c.line(Instant::now())));
        c.counted_memory = 0;
        clients.kill(key);
        // The next largest of this core, for the others to see.
        let next = clients.list.iter().filter(|(_, c)| evictable(c)).map(|(_, c)| c.counted_memory).max();
        drop(clients);
        g.largest.store(next.unwrap_or(0), Ordering::Relaxed);
        g.total.store(g.total.load(Ordering::Relaxed).saturating_sub(mem), Ordering::Relaxed);
        CoreStats::add(&core.stats.evicted_clients, 1);
    }
}
