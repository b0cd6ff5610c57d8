//! Server commands: INFO, CONFIG, SHUTDOWN.

use super::reply::{help, reply};
use crate::coordinator::dispatch::call_all;
use crate::core::Core;
use crate::log;
use crate::persistence;
use crate::session::Connection;
use crate::tls;
use shard::config::find_param;
use shard::reply::errors::SYNTAX;
use shard::Args;
use std::fmt::Write;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What one core contributes to INFO.
#[derive(Clone, Default)]
pub struct CoreReport {
    pub index: usize,
    /// (keys, keys with a TTL) per database.
    pub keyspace: Vec<(usize, usize)>,
    pub commands: u64,
    pub shard_commands: u64,
    pub hits: u64,
    pub misses: u64,
    pub lazyfreed: u64,
    pub expired: u64,
    pub clients: usize,
    pub connections_received: u64,
    pub rejected: u64,
    pub net_in: u64,
    pub net_out: u64,
    pub hops_sent: u64,
    pub remote_commands: u64,
    pub batches_served: u64,
    pub ops_per_sec: u64,
    pub cpu_user: f64,
    pub cpu_sys: f64,
    pub evicted: u64,
    pub evicted_clients: u64,
    /// Effects waiting for the AOF writer (Redis leaves its AOF buffer out
    /// of eviction's count).
    pub aof_buffer: u64,
    pub blocked: u64,
    /// The largest query buffer and pending output of this core's clients.
    pub max_input_buffer: usize,
    pub max_output_buffer: usize,
    /// This shard's AOF figures (`None` when the AOF is off).
    pub aof: Option<crate::persistence::aof::AofStats>,
    /// Writes since the last save.
    pub dirty: u64,
    /// (keys written, keys at the cut) of a running snapshot.
    pub save_keys: (u64, u64),
    pub scripts: crate::scripting::Usage,
    /// Channels, patterns and shard channels with subscribers here that no
    /// lower core has (summed: the distinct names of the server).
    pub pubsub: [usize; 3],
    /// MIGRATE's cached connections on this core.
    pub migrate_sockets: usize,
    /// CLIENT TRACKING: (clients here, keys, items, prefixes of this shard).
    pub tracking: (u64, u64, u64, u64),
    /// Calls, errors (INFO commandstats, errorstats, stats).
    pub observe: shard::observe::Counters,
}

fn thread_cpu() -> (f64, f64) {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (t(ru.ru_utime), t(ru.ru_stime))
}

pub fn report(core: &Rc<Core>) -> CoreReport {
    let shard = core.shard.borrow();
    let s = &core.stats;
    let (cpu_user, cpu_sys) = thread_cpu();
    CoreReport {
        index: core.index,
        keyspace: shard.dbs.iter().map(|d| (d.len(), d.volatile())).collect(),
        commands: s.commands.get(),
        shard_commands: shard.stats.commands,
        hits: shard.stats.keyspace_hits,
        misses: shard.stats.keyspace_misses,
        lazyfreed: shard.stats.lazyfreed,
        expired: shard.expired_keys(),
        clients: core.clients.borrow().list.len(),
        connections_received: s.connections_received.get(),
        rejected: s.rejected_connections.get(),
        net_in: s.net_input_bytes.get(),
        net_out: s.net_output_bytes.get(),
        hops_sent: s.hops_sent.get(),
        remote_commands: s.remote_commands.get(),
        batches_served: shard.stats.remote_batches,
        ops_per_sec: s.ops_samples.borrow().per_second(),
        cpu_user,
        cpu_sys,
        evicted: shard.evicted_keys(),
        evicted_clients: s.evicted_clients.get(),
        aof_buffer: shard.effects.as_ref().map_or(0, |e| e.buf.capacity() as u64),
        blocked: core.blocked_here.get(),
        max_input_buffer: core.clients.borrow().list.iter().map(|(_, c)| c.qbuf + c.qbuf_free).max().unwrap_or(0),
        max_output_buffer: core.clients.borrow().list.iter().map(|(_, c)| c.output_memory()).max().unwrap_or(0),
        aof: core.aof.enabled.get().then(|| core.aof.stats.borrow().clone()),
        dirty: shard.dirty,
        save_keys: shard.snapshot_progress(),
        scripts: crate::scripting::usage(),
        pubsub: core.pubsub.borrow().distinct_here(core.index),
        migrate_sockets: super::migrate::cached(),
        tracking: crate::tracking::report(core, &shard),
        observe: shard.observe.counters(),
    }
}

