//! MEMORY STATS, DOCTOR, MALLOC-STATS, PURGE and HELP (USAGE runs on the
//! key's owner: shard/src/commands/memory.rs). The figures are corekv's
//! own: used memory as the allocator counts it (every core's blocks at
//! their usable sizes, as INFO memory), each database's table, clients'
//! buffers, the replication stream, the AOF buffers and the script caches,
//! gathered from every core; the allocator's committed bytes and the
//! process's RSS. Field names, order and report wording are Redis 7.0's
//! (object.c).

use super::debug::help_reply;
use super::reply::reply;
use crate::coordinator::dispatch::{call, call_all};
use crate::session::Connection;
use shard::commands::zset::reply_score;
use shard::memory;
use std::sync::atomic::Ordering::Relaxed;

/// One core's part of MEMORY STATS.
struct CoreMemory {
    /// (keys, keys with a TTL, table bytes) per database.
    dbs: Vec<(usize, usize, usize)>,
    /// Normal clients' memory (Redis's clients.normal) and their number.
    clients: (u64, u64),
    aof_buffer: u64,
    scripts: crate::scripting::Usage,
}

fn core_memory(c: &crate::core::Core) -> CoreMemory {
    let shard = c.shard.borrow();
    let clients = c.clients.borrow();
    let normal = clients.list.iter().filter(|(_, ci)| !ci.replica);
    let (bytes, count) = normal.fold((0u64, 0u64), |(b, n), (_, ci)| (b + ci.total_memory() as u64, n + 1));
    CoreMemory {
        dbs: shard::commands::memory::db_overheads(&shard),
        clients: (bytes, count),
        aof_buffer: shard.effects.as_ref().map_or(0, |e| e.buf.capacity() as u64),
        scripts: crate::scripting::usage(),
    }
}

/// Redis's struct redisMemOverhead, from corekv's figures.
struct Overhead {
    peak: u64,
    total: u64,
    startup: u64,
    backlog: u64,
    replicas: u64,
    replica_count: u64,
    clients: u64,
    client_count: u64,
    aof: u64,
    lua: u64,
    functions: u64,
    cached_scripts: usize,
    /// (db, main table, expires) for each database holding keys.
    dbs: Vec<(usize, u64, u64)>,
    overhead: u64,
    keys: u64,
    bytes_per_key: u64,
    dataset: u64,
    dataset_perc: f32,
    peak_perc: f32,
    allocated: u64,
    active: u64,
    resident: u64,
    rss: u64,
}

impl Overhead {
    fn ratio(a: u64, b: u64) -> f32 {
        a as f32 / b as f32
    }
    fn allocator_frag(&self) -> (f32, i64) {
        (Self::ratio(self.active, self.allocated), self.active as i64 - self.allocated as i64)
    }
    fn allocator_rss(&self) -> (f32, i64) {
        (Self::ratio(self.resident, self.active), self.resident as i64 - self.active as i64)
    }
    fn rss_extra(&self) -> (f32, i64) {
        (Self::ratio(self.rss, self.resident), self.rss as i64 - self.resident as i64)
    }
    fn total_frag(&self) -> (f32, i64) {
        (Self::ratio(self.rss, self.total), self.rss as i64 - self.total as i64)
    }
}

