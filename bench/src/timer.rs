//! A timerfd with nanosecond resolution for the open-loop schedule: epoll's
//! own timeout has millisecond granularity, which would add up to 1 ms of
//! client-side delay to every scheduled send.

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

pub struct Timer {
    fd: OwnedFd,
    /// Expiry currently set, if it hasn't been acknowledged yet.
    armed: Option<Instant>,
}

impl Timer {
    pub fn new(registry: &Registry, token: Token) -> io::Result<Self> {
        // SAFETY: plain syscall; the returned fd is checked and then owned.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        registry.register(&mut SourceFd(&fd.as_raw_fd()), token, Interest::READABLE)?;
        Ok(Timer { fd, armed: None })
    }

    /// Makes sure the timer fires no later than `at`. Only re-arms if that
    /// is earlier than the pending expiry, saving a syscall per loop turn.
    pub fn arm(&mut self, at: Instant, now: Instant) -> io::Result<()> {
        if self.armed.is_some_and(|a| a <= at) {
            return Ok(());
        }
        let after = at.saturating_duration_since(now).max(Duration::from_nanos(1)); // zero would disarm
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec { tv_sec: after.as_secs() as libc::time_t, tv_nsec: after.subsec_nanos() as _ },
        };
        // SAFETY: valid fd and a fully initialised itimerspec.
        if unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) } < 0 {
            return Err(io::Error::last_os_error());
        }
        self.armed = Some(at);
        Ok(())
    }

    /// Consumes the expiry notification after the timer fired.
    pub fn acknowledge(&mut self) {
        let mut n = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a local buffer; EAGAIN is fine.
        unsafe { libc::read(self.fd.as_raw_fd(), n.as_mut_ptr().cast(), 8) };
        self.armed = None;
    }
}