/// INFO memory's scripting lines: VMs summed over the cores; scripts and
/// functions counted once (every core holds the same ones).
fn scripts_memory(reports: &[CoreReport]) -> String {
    let vm_eval: u64 = reports.iter().map(|r| r.scripts.vm_eval).sum();
    let vm_functions: u64 = reports.iter().map(|r| r.scripts.vm_functions).sum();
    let first = reports.iter().map(|r| r.scripts).max_by_key(|u| (u.cached_scripts, u.libraries)).unwrap_or_default();
    let vm_total = vm_eval + vm_functions;
    let scripts = first.scripts_eval + first.functions_bytes;
    format!(
        "used_memory_lua:{vm_eval}\r\nused_memory_vm_eval:{vm_eval}\r\nused_memory_lua_human:{}\r\nused_memory_scripts_eval:{}\r\nnumber_of_cached_scripts:{}\r\nnumber_of_functions:{}\r\nnumber_of_libraries:{}\r\nused_memory_vm_functions:{vm_functions}\r\nused_memory_vm_total:{vm_total}\r\nused_memory_vm_total_human:{}\r\nused_memory_functions:{}\r\nused_memory_scripts:{scripts}\r\nused_memory_scripts_human:{}\r\n",
        human(vm_eval),
        first.scripts_eval,
        first.cached_scripts,
        first.functions,
        first.libraries,
        human(vm_total),
        first.functions_bytes,
        human(scripts)
    )
}

fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b < 1024.0 {
        format!("{bytes}B")
    } else if b < 1024.0 * 1024.0 {
        format!("{:.2}K", b / 1024.0)
    } else if b < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2}M", b / 1024.0 / 1024.0)
    } else {
        format!("{:.2}G", b / 1024.0 / 1024.0 / 1024.0)
    }
}

const DEFAULT_SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "errorstats",
    "cluster",
    "keyspace",
    "shards",
];

fn process_cpu() -> (f64, f64) {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (t(ru.ru_utime), t(ru.ru_stime))
}

/// The INFO text for the requested sections.
/// What INFO shows of replication (gathered from core 0 beforehand).
pub struct ReplicationInfo {
    pub section: String,
    /// sync_full, sync_partial_ok, sync_partial_err.
    pub syncs: (u64, u64, u64),
}