async fn overhead(conn: &Connection) -> Overhead {
    let cores: Vec<CoreMemory> = call_all(&conn.core, |c| core_memory(c)).await.into_iter().flatten().collect();
    let backlog_size = conn.core.config().repl_backlog_size;
    // The replication stream, on core 0: Redis's rule splits it into the
    // backlog and what replicas hold beyond it.
    let (backlog, replicas, replica_count) = call(&conn.core, crate::replication::hub::HUB, move |c| {
        let primary = c.repl.primary.borrow();
        let Some(p) = primary.as_ref() else { return (0, 0, 0) };
        let held = p.backlog.held();
        let n = p.replicas.len() as u64;
        match n > 0 && held > backlog_size {
            true => (backlog_size, held - backlog_size, n),
            false => (held, 0, n),
        }
    })
    .await
    .unwrap_or_default();
    let p = &conn.core.process;
    let total = memory::used();
    let peak = p.memory_peak.fetch_max(total, Relaxed).max(total);
    let startup = memory::startup();
    // Scripts and functions are on every core: counted once, from the
    // core that holds the most (as INFO memory does).
    let first = cores.iter().map(|c| c.scripts).max_by_key(|u| (u.cached_scripts, u.libraries)).unwrap_or_default();
    let databases = cores.iter().map(|c| c.dbs.len()).max().unwrap_or(0);
    let mut dbs = Vec::new();
    let mut keys = 0u64;
    for db in 0..databases {
        let (n, main) = cores
            .iter()
            .filter_map(|c| c.dbs.get(db))
            .fold((0u64, 0u64), |(n, m), &(k, _, bytes)| (n + k as u64, m + if k > 0 { bytes as u64 } else { 0 }));
        if n > 0 {
            keys += n;
            // Expiry times live in the entries: no table of their own.
            dbs.push((db, main, 0));
        }
    }
    let clients: u64 = cores.iter().map(|c| c.clients.0).sum();
    let client_count: u64 = cores.iter().map(|c| c.clients.1).sum();
    let aof: u64 = cores.iter().map(|c| c.aof_buffer).sum();
    let overhead = startup
        + backlog
        + replicas
        + clients
        + aof
        + first.scripts_eval
        + first.functions_bytes
        + dbs.iter().map(|d| d.1 + d.2).sum::<u64>();
    let net = if total > startup { total - startup } else { 1 };
    let dataset = total.saturating_sub(overhead);
    let committed = memory::allocator().map_or(total, |a| (a.committed)());
    Overhead {
        peak,
        total,
        startup,
        backlog,
        replicas,
        replica_count,
        clients,
        client_count,
        aof,
        lua: first.scripts_eval,
        functions: first.functions_bytes,
        cached_scripts: first.cached_scripts,
        dbs,
        overhead,
        keys,
        bytes_per_key: net.checked_div(keys).unwrap_or(0),
        dataset,
        dataset_perc: dataset as f32 * 100.0 / net as f32,
        peak_perc: total as f32 * 100.0 / peak.max(1) as f32,
        allocated: total,
        // mimalloc reports the pages it has committed: they stand for both
        // its active and its resident bytes.
        active: committed,
        resident: committed,
        rss: (p.memory)().rss,
    }
}

pub async fn stats(conn: &mut Connection) {
    let m = overhead(conn).await;
    reply(conn, |r| {
        let int = |r: &mut shard::Reply, name: &str, v: i64| {
            r.bulk(name.as_bytes());
            r.int(v);
        };
        let double = |r: &mut shard::Reply, name: &str, v: f32| {
            r.bulk(name.as_bytes());
            reply_score(r, v as f64);
        };
        r.map(27 + m.dbs.len());
        int(r, "peak.allocated", m.peak as i64);
        int(r, "total.allocated", m.total as i64);
        int(r, "startup.allocated", m.startup as i64);
        int(r, "replication.backlog", m.backlog as i64);
        int(r, "clients.slaves", m.replicas as i64);
        int(r, "clients.normal", m.clients as i64);
        int(r, "cluster.links", 0);
        int(r, "aof.buffer", m.aof as i64);
        int(r, "lua.caches", m.lua as i64);
        int(r, "functions.caches", m.functions as i64);
        for &(db, main, expires) in &m.dbs {
            r.bulk(format!("db.{db}").as_bytes());
            r.map(3);
            int(r, "overhead.hashtable.main", main as i64);
            int(r, "overhead.hashtable.expires", expires as i64);
            // No slot-to-keys map: CLUSTER GETKEYSINSLOT walks the table.
            int(r, "overhead.hashtable.slot-to-keys", 0);
        }
        int(r, "overhead.total", m.overhead as i64);
        int(r, "keys.count", m.keys as i64);
        int(r, "keys.bytes-per-key", m.bytes_per_key as i64);
        int(r, "dataset.bytes", m.dataset as i64);
        double(r, "dataset.percentage", m.dataset_perc);
        double(r, "peak.percentage", m.peak_perc);
        int(r, "allocator.allocated", m.allocated as i64);
        int(r, "allocator.active", m.active as i64);
        int(r, "allocator.resident", m.resident as i64);
        let (ratio, bytes) = m.allocator_frag();
        double(r, "allocator-fragmentation.ratio", ratio);
        int(r, "allocator-fragmentation.bytes", bytes);
        let (ratio, bytes) = m.allocator_rss();
        double(r, "allocator-rss.ratio", ratio);
        int(r, "allocator-rss.bytes", bytes);
        let (ratio, bytes) = m.rss_extra();
        double(r, "rss-overhead.ratio", ratio);
        int(r, "rss-overhead.bytes", bytes);
        let (ratio, bytes) = m.total_frag();
        double(r, "fragmentation", ratio);
        int(r, "fragmentation.bytes", bytes);
    });
}

