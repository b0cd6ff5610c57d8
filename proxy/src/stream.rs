//! A client socket, whichever side drives it: glommio's reactor (the
//! default) or this core's own ring (`client-ring yes`), and TLS over
//! either (`tls-port`; the replica link with `tls-replication`).

use crate::ring::stream::RingStream;
use crate::tls::stream::TlsStream;
use futures_lite::{AsyncRead, AsyncWrite};
use glommio::net::TcpStream;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};

pub enum ClientStream {
    Reactor(TcpStream),
    Ring(RingStream),
    Tls(Box<TlsStream<ClientStream>>),
}

impl ClientStream {
    pub fn fd(&self) -> RawFd {
        match self {
            ClientStream::Reactor(s) => s.as_raw_fd(),
            ClientStream::Ring(s) => s.as_raw_fd(),
            ClientStream::Tls(s) => s.get_ref().fd(),
        }
    }

    fn with_socket<T>(&self, f: impl FnOnce(socket2::SockRef<'_>) -> T) -> T {
        // SAFETY: the fd belongs to this stream, which outlives the borrow.
        let fd = unsafe { BorrowedFd::borrow_raw(self.fd()) };
        f(socket2::SockRef::from(&fd))
    }

    fn addr(a: std::io::Result<socket2::SockAddr>) -> std::io::Result<SocketAddr> {
        a?.as_socket().ok_or_else(|| std::io::ErrorKind::InvalidInput.into())
    }

    pub fn peer_addr(&self) -> std::io::Result<SocketAddr> {
        Self::addr(self.with_socket(|s| s.peer_addr()))
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Self::addr(self.with_socket(|s| s.local_addr()))
    }

    /// Waits until the socket has input (or hung up), without a buffer:
    /// an idle connection holds none. False: closed. The reactor path
    /// reads into its buffer directly.
    pub async fn readable(&self) -> bool {
        std::future::poll_fn(|cx| self.poll_readable(cx)).await
    }

    /// [`readable`](Self::readable) as a poll (beside a push queue).
    pub fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<bool> {
        match self {
            ClientStream::Reactor(_) => Poll::Ready(true),
            ClientStream::Ring(s) => s.poll_readable(cx),
            // rustls may hold decrypted input already: read at once.
            ClientStream::Tls(_) => Poll::Ready(true),
        }
    }

    /// Reply bytes queued and not yet sent (the ring's queue).
    pub fn pending_output(&self) -> usize {
        match self {
            ClientStream::Reactor(_) => 0,
            ClientStream::Ring(s) => s.pending_output(),
            ClientStream::Tls(s) => s.get_ref().pending_output(),
        }
    }

    /// `pending_output`, readable later from outside the connection's task.
    pub fn output_probe(&self) -> Option<Box<dyn Fn() -> usize>> {
        match self {
            ClientStream::Reactor(_) => None,
            ClientStream::Ring(s) => Some(Box::new(s.pending_probe())),
            ClientStream::Tls(s) => s.get_ref().output_probe(),
        }
    }

    pub fn set_nodelay(&self, on: bool) -> std::io::Result<()> {
        self.with_socket(|s| s.set_tcp_nodelay(on))
    }

    /// Redis's anetKeepAlive: first probe after `seconds`, then every third
    /// of it, dead after three unanswered probes.
    pub fn set_keepalive(&self, seconds: u64) {
        if seconds == 0 {
            return;
        }
        let ka = socket2::TcpKeepalive::new()
            .with_time(std::time::Duration::from_secs(seconds))
            .with_interval(std::time::Duration::from_secs((seconds / 3).max(1)))
            .with_retries(3);
        let _ = self.with_socket(|s| s.set_tcp_keepalive(&ka));
    }

    /// Writes all of `out` and leaves it empty; on the ring the buffer
    /// itself is handed over when the connection has nothing queued.
    pub async fn write_vec(&mut self, out: &mut Vec<u8>) -> std::io::Result<()> {
        match self {
            ClientStream::Ring(s) => std::future::poll_fn(|cx| s.poll_write_vec(cx, out)).await,
            _ => {
                futures_lite::AsyncWriteExt::write_all(self, out).await?;
                out.clear();
                Ok(())
            }
        }
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Reactor(s) => Pin::new(s).poll_read(cx, buf),
            ClientStream::Ring(s) => Pin::new(s).poll_read(cx, buf),
            ClientStream::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Reactor(s) => Pin::new(s).poll_write(cx, buf),
            ClientStream::Ring(s) => Pin::new(s).poll_write(cx, buf),
            ClientStream::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            ClientStream::Reactor(s) => Pin::new(s).poll_flush(cx),
            ClientStream::Ring(s) => Pin::new(s).poll_flush(cx),
            ClientStream::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            ClientStream::Reactor(s) => Pin::new(s).poll_close(cx),
            ClientStream::Ring(s) => Pin::new(s).poll_close(cx),
            ClientStream::Tls(s) => Pin::new(&mut **s).poll_close(cx),
        }
    }
}