pub fn render(
    core: &Core,
    reports: &[CoreReport],
    sections: &[String],
    repl: &ReplicationInfo,
    histograms: &[(usize, shard::observe::hdr::Histogram)],
) -> String {
    let p = &core.process;
    let observed = shard::observe::Counters::merge(reports.iter().map(|r| &r.observe));
    let config = core.config();
    let want = |name: &str| sections.iter().any(|s| s == name);
    let sum = |f: fn(&CoreReport) -> u64| reports.iter().map(f).sum::<u64>();
    let mut out = String::new();
    let mut section = |title: &str, body: String| {
        if !out.is_empty() {
            out.push_str("\r\n");
        }
        let _ = write!(out, "# {title}\r\n{body}");
    };
    let uptime = p.started.elapsed().as_secs();
    if want("server") {
        let mut b = String::new();
        let _ = write!(
            b,
            "redis_version:7.0.15\r\ncorekv_version:{}\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\nredis_mode:{}\r\nos:{}\r\narch_bits:64\r\nmultiplexing_api:io_uring\r\nprocess_id:{}\r\nprocess_supervised:no\r\nrun_id:{}\r\ntcp_port:{}\r\nserver_time_usec:{}\r\nuptime_in_seconds:{}\r\nuptime_in_days:{}\r\nhz:{}\r\nconfigured_hz:{}\r\nexecutable:{}\r\nconfig_file:{}\r\nshards:{}\r\nio_threads_active:0\r\n",
            env!("CARGO_PKG_VERSION"),
            if core.cluster.borrow().enabled() { "cluster" } else { "standalone" },
            os_name(),
            std::process::id(),
            p.run_id,
            p.tcp_port(),
            shard::unix_ms() * 1000,
            uptime,
            uptime / 86400,
            config.hz,
            config.hz,
            p.executable,
            p.config_file,
            core.count,
        );
        section("Server", b);
    }
    if want("clients") {
        let clients: usize = reports.iter().map(|r| r.clients).sum();
        let blocked: u64 = reports.iter().map(|r| r.blocked).sum();
        let max_input = reports.iter().map(|r| r.max_input_buffer).max().unwrap_or(0);
        let max_output = reports.iter().map(|r| r.max_output_buffer).max().unwrap_or(0);
        section(
            "Clients",
            format!("connected_clients:{clients}\r\ncluster_connections:0\r\nmaxclients:{}\r\nclient_recent_max_input_buffer:{max_input}\r\nclient_recent_max_output_buffer:{max_output}\r\nblocked_clients:{blocked}\r\ntracking_clients:{}\r\nclients_in_timeout_table:{blocked}\r\n", config.maxclients, sum(|r| r.tracking.0)),
        );
    }
    if want("memory") {
        let m = (p.memory)();
        // Every thread's allocations (the shards', the main thread's...).
        let used = shard::memory::used();
        let peak = p.memory_peak.fetch_max(used, std::sync::atomic::Ordering::Relaxed).max(used);
        let ratio = if used > 0 { m.rss as f64 / used as f64 } else { 0.0 };
        let startup = shard::memory::startup();
        let dataset = used.saturating_sub(startup);
        let not_counted: u64 = reports.iter().map(|r| r.aof_buffer).sum();
        let (max, policy) = (config.maxmemory, config.maxmemory_policy.name());
        section(
            "Memory",
            format!(
                "used_memory:{used}\r\nused_memory_human:{}\r\nused_memory_rss:{}\r\nused_memory_rss_human:{}\r\nused_memory_peak:{peak}\r\nused_memory_peak_human:{}\r\nused_memory_peak_perc:{:.2}%\r\nused_memory_overhead:{startup}\r\nused_memory_startup:{startup}\r\nused_memory_dataset:{dataset}\r\nused_memory_dataset_perc:{:.2}%\r\nused_memory_rss_peak:{}\r\nmem_fragmentation_ratio:{ratio:.2}\r\nmem_fragmentation_bytes:{}\r\n{}maxmemory:{max}\r\nmaxmemory_human:{}\r\nmaxmemory_policy:{policy}\r\nmem_not_counted_for_evict:{not_counted}\r\nmem_clients_slaves:{}\r\nmem_allocator:{}\r\nactive_defrag_running:0\r\nlazyfree_pending_objects:0\r\nlazyfreed_objects:{}\r\n",
                human(used), m.rss, human(m.rss), human(peak),
                if peak > 0 { used as f64 * 100.0 / peak as f64 } else { 0.0 },
                if used > 0 { dataset as f64 * 100.0 / used as f64 } else { 0.0 },
                m.peak_rss, m.rss as i64 - used as i64, scripts_memory(reports), human(max),
                p.replicas_held.load(std::sync::atomic::Ordering::Relaxed), m.allocator,
                sum(|r| r.lazyfreed)
            ),
        );
    }
    if want("persistence") {
        let aof: Vec<_> = reports.iter().filter_map(|r| r.aof.clone()).collect();
        section(
            "Persistence",
            persistence::info(core, sum(|r| r.dirty), (sum(|r| r.save_keys.0), sum(|r| r.save_keys.1)), &aof),
        );
    }
    if want("stats") {
        section(
            "Stats",
            format!(
                "total_connections_received:{}\r\ntotal_commands_processed:{}\r\ninstantaneous_ops_per_sec:{}\r\ntotal_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\nrejected_connections:{}\r\nsync_full:{}\r\nsync_partial_ok:{}\r\nsync_partial_err:{}\r\nexpired_keys:{}\r\nevicted_keys:{}\r\nevicted_clients:{}\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\npubsub_channels:{}\r\npubsub_patterns:{}\r\npubsubshard_channels:{}\r\nmigrate_cached_sockets:{}\r\ntracking_total_keys:{}\r\ntracking_total_items:{}\r\ntracking_total_prefixes:{}\r\nunexpected_error_replies:{}\r\ntotal_error_replies:{}\r\ncross_core_batches:{}\r\ncross_core_commands:{}\r\n",
                sum(|r| r.connections_received),
                observed.calls(),
                sum(|r| r.ops_per_sec),
                sum(|r| r.net_in),
                sum(|r| r.net_out),
                sum(|r| r.rejected),
                repl.syncs.0,
                repl.syncs.1,
                repl.syncs.2,
                sum(|r| r.expired),
                sum(|r| r.evicted),
                sum(|r| r.evicted_clients),
                sum(|r| r.hits),
                sum(|r| r.misses),
                sum(|r| r.pubsub[0] as u64),
                sum(|r| r.pubsub[1] as u64),
                sum(|r| r.pubsub[2] as u64),
                sum(|r| r.migrate_sockets as u64),
                sum(|r| r.tracking.1),
                sum(|r| r.tracking.2),
                // Every shard holds every BCAST prefix.
                reports.iter().map(|r| r.tracking.3).max().unwrap_or(0),
                observed.unexpected_error_replies,
                observed.total_error_replies,
                sum(|r| r.hops_sent),
                sum(|r| r.remote_commands),
            ),
        );
    }
    if want("replication") {
        section("Replication", repl.section.clone());
    }
    if want("cpu") {
        let (user, sys) = process_cpu();
        section(
            "CPU",
            format!("used_cpu_sys:{sys:.6}\r\nused_cpu_user:{user:.6}\r\nused_cpu_sys_children:0.000000\r\nused_cpu_user_children:0.000000\r\n"),
        );
    }
    if want("commandstats") {
        section("Commandstats", super::stats::commandstats(&observed));
    }
    if want("errorstats") {
        section("Errorstats", super::stats::errorstats(&observed));
    }
    if want("latencystats") {
        section("Latencystats", super::stats::latencystats(histograms, &config));
    }
    if want("cluster") {
        let enabled = core.cluster.borrow().enabled() as u8;
        section("Cluster", format!("cluster_enabled:{enabled}\r\n"));
    }
    if want("keyspace") {
        let mut b = String::new();
        for db in 0..config.databases {
            let (keys, expires) = reports
                .iter()
                .map(|r| r.keyspace.get(db).copied().unwrap_or_default())
                .fold((0, 0), |a, k| (a.0 + k.0, a.1 + k.1));
            if keys > 0 {
                let _ = write!(b, "db{db}:keys={keys},expires={expires},avg_ttl=0\r\n");
            }
        }
        section("Keyspace", b);
    }
    if want("shards") {
        let mut b = String::new();
        for r in reports {
            let keys: usize = r.keyspace.iter().map(|k| k.0).sum();
            let _ = write!(
                b,
                "shard{}:cpu={},keys={},clients={},commands={},executed={},hits={},misses={},expired={},cross_core_sent={},cross_core_served={},used_cpu_user={:.6},used_cpu_sys={:.6}\r\n",
                r.index,
                p.cpus.get(r.index).copied().unwrap_or(0),
                keys,
                r.clients,
                r.commands,
                r.shard_commands,
                r.hits,
                r.misses,
                r.expired,
                r.hops_sent,
                r.batches_served,
                r.cpu_user,
                r.cpu_sys
            );
        }
        section("Shards", b);
    }
    out
}

