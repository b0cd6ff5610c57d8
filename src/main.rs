//! corekv: process bootstrap. Parses the configuration, checks io_uring,
//! picks the CPUs, starts one pinned glommio executor per shard, waits for
//! shutdown (SIGINT, SIGTERM or SHUTDOWN) and exits cleanly.

mod alloc;
mod cli;
mod cpus;
mod limits;
mod title;
mod topology;
mod uring;

use glommio::channels::channel_mesh::MeshBuilder;
use glommio::{LocalExecutorBuilder, Placement};
use proxy::cluster::ClusterView;
use proxy::core::{MemoryInfo, Process};
use proxy::log;
use proxy::server::{run_core, CoreSetup};
use shard::config::ClusterMode;
use shard::Config;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicUsize;
use std::sync::{mpsc, Arc};
use std::time::Instant;

#[global_allocator]
static GLOBAL: alloc::CountingAlloc = alloc::CountingAlloc;

/// Messages between a cross-core channel's ends before senders wait.
const MESH_CHANNEL_SIZE: usize = 1024;
/// glommio's pool for registered read buffers (its default: 10 MiB per
/// executor, taken from the allocator at start and so counted in
/// used_memory and against maxmemory, while mostly never touched). corekv
/// reads no file through glommio (dumps are mapped, AOFs read with std::fs;
/// a read past the pool falls back to a plain allocation), so its minimum.
const GLOMMIO_IO_MEMORY: usize = 64 << 10;

fn main() {
    // A shard that dies must take the process down loudly rather than leave
    // a hole in the keyspace (release builds abort on panic anyway).
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::abort();
    }));
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("topology") {
        match topology::run(&args[2..]) {
            Ok(text) => print!("{}{}", text, if text.ends_with('\n') { "" } else { "\n" }),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        }
        return;
    }
    let cli = match cli::parse(&args) {
        cli::Outcome::Run(cli) => cli,
        cli::Outcome::Print(text) => {
            println!("{text}");
            return;
        }
        cli::Outcome::Fail(text) => {
            eprintln!("{text}");
            std::process::exit(1);
        }
    };
    if cli.check_only {
        // Everything a start decides before binding: CPUs and the cluster
        // topology (with this host's place in it).
        let checked = shard_cpus(&cli.config).and_then(|cpus| {
            let text = match cli.config.cluster_config_file.as_str() {
                "" => None,
                path => Some(std::fs::read_to_string(path).map_err(|e| format!("Can't open {path}: {e}"))?),
            };
            ClusterView::build(&cli.config, cpus.len(), cli.config.port, text.as_deref())?;
            proxy::acl::users::Users::from_config(&cli.config)?;
            proxy::core::CommandTable::with_renames(&cli.config.rename_commands)?;
            proxy::tls::settings::check(&cli.config.tls)
        });
        if let Err(e) = checked {
            eprintln!("corekv: {e}");
            std::process::exit(1);
        }
        // Redis's settings kept only as values (`Param::stored`) are left out.
        for p in shard::config::PARAMS.iter().filter(|p| !shard::config::is_alias(p.name) && !p.stored()) {
            println!("{} {}", p.name, cli.config.shown(p.name).unwrap_or_default());
        }
        return;
    }
    let mut cli = cli;
    if cli.config.daemonize {
        daemonize();
    }
    log::configure(&cli.config.loglevel, &cli.config.logfile);
    if cli.config.set_proc_title {
        title::set(&format!("corekv {}:{}", cli.config.bind.first().map_or("*", String::as_str), cli.config.port));
    }
    // Redis's createPidFile: when asked, or daemonized (at its default path).
    if cli.config.daemonize && cli.config.pidfile.is_empty() {
        cli.config.pidfile = DEFAULT_PID_FILE.into();
    }
    if !cli.config.pidfile.is_empty() {
        if let Err(e) = std::fs::write(&cli.config.pidfile, format!("{}\n", std::process::id())) {
            log::warning(&format!("Failed to write PID file: {}", shard::config::os_reason(&e)));
        }
    }
    let checked = proxy::acl::users::Users::from_config(&cli.config)
        .and_then(|_| proxy::core::CommandTable::with_renames(&cli.config.rename_commands));
    if let Err(msg) = checked.and_then(|_| run(cli)) {
        log::warning(&msg);
        eprintln!("corekv: {msg}");
        std::process::exit(1);
    }
}

/// Where a daemonized server writes its pid when `pidfile` is not set
/// (Redis's CONFIG_DEFAULT_PID_FILE).
const DEFAULT_PID_FILE: &str = "/var/run/redis.pid";

