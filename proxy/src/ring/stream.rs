//! A connection's end of the ring: reads take bytes from the provided
//! buffers its receive filled, writes queue replies for the driver's next
//! turn. Dropping it sends what is queued, then closes the socket.

use super::{Ring, State};
use futures_lite::{AsyncRead, AsyncWrite};
use std::os::fd::RawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

pub struct RingStream {
    ring: Rc<Ring>,
    key: usize,
}

impl RingStream {
    pub(super) fn new(ring: Rc<Ring>, key: usize) -> Self {
        RingStream { ring, key }
    }

    /// The ring this connection is on (whose driver can run its task).
    pub fn ring(&self) -> &Rc<Ring> {
        &self.ring
    }

    pub fn as_raw_fd(&self) -> RawFd {
        self.ring.state.borrow().conns[self.key].fd
    }

    /// Ready once there is input or the peer is gone (`false`).
    pub fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<bool> {
        let mut st = self.ring.state.borrow_mut();
        let c = &mut st.conns[self.key];
        if !c.input.is_empty() {
            return Poll::Ready(true);
        }
        if c.eof {
            return Poll::Ready(false);
        }
        c.reader.wait(cx);
        Poll::Pending
    }

    /// Reads `pending_output` later, from outside the connection's task
    /// (CLIENT LIST); 0 once the connection is gone.
    pub fn pending_probe(&self) -> impl Fn() -> usize + 'static {
        let (ring, key) = (self.ring.clone(), self.key);
        move || {
            let st = ring.state.try_borrow();
            st.ok().and_then(|st| st.conns.get(key).map(|c| c.queued.len() + c.sending.len() - c.sent)).unwrap_or(0)
        }
    }

    /// Reply bytes queued or being sent.
    pub fn pending_output(&self) -> usize {
        let st = self.ring.state.borrow();
        let c = &st.conns[self.key];
        c.queued.len() + c.sending.len() - c.sent
    }

    /// Copies received bytes into `buf`; `None` when there are none yet.
    fn take_input(st: &mut State, key: usize, buf: &mut [u8]) -> Option<usize> {
        let State { conns, bufs, .. } = st;
        let c = &mut conns[key];
        let mut n = 0;
        while n < buf.len() {
            let Some((bid, start, end)) = c.input.front_mut() else { break };
            let bytes = &bufs.bytes(*bid, *end as usize)[*start as usize..];
            let take = bytes.len().min(buf.len() - n);
            buf[n..n + take].copy_from_slice(&bytes[..take]);
            n += take;
            *start += take as u32;
            if *start == *end {
                let bid = *bid;
                c.input.pop_front();
                bufs.recycle(bid);
            }
        }
        (n > 0).then_some(n)
    }

    /// Queues `out` whole and leaves it empty: when nothing else is queued
    /// the buffers are swapped rather than the bytes copied (a large
    /// reply was copied twice, into `out` and then here).
    pub fn poll_write_vec(&self, cx: &mut Context<'_>, out: &mut Vec<u8>) -> Poll<std::io::Result<()>> {
        self.poll_queue(cx, |queued| {
            if queued.is_empty() {
                std::mem::swap(queued, out);
            } else {
                queued.extend_from_slice(out);
                out.clear();
            }
        })
    }

    /// Runs `put` on the connection's queue once there is room for more.
    fn poll_queue(&self, cx: &mut Context<'_>, put: impl FnOnce(&mut Vec<u8>)) -> Poll<std::io::Result<()>> {
        let ring = &self.ring;
        let mut st = ring.state.borrow_mut();
        let c = &mut st.conns[self.key];
        if c.failed {
            return Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
        }
        // A slow reader: its replies stay queued up to the high-water mark,
        // then the connection waits (and reads no more requests).
        if !c.queued.is_empty()
            && c.queued.len() + c.sending.len().saturating_sub(c.sent) >= ring.config.write_high_water
        {
            c.writer.wait(cx);
            return Poll::Pending;
        }
        put(&mut c.queued);
        ring.mark(&mut st, self.key);
        drop(st);
        ring.kick();
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for RingStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<std::io::Result<usize>> {
        let ring = &self.ring;
        let mut st = ring.state.borrow_mut();
        if let Some(n) = Self::take_input(&mut st, self.key, buf) {
            // Buffers came back: a receive that ran out of them (waiting in
            // the dirty list) can resume.
            let starved = !st.dirty.is_empty();
            drop(st);
            if starved {
                ring.kick();
            }
            return Poll::Ready(Ok(n));
        }
        let c = &mut st.conns[self.key];
        if c.eof || buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        c.reader.wait(cx);
        Poll::Pending
    }
}

impl AsyncWrite for RingStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.poll_queue(cx, |queued| queued.extend_from_slice(buf)).map_ok(|()| buf.len())
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl Drop for RingStream {
    fn drop(&mut self) {
        self.ring.release(self.key);
    }
}

impl Ring {
    /// What each accepted connection is handed to, with its listener's tag.
    pub fn on_accept(&self, f: impl Fn(RingStream, usize) + 'static) {
        self.set_on_accept(Box::new(move |ring, key, tag| f(RingStream::new(ring, key), tag)));
    }
}