fn os_name() -> String {
    // SAFETY: uname fills the struct it is given.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return "Linux".into();
    }
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    format!("{} {} {}", field(&u.sysname), field(&u.release), field(&u.machine))
}

pub async fn info(conn: &mut Connection, args: Args<'_>) {
    let mut sections: Vec<String> =
        args.iter().skip(1).map(|s| String::from_utf8_lossy(s).to_ascii_lowercase()).collect();
    if sections.is_empty() || sections.iter().any(|s| s == "default") {
        sections.extend(DEFAULT_SECTIONS.iter().map(|s| s.to_string()));
    }
    if sections.iter().any(|s| s == "all" || s == "everything") {
        sections.extend(DEFAULT_SECTIONS.iter().map(|s| s.to_string()));
        sections.extend(["commandstats", "latencystats"].map(String::from));
    }
    let reports: Vec<CoreReport> = call_all(&conn.core, report).await.into_iter().flatten().collect();
    let repl = if sections.iter().any(|s| s == "replication" || s == "stats") {
        ReplicationInfo {
            section: crate::replication::info::section(&conn.core).await,
            syncs: crate::replication::info::sync_stats(&conn.core).await,
        }
    } else {
        ReplicationInfo { section: String::new(), syncs: (0, 0, 0) }
    };
    let histograms = match sections.iter().any(|s| s == "latencystats") {
        true => super::stats::histograms(&conn.core).await,
        false => Vec::new(),
    };
    let text = render(&conn.core, &reports, &sections, &repl, &histograms);
    reply(conn, |r| r.verbatim(text.as_bytes()));
}

