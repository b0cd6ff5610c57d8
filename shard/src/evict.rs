//! `maxmemory` and eviction, as Redis's evict.c: approximated LRU / LFU with a
//! pool of the best candidates among sampled keys, random eviction, and
//! volatile-ttl. Each shard evicts its own keys; used memory is the whole
//! process's (`memory::used`), and a shard over the limit frees its share of
//! the excess, weighted by what its thread holds (ARCHITECTURE.md, "Memory").

use crate::bytes::CompactBytes;
use crate::memory;
use crate::shard::Shard;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    VolatileLru,
    VolatileLfu,
    VolatileRandom,
    VolatileTtl,
    AllkeysLru,
    AllkeysLfu,
    AllkeysRandom,
    NoEviction,
}

const POLICIES: [Policy; 8] = [
    Policy::VolatileLru,
    Policy::VolatileLfu,
    Policy::VolatileRandom,
    Policy::VolatileTtl,
    Policy::AllkeysLru,
    Policy::AllkeysLfu,
    Policy::AllkeysRandom,
    Policy::NoEviction,
];

impl Policy {
    /// Redis's order, as its CONFIG SET error lists them.
    pub const NAMES: [&'static str; 8] = [
        "volatile-lru",
        "volatile-lfu",
        "volatile-random",
        "volatile-ttl",
        "allkeys-lru",
        "allkeys-lfu",
        "allkeys-random",
        "noeviction",
    ];

    pub fn name(self) -> &'static str {
        Self::NAMES[POLICIES.iter().position(|&p| p == self).unwrap_or(7)]
    }

    pub fn parse(name: &str) -> Option<Policy> {
        Self::NAMES.iter().position(|n| n.eq_ignore_ascii_case(name)).map(|i| POLICIES[i])
    }

    /// The entry's access field holds LFU data (else the LRU clock).
    pub fn is_lfu(self) -> bool {
        matches!(self, Policy::VolatileLfu | Policy::AllkeysLfu)
    }

    /// Redis's MAXMEMORY_FLAG_LRU: saved keys carry their idle time.
    pub fn is_lru(self) -> bool {
        matches!(self, Policy::VolatileLru | Policy::AllkeysLru)
    }

    fn volatile_only(self) -> bool {
        matches!(self, Policy::VolatileLru | Policy::VolatileLfu | Policy::VolatileRandom | Policy::VolatileTtl)
    }

    fn random(self) -> bool {
        matches!(self, Policy::VolatileRandom | Policy::AllkeysRandom)
    }
}

/// LFU parameters a database needs on every access.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lfu {
    pub log_factor: u32,
    pub decay_time: u32,
}

/// Redis's LFU_INIT_VAL: new keys start here so they are not evicted first.
pub const LFU_INIT_VAL: u32 = 5;

/// Redis's 16-bit LFU clock: minutes, wrapping.
fn lfu_minutes(now_ms: u64) -> u32 {
    ((now_ms / 60_000) & 0xffff) as u32
}

/// LFU data of a new key: this minute, the initial counter.
pub fn lfu_new(now_ms: u64) -> u32 {
    (lfu_minutes(now_ms) << 8) | LFU_INIT_VAL
}

/// The counter after decay (`LFUDecrAndReturn`): one step down per
/// `decay_time` minutes since the last decrement time.
pub fn lfu_counter(access: u32, now_ms: u64, decay_time: u32) -> u32 {
    let (ldt, counter) = (access >> 8 & 0xffff, access & 0xff);
    let now = lfu_minutes(now_ms);
    let elapsed = if now >= ldt { now - ldt } else { 65535 - ldt + now };
    let periods = elapsed.checked_div(decay_time).unwrap_or(0);
    counter.saturating_sub(periods)
}

