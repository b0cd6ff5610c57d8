//! A core's client listeners: the client port on every bind address (with
//! SO_REUSEPORT, so every core listens and the kernel spreads connections
//! over them), `tls-port`, and in per-core cluster mode the shard's own node
//! port. Opened at start, and again when CONFIG SET port or bind changes
//! them at run time (Redis's changeListenPort and changeBindAddr): the
//! listeners still wanted are kept, new ones opened on every core first
//! (`Listening::prepare`), and only when every core could, the old ones
//! closed and the new ones accepted on (`commit`); connections already
//! accepted go on either way. Not moved: `metrics-port` (on the bind
//! addresses of the start) and the process title.

use crate::conn;
use crate::core::{Core, Listening};
use crate::fd_shed;
use crate::log;
use crate::ring::Ring;
use crate::session::Port;
use crate::stream::ClientStream;
use crate::tls;
use glommio::net::TcpListener;
use socket2::{Domain, Protocol, Socket, Type};
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, RawFd};
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::Duration;

pub type TlsConfig = Arc<rustls::ServerConfig>;

/// The ring's listener tag: the port, and whether it speaks TLS.
pub const TLS_TAG: usize = 1 << 8;

/// A listening socket for this core, with the options Redis's
/// `anetTcpServer` sets (SO_REUSEADDR, IPV6_V6ONLY, close-on-exec,
/// non-blocking, `tcp-backlog`). `shared`: SO_REUSEPORT, so every core
/// listens on the port and the kernel spreads connections over them;
/// otherwise the port is this core's alone.
pub fn listen_socket(addr: SocketAddr, backlog: i32, shared: bool) -> std::io::Result<Socket> {
    open_socket(addr, backlog, shared).map_err(|(_, e)| e)
}

/// `listen_socket`, the failed step named as Redis's anet errors name it.
fn open_socket(addr: SocketAddr, backlog: i32, shared: bool) -> Result<Socket, (&'static str, std::io::Error)> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM.cloexec(), Some(Protocol::TCP))
        .map_err(|e| ("creating socket", e))?;
    socket.set_reuse_address(true).map_err(|e| ("setsockopt SO_REUSEADDR", e))?;
    socket.set_reuse_port(shared).map_err(|e| ("setsockopt SO_REUSEPORT", e))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true).map_err(|e| ("setsockopt", e))?;
    }
    socket.set_nonblocking(true).map_err(|e| ("fcntl(F_SETFL,O_NONBLOCK)", e))?;
    socket.bind(&addr.into()).map_err(|e| ("bind", e))?;
    socket.listen(backlog).map_err(|e| ("listen", e))?;
    Ok(socket)
}

/// A glommio listener over a listening socket, and its fd (kept to shut it
/// down).
pub fn reactor_listener(socket: Socket) -> (RawFd, TcpListener) {
    let fd = socket.as_raw_fd();
    // SAFETY: a listening TCP socket whose ownership moves into the glommio
    // listener.
    (fd, unsafe { TcpListener::from_raw_fd(socket.into_raw_fd()) })
}

/// Serves an accepted connection; `tls`: after a TLS handshake. A
/// connection on the client ring is its driver's task, else glommio's.
pub fn spawn_conn(core: Rc<Core>, stream: ClientStream, port: Port, tls: Option<TlsConfig>) {
    let ring = match &stream {
        ClientStream::Ring(s) => Some(s.ring().clone()),
        _ => None,
    };
    let serving: Pin<Box<dyn Future<Output = ()>>> = match tls {
        None => Box::pin(conn::serve(core, stream, port)),
        Some(config) => Box::pin(tls::accept::serve(core, stream, port, tls::settings::current(config))),
    };
    match ring {
        Some(ring) => ring.spawn(serving),
        None => drop(glommio::spawn_local(serving).detach()),
    }
}