/// CONFIG GET pattern [pattern ...] (Redis 7.0's configGetCommand): a name
/// without glob characters is looked up (aliases too) and answered under
/// the name as given; a pattern matches every setting's name. Each
/// setting once, by name.
pub fn config_get(conn: &mut Connection, args: Args) {
    let mut found: Vec<(String, String)> = Vec::new();
    {
        let config = conn.core.config();
        let seen = |found: &[(String, String)], name: &str| found.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
        for pattern in args.iter().skip(2) {
            if !pattern.iter().any(|c| b"[*?".contains(c)) {
                let name = String::from_utf8_lossy(pattern).into_owned();
                if let Some(value) = config.get(&name).filter(|_| !seen(&found, &name)) {
                    found.push((name, value));
                }
                continue;
            }
            for (name, value) in config.matching(pattern) {
                if !seen(&found, name) {
                    found.push((name.to_string(), value));
                }
            }
        }
    }
    // Redis answers in its dict's order; corekv in the names' order.
    found.sort();
    reply(conn, |r| {
        r.map(found.len());
        for (name, value) in &found {
            r.bulk(name.as_bytes());
            r.bulk(value.as_bytes());
        }
    });
}

pub fn config_help(conn: &mut Connection) {
    help(
        conn,
        &[
            "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GET <pattern>",
            "    Return parameters matching the glob-like <pattern> and their values.",
            "SET <directive> <value>",
            "    Set the configuration <directive> to <value>.",
            "RESETSTAT",
            "    Reset statistics reported by the INFO command.",
            "REWRITE",
            "    Rewrite the configuration file.",
            "HELP",
            "    Prints this help.",
        ],
    );
}