/// One access (`updateLFU`): decay, then a logarithmic increment with
/// probability 1 / ((counter - LFU_INIT_VAL) * log_factor + 1).
pub fn lfu_touch(access: u32, now_ms: u64, lfu: Lfu, random: u64) -> u32 {
    let mut counter = lfu_counter(access, now_ms, lfu.decay_time);
    if counter < 255 {
        let base = counter.saturating_sub(LFU_INIT_VAL) as f64;
        let p = 1.0 / (base * lfu.log_factor as f64 + 1.0);
        let r = (random >> 11) as f64 / (1u64 << 53) as f64;
        if r < p {
            counter += 1;
        }
    }
    (lfu_minutes(now_ms) << 8) | counter
}

/// Redis's EVPOOL_SIZE.
const POOL_SIZE: usize = 16;

struct Candidate {
    /// Higher goes first: idle seconds, 255 - frequency, or the time left
    /// before expiry turned around.
    score: u64,
    db: usize,
    key: CompactBytes,
}

/// Eviction state of one shard.
#[derive(Default)]
pub struct Eviction {
    /// Best candidates seen so far, lowest score first (evictionPoolPopulate).
    pool: Vec<Candidate>,
    /// Where random eviction and sampling start their round over databases.
    next_db: usize,
    pub evicted_keys: u64,
    /// Bytes this shard's writes added while over the limit, not yet paid
    /// back by evicting.
    debt: i64,
    /// The process's used memory at its highest since this core last
    /// returned pages to the OS, at the last tick, and ticks since it last
    /// grew (see `memory_returned`).
    high_used: u64,
    last_used: u64,
    quiet_ticks: u32,
}

/// What `perform_evictions` achieved (Redis's EVICT_OK/RUNNING/FAIL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Under the limit, or freed this shard's share.
    Ok,
    /// Stopped at the time limit; the cron goes on.
    Running,
    /// Over the limit with nothing this policy may evict.
    Fail,
}

/// `maxmemory-eviction-tenacity` as a time limit per call (Redis's
/// evictionTimeLimitUs): linear 0..500 µs up to 10, then +15% a step; 100: none.
fn time_limit(tenacity: u64) -> Option<Duration> {
    match tenacity {
        0..=10 => Some(Duration::from_micros(50 * tenacity)),
        11..=99 => Some(Duration::from_micros((500.0 * 1.15f64.powi(tenacity as i32 - 10)) as u64)),
        _ => None,
    }
}

impl Shard {
    /// Copies what databases need of the eviction settings (after start and
    /// every CONFIG SET).
    pub fn apply_config(&mut self) {
        let lfu = self.config.maxmemory_policy.is_lfu().then_some(Lfu {
            log_factor: self.config.lfu_log_factor.min(u32::MAX as u64) as u32,
            decay_time: self.config.lfu_decay_time.min(u32::MAX as u64) as u32,
        });
        for db in &mut self.dbs {
            db.lfu = lfu;
        }
        if self.config.maxmemory == 0 {
            memory::set_evict_failed(self.index, false);
        }
        self.apply_notify_config();
    }

    /// Before a write: while used memory is over `maxmemory`, evicts what
    /// this shard's own writes added since its last eviction (one branch
    /// when there is no limit). Each shard pays for its own writes, so a
    /// shard called often (the connection's) does not evict for others
    /// whose batches have not run yet.
    #[inline]
    pub fn make_room(&mut self, now: u64) -> Outcome {
        if self.config.maxmemory == 0 {
            return Outcome::Ok;
        }
        let debt = self.eviction.debt.max(0) as u64;
        self.evict(now, debt)
    }

    /// The cron's call: also this shard's part of any excess left (memory
    /// that no write added: buffers, a lowered limit), by its share of the
    /// evictable keys; and an eviction cut short by its time limit goes on.
    pub fn perform_evictions(&mut self, now: u64) -> Outcome {
        let max = self.config.maxmemory;
        let excess = memory::counted().saturating_sub(max);
        let share = if max == 0 { 0 } else { memory::share_of(self.index, excess) };
        let debt = self.eviction.debt.max(0) as u64;
        self.evict(now, debt.max(share))
    }

    /// Called after a write ran on this shard: what it added, while over
    /// the limit, is owed to eviction.
    #[inline]
    pub(crate) fn owe(&mut self, bytes: i64) {
        if bytes > 0 {
            self.eviction.debt += bytes;
        }
    }

