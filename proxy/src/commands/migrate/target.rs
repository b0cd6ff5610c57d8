//! MIGRATE's connections to target servers: a per-core cache by
//! "host:port", as Redis's `migrate_cached_sockets` (at most 64, closed by
//! the cron after 10 s unused), and Redis's syncWrite/syncReadLine bounded
//! by the command's timeout. Per core, so no lock: a core's MIGRATEs reuse
//! its own connections (Redis has one thread, hence one cache).

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use shard::args::atoi;
use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Redis's MIGRATE_SOCKET_CACHE_ITEMS and MIGRATE_SOCKET_CACHE_TTL.
const CACHE_ITEMS: usize = 64;
const CACHE_TTL: Duration = Duration::from_secs(10);
/// Redis reads replies into 1024-byte buffers (one byte for the NUL).
const LINE_MAX: usize = 1023;
/// Redis writes the commands in 64 KiB chunks, each with the full timeout.
const WRITE_CHUNK: usize = 64 * 1024;

/// A failed read or write; a timeout is never retried (Redis's ETIMEDOUT).
pub struct IoFail {
    pub timed_out: bool,
}

/// A connection to a target server.
pub struct Link {
    stream: TcpStream,
    /// The database last SELECTed with success, -1 for none (Redis's
    /// `last_dbid`: so MIGRATE to db -1 sends no SELECT, as in Redis).
    pub last_db: i64,
    /// Bytes read past the last line (a target answers only what was sent,
    /// so this is normally empty).
    pending: Vec<u8>,
    last_use: Instant,
}

thread_local! {
    static CACHE: RefCell<HashMap<Vec<u8>, Link>> = RefCell::new(HashMap::new());
}

/// `fut`, or a timeout after `dur`.
async fn bounded<T>(dur: Duration, fut: impl Future<Output = std::io::Result<T>>) -> Result<T, IoFail> {
    let timed = async {
        glommio::timer::sleep(dur).await;
        Err(IoFail { timed_out: true })
    };
    futures_lite::future::or(async { fut.await.map_err(|_| IoFail { timed_out: false }) }, timed).await
}

/// Why there is no connection.
pub enum NoLink {
    /// The host has no address: Redis's only "connecting" error.
    NoAddress,
    /// Refused or timed out. Redis's blocking connect reports success
    /// either way and its first write fails, so this is a write's failure.
    Failed(IoFail),
}

/// The cached connection to `host:port` (taken out of the cache while in
/// use), or a new one.
pub async fn take(name: &[u8], host: &[u8], port: &[u8], timeout: Duration) -> Result<Link, NoLink> {
    if let Some(mut link) = CACHE.with(|c| c.borrow_mut().remove(name)) {
        link.last_use = Instant::now();
        return Ok(link);
    }
    let host = std::str::from_utf8(host).map_err(|_| NoLink::NoAddress)?;
    // A literal address needs no resolver; a name resolves as Redis's
    // getaddrinfo does (blocking, as in Redis).
    let port = atoi(port) as u16;
    let addr = match host.parse::<IpAddr>() {
        Ok(ip) => Some(SocketAddr::new(ip, port)),
        Err(_) => (host, port).to_socket_addrs().ok().and_then(|mut a| a.next()),
    };
    let addr = addr.ok_or(NoLink::NoAddress)?;
    let stream = TcpStream::connect_timeout(addr, timeout).await.map_err(|e| {
        let timed_out = std::io::Error::from(e).kind() == std::io::ErrorKind::TimedOut;
        NoLink::Failed(IoFail { timed_out })
    })?;
    let _ = stream.set_nodelay(true);
    Ok(Link { stream, last_db: -1, pending: Vec::new(), last_use: Instant::now() })
}

/// Puts a healthy connection back in the cache (one dropped instead closes).
pub fn give_back(name: Vec<u8>, link: Link) {
    CACHE.with(|c| {
        let mut cache = c.borrow_mut();
        if cache.len() >= CACHE_ITEMS && !cache.contains_key(&name) {
            // Full: drop one, as Redis drops a random entry.
            if let Some(k) = cache.keys().next().cloned() {
                cache.remove(&k);
            }
        }
        cache.insert(name, link);
    });
}

/// The cron: connections unused for more than 10 s are closed.
pub fn close_idle() {
    let _ = CACHE.try_with(|c| {
        if let Ok(mut cache) = c.try_borrow_mut() {
            cache.retain(|_, l| l.last_use.elapsed() <= CACHE_TTL);
        }
    });
}

/// This core's cached connections (INFO's migrate_cached_sockets).
pub fn cached() -> usize {
    CACHE.try_with(|c| c.try_borrow().map_or(0, |cache| cache.len())).unwrap_or(0)
}

/// Shutdown: every cached connection closed while the executor runs.
pub fn close_all() {
    let _ = CACHE.try_with(|c| c.take());
}

impl Link {
    /// Writes `buf` in 64 KiB chunks, each within `timeout`.
    pub async fn write(&mut self, buf: &[u8], timeout: Duration) -> Result<(), IoFail> {
        for chunk in buf.chunks(WRITE_CHUNK) {
            bounded(timeout, self.stream.write_all(chunk)).await?;
        }
        bounded(timeout, self.stream.flush()).await
    }

    /// One reply line without its CRLF (at most 1023 bytes, as Redis's
    /// buffer), each read within `timeout`.
    pub async fn read_line(&mut self, timeout: Duration) -> Result<Vec<u8>, IoFail> {
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let mut line: Vec<u8> = self.pending.drain(..=end).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                line.truncate(LINE_MAX);
                return Ok(line);
            }
            if self.pending.len() >= LINE_MAX {
                return Ok(self.pending.drain(..LINE_MAX).collect());
            }
            let mut chunk = [0u8; 4096];
            let n = bounded(timeout, self.stream.read(&mut chunk)).await?;
            if n == 0 {
                return Err(IoFail { timed_out: false });
            }
            self.pending.extend_from_slice(&chunk[..n]);
        }
    }
}