/// CONFIG SET name value [name value ...]: validated as a whole on this
/// core's copy, then applied to every core's copy.
pub async fn config_set(conn: &mut Connection, args: Args<'_>) {
    if !args.len().is_multiple_of(2) {
        return conn.error(SYNTAX);
    }
    // Redis's configSetCommand: every name is checked first (unknown,
    // immutable, protected, repeated: named as given), then every value
    // is set (a bad one named by its setting), on a copy.
    let failed =
        |name: &str, reason: &str| format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {reason}");
    let protected_allowed = protected_configs_allowed(conn);
    let mut changes: Vec<(String, String)> = Vec::new();
    for i in (2..args.len()).step_by(2) {
        let given = String::from_utf8_lossy(args.get(i)).into_owned();
        let Some(param) = find_param(&given) else {
            return conn.error(&format!("ERR Unknown option or number of arguments for CONFIG SET - '{given}'"));
        };
        if !param.mutable {
            return conn.error(&failed(&given, "can't set immutable config"));
        }
        if shard::config::PROTECTED.contains(&param.name) && !protected_allowed {
            return conn.error(&failed(&given, "can't set protected config"));
        }
        if changes.iter().any(|(n, _)| *n == param.name) {
            return conn.error(&failed(&given, "duplicate parameter"));
        }
        changes.push((param.name.to_string(), String::from_utf8_lossy(args.get(i + 1)).into_owned()));
    }
    let mut candidate = conn.core.config().clone();
    for (name, value) in &changes {
        if let Err(reason) = candidate.set_value(name, value) {
            return conn.error(&failed(name, &reason));
        }
    }
    // Redis's updateMaxclients: the descriptors for it, or its error.
    if changes.iter().any(|(n, _)| n == "maxclients") {
        use crate::fd_limit::{adjust_open_files_limit, Adjusted};
        let fits = match adjust_open_files_limit(candidate.maxclients) {
            Adjusted::Enough => None,
            Adjusted::Lowered(n) => Some(n),
            Adjusted::TooLow(..) => Some(0),
        };
        if let Some(n) = fits {
            return conn.error(&format!("ERR CONFIG SET failed (possibly related to argument 'maxclients') - The operating system is not able to handle the specified number of clients, try with {n}"));
        }
    }
    // Redis's applyTlsCfg: a configuration that cannot be built is refused
    // (the reason in the log), one that can goes to every core.
    let tls_changed = changes.iter().any(|(n, _)| n.starts_with("tls-"));
    if tls_changed {
        let s = &candidate.tls;
        let built = match (s.port != 0 || s.cluster, s.replication) {
            (false, false) => Ok(()),
            (server, client) => (if server { tls::settings::server_config(s).map(drop) } else { Ok(()) })
                .and_then(|()| if client { tls::settings::client_config(s).map(drop) } else { Ok(()) }),
        };
        if let Err(reason) = built {
            log::warning(&reason);
            let name = changes.iter().find(|(n, _)| n.starts_with("tls-")).map_or("", |(n, _)| n.as_str());
            return conn.error(&format!("ERR CONFIG SET failed (possibly related to argument '{name}') - Unable to update TLS configuration. Check server logs."));
        }
    }
    // Redis's updatePort and applyBind: every core listens on the new
    // addresses and closes the old ones before the values are taken; when
    // one cannot, the old ones stay (as its restoreBackupConfig listens on
    // them again). A port set to what it is changes nothing; bind is
    // applied whatever its value.
    let (old_bind, old_port) = (conn.core.config().bind.clone(), conn.core.process.tcp_port());
    let port_changed = changes.iter().any(|(n, _)| n == "port") && candidate.port != conn.core.config().port;
    let listen_change = changes
        .iter()
        .map(|(n, _)| n.as_str())
        .find(|n| *n == "bind" || (*n == "port" && port_changed))
        .map(|n| if n == "port" { "port" } else { "bind" });
    if let Some(name) = listen_change {
        let port = if port_changed { candidate.port } else { old_port };
        if !rebind(&conn.core, candidate.bind.clone(), port).await {
            let reason = match name {
                "port" => "Unable to listen on this port. Check server logs.",
                _ => {
                    log::warning("Failed to bind");
                    "Failed to bind to specified addresses."
                }
            };
            log::warning(&format!(
                "Failed applying new configuration. Possibly related to new {name} setting. Restoring previous settings."
            ));
            return conn.error(&failed(name, reason));
        }
        conn.core.process.tcp_port.store(port, Ordering::Relaxed);
    }
    let old: Vec<(String, String)> = {
        let config = conn.core.config();
        changes.iter().map(|(n, _)| (n.clone(), config.get(n).unwrap_or_default())).collect()
    };
    let aof_was = conn.core.aof.enabled.get();
    let aof_wanted = candidate.appendonly;
    if !apply(conn, changes, tls_changed).await {
        return conn.error("ERR CONFIG SET could not reach every shard");
    }
    // Applying (Redis's apply functions, after every value is set): if the
    // AOF cannot be turned on, every setting goes back (restoreBackupConfig).
    match (aof_was, aof_wanted) {
        (false, true) => {
            if let Err(e) = persistence::aof::turn_on(&conn.core).await {
                log::warning(&format!("Redis needs to enable the AOF but can't: {e}"));
                log::warning("Failed applying new configuration. Possibly related to new appendonly setting. Restoring previous settings.");
                persistence::aof::turn_off(&conn.core).await;
                apply(conn, old, tls_changed).await;
                if listen_change.is_some() && rebind(&conn.core, old_bind, old_port).await {
                    conn.core.process.tcp_port.store(old_port, Ordering::Relaxed);
                }
                return conn.error("ERR CONFIG SET failed (possibly related to argument 'appendonly') - Unable to turn on AOF. Check server logs.");
            }
        }
        (true, false) => persistence::aof::turn_off(&conn.core).await,
        _ => {}
    }
    reply(conn, |r| r.ok());
}