/// Redis's daemonize(): the parent exits, the child leads a new session
/// with its standard streams on /dev/null. Runs before any thread starts.
fn daemonize() {
    // SAFETY: the process is single-threaded here; fork, setsid, open and
    // dup2 are plain system calls on descriptors this process owns.
    unsafe {
        match libc::fork() {
            0 => {}
            -1 => return,
            _ => libc::_exit(0),
        }
        libc::setsid();
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null != -1 {
            for fd in 0..=2 {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        }
    }
}

/// Process-wide memory figures for INFO (the allocated bytes come from the
/// shards' own counters).
fn memory() -> MemoryInfo {
    let (mut elapsed, mut user, mut sys) = (0usize, 0usize, 0usize);
    let (mut rss, mut peak_rss, mut commit, mut peak_commit, mut faults) = (0usize, 0usize, 0usize, 0usize, 0usize);
    // SAFETY: mi_process_info writes the counters it is given.
    unsafe {
        libmimalloc_sys::mi_process_info(
            &mut elapsed,
            &mut user,
            &mut sys,
            &mut rss,
            &mut peak_rss,
            &mut commit,
            &mut peak_commit,
            &mut faults,
        );
    }
    // mimalloc's "current" RSS on Linux is the peak (getrusage); the
    // kernel's resident pages say what was returned.
    let rss = current_rss().unwrap_or(rss as u64);
    MemoryInfo { rss, peak_rss: peak_rss as u64, allocator: "mimalloc".into() }
}

/// Resident bytes from /proc/self/statm (its second field, in pages).
fn current_rss() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf reads a constant.
    Some(pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64)
}

/// Shard → CPU: every shard pinned, wrapping when there are more shards than
/// CPUs.
fn shard_cpus(config: &Config) -> Result<Vec<usize>, String> {
    let cpus = if config.cpus.is_empty() { cpus::affinity() } else { cpus::parse_list(&config.cpus)? };
    let online = cpus::affinity();
    if let Some(c) = cpus.iter().find(|c| !online.contains(c)) {
        return Err(format!(
            "CPU {c} in 'cpus {}' is not available to this process (allowed: {online:?})",
            config.cpus
        ));
    }
    let shards = if config.shards == 0 { cpus.len() } else { config.shards };
    if shards > cpus.len() {
        log::warning(&format!("{shards} shards on {} CPUs: some CPUs run more than one shard", cpus.len()));
    }
    Ok((0..shards).map(|i| cpus[i % cpus.len()]).collect())
}

/// The client addresses, with port 0 resolved to one free port shared by all
/// shards. Fails early, with Redis's wording, if a port is taken (every shard
/// binds with SO_REUSEPORT, which would otherwise share a port with another
/// server silently).
fn listen_addresses(config: &Config) -> Result<Vec<SocketAddr>, String> {
    let mut port = config.port;
    let mut addrs = Vec::new();
    for host in &config.bind {
        let host = host.trim_start_matches('-');
        let ip: IpAddr = match host {
            "*" => "0.0.0.0".parse().map_err(|e| format!("{e}"))?,
            "::*" => "::".parse().map_err(|e| format!("{e}"))?,
            h => h.parse().map_err(|_| format!("Invalid bind address '{h}'"))?,
        };
        let probe = std::net::TcpListener::bind(SocketAddr::new(ip, port))
            .map_err(|e| format!("Failed listening on port {port} (tcp), aborting: {host}:{port}: {e}"))?;
        port = probe.local_addr().map_err(|e| e.to_string())?.port();
        addrs.push(SocketAddr::new(ip, port));
    }
    Ok(addrs)
}

/// Fails early, with Redis's wording, when `port` (tls-port, metrics-port)
/// is taken on a bind address: the shards' SO_REUSEPORT would share it.
fn check_port_free(config: &Config, port: u16, kind: &str) -> Result<(), String> {
    if port == 0 {
        return Ok(());
    }
    for host in &config.bind {
        let host = host.trim_start_matches('-');
        let ip: IpAddr = match host {
            "*" => IpAddr::from([0, 0, 0, 0]),
            "::*" => IpAddr::from([0u16; 8]),
            h => h.parse().map_err(|_| format!("Invalid bind address '{h}'"))?,
        };
        std::net::TcpListener::bind(SocketAddr::new(ip, port))
            .map_err(|e| format!("Failed listening on port {port} ({kind}), aborting: {host}:{port}: {e}"))?;
    }
    Ok(())
}