/// Accepts on glommio's reactor until shutdown or until the listener is
/// retired (then shut down, which makes the pending accept fail); the
/// listener is closed as the loop returns.
async fn accept_loop(
    core: Rc<Core>,
    listener: TcpListener,
    listener_fd: RawFd,
    port: Port,
    tls: Option<TlsConfig>,
    retired: Rc<Cell<bool>>,
) {
    loop {
        match listener.accept().await {
            Ok(stream) => {
                if core.process.shutting_down() {
                    return;
                }
                spawn_conn(core.clone(), ClientStream::Reactor(stream), port, tls.clone());
            }
            Err(_) if core.process.shutting_down() || retired.get() => return,
            Err(e) => {
                let e = std::io::Error::from(e);
                if e.raw_os_error().is_some_and(fd_shed::exhausted) {
                    fd_shed::shed(listener_fd, &e);
                } else {
                    log::warning(&format!("Accepting client connection: {e}"));
                }
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// One `bind` entry as Redis's listenToPort reads it: the address ("*"
/// and "::*" the wildcards; IPv6 when it holds a ':'), the text its log
/// lines show, and whether it is optional (a leading '-': skipped when the
/// host does not have it).
pub struct BindAddr {
    pub ip: Option<IpAddr>,
    pub host: String,
    pub optional: bool,
}

impl BindAddr {
    pub fn parse(entry: &str) -> BindAddr {
        let optional = entry.starts_with('-');
        let host = entry.strip_prefix('-').unwrap_or(entry);
        let ip = match host {
            "*" => Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            "::*" => Some(IpAddr::V6(Ipv6Addr::UNSPECIFIED)),
            h if h.contains(':') => h.parse::<Ipv6Addr>().ok().map(IpAddr::V6),
            h => h.parse::<Ipv4Addr>().ok().map(IpAddr::V4),
        };
        BindAddr { ip, host: host.to_string(), optional }
    }
}

/// Whether Redis's listenToPort goes on without an address that failed so:
/// an optional one the host does not have, or one whose protocol it lacks.
fn skippable(e: &std::io::Error, optional: bool) -> bool {
    match e.raw_os_error() {
        Some(libc::EADDRNOTAVAIL) => optional,
        Some(n) => {
            [libc::ENOPROTOOPT, libc::EPROTONOSUPPORT, libc::ESOCKTNOSUPPORT, libc::EPFNOSUPPORT, libc::EAFNOSUPPORT]
                .contains(&n)
        }
        None => false,
    }
}

/// Redis's warning for an address it could not listen on (logged), and
/// its reason.
fn could_not_listen(host: &str, port: u16, step: &str, e: &std::io::Error) -> String {
    let reason = format!("{host}:{port}: {step}: {}", shard::config::os_reason(e));
    log::warning(&format!("Warning: Could not create server TCP listening socket {reason}"));
    reason
}

/// What a listener serves: its address, port kind and whether it speaks TLS.
type Key = (SocketAddr, Port, bool);

/// One open listener of this core and how it is accepted on.
struct Open {
    key: Key,
    accepting: Accepting,
}

enum Accepting {
    /// A listener of the client ring: its key there.
    Ring(usize),
    /// An accept loop on glommio's reactor: the listener's fd, its retired
    /// mark, its task.
    Reactor { fd: RawFd, retired: Rc<Cell<bool>>, task: glommio::task::JoinHandle<()> },
}

/// What `prepare` opened, and every listener wanted after the change.
struct Prepared {
    new: Vec<(Key, Socket)>,
    wanted: Vec<Key>,
}

/// This core's client listeners.
pub struct ClientListeners {
    core: Weak<Core>,
    ring: Option<Rc<Ring>>,
    backlog: i32,
    tls_port: u16,
    node_port: Option<u16>,
    node_tls: bool,
    /// This core's own TLS configuration (its own session cache).
    pub tls: Option<TlsConfig>,
    open: RefCell<Vec<Open>>,
    prepared: RefCell<Option<Prepared>>,
}

impl ClientListeners {
    /// `ring`: accept on the client ring, else on glommio's reactor.
    pub fn new(core: &Rc<Core>, node_port: Option<u16>, ring: Option<Rc<Ring>>) -> std::io::Result<ClientListeners> {
        let settings = &core.config().tls;
        let node_tls = settings.cluster && node_port.is_some();
        let tls = match settings.port != 0 || node_tls {
            true => Some(tls::settings::server_config(settings).map_err(std::io::Error::other)?),
            false => None,
        };
        Ok(ClientListeners {
            core: Rc::downgrade(core),
            ring,
            backlog: core.config().tcp_backlog as i32,
            tls_port: settings.port,
            node_port,
            node_tls,
            tls,
            open: Default::default(),
            prepared: Default::default(),
        })
    }

    /// (address, port kind, SO_REUSEPORT, TLS) of each socket for bind
    /// address `ip` and client port `port` (0: none).
    fn sockets(&self, ip: IpAddr, port: u16) -> Vec<(SocketAddr, Port, bool, Option<TlsConfig>)> {
        let mut sockets = Vec::new();
        if port != 0 {
            sockets.push((SocketAddr::new(ip, port), Port::Client, true, None));
        }
        if self.tls_port != 0 {
            sockets.push((SocketAddr::new(ip, self.tls_port), Port::Client, true, self.tls.clone()));
        }
        if let Some(port) = self.node_port {
            let tls = if self.node_tls { self.tls.clone() } else { None };
            sockets.push((SocketAddr::new(ip, port), Port::Node, false, tls));
        }
        sockets
    }

    /// Listens on `listen` (the addresses resolved at start, their port
    /// the client port) and accepts.
    pub fn start(&self, listen: &[SocketAddr]) -> std::io::Result<()> {
        let bind: Vec<BindAddr> =
            listen.iter().map(|a| BindAddr { ip: Some(a.ip()), host: a.ip().to_string(), optional: false }).collect();
        let port = listen.first().map_or(0, |a| a.port());
        self.prepare_addrs(&bind, port, false).map_err(std::io::Error::other)?;
        self.commit();
        Ok(())
    }

    /// `Listening::prepare`; the error is the failed address and why.
    fn prepare_addrs(&self, bind: &[BindAddr], port: u16, probe: bool) -> Result<(), String> {
        self.abort();
        let mut prepared = Prepared { new: Vec::new(), wanted: Vec::new() };
        let open: Vec<Key> = self.open.borrow().iter().map(|o| o.key).collect();
        for b in bind {
            let Some(ip) = b.ip else {
                let reason = format!("{}:{port}: Name or service not known", b.host);
                log::warning(&format!("Warning: Could not create server TCP listening socket {reason}"));
                return Err(reason);
            };
            for (at, kind, shared, tls) in self.sockets(ip, port) {
                let key = (at, kind, tls.is_some());
                if prepared.wanted.contains(&key) {
                    continue;
                }
                if open.contains(&key) {
                    prepared.wanted.push(key);
                    continue;
                }
                // Another process on the address with SO_REUSEPORT would
                // share it with every core without a word: a plain bind
                // finds it. Busy because one of ours listens on the same
                // port (a wildcard beside a specific address) is no sign.
                if probe && shared {
                    if let Err(e) = std::net::TcpListener::bind(at) {
                        let ours = e.raw_os_error() == Some(libc::EADDRINUSE)
                            && open.iter().any(|(a, _, _)| a.port() == at.port());
                        if !ours && !skippable(&e, b.optional) {
                            return Err(could_not_listen(&b.host, at.port(), "bind", &e));
                        }
                    }
                }
                match open_socket(at, self.backlog, shared) {
                    Ok(socket) => {
                        prepared.new.push((key, socket));
                        prepared.wanted.push(key);
                    }
                    Err((step, e)) => {
                        let reason = could_not_listen(&b.host, at.port(), step, &e);
                        if !skippable(&e, b.optional) {
                            return Err(reason);
                        }
                    }
                }
            }
        }
        *self.prepared.borrow_mut() = Some(prepared);
        Ok(())
    }

    /// Stops accepting everywhere and waits for the reactor's accept loops
    /// to end (their listeners closed); the ring's listeners go with
    /// `Ring::stop`.
    pub async fn stop(&self) {
        self.abort();
        let open = std::mem::take(&mut *self.open.borrow_mut());
        let mut tasks = Vec::new();
        for o in open {
            if let Accepting::Reactor { fd, retired, task } = o.accepting {
                retired.set(true);
                // SAFETY: the listener owning `fd` is alive until its task
                // ends, which is awaited below.
                unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
                tasks.push(task);
            }
        }
        for task in tasks {
            task.await;
        }
    }

    fn retire(&self, o: Open) {
        match o.accepting {
            Accepting::Ring(key) => {
                if let Some(ring) = &self.ring {
                    ring.unlisten(key);
                }
            }
            Accepting::Reactor { fd, retired, task } => {
                retired.set(true);
                // SAFETY: the listener owning `fd` lives until its task
                // ends, which this shutdown brings about.
                unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
                drop(task);
            }
        }
    }
}

impl Listening for ClientListeners {
    fn prepare(&self, bind: &[String], port: u16, probe: bool) -> bool {
        let bind: Vec<BindAddr> = bind.iter().map(|b| BindAddr::parse(b)).collect();
        self.prepare_addrs(&bind, port, probe).is_ok()
    }

    fn commit(&self) {
        let Some(prepared) = self.prepared.borrow_mut().take() else { return };
        let Some(core) = self.core.upgrade() else { return };
        let old = std::mem::take(&mut *self.open.borrow_mut());
        let mut open = Vec::new();
        for o in old {
            if prepared.wanted.contains(&o.key) {
                open.push(o);
            } else {
                self.retire(o);
            }
        }
        for (key, socket) in prepared.new {
            let (_, kind, is_tls) = key;
            let accepting = match &self.ring {
                Some(ring) => {
                    let tag = kind as usize | if is_tls { TLS_TAG } else { 0 };
                    Accepting::Ring(ring.listen(socket.into(), tag))
                }
                None => {
                    let (fd, listener) = reactor_listener(socket);
                    let retired = Rc::new(Cell::new(false));
                    let tls = if is_tls { self.tls.clone() } else { None };
                    let task =
                        glommio::spawn_local(accept_loop(core.clone(), listener, fd, kind, tls, retired.clone()))
                            .detach();
                    Accepting::Reactor { fd, retired, task }
                }
            };
            open.push(Open { key, accepting });
        }
        *self.open.borrow_mut() = open;
    }

    fn abort(&self) {
        // The sockets close as they drop.
        self.prepared.borrow_mut().take();
    }
}
