//! Starting one core: join the mesh, build the shard, listen on the client
//! port(s) with SO_REUSEPORT, serve connections, and run the periodic tasks
//! (active expiry, statistics) until shutdown.

use crate::cluster::reload::reload_topology;
use crate::cluster::ClusterView;
use crate::coordinator::serve::serve;
use crate::core::{Core, Process};
use crate::fd_shed;
use crate::listen::{listen_socket, reactor_listener, spawn_conn, ClientListeners, TLS_TAG};
use crate::log;
use crate::mesh::{Mesh, RequestMesh, ResponseMesh};
use crate::persistence::{self, load::Dump};
use crate::replication::replica::{self, link};
use crate::ring::{Ring, RingConfig};
use crate::session::Port;
use crate::stream::ClientStream;
use glommio::net::TcpListener;
use shard::{Config, Shard};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct CoreSetup {
    pub index: usize,
    pub count: usize,
    pub config: Config,
    pub process: Arc<Process>,
    pub requests: RequestMesh<Core>,
    pub responses: ResponseMesh,
    pub listen: Vec<SocketAddr>,
    pub cluster: ClusterView,
    /// The dump file to load before serving, mapped once for all cores.
    pub dump: Option<Arc<Dump>>,
    /// Every core waits here after loading: no client is accepted before
    /// the whole keyspace is in.
    pub loaded: Arc<std::sync::Barrier>,
    /// The AOF to replay and append to (`appendonly yes`).
    pub aof: Option<Arc<crate::persistence::aof::Found>>,
}

/// A listener of this core alone (metrics-port) and its fd (kept to shut
/// it down at exit).
fn listener(addr: SocketAddr, backlog: i32) -> std::io::Result<(RawFd, TcpListener)> {
    Ok(reactor_listener(listen_socket(addr, backlog, false)?))
}

/// Periodic work, `hz` times a second; returns when shutdown is requested.
async fn cron(core: Rc<Core>) {
    loop {
        let hz = core.config().hz.max(1);
        glommio::timer::sleep(Duration::from_millis(1000 / hz)).await;
        if core.process.shutting_down() {
            persistence::abandon(&core);
            crate::commands::migrate::close_all();
            return;
        }
        if core.index == 0 && core.process.reload_requested.swap(false, std::sync::atomic::Ordering::Relaxed) {
            match reload_topology(&core).await {
                Ok(()) => log::notice("Cluster topology reloaded"),
                Err(e) => log::warning(&format!("Cluster topology not reloaded: {e}")),
            }
        }
        if core.index == 0 {
            if core.process.signal_shutdown.load(std::sync::atomic::Ordering::Relaxed) {
                if shutdown_on_signal(&core).await {
                    crate::commands::migrate::close_all();
                    return;
                }
                continue;
            }
            persistence::cron(&core).await;
        }
        crate::commands::client::pause_cron(&core);
        crate::commands::migrate::close_idle();
        core.shard.borrow_mut().active_expire(shard::unix_ms());
        memory_cron(&core);
        // Keys expired or evicted above: their tracking readers hear.
        if core.shard.borrow().tracking.as_ref().is_some_and(|t| t.pending()) {
            core.send_invalidations();
        }
        let commands = core.stats.commands.get();
        core.stats.ops_samples.borrow_mut().sample(commands, Instant::now());
        let timeout = core.config().timeout;
        if timeout > 0 {
            close_idle_clients(&core, Duration::from_secs(timeout));
        }
        close_clients_over_output_limits(&core);
        crate::client_evict::cron(&core);
    }
}

/// Redis's clientsCron output buffer check: a client holding output over
/// its hard limit, or over its soft one for longer than its seconds, is
/// closed even when nothing new is written to it (one big reply or a
/// burst of pushes it does not read); one seen under its soft limit starts
/// its time over it again. As Redis, a client holding nothing is skipped.
fn close_clients_over_output_limits(core: &Core) {
    let limits = core.config().client_output_buffer_limit;
    let now_secs = shard::unix_ms() / 1000;
    let mut over = Vec::new();
    {
        let mut clients = core.clients.borrow_mut();
        for (key, c) in clients.list.iter_mut() {
            let Some(limit) = c.output_limit(&limits).filter(|l| l.hard > 0 || l.soft > 0) else { continue };
            let pushes = core.push.get(c.id).map_or(0, |q| q.len());
            let held = (c.output_memory() + pushes) as u64;
            if held > 0 && c.output_limit_reached(held, limit, now_secs) {
                over.push((key, c.id, c.line(Instant::now())));
            }
        }
    }
    for (key, id, line) in over {
        log::warning(&format!("Client {line} closed for overcoming of output buffer limits."));
        if let Some(queue) = core.push.get(id) {
            queue.overflow();
        }
        core.clients.borrow().kill(key);
    }
}

