//! CLIENT PAUSE as one core holds it (a leaf: plain state). Every core
//! keeps the same pause, set and lifted over the mesh by CLIENT PAUSE and
//! UNPAUSE (`commands/client.rs`); the router holds a paused command back
//! (`router.rs`) and its connection parks here until the pause is lifted
//! or runs out. FAILOVER holds writes too, for its own purpose (Redis's
//! PAUSE_DURING_FAILOVER): CLIENT UNPAUSE does not lift that one.

use std::cell::{Cell, RefCell};
use std::task::Waker;

/// Redis's pause types, the larger the more restrictive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PauseKind {
    Off,
    /// Writes and what may replicate (EVAL, PUBLISH...) wait.
    Write,
    /// Every command waits.
    All,
}

#[derive(Default)]
pub struct Pause {
    kind: Cell<u8>,
    /// Unix ms at which the pause ends by itself.
    end_ms: Cell<u64>,
    /// Connections waiting for the pause to end (or for CLIENT KILL).
    parked: RefCell<Vec<Waker>>,
    /// FAILOVER's write pause, with the sequence number core 0 gave it (a
    /// core never goes back to an older one).
    failover: Cell<bool>,
    failover_seq: Cell<u64>,
}

impl Pause {
    /// The pause in force at `now_ms`; one that ran out counts as off
    /// (the cron lifts it).
    #[inline]
    pub fn kind(&self, now_ms: u64) -> PauseKind {
        let client = self.client_kind(now_ms);
        match self.failover.get() {
            true => client.max(PauseKind::Write),
            false => client,
        }
    }

    /// CLIENT PAUSE's part.
    fn client_kind(&self, now_ms: u64) -> PauseKind {
        match self.kind.get() {
            0 => PauseKind::Off,
            _ if self.end_ms.get() < now_ms => PauseKind::Off,
            1 => PauseKind::Write,
            _ => PauseKind::All,
        }
    }

    /// A pause is recorded, running or run out but not yet lifted.
    pub fn recorded(&self) -> bool {
        self.kind.get() != 0 || self.failover.get()
    }

    /// CLIENT PAUSE's pause ran out and is still recorded (the cron lifts it).
    pub fn client_ran_out(&self, now_ms: u64) -> bool {
        self.kind.get() != 0 && self.client_kind(now_ms) == PauseKind::Off
    }

    /// When the pause ends by itself (FAILOVER's never does).
    pub fn end_ms(&self) -> u64 {
        if self.failover.get() {
            return u64::MAX;
        }
        self.end_ms.get()
    }

    /// A failover is in progress (its pause holds writes on every core).
    pub fn in_failover(&self) -> bool {
        self.failover.get()
    }

    /// FAILOVER's pause on or off, unless a newer change is already in.
    pub fn set_failover(&self, (seq, on): (u64, bool)) {
        if seq <= self.failover_seq.get() {
            return;
        }
        self.failover_seq.set(seq);
        self.failover.set(on);
        if !on {
            self.wake_all();
        }
    }

    /// Redis's pauseClients for one purpose: a pause already running is
    /// only ever made longer and more restrictive; one that ends before
    /// `now_ms` (CLIENT PAUSE 0) is lifted at once.
    pub fn set(&self, kind: PauseKind, end_ms: u64, now_ms: u64) {
        let (old, old_end) = (self.client_kind(now_ms), self.end_ms.get());
        let (kind, end) = if old == PauseKind::Off { (kind, end_ms) } else { (old.max(kind), old_end.max(end_ms)) };
        self.kind.set(kind as u8);
        self.end_ms.set(end);
        if end < now_ms {
            self.lift();
        }
    }

    /// CLIENT UNPAUSE, or the pause ran out: every parked connection looks
    /// again (FAILOVER's pause stays).
    pub fn lift(&self) {
        self.kind.set(0);
        self.end_ms.set(0);
        self.wake_all();
    }

    /// Wakes every parked connection (they check the pause again, and
    /// whether they were killed meanwhile).
    pub fn wake_all(&self) {
        for waker in self.parked.borrow_mut().drain(..) {
            waker.wake();
        }
    }

    pub fn park(&self, waker: Waker) {
        self.parked.borrow_mut().push(waker);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_only_grows_and_runs_out() {
        let p = Pause::default();
        assert_eq!(p.kind(0), PauseKind::Off);
        p.set(PauseKind::All, 100, 10);
        assert_eq!(p.kind(50), PauseKind::All);
        // A later, weaker and shorter pause changes nothing.
        p.set(PauseKind::Write, 60, 20);
        assert_eq!((p.kind(90), p.end_ms()), (PauseKind::All, 100));
        assert_eq!(p.kind(101), PauseKind::Off);
        // Run out: a new one replaces it.
        p.set(PauseKind::Write, 300, 200);
        assert_eq!((p.kind(250), p.end_ms()), (PauseKind::Write, 300));
        p.lift();
        assert_eq!(p.kind(250), PauseKind::Off);
        // CLIENT PAUSE 0 ends at once.
        p.set(PauseKind::All, 0, 400);
        assert!(!p.recorded());
    }

    #[test]
    fn unpause_leaves_the_failover_pause() {
        let p = Pause::default();
        p.set_failover((2, true));
        p.set(PauseKind::All, 100, 10);
        assert_eq!(p.kind(50), PauseKind::All);
        p.lift();
        assert_eq!((p.kind(50), p.end_ms()), (PauseKind::Write, u64::MAX));
        // An older change arriving late is ignored.
        p.set_failover((1, false));
        assert!(p.in_failover());
        p.set_failover((3, false));
        assert_eq!(p.kind(50), PauseKind::Off);
        assert!(!p.recorded());
    }
}