/// Redis's getMemoryDoctorReport, on corekv's figures.
fn doctor_report(m: &Overhead) -> String {
    const MB10: i64 = 10 << 20;
    if m.total < 5 << 20 {
        return "Hi Sam, this instance is empty or is using very little memory, my issues detector can't be used in these conditions. Please, leave for your mission on Earth and fill it with some data. The new Sam and I will be back to our programming as soon as I finished rebooting.\n".into();
    }
    let over = |(ratio, bytes): (f32, i64), limit: f32| ratio > limit && bytes > MB10;
    let big_peak = m.peak as f32 / m.total as f32 > 1.5;
    let high_frag = over(m.total_frag(), 1.4);
    let high_alloc_frag = over(m.allocator_frag(), 1.1);
    let high_alloc_rss = over(m.allocator_rss(), 1.1);
    let high_proc_rss = over(m.rss_extra(), 1.1);
    let big_client_buf = m.clients / m.client_count.max(1) > 1024 * 200;
    let big_slave_buf = m.replica_count > 0 && m.replicas > 1024 * 1024 * 10;
    let many_scripts = m.cached_scripts > 1000;
    let issues = [
        big_peak,
        high_frag,
        high_alloc_frag,
        high_alloc_rss,
        high_proc_rss,
        big_slave_buf,
        big_client_buf,
        many_scripts,
    ];
    if !issues.iter().any(|&b| b) {
        return "Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base.\n".into();
    }
    let mut s = String::from("Sam, I detected a few issues in this Redis instance memory implants:\n\n");
    if big_peak {
        s += " * Peak memory: In the past this instance used more than 150% the memory that is currently using. The allocator is normally not able to release memory after a peak, so you can expect to see a big fragmentation ratio, however this is actually harmless and is only due to the memory peak, and if the Redis instance Resident Set Size (RSS) is currently bigger than expected, the memory will be used as soon as you fill the Redis instance with more data. If the memory peak was only occasional and you want to try to reclaim memory, please try the MEMORY PURGE command, otherwise the only other option is to shutdown and restart the instance.\n\n";
    }
    if high_frag {
        s += " * High total RSS: This instance has a memory fragmentation and RSS overhead greater than 1.4 (this means that the Resident Set Size of the Redis process is much larger than the sum of the logical allocations Redis performed). This problem is usually due either to a large peak memory (check if there is a peak memory entry above in the report) or may result from a workload that causes the allocator to fragment memory a lot. If the problem is a large peak memory, then there is no issue. Otherwise, make sure you are using the Jemalloc allocator and not the default libc malloc. Note: The currently used allocator is \"mimalloc\".\n\n";
    }
    if high_alloc_frag {
        s += " * High allocator fragmentation: This instance has an allocator external fragmentation greater than 1.1. This problem is usually due either to a large peak memory (check if there is a peak memory entry above in the report) or may result from a workload that causes the allocator to fragment memory a lot. You can try enabling 'activedefrag' config option.\n\n";
    }
    if high_alloc_rss {
        s += " * High allocator RSS overhead: This instance has an RSS memory overhead is greater than 1.1 (this means that the Resident Set Size of the allocator is much larger than the sum what the allocator actually holds). This problem is usually due to a large peak memory (check if there is a peak memory entry above in the report), you can try the MEMORY PURGE command to reclaim it.\n\n";
    }
    if high_proc_rss {
        s += " * High process RSS overhead: This instance has non-allocator RSS memory overhead is greater than 1.1 (this means that the Resident Set Size of the Redis process is much larger than the RSS the allocator holds). This problem may be due to Lua scripts or Modules.\n\n";
    }
    if big_slave_buf {
        s += " * Big replica buffers: The replica output buffers in this instance are greater than 10MB for each replica (on average). This likely means that there is some replica instance that is struggling receiving data, either because it is too slow or because of networking issues. As a result, data piles on the master output buffers. Please try to identify what replica is not receiving data correctly and why. You can use the INFO output in order to check the replicas delays and the CLIENT LIST command to check the output buffers of each replica.\n\n";
    }
    if big_client_buf {
        s += " * Big client buffers: The clients output buffers in this instance are greater than 200K per client (on average). This may result from different causes, like Pub/Sub clients subscribed to channels bot not receiving data fast enough, so that data piles on the Redis instance output buffer, or clients sending commands with large replies or very large sequences of commands in the same pipeline. Please use the CLIENT LIST command in order to investigate the issue if it causes problems in your instance, or to understand better why certain clients are using a big amount of memory.\n\n";
    }
    if many_scripts {
        s += " * Many scripts: There seem to be many cached scripts in this instance (more than 1000). This may be because scripts are generated and `EVAL`ed, instead of being parameterized (with KEYS and ARGV), `SCRIPT LOAD`ed and `EVALSHA`ed. Unless `SCRIPT FLUSH` is called periodically, the scripts' caches may end up consuming most of your memory.\n\n";
    }
    s += "I'm here to keep you safe, Sam. I want to help you.\n";
    s
}

