//! Out of file descriptors (EMFILE/ENFILE) a pending client cannot be
//! accepted and would wait with no answer. Redis lowers `maxclients` to fit
//! `ulimit -n` so that this is rare (src/limits.rs does the same); when it
//! happens anyway, this core gives up its spare descriptor, accepts each
//! pending client, answers it with the max-clients error and closes it,
//! then takes the spare back. The warning is logged at most once a second.

use crate::log;
use std::cell::Cell;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

thread_local! {
    static SPARE: Cell<RawFd> = const { Cell::new(-1) };
    static LOGGED: Cell<Option<Instant>> = const { Cell::new(None) };
}

const REFUSAL: &[u8] = b"-ERR max number of clients reached\r\n";

/// Holds this core's spare descriptor (called at start and after a shed).
pub fn reserve() {
    SPARE.with(|spare| {
        if spare.get() < 0 {
            // SAFETY: opening /dev/null read-only; the fd is ours.
            spare.set(unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) });
        }
    });
}

/// Whether an accept failed for want of descriptors.
pub fn exhausted(errno: i32) -> bool {
    errno == libc::EMFILE || errno == libc::ENFILE
}

/// Refuses every client pending on `listener` (non-blocking) with the
/// max-clients error, using the spare descriptor; logs `error` (rate
/// limited).
pub fn shed(listener: RawFd, error: &std::io::Error) {
    let now = Instant::now();
    if LOGGED.with(|l| l.get().is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1))) {
        LOGGED.with(|l| l.set(Some(now)));
        log::warning(&format!("Accepting client connection: {error}"));
    }
    SPARE.with(|spare| {
        if spare.get() >= 0 {
            // SAFETY: our own spare fd.
            unsafe { libc::close(spare.get()) };
            spare.set(-1);
        }
    });
    loop {
        // SAFETY: accept4 on a listening socket we own, no address wanted.
        let fd = unsafe {
            libc::accept4(
                listener,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if fd < 0 {
            break;
        }
        // SAFETY: the fresh socket is ours; best effort, then closed.
        unsafe {
            libc::send(fd, REFUSAL.as_ptr().cast(), REFUSAL.len(), libc::MSG_NOSIGNAL);
            libc::close(fd);
        }
    }
    reserve();
}