/// maxmemory: eviction that stopped at its time limit goes on; after a large
/// fall of used memory (DEL of a big value, FLUSHALL) this core's free pages
/// go back to the OS without waiting for traffic.
fn memory_cron(core: &Core) {
    let mut shard = core.shard.borrow_mut();
    // A CLIENT PAUSE keeps the dataset as it is.
    if shard.config.maxmemory > 0 && core.locks.borrow().is_idle() && !core.pause.recorded() {
        shard.perform_evictions(shard::unix_ms());
    }
    if shard.memory_returned(8 << 20) {
        shard::memory::return_to_os();
    }
}

/// SIGTERM/SIGINT: save first when a save point is configured, as Redis
/// does; if that fails, keep running. Returns true when shutting down.
async fn shutdown_on_signal(core: &Rc<Core>) -> bool {
    log::warning("User requested shutdown...");
    if persistence::save_on_shutdown(core, false, false) {
        if let Err(e) = persistence::final_save(core).await {
            log::warning(&format!("Error trying to save the DB, can't exit: {e}"));
            log::warning(
                "SIGTERM received but errors trying to shut down the server, check the logs for more information",
            );
            core.process.signal_shutdown.store(false, std::sync::atomic::Ordering::Relaxed);
            return false;
        }
    }
    core.process.request_shutdown();
    true
}

fn close_idle_clients(core: &Core, timeout: Duration) {
    let now = Instant::now();
    let clients = core.clients.borrow();
    // Redis leaves blocked (and paused) clients alone.
    for (key, c) in clients.list.iter() {
        if !c.blocked && now.duration_since(c.last_active) > timeout {
            clients.kill(key);
        }
    }
}

/// Runs one core until shutdown.
/// `listening` is called once every client socket of this core is bound.
pub async fn run_core(setup: CoreSetup, listening: impl FnOnce()) -> std::io::Result<()> {
    let (mesh, requests, responses) = Mesh::join(setup.index, setup.requests, setup.responses).await;
    fd_shed::reserve();
    let backlog = setup.config.tcp_backlog as i32;
    let node_port = setup.cluster.shard_port(setup.index);
    let shard = Shard::new(setup.index, setup.count, setup.config);
    let core = Rc::new_cyclic(|me| Core::new(shard, setup.cluster, mesh, setup.process, me.clone()));
    serve(&core, requests, responses);
    // What loading the data allocates on this core is data, not start-up
    // memory (used_memory_startup).
    let before_load = shard::memory::thread_used();
    if let Some(dump) = &setup.dump {
        let started = std::time::Instant::now();
        if let Err(e) = persistence::load::load(&core, dump) {
            // A bad file must stop the start, loudly and before any client.
            log::warning(&e);
            eprintln!("corekv: {e}");
            std::process::exit(1);
        }
        setup.loaded.wait();
        if core.index == 0 {
            let status = &core.process.save_status;
            let secs = started.elapsed().as_secs_f64();
            log::notice(&format!(
                "Done loading RDB, keys loaded: {}, keys expired: {}.",
                status.loaded_keys.load(std::sync::atomic::Ordering::Relaxed),
                status.load_expired.load(std::sync::atomic::Ordering::Relaxed)
            ));
            log::notice(&format!(
                "DB loaded from disk: {secs:.3} seconds ({:.1} MB/s, every shard reading the whole file)",
                dump.bytes().len() as f64 / 1e6 / secs.max(1e-6)
            ));
        }
    }
    if let Some(found) = &setup.aof {
        crate::persistence::aof::start(&core, found).await;
    }
    shard::memory::loaded_at_start(shard::memory::thread_used() - before_load);
    // As a replica from the first client on; core 0 runs the link.
    let replicaof = core.config().replicaof.clone();
    if let Some(target) = replicaof {
        replica::start_as_replica(&core, target);
    }
    if core.index == 0 {
        glommio::spawn_local(link::supervise(core.clone())).detach();
    }
    // Loading raises no notifications (Redis loads without any).
    core.shard.borrow_mut().notifications().clear();
    glommio::spawn_local(crate::notify::run(core.clone())).detach();
    let metrics = metrics_listeners(&core, &setup.listen, backlog)?;
    if core.config().client_ring {
        let config = RingConfig {
            sqpoll_ms: core.config().client_ring_sqpoll_ms,
            gather_bound: Duration::from_micros(core.config().client_ring_gather_us.into()),
            ..RingConfig::default()
        };
        match client_ring(config) {
            Ok(ring) => return run_ring(core, ring, &setup.listen, node_port, metrics, listening).await,
            Err(e) if core.index == 0 => {
                log::warning(&format!("client-ring: {e}; client sockets stay on glommio's reactor"))
            }
            Err(_) => {}
        }
    }
    let listeners = Rc::new(ClientListeners::new(&core, node_port, None)?);
    listeners.start(&setup.listen)?;
    *core.listening.borrow_mut() = Some(listeners.clone());
    listening();
    cron(core.clone()).await;
    core.listening.take();
    stop_listening(metrics).await;
    listeners.stop().await;
    close_connections(&core).await;
    crate::persistence::aof::flush_at_exit(&core).await;
    Ok(())
}