/// One change of the client listeners at a time (their `prepare` and
/// `commit` over every core).
static REBINDING: AtomicBool = AtomicBool::new(false);

/// Lets the next change of the listeners go, however this one ends.
struct Rebinding;

impl Drop for Rebinding {
    fn drop(&mut self) {
        REBINDING.store(false, Ordering::Release);
    }
}

/// Every core's client listeners moved to bind addresses `bind` and client
/// port `port` (0: none), on all cores or none (core.rs's `Listening`):
/// this core first, checking that no other process holds the new
/// addresses, then the others; only when all could, each closes the old
/// ones. False, Redis's warnings logged, when some address could not be
/// listened on.
async fn rebind(core: &Rc<Core>, bind: Vec<String>, port: u16) -> bool {
    while REBINDING.swap(true, Ordering::Acquire) {
        glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
    }
    let _turn = Rebinding;
    let here = core.listening.borrow().clone();
    let mut ok = here.is_none_or(|l| l.prepare(&bind, port, true));
    if ok {
        let origin = core.index;
        let prepared = call_all(core, move |c| {
            let listening = c.listening.borrow().clone();
            c.index == origin || listening.is_none_or(|l| l.prepare(&bind, port, false))
        })
        .await;
        ok = prepared.iter().all(|p| *p == Some(true));
    }
    call_all(core, move |c| {
        let listening = c.listening.borrow().clone();
        if let Some(l) = listening {
            if ok {
                l.commit()
            } else {
                l.abort()
            }
        }
    })
    .await;
    ok
}

/// Redis's allowProtectedAction for `enable-protected-configs`: `dir` and
/// `dbfilename` are settable by everyone, no one, or local connections.
fn protected_configs_allowed(conn: &Connection) -> bool {
    match conn.core.config().enable_protected_configs {
        shard::config::Protected::Yes => true,
        shard::config::Protected::No => false,
        shard::config::Protected::Local => {
            let clients = conn.core.clients.borrow();
            clients.list.get(conn.state.registry_key).is_some_and(|c| crate::acl::protected::is_local(c.addr))
        }
    }
}

/// Sets `changes` on every core's copy and applies what depends on them
/// (log level, TLS, ACL's default user, refused writes). False when a core
/// could not be reached.
async fn apply(conn: &mut Connection, changes: Vec<(String, String)>, tls_changed: bool) -> bool {
    let password = changes.iter().any(|(n, _)| n == "requirepass");
    let acl_changed = password || changes.iter().any(|(n, _)| n == "acl-pubsub-default");
    let applied = call_all(&conn.core, move |core| {
        let mut shard = core.shard.borrow_mut();
        for (name, value) in &changes {
            let _ = shard.config.set_value(name, value);
            if name == "loglevel" {
                log::set_level(value);
            }
        }
        shard.apply_config();
        let tls = &shard.config.tls;
        if tls_changed && (tls.port != 0 || tls.cluster) {
            // Checked above; each core builds its own (its own session cache).
            if let Ok(config) = tls::settings::server_config(tls) {
                tls::settings::install(config);
            }
        }
    })
    .await;
    if applied.iter().any(Option::is_none) {
        return false;
    }
    if acl_changed {
        super::acl::config_changed(conn, password).await;
    }
    // `save` and `stop-writes-on-bgsave-error` decide whether writes are refused.
    persistence::refresh_deny_writes(&conn.core).await;
    true
}

