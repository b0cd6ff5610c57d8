//! Starting one core: join the mesh, build the shard, listen on the client
//! port(s) with SO_REUSEPORT, serve connections, and run the periodic tasks
//! (active expiry, statistics) until shutdown.

use crate::cluster::ClusterView;
use crate::conn::{self, Port};
use crate::core::{Core, Process};
use crate::log;
use crate::mesh::{self, Mesh, RequestMesh, ResponseMesh};
use crate::persistence::{self, load::Dump};
use glommio::net::TcpListener;
use shard::{Config, Shard};
use socket2::{Domain, Protocol, Socket, Type};
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct CoreSetup {
    pub index: usize,
    pub count: usize,
    pub config: Config,
    pub process: Arc<Process>,
    pub requests: RequestMesh,
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

/// A listening socket for this core. `shared`: SO_REUSEPORT, so every core
/// listens on the port and the kernel spreads connections over them;
/// otherwise the port is this core's alone.
fn listener(addr: SocketAddr, backlog: i32, shared: bool) -> std::io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(shared)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    // SAFETY: a freshly created listening TCP socket whose ownership moves
    // into the glommio listener.
    Ok(unsafe { TcpListener::from_raw_fd(socket.into_raw_fd()) })
}

/// Re-reads the topology file and installs the new view on every core.
/// Routing changes at once; keys of slots that moved are not migrated.
pub async fn reload_topology(core: &Rc<Core>) -> Result<(), String> {
    let (config, shards) = (core.config().clone(), core.count);
    if config.cluster_config_file.is_empty() {
        return Err("no cluster-config-file to reload".into());
    }
    let text = std::fs::read_to_string(&config.cluster_config_file)
        .map_err(|e| format!("reading {}: {e}", config.cluster_config_file))?;
    let view = ClusterView::build(&config, shards, core.process.tcp_port, Some(&text))?;
    let old = core.cluster();
    if view.shard_nodes.iter().map(|&n| view.node(n).port).ne(old.shard_nodes.iter().map(|&n| old.node(n).port)) {
        return Err("the reloaded topology changes this host's node ports; restart to apply".into());
    }
    let installed = crate::mesh::call_all(core, move |c| {
        *c.cluster.borrow_mut() = std::rc::Rc::new(view.clone());
    })
    .await;
    if installed.iter().any(Option::is_none) {
        return Err("could not reach every shard".into());
    }
    Ok(())
}

async fn accept_loop(core: Rc<Core>, listener: TcpListener, port: Port) {
    loop {
        match listener.accept().await {
            Ok(stream) => {
                glommio::spawn_local(conn::serve(core.clone(), stream, port)).detach();
            }
            Err(e) => {
                log::warning(&format!("Accepting client connection: {e}"));
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Periodic work, `hz` times a second; returns when shutdown is requested.
async fn cron(core: Rc<Core>) {
    loop {
        let hz = core.config().hz.max(1);
        glommio::timer::sleep(Duration::from_millis(1000 / hz)).await;
        if core.process.shutting_down() {
            persistence::abandon(&core);
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
                    return;
                }
                continue;
            }
            persistence::cron(&core).await;
        }
        core.shard.borrow_mut().active_expire(shard::unix_ms());
        let commands = core.stats.commands.get();
        core.stats.ops_samples.borrow_mut().sample(commands, Instant::now());
        let timeout = core.config().timeout;
        if timeout > 0 {
            close_idle_clients(&core, Duration::from_secs(timeout));
        }
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
    for (key, c) in clients.list.iter() {
        if now.duration_since(c.last_active) > timeout {
            clients.kill(key);
        }
    }
}

/// Runs one core until shutdown.
/// `listening` is called once every client socket of this core is bound.
pub async fn run_core(setup: CoreSetup, listening: impl FnOnce()) -> std::io::Result<()> {
    let (mesh, requests, responses) = Mesh::join(setup.requests, setup.responses).await;
    let backlog = setup.config.tcp_backlog as i32;
    let node_port = setup.cluster.shard_port(setup.index);
    let shard = Shard::new(setup.index, setup.count, setup.config);
    let core = Rc::new_cyclic(|me| Core::new(shard, setup.cluster, mesh, setup.process, me.clone()));
    mesh::serve(&core, requests, responses);
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
    for addr in &setup.listen {
        let client = listener(*addr, backlog, true)?;
        glommio::spawn_local(accept_loop(core.clone(), client, Port::Client)).detach();
        // Per-core mode: this shard's own node port, on this core only, so
        // a cluster client reaches the owning core with no hop.
        if let Some(port) = node_port {
            let node = listener(SocketAddr::new(addr.ip(), port), backlog, false)?;
            glommio::spawn_local(accept_loop(core.clone(), node, Port::Node)).detach();
        }
    }
    listening();
    cron(core.clone()).await;
    crate::persistence::aof::flush_at_exit(&core).await;
    Ok(())
}