pub async fn doctor(conn: &mut Connection) {
    let report = doctor_report(&overhead(conn).await);
    reply(conn, |r| r.verbatim(report.as_bytes()));
}

/// mimalloc's own statistics text: each core's heap, then the process's.
pub async fn malloc_stats(conn: &mut Connection) {
    let Some(allocator) = memory::allocator() else {
        return reply(conn, |r| r.bulk(b"Stats not supported for the current allocator"));
    };
    let parts = call_all(&conn.core, move |c| (c.index, (allocator.thread_stats)())).await;
    let mut text = String::new();
    for (index, stats) in parts.into_iter().flatten() {
        text += &format!("### shard {index} (its thread's heap)\n{stats}\n");
    }
    text += &format!("### process\n{}", (allocator.process_stats)());
    reply(conn, |r| r.verbatim(text.as_bytes()));
}

/// MEMORY PURGE: every core gives its heap's free pages back to the OS.
pub async fn purge(conn: &mut Connection) {
    call_all(&conn.core, |_| memory::return_to_os()).await;
    reply(conn, |r| r.ok());
}

pub fn help(conn: &mut Connection, command: &[u8]) {
    help_reply(
        conn,
        command,
        &[
            "DOCTOR",
            "    Return memory problems reports.",
            "MALLOC-STATS",
            "    Return internal statistics report from the memory allocator.",
            "PURGE",
            "    Attempt to purge dirty pages for reclamation by the allocator.",
            "STATS",
            "    Return information about the memory usage of the server.",
            "USAGE <key> [SAMPLES <count>]",
            "    Return memory in bytes used by <key> and its value. Nested values are",
            "    sampled up to <count> times (default: 5, 0 means sample all).",
        ],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(total: u64, peak: u64) -> Overhead {
        Overhead {
            peak,
            total,
            startup: 1 << 20,
            backlog: 0,
            replicas: 0,
            replica_count: 0,
            clients: 2048,
            client_count: 1,
            aof: 0,
            lua: 0,
            functions: 0,
            cached_scripts: 0,
            dbs: Vec::new(),
            overhead: 1 << 20,
            keys: 0,
            bytes_per_key: 0,
            dataset: 0,
            dataset_perc: 0.0,
            peak_perc: 0.0,
            allocated: total,
            active: total,
            resident: total,
            rss: total,
        }
    }

    #[test]
    fn doctor_speaks_as_redis() {
        assert!(doctor_report(&figures(1 << 20, 1 << 20)).starts_with("Hi Sam, this instance is empty"));
        assert!(doctor_report(&figures(100 << 20, 100 << 20)).starts_with("Hi Sam, I can't find any memory issue"));
        let peak = doctor_report(&figures(100 << 20, 400 << 20));
        assert!(peak.starts_with("Sam, I detected a few issues"));
        assert!(peak.contains(" * Peak memory:"));
        assert!(peak.ends_with("I'm here to keep you safe, Sam. I want to help you.\n"));
    }
}