/// CONFIG REWRITE: the file corekv was started with, rewritten as Redis's
/// rewriteConfig does (shard/src/config/rewrite.rs: comments and unknown
/// lines kept, settings replaced in place, new ones appended), then put in
/// its place through a temporary file.
pub fn config_rewrite(conn: &mut Connection) {
    let path = conn.core.process.config_file.clone();
    if path.is_empty() {
        return conn.error("ERR The server is running without a config file");
    }
    let users: Option<Vec<String>> = conn
        .core
        .config()
        .aclfile
        .is_empty()
        .then(|| conn.core.acl.users().file_text().lines().map(String::from).collect());
    let written = match std::fs::read_to_string(&path) {
        Ok(old) => Ok(old),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e),
    }
    .and_then(|old| write_over(&path, &shard::config::rewrite(&old, &conn.core.config(), users.as_deref())));
    match written {
        Ok(()) => {
            log::warning("CONFIG REWRITE executed with success.");
            reply(conn, |r| r.ok())
        }
        Err(e) => {
            let reason = shard::config::os_reason(&e);
            log::warning(&format!("CONFIG REWRITE failed: {reason}"));
            conn.error(&format!("ERR Rewriting config file: {reason}"))
        }
    }
}

/// Redis's rewriteConfigOverwriteFile: a new file beside the old one,
/// fsynced, mode 0644, renamed over it, the directory fsynced.
fn write_over(path: &str, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let tmp = format!("{path}.{}-{}", std::process::id(), shard::unix_ms());
    let result = (|| {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        std::fs::rename(&tmp, path)?;
        let dir = std::path::Path::new(path).parent().filter(|d| !d.as_os_str().is_empty());
        std::fs::File::open(dir.unwrap_or(std::path::Path::new(".")))?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

pub async fn config_resetstat(conn: &mut Connection) {
    call_all(&conn.core, |core| {
        core.shard.borrow_mut().reset_stats();
        let s = &core.stats;
        for c in [
            &s.commands,
            &s.connections_received,
            &s.rejected_connections,
            &s.net_input_bytes,
            &s.net_output_bytes,
            &s.hops_sent,
            &s.remote_commands,
            &s.evicted_clients,
        ] {
            c.set(0);
        }
    })
    .await;
    reply(conn, |r| r.ok());
}

/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]: saves first when asked or
/// when a save point is configured; a failed save keeps the server up
/// unless FORCE.
pub async fn shutdown(conn: &mut Connection, args: Args<'_>) {
    let (mut save, mut nosave, mut force) = (false, false, false);
    for opt in args.iter().skip(1) {
        match opt.to_ascii_lowercase().as_slice() {
            b"nosave" => nosave = true,
            b"save" => save = true,
            b"force" => force = true,
            b"now" => {}
            b"abort" => return conn.error("ERR No shutdown in progress."),
            _ => return conn.error(SYNTAX),
        }
    }
    if save && nosave {
        return conn.error(SYNTAX);
    }
    // While a script is busy only NOSAVE may end the server (a save would
    // wait for the script's core).
    let busy = conn.core.process.scripts.iter().map(|s| s.running.load(std::sync::atomic::Ordering::Relaxed)).max();
    match busy {
        Some(1) if !nosave => {
            return conn.error("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.")
        }
        Some(2) if !nosave => {
            return conn
                .error("BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.")
        }
        _ => {}
    }
    log::warning("User requested shutdown...");
    if persistence::save_on_shutdown(&conn.core, save, nosave) {
        if let Err(e) = persistence::final_save(&conn.core).await {
            log::warning(&format!("Error trying to save the DB: {e}"));
            if !force {
                log::warning("Errors trying to shut down the server. Check the logs for more information.");
                return conn.error("ERR Errors trying to SHUTDOWN. Check logs.");
            }
        }
    }
    conn.core.process.request_shutdown();
    conn.state.close = true;
}