/// `metrics-port`: core 0 serves it on every bind address.
fn metrics_listeners(
    core: &Rc<Core>,
    listen: &[SocketAddr],
    backlog: i32,
) -> std::io::Result<Vec<(RawFd, glommio::task::JoinHandle<()>)>> {
    let port = core.config().metrics_port;
    if core.index != 0 || port == 0 {
        return Ok(Vec::new());
    }
    let mut accepting = Vec::new();
    for addr in listen {
        let (fd, socket) = listener(SocketAddr::new(addr.ip(), port), backlog)?;
        accepting.push((fd, glommio::spawn_local(crate::metrics::accept_loop(core.clone(), socket)).detach()));
    }
    Ok(accepting)
}

/// This core's client ring, if the kernel has what it needs: multishot
/// receive (Linux 6.0) and provided-buffer rings (5.19).
fn client_ring(config: RingConfig) -> Result<Rc<Ring>, String> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut version = release.trim().split(['.', '-']).map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (version.next().unwrap_or(0), version.next().unwrap_or(0));
    if (major, minor) < (6, 0) {
        return Err(format!("Linux {} has no multishot receive (6.0 or newer needed)", release.trim()));
    }
    Ring::new(config).map_err(|e| format!("setting up the ring: {e}"))
}

/// `run_core` with the client sockets on this core's own ring.
async fn run_ring(
    core: Rc<Core>,
    ring: Rc<Ring>,
    listen: &[SocketAddr],
    node_port: Option<u16>,
    metrics: Vec<(RawFd, glommio::task::JoinHandle<()>)>,
    listening: impl FnOnce(),
) -> std::io::Result<()> {
    if core.index == 0 {
        log::notice(&format!("Client sockets on corekv's own io_uring per shard ({})", ring.setup));
    }
    let listeners = Rc::new(ClientListeners::new(&core, node_port, Some(ring.clone()))?);
    listeners.start(listen)?;
    *core.listening.borrow_mut() = Some(listeners.clone());
    let serving = core.clone();
    let config = listeners.tls.clone();
    ring.on_accept(move |stream, tag| {
        let port = if tag & !TLS_TAG == Port::Node as usize { Port::Node } else { Port::Client };
        let tls = if tag & TLS_TAG != 0 { config.clone() } else { None };
        spawn_conn(serving.clone(), ClientStream::Ring(stream), port, tls);
    });
    let clocked = core.clone();
    ring.on_turn(move |busy| clocked.turn_clock.turn(busy));
    let looking = core.clone();
    ring.on_input(move |inputs| crate::prefetch::received(&looking, inputs));
    let serving = Rc::downgrade(&ring);
    *core.while_blocked.borrow_mut() = Some(Box::new(move || {
        if let Some(ring) = serving.upgrade() {
            ring.serve_while_blocked();
        }
    }));
    let driver = glommio::spawn_local(ring.clone().drive()).detach();
    listening();
    cron(core.clone()).await;
    core.listening.take();
    stop_listening(metrics).await;
    listeners.stop().await;
    ring.stop();
    close_connections(&core).await;
    let reaped = futures_lite::future::or(async { driver.await.is_some() }, async {
        glommio::timer::sleep(Duration::from_secs(1)).await;
        false
    })
    .await;
    if !reaped {
        log::warning(&format!("client ring: {} connection(s) still open at exit", ring.connections()));
    }
    core.while_blocked.take();
    ring.on_accept(|_, _| {});
    ring.on_turn(|_| {});
    ring.on_input(|_| {});
    core.turn_clock.turn(false);
    crate::persistence::aof::flush_at_exit(&core).await;
    Ok(())
}

/// Ends every accept loop and closes its listener before the executor goes
/// away. A pending io_uring accept holds the listening socket: left to the
/// ring's asynchronous teardown, the port would stay in LISTEN for a while
/// after exit and an immediate restart could fail with EADDRINUSE.
/// shutdown(2) takes the socket out of LISTEN at once and fails the
/// pending accept, so the loop returns and drops (closes) the listener.
async fn stop_listening(accepting: Vec<(RawFd, glommio::task::JoinHandle<()>)>) {
    for (fd, _) in &accepting {
        // SAFETY: the listener owning `fd` is alive until its task ends,
        // which is awaited below.
        unsafe { libc::shutdown(*fd, libc::SHUT_RDWR) };
    }
    for (_, task) in accepting {
        task.await;
    }
}

/// Hangs up every connection of this core and waits (briefly) for their
/// tasks to close them, so no socket is left to the ring's teardown.
async fn close_connections(core: &Core) {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        {
            let clients = core.clients.borrow();
            if clients.list.is_empty() || Instant::now() > deadline {
                return;
            }
            for (key, _) in clients.list.iter() {
                clients.kill(key);
            }
        }
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
}
