//! One non-blocking server connection: output buffer, input buffer, and the
//! FIFO of requests awaiting replies (RESP replies arrive in request order).

use crate::workload::Request;
use mio::net::TcpStream;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::Instant;

/// Counted in the statistics (sent inside the measurement window).
pub const MEASURED: u8 = 1;
/// GET of a key known to hold a value written by this run: verify it.
pub const KNOWN: u8 = 2;
/// Reply to connection plumbing (AUTH, ASKING), not to a workload request.
pub const SETUP: u8 = 4;

/// A request awaiting its reply.
#[derive(Debug, Clone, Copy)]
pub struct Pending {
    /// Latency origin: the actual send time (closed loop) or the scheduled
    /// send time (open loop).
    pub t0: Instant,
    pub req: Request,
    pub req_bytes: u32,
    pub flags: u8,
    pub redirects: u8,
}

const READ_CHUNK: usize = 64 * 1024;

pub struct Conn {
    pub stream: TcpStream,
    pub client: usize,
    pub node: usize,
    pub pending: VecDeque<Pending>,
    pub connected: bool,
    pub dead: bool,
    /// Replies already seen of the request at the front of `pending` (a
    /// `--command` of several commands answers with one reply each).
    pub partial: u8,
    out: Vec<u8>,
    out_pos: usize,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Conn {
    pub fn connect(addr: SocketAddr, client: usize, node: usize) -> io::Result<Self> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            client,
            node,
            pending: VecDeque::new(),
            connected: false,
            dead: false,
            partial: 0,
            out: Vec::with_capacity(16 * 1024),
            out_pos: 0,
            buf: vec![0; READ_CHUNK],
            start: 0,
            end: 0,
        })
    }

    /// Buffer that requests are encoded into; sent by `flush`.
    #[inline]
    pub fn out(&mut self) -> &mut Vec<u8> {
        &mut self.out
    }

    #[inline]
    pub fn has_output(&self) -> bool {
        self.out_pos < self.out.len()
    }

    /// Writes as much buffered output as the socket takes.
    pub fn flush(&mut self) -> io::Result<()> {
        if !self.connected {
            return Ok(()); // the writable event on connect flushes
        }
        while self.out_pos < self.out.len() {
            match self.stream.write(&self.out[self.out_pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.out.clear();
        self.out_pos = 0;
        Ok(())
    }

    /// One read into the input buffer. Returns true once the socket is
    /// drained: with edge-triggered epoll a short read means no more data for
    /// now, which saves the extra read() that would just return EAGAIN.
    pub fn read_some(&mut self) -> io::Result<bool> {
        if self.buf.len() - self.end < READ_CHUNK / 4 {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.buf.len() - self.end < READ_CHUNK / 4 {
                // A reply larger than the buffer (big values) is in progress.
                self.buf.resize(self.buf.len() * 2, 0);
            }
        }
        let space = self.buf.len() - self.end;
        loop {
            match self.stream.read(&mut self.buf[self.end..]) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "server closed the connection")),
                Ok(n) => {
                    self.end += n;
                    return Ok(n < space);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Received bytes not yet parsed.
    #[inline]
    pub fn unread(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Unparsed input together with the request queue, borrowed separately.
    #[inline]
    pub fn parts(&mut self) -> (&[u8], &mut VecDeque<Pending>, &mut u8) {
        (&self.buf[self.start..self.end], &mut self.pending, &mut self.partial)
    }

    #[inline]
    pub fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }
}