/// Builds and logs the cluster view; in per-core mode also checks that every
/// node port is free before any shard starts.
fn cluster_view(config: &Config, shards: usize, port: u16) -> Result<ClusterView, String> {
    let text = match config.cluster_config_file.as_str() {
        "" => None,
        path => Some(std::fs::read_to_string(path).map_err(|e| format!("Can't open cluster-config-file {path}: {e}"))?),
    };
    let view = ClusterView::build(config, shards, port, text.as_deref())?;
    if !view.enabled() {
        return Ok(view);
    }
    log::notice(&format!(
        "cluster-mode {}: {} node(s) in the topology, {} of them here",
        config.cluster_mode.name(),
        view.topology.nodes.len(),
        if view.mode == ClusterMode::PerCore { shards } else { 1 }
    ));
    for shard in 0..shards {
        if let Some(node_port) = view.shard_port(shard) {
            for host in &config.bind {
                let ip: IpAddr =
                    host.trim_start_matches('-').parse().map_err(|_| format!("Invalid bind address '{host}'"))?;
                std::net::TcpListener::bind(SocketAddr::new(ip, node_port))
                    .map_err(|e| format!("Failed listening on node port {node_port} of shard {shard}: {e}"))?;
            }
            let node = view.node(view.shard_nodes[shard]);
            let slots: Vec<String> = node.slots.iter().map(|(a, b)| format!("{a}-{b}")).collect();
            log::notice(&format!(
                "shard {shard}: node {} at {} serving slots {}",
                node.id,
                node.addr(),
                slots.join(",")
            ));
        }
    }
    Ok(view)
}

fn run(cli: Box<cli::Cli>) -> Result<(), String> {
    let mut config = cli.config;
    uring::probe()?;
    let cpus = shard_cpus(&config)?;
    let listen = listen_addresses(&config)?;
    proxy::tls::settings::check(&config.tls)?;
    check_port_free(&config, config.tls.port, "tls")?;
    check_port_free(&config, config.metrics_port, "metrics")?;
    let shards = cpus.len();
    log::notice(&format!(
        "corekv {} (Redis 7.0 protocol) starting, pid={}, {} shard{}",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        cpus.len(),
        if cpus.len() == 1 { "" } else { "s" }
    ));
    warn_stored_settings(&config);
    limits::adjust_open_files_limit(&mut config);
    check_tcp_backlog(config.tcp_backlog);
    let port = listen.first().map_or(config.port, |a| a.port());
    let cluster = cluster_view(&config, shards, port)?;
    alloc::init(config.disable_thp);
    let process = Arc::new(Process {
        shutdown: Default::default(),
        replicas_held: Default::default(),
        reload_requested: Default::default(),
        connected_clients: AtomicUsize::new(0),
        started: Instant::now(),
        run_id: proxy::core::random_id(),
        executable: std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default(),
        config_file: cli.config_file.clone().unwrap_or_default(),
        cpus: cpus.clone(),
        tcp_port: port.into(),
        memory,
        thread_allocated: alloc::thread_allocated,
        memory_peak: Default::default(),
        save_status: Default::default(),
        signal_shutdown: Default::default(),
        scripts: (0..shards).map(|_| Default::default()).collect(),
        client_memory: (0..shards).map(|_| Default::default()).collect(),
    });
    let placement: Vec<String> = cpus.iter().enumerate().map(|(i, c)| format!("shard {i} -> CPU {c}")).collect();
    log::notice(&format!("Shards pinned: {}", placement.join(", ")));
    install_signal_handlers(process.clone())?;
    // With the AOF on and present it is the dataset; otherwise the dump is
    // (Redis 7 loads the RDB when appendonly is on but no AOF exists yet).
    let aof = proxy::persistence::aof::prepare(&config, shards)?.map(Arc::new);
    let dump_path = std::path::Path::new(&config.dir).join(&config.dbfilename);
    let dump = match &aof {
        Some(a) if !a.fresh => None,
        _ => proxy::persistence::load::Dump::open(&dump_path)?.map(Arc::new),
    };
    if let Some(d) = &dump {
        log::notice(&format!("Loading {} ({} bytes) on {shards} shard(s)", d.path, d.bytes().len()));
    }
    let loaded = Arc::new(std::sync::Barrier::new(shards));
    let requests = MeshBuilder::full(shards, MESH_CHANNEL_SIZE);
    let responses = MeshBuilder::full(shards, MESH_CHANNEL_SIZE);
    let (ready_tx, ready_rx) = mpsc::channel::<Result<usize, String>>();
    let mut handles = Vec::new();
    for (index, &cpu) in cpus.iter().enumerate() {
        let setup = CoreSetup {
            index,
            count: shards,
            config: config.clone(),
            process: process.clone(),
            requests: requests.clone(),
            responses: responses.clone(),
            listen: listen.clone(),
            cluster: cluster.clone(),
            aof: aof.clone(),
            dump: dump.clone(),
            loaded: loaded.clone(),
        };
        let ready = ready_tx.clone();
        let process = process.clone();
        let handle = LocalExecutorBuilder::new(Placement::Fixed(cpu))
            .name(&format!("shard-{index}"))
            .io_memory(GLOMMIO_IO_MEMORY)
            .spawn(move || async move {
                let result = run_core(setup, || {
                    let _ = ready.send(Ok(index));
                })
                .await;
                if let Err(e) = result {
                    let _ = ready.send(Err(e.to_string()));
                    process.request_shutdown();
                }
            })
            .map_err(|e| uring::explain_executor_error(&e))?;
        handles.push(handle);
    }
    drop(ready_tx);
    let mut started = 0;
    while started < shards {
        match ready_rx.recv() {
            Ok(Ok(_)) => started += 1,
            Ok(Err(e)) => {
                process.request_shutdown();
                return Err(format!("Failed listening on port {} (tcp), aborting: {e}", port));
            }
            Err(_) => return Err("a shard executor stopped during startup".into()),
        }
    }
    // Every core is up (rings, listeners, TLS) and no client was served
    // yet: Redis's used_memory_startup, less what loading the data took.
    shard::memory::mark_startup();
    // Again with the port actually bound (the command line may say 0),
    // before "Ready": whoever waits for that line sees the final title.
    if let Some(addr) = listen.first().filter(|_| config.set_proc_title) {
        title::set(&format!("corekv {addr}"));
    }
    for addr in &listen {
        log::notice(&format!("Ready to accept connections tcp on {addr}"));
        if config.tls.port != 0 {
            log::notice(&format!("Ready to accept connections tls on {}", SocketAddr::new(addr.ip(), config.tls.port)));
        }
        if config.metrics_port != 0 {
            log::notice(&format!("Metrics on http://{}/metrics", SocketAddr::new(addr.ip(), config.metrics_port)));
        }
    }
    for handle in handles {
        if let Err(e) = handle.join() {
            log::warning(&format!("shard executor ended with an error: {e}"));
        }
    }
    if !config.pidfile.is_empty() {
        log::notice("Removing the pid file.");
        let _ = std::fs::remove_file(&config.pidfile);
    }
    log::notice("corekv is now ready to exit, bye bye...");
    Ok(())
}

