//! The link's socket: commands out, lines and raw bytes in. Reads wake at
//! least every `TICK`, so the link notices a new REPLICAOF, a shutdown,
//! its ACK timer and `repl-timeout` without a second task.

use crate::stream::ClientStream;
use crate::tls::settings::server_name;
use crate::tls::stream::TlsStream;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const TICK: Duration = Duration::from_millis(100);

pub struct LinkIo {
    /// The socket, or TLS over it (`tls-replication yes`).
    pub stream: ClientStream,
    /// Bytes read and not yet taken: `buf[start..]`.
    buf: Vec<u8>,
    start: usize,
}

/// What one read brought.
pub enum Read {
    Bytes(usize),
    /// Nothing within `TICK`.
    Idle,
}

impl LinkIo {
    /// The link over `stream`; with `tls` (`tls-replication yes`), after
    /// a TLS handshake with the primary at `host`, done by `deadline`.
    pub async fn new(
        stream: TcpStream,
        tls: Option<(Arc<rustls::ClientConfig>, &str)>,
        deadline: Instant,
    ) -> Result<Self, String> {
        let failed = |e: std::io::Error| format!("Unable to connect to MASTER: {e}");
        stream.set_nodelay(true).map_err(|e| failed(e.into()))?;
        stream.set_read_timeout(Some(TICK)).map_err(|e| failed(e.into()))?;
        let mut stream = ClientStream::Reactor(stream);
        if let Some((config, host)) = tls {
            let mut tls = TlsStream::client(stream, config, server_name(host)).map_err(failed)?;
            loop {
                // Reads wake every TICK with a timeout: keep going until the deadline.
                match tls.handshake().await {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut && Instant::now() < deadline => {}
                    Err(e) => return Err(failed(e)),
                }
            }
            stream = ClientStream::Tls(Box::new(tls));
        }
        Ok(LinkIo { stream, buf: Vec::new(), start: 0 })
    }

    /// One command, as a RESP array of bulk strings.
    pub async fn send(&mut self, parts: &[&[u8]]) -> Result<(), String> {
        let mut out = Vec::new();
        shard::propagate::put_command(&mut out, parts);
        self.stream.write_all(&out).await.map_err(|e| format!("I/O error writing to MASTER: {e}"))
    }

    /// Reads into `into` (at most its length); `Ok(Idle)` after `TICK`
    /// with nothing, an error when the primary closed the link.
    pub async fn read_some(&mut self, into: &mut [u8]) -> Result<Read, String> {
        if self.start < self.buf.len() {
            let n = into.len().min(self.buf.len() - self.start);
            into[..n].copy_from_slice(&self.buf[self.start..self.start + n]);
            self.start += n;
            return Ok(Read::Bytes(n));
        }
        match self.stream.read(into).await {
            Ok(0) => Err("Connection with master lost.".into()),
            Ok(n) => Ok(Read::Bytes(n)),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Ok(Read::Idle),
            Err(e) => Err(format!("I/O error reading from MASTER: {e}")),
        }
    }

    /// The next line without its CRLF (empty for the newlines a primary
    /// sends as keep-alives); gives up at `deadline`.
    pub async fn read_line(&mut self, deadline: Instant) -> Result<String, String> {
        loop {
            if let Some(nl) = self.buf[self.start..].iter().position(|&b| b == b'\n') {
                let line = &self.buf[self.start..self.start + nl];
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let text = String::from_utf8_lossy(line).into_owned();
                self.start += nl + 1;
                return Ok(text);
            }
            if Instant::now() >= deadline {
                return Err("Master did not respond to command during SYNC handshake".into());
            }
            self.buf.drain(..self.start);
            self.start = 0;
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk).await {
                Ok(0) => return Err("Connection with master lost.".into()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(e) => return Err(format!("I/O error reading from MASTER: {e}")),
            }
        }
    }

    /// A command and its one-line reply.
    pub async fn call(&mut self, parts: &[&[u8]], timeout: Duration) -> Result<String, String> {
        self.send(parts).await?;
        let deadline = Instant::now() + timeout;
        loop {
            let line = self.read_line(deadline).await?;
            if !line.is_empty() {
                return Ok(line);
            }
        }
    }
}
