//! The TLS record layer over a socket: ciphertext in and out through the
//! socket's own reads and writes (the ring's provided buffers and send
//! queue, or glommio's reactor), plaintext to the caller, so conn.rs and
//! the replication code read and write as on a plain socket.
//!
//! One task drives both directions: a write that finds the socket full
//! leaves its ciphertext with rustls, and the next read (or write) sends it
//! first, so nothing waits behind a reader that is itself waiting.

use futures_lite::{AsyncRead, AsyncWrite};
use rustls::{ClientConfig, ClientConnection, Connection, ServerConfig, ServerConnection};
use std::io::{self, Read, Write};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Plaintext rustls encrypts ahead of the socket: replies bigger than this
/// go out a piece at a time instead of being held twice.
const BUFFER_LIMIT: usize = 64 * 1024;

pub struct TlsStream<S> {
    io: S,
    tls: Connection,
    closing: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream<S> {
    pub fn server(io: S, config: Arc<ServerConfig>) -> io::Result<Self> {
        let tls = ServerConnection::new(config).map_err(io::Error::other)?;
        Ok(Self::new(io, tls.into()))
    }

    pub fn client(io: S, config: Arc<ClientConfig>, name: rustls::pki_types::ServerName<'static>) -> io::Result<Self> {
        let tls = ClientConnection::new(config, name).map_err(io::Error::other)?;
        Ok(Self::new(io, tls.into()))
    }

    fn new(io: S, mut tls: Connection) -> Self {
        tls.set_buffer_limit(Some(BUFFER_LIMIT));
        TlsStream { io, tls, closing: false }
    }

    pub fn get_ref(&self) -> &S {
        &self.io
    }

    pub fn get_mut(&mut self) -> &mut S {
        &mut self.io
    }

    /// Completes the handshake (both sides); the error says why it failed.
    pub async fn handshake(&mut self) -> io::Result<()> {
        futures_lite::future::poll_fn(|cx| self.poll_handshake(cx)).await
    }

    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let sent = self.poll_send(cx);
            if let Poll::Ready(Err(e)) = sent {
                return Poll::Ready(Err(e));
            }
            if !self.tls.is_handshaking() {
                return sent;
            }
            match self.receive(cx) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into())),
                Poll::Ready(Ok(_)) => {}
                other => return other.map_ok(|_| ()),
            }
        }
    }

    /// Hands rustls's queued ciphertext to the socket; ready once none is left.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut Io { io: &mut self.io, cx }) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Reads ciphertext from the socket and processes it: the bytes read (0
    /// at the socket's end), pending when the socket has none.
    fn receive(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let n = match self.tls.read_tls(&mut Io { io: &mut self.io, cx }) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
            Err(e) => return Poll::Ready(Err(e)),
        };
        if let Err(e) = self.tls.process_new_packets() {
            // The alert rustls queued goes out if the socket takes it.
            let _ = self.poll_send(cx);
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
        }
        Poll::Ready(Ok(n))
    }
}

/// The socket as `Read`/`Write` for rustls, within one poll.
struct Io<'a, 'b, S> {
    io: &'a mut S,
    cx: &'a mut Context<'b>,
}

impl<S: AsyncRead + Unpin> Read for Io<'_, '_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_read(self.cx, buf) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl<S: AsyncWrite + Unpin> Write for Io<'_, '_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_write(self.cx, buf) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsStream<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            // Ciphertext a full socket left behind goes out first.
            if let Poll::Ready(Err(e)) = this.poll_send(cx) {
                return Poll::Ready(Err(e));
            }
            match this.tls.reader().read(buf) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The peer closed without close_notify: an end all the same.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Poll::Ready(Ok(0)),
                Err(e) => return Poll::Ready(Err(e)),
            }
            match this.receive(cx) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Ok(0)),
                Poll::Ready(Ok(_)) => {}
                other => return other,
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsStream<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        // Earlier ciphertext still waiting for room holds the writer back,
        // as a full socket would.
        match this.poll_send(cx) {
            Poll::Ready(Ok(())) => {}
            other => return other.map_ok(|_| 0),
        }
        let n = this.tls.writer().write(buf)?;
        if let Poll::Ready(Err(e)) = this.poll_send(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match this.poll_send(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut this.io).poll_flush(cx),
            other => other,
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.closing {
            this.closing = true;
            this.tls.send_close_notify();
        }
        match this.poll_send(cx) {
            Poll::Ready(_) => Pin::new(&mut this.io).poll_close(cx),
            Poll::Pending => Poll::Pending,
        }
    }
}