    /// Redis's performEvictions for this shard: frees keys by the policy
    /// until `to_free` bytes are freed or used memory is back under the
    /// limit, the time limit passes (the cron goes on) or nothing is left to
    /// evict.
    fn evict(&mut self, now: u64, to_free: u64) -> Outcome {
        let (max, policy) = (self.config.maxmemory, self.config.maxmemory_policy);
        let volatile = policy.volatile_only();
        let evictable = self.dbs.iter().map(|d| if volatile { d.volatile() } else { d.len() }).sum::<usize>();
        memory::set_weight(self.index, evictable as u64);
        memory::set_not_counted(self.index, self.effects.as_ref().map_or(0, |e| e.buf.capacity() as u64));
        if max == 0 || memory::counted() <= max {
            self.eviction.debt = 0;
            memory::set_evict_failed(self.index, false);
            return Outcome::Ok;
        }
        if policy == Policy::NoEviction {
            self.eviction.debt = 0;
            return Outcome::Fail;
        }
        if to_free == 0 {
            return Outcome::Ok;
        }
        let start = memory::thread_used();
        let started = Instant::now();
        let limit = time_limit(self.config.maxmemory_eviction_tenacity);
        let mut evicted = 0u64;
        let outcome = loop {
            if start - memory::thread_used() >= to_free as i64 || memory::counted() <= max {
                break Outcome::Ok;
            }
            let Some((db, key)) = self.pick_victim(now) else {
                break Outcome::Fail;
            };
            let threshold = self.config.latency_monitor_threshold;
            let deleting = (threshold != 0).then(Instant::now);
            self.evict_key(db, &key, now);
            if let Some(t) = deleting {
                self.observe.latency.add_if_needed(threshold, "eviction-del", t.elapsed().as_millis() as u64);
            }
            evicted += 1;
            if evicted.is_multiple_of(16) && limit.is_some_and(|l| started.elapsed() >= l) {
                break Outcome::Running;
            }
        };
        let freed = start - memory::thread_used();
        let threshold = self.config.latency_monitor_threshold;
        self.observe.latency.add_if_needed(threshold, "eviction-cycle", started.elapsed().as_millis() as u64);
        self.eviction.debt = if outcome == Outcome::Ok { 0 } else { (self.eviction.debt - freed).max(0) };
        if evicted > 0 {
            self.log_expired_keys();
        }
        memory::set_evict_failed(self.index, outcome == Outcome::Fail);
        outcome
    }

    fn evict_key(&mut self, db: usize, key: &[u8], now: u64) {
        let d = &mut self.dbs[db];
        if let Some(entry) = d.remove(key, now) {
            if d.log_expired {
                d.expired_log.push(entry.key);
            }
            self.eviction.evicted_keys += 1;
            self.notify(crate::notify::EVICTED, "evicted", db, key);
            // Redis's performEvictions signals the key as modified, ahead
            // of the command it makes room for.
            let current = self.caller.id();
            if let Some(table) = &mut self.tracking {
                table.evicted(key, current);
            }
        }
    }

    /// The next key to evict under the policy, if any.
    fn pick_victim(&mut self, now: u64) -> Option<(usize, CompactBytes)> {
        let policy = self.config.maxmemory_policy;
        let volatile = policy.volatile_only();
        let n = self.dbs.len();
        if policy.random() {
            for _ in 0..n {
                let db = self.eviction.next_db % n;
                self.eviction.next_db += 1;
                let d = &self.dbs[db];
                if d.is_empty() || (volatile && d.volatile() == 0) {
                    continue;
                }
                let mut found = None;
                let mut rng = self.rng;
                self.dbs[db].table.sample(
                    || xorshift(&mut rng),
                    1,
                    64,
                    |e| !volatile || e.expire_at().is_some(),
                    |e| found = Some(e.key.clone()),
                );
                self.rng = rng;
                if let Some(key) = found {
                    return Some((db, key));
                }
            }
            return None;
        }
        loop {
            self.populate_pool(now);
            let best = self.eviction.pool.pop()?;
            // The key may be gone since it was sampled.
            if self.dbs[best.db].has_entry(&best.key) {
                return Some((best.db, best.key));
            }
        }
    }