/// Redis settings corekv keeps only as values: one set away from its
/// default is said at start, with why it changes nothing here.
fn warn_stored_settings(config: &Config) {
    let defaults = Config::default();
    for (name, why) in shard::config::STORED_WHY {
        let (value, default) = (config.get(name).unwrap_or_default(), defaults.get(name).unwrap_or_default());
        if value != default {
            log::warning(&format!("'{name} {value}' is accepted for compatibility and has no effect: {why}."));
        }
    }
}

/// Redis's start-up warning when the kernel caps `tcp-backlog`.
fn check_tcp_backlog(backlog: u64) {
    let somaxconn = std::fs::read_to_string("/proc/sys/net/core/somaxconn").ok();
    if let Some(max) = somaxconn.and_then(|s| s.trim().parse::<u64>().ok()) {
        if max < backlog {
            log::warning(&format!("WARNING: The TCP backlog setting of {backlog} cannot be enforced because /proc/sys/net/core/somaxconn is set to the lower value of {max}."));
        }
    }
}

/// SIGINT/SIGTERM ask the shards to stop (after a final save when a save
/// point is configured); a second signal exits at once.
/// SIGHUP re-reads the cluster topology file.
fn install_signal_handlers(process: Arc<Process>) -> Result<(), String> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]).map_err(|e| e.to_string())?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if sig == SIGHUP {
                    log::notice("Received SIGHUP, reloading the cluster topology");
                    process.reload_requested.store(true, std::sync::atomic::Ordering::Relaxed);
                    continue;
                }
                let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
                if process.shutting_down() || process.signal_shutdown.load(std::sync::atomic::Ordering::Relaxed) {
                    log::warning(&format!("You insist... exiting now ({name})."));
                    std::process::exit(1);
                }
                log::warning(&format!("Received {name} scheduling shutdown..."));
                // Core 0 saves first when a save point is configured.
                process.signal_shutdown.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(())
}
