//! The cut: one instant all shards agree on.
//!
//! Every core's thread waits at this barrier inside a mesh call and takes
//! its shard's cut after it opens. While any core waits, none has passed,
//! so at the moment the last one arrives no core executes anything: each
//! shard's cut is equivalent to that one instant T. If write w1 happened
//! before w2 (w2's client saw w1's reply), w1 executed before w2; if w2 is
//! in the snapshot it executed before its shard's arrival, so before T, so
//! w1 did too, and w1's shard was not yet waiting (it waits from its arrival
//! through T): w1 precedes that shard's cut and is in the snapshot.
//!
//! A thread barrier costs the data path nothing (no gate to check on each
//! write); the price is that every core stalls for the mesh round trip to
//! the slowest core. One save at a time in the process, so two barriers
//! can never wait on each other; a core that never arrives (shutting down)
//! makes every waiter give up after the timeout, all of them alike.
//!
//! The coordinating core arrives last, and only once all the others have:
//! until then it keeps running its reactor, which is what delivers its
//! mesh messages' wake-ups to the other cores (a blocked sender would leave
//! a sleeping peer unwoken, and the barrier would never fill).

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

pub struct CutBarrier {
    parties: usize,
    timeout: Duration,
    state: Mutex<State>,
    opened: Condvar,
}

#[derive(Default)]
struct State {
    arrived: usize,
    open: bool,
    broken: bool,
}

impl CutBarrier {
    pub fn new(parties: usize, timeout: Duration) -> Self {
        CutBarrier { parties, timeout, state: Mutex::new(State::default()), opened: Condvar::new() }
    }

    /// Parties that have arrived so far (the coordinator waits for all but
    /// itself before arriving).
    pub fn arrived(&self) -> usize {
        self.state.lock().map_or(0, |s| if s.broken { usize::MAX } else { s.arrived })
    }

    /// Breaks the barrier for everyone (the coordinator gave up waiting for
    /// the others, without blocking its own thread).
    pub fn abandon(&self) {
        if let Ok(mut s) = self.state.lock() {
            if !s.open {
                s.broken = true;
                self.opened.notify_all();
            }
        }
    }

    /// Blocks the calling thread until every party arrived (true) or the
    /// barrier broke by timeout (false, for every party).
    pub fn wait(&self) -> bool {
        let deadline = Instant::now() + self.timeout;
        let Ok(mut s) = self.state.lock() else {
            return false;
        };
        if s.broken {
            return false;
        }
        s.arrived += 1;
        if s.arrived == self.parties {
            s.open = true;
            self.opened.notify_all();
            return true;
        }
        while !s.open && !s.broken {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                s.broken = true;
                self.opened.notify_all();
                return false;
            }
            s = match self.opened.wait_timeout(s, left) {
                Ok((guard, _)) => guard,
                Err(_) => return false,
            };
        }
        s.open
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn opens_for_all_or_breaks_for_all() {
        let b = Arc::new(CutBarrier::new(4, Duration::from_secs(10)));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn({
                    let b = b.clone();
                    move || b.wait()
                })
            })
            .collect();
        assert!(handles.into_iter().all(|h| h.join().unwrap()));

        let b = Arc::new(CutBarrier::new(3, Duration::from_millis(50)));
        let early: Vec<_> = (0..2)
            .map(|_| {
                std::thread::spawn({
                    let b = b.clone();
                    move || b.wait()
                })
            })
            .collect();
        assert!(early.into_iter().all(|h| !h.join().unwrap()));
        assert!(!b.wait(), "a late arrival finds the barrier broken");

        let b = Arc::new(CutBarrier::new(2, Duration::from_secs(60)));
        let waiter = std::thread::spawn({
            let b = b.clone();
            move || b.wait()
        });
        while b.arrived() < 1 {
            std::thread::yield_now();
        }
        b.abandon();
        assert!(!waiter.join().unwrap(), "abandoning releases the waiters at once");
        assert!(!b.wait());
    }
}