    /// Samples `maxmemory-samples` keys of each database into the pool
    /// (evictionPoolPopulate).
    fn populate_pool(&mut self, now: u64) {
        let policy = self.config.maxmemory_policy;
        let volatile = policy.volatile_only();
        let samples = self.config.maxmemory_samples as usize;
        let decay = self.config.lfu_decay_time as u32;
        let mut rng = self.rng;
        let pool = &mut self.eviction.pool;
        for (i, d) in self.dbs.iter().enumerate() {
            if d.is_empty() || (volatile && d.volatile() == 0) {
                continue;
            }
            d.table.sample(
                || xorshift(&mut rng),
                samples,
                samples * 16,
                |e| !volatile || e.expire_at().is_some(),
                |e| {
                    let score = match policy {
                        Policy::VolatileTtl => u64::MAX - e.expire_at().unwrap_or(u64::MAX),
                        p if p.is_lfu() => 255 - lfu_counter(e.access(), now, decay) as u64,
                        _ => e.idle_seconds(now),
                    };
                    insert(pool, score, i, &e.key);
                },
            );
        }
        self.rng = rng;
    }

    /// Keys evicted since the stats were reset.
    pub fn evicted_keys(&self) -> u64 {
        self.eviction.evicted_keys
    }

    /// True once the process's used memory fell by `threshold` from its
    /// high point and stayed down (no growth) for three cron ticks: then
    /// every core returns its free pages to the OS (mimalloc does so on
    /// later traffic of the thread that owns them: an idle core would keep
    /// them), whichever core freed the blocks. A busy server, whose memory
    /// goes up and down, keeps its pages for reuse.
    pub fn memory_returned(&mut self, threshold: u64) -> bool {
        let now = memory::used();
        let e = &mut self.eviction;
        let grew = now > e.last_used;
        e.last_used = now;
        if now >= e.high_used {
            e.high_used = now;
            e.quiet_ticks = 0;
            return false;
        }
        e.quiet_ticks = if grew { 0 } else { e.quiet_ticks + 1 };
        if e.high_used - now < threshold || e.quiet_ticks < 3 {
            return false;
        }
        e.high_used = now;
        e.quiet_ticks = 0;
        true
    }
}

fn insert(pool: &mut Vec<Candidate>, score: u64, db: usize, key: &[u8]) {
    if pool.iter().any(|c| c.db == db && *c.key == *key) {
        return;
    }
    let k = pool.iter().position(|c| c.score >= score).unwrap_or(pool.len());
    if pool.len() < POOL_SIZE {
        pool.insert(k, Candidate { score, db, key: CompactBytes::new(key) });
    } else if k > 0 {
        // Full: the worst candidate (the first) makes room.
        pool.remove(0);
        pool.insert(k - 1, Candidate { score, db, key: CompactBytes::new(key) });
    }
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lfu_counter_grows_logarithmically_and_decays() {
        let lfu = Lfu { log_factor: 10, decay_time: 1 };
        let mut a = lfu_new(0);
        let mut rng = 7u64;
        for _ in 0..1000 {
            a = lfu_touch(a, 0, lfu, xorshift(&mut rng));
        }
        let c = lfu_counter(a, 0, 1);
        assert!((15..40).contains(&c), "{c}");
        // Ten minutes later: ten steps down.
        assert_eq!(lfu_counter(a, 600_000, 1), c - 10);
        assert_eq!(lfu_counter(a, 600_000, 0), c);
    }

    #[test]
    fn policies_by_name() {
        for name in Policy::NAMES {
            assert_eq!(Policy::parse(name).unwrap().name(), name);
        }
        assert_eq!(time_limit(10), Some(Duration::from_micros(500)));
        assert_eq!(time_limit(100), None);
    }
}
