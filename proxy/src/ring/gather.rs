//! How many completions a park waits for. Woken by the first one, a busy
//! shard sleeps and wakes once for every one or two requests: under a
//! closed-loop load of 50 connections each wake-up found exactly one, and
//! the sleep, the wake-up and the turn around them cost more than the
//! request. Asking the kernel for several, with a bound on the wait
//! (`min_wait_usec`, Linux 6.12: after it, whatever has come ends the
//! wait), lets one wake-up serve several requests, as Redis's slower loop
//! finds several sockets ready per `epoll_wait`. It trades latency for
//! CPU, so it is off unless `client-ring-gather-us` sets a bound
//! (bench/RESULTS.md, "Wake-ups that serve several requests").
//!
//! The count follows the load:
//! - it grows by one after a wake-up that found what it waited for in
//!   under half the bound (requests come fast enough to fill one more);
//! - a wake-up that found fewer (the bound ran out) sets it to what came,
//!   and the ceiling one below the count that failed; the ceiling rises by
//!   one again after `PROBE` wake-ups, so a load that cannot fill a larger
//!   count pays the bound about once per `PROBE` parks;
//! - it is at most half the connections that sent anything in the last
//!   `EPOCH` receives: each of those has one request in flight at most
//!   when it waits for its reply, so one client alone, or two, never wait
//!   for one another however fast they are;
//! - a wake-up with nothing (a timer, glommio's own wake-up) changes nothing.

use std::cell::Cell;
use std::time::Duration;

/// The most completions a park waits for.
const MOST: u32 = 16;

/// Wake-ups between two tries at a higher ceiling.
const PROBE: u32 = 64;

/// Receives over which the connections that sent something are counted.
const EPOCH: u32 = 1024;

pub(super) struct Gather {
    /// Completions the next park waits for.
    want: Cell<u32>,
    /// The count it may grow to; lowered when the bound ran out.
    ceiling: Cell<u32>,
    /// Wake-ups since the ceiling last moved.
    since_probe: Cell<u32>,
    /// The longest a park waits for more than one (zero: never waits for more).
    bound: Duration,
    /// The current epoch, its receives so far, and the connections that
    /// sent something in it.
    epoch: Cell<u32>,
    receives: Cell<u32>,
    senders: Cell<u32>,
    /// Connections that sent something in the last whole epoch.
    last_senders: Cell<u32>,
}

impl Gather {
    pub(super) fn new(bound: Duration) -> Gather {
        Gather {
            want: Cell::new(1),
            ceiling: Cell::new(MOST),
            since_probe: Cell::new(0),
            bound,
            epoch: Cell::new(1),
            receives: Cell::new(0),
            senders: Cell::new(0),
            last_senders: Cell::new(0),
        }
    }

    /// False with a zero bound: every park ends at the first completion,
    /// and nothing needs counting.
    #[inline]
    pub(super) fn is_on(&self) -> bool {
        !self.bound.is_zero()
    }

    /// Completions to wait for, and the bound when more than one.
    pub(super) fn want(&self) -> (u32, Option<Duration>) {
        match self.want.get() {
            want if want > 1 => (want, Some(self.bound)),
            _ => (1, None),
        }
    }

    /// A connection received input; `seen` is its own record of the last
    /// epoch it did.
    #[inline]
    pub(super) fn received(&self, seen: &mut u32) {
        if !self.is_on() {
            return;
        }
        let epoch = self.epoch.get();
        if *seen != epoch {
            *seen = epoch;
            self.senders.set(self.senders.get() + 1);
        }
        let receives = self.receives.get() + 1;
        if receives < EPOCH {
            self.receives.set(receives);
        } else {
            self.last_senders.set(self.senders.get());
            self.epoch.set(epoch.wrapping_add(1).max(1));
            self.receives.set(0);
            self.senders.set(0);
        }
    }

    /// A park that waited for `waited_for` completions found `found`
    /// after `waited`.
    pub(super) fn woke(&self, waited_for: u32, found: usize, waited: Duration) {
        if !self.is_on() || found == 0 {
            return;
        }
        let found = u32::try_from(found).unwrap_or(u32::MAX);
        let mut ceiling = self.ceiling.get();
        let probe = self.since_probe.get() + 1;
        if found < waited_for {
            ceiling = waited_for - 1;
            self.since_probe.set(0);
        } else if probe >= PROBE {
            ceiling = (ceiling + 1).min(MOST);
            self.since_probe.set(0);
        } else {
            self.since_probe.set(probe);
        }
        self.ceiling.set(ceiling);
        let next = if found < waited_for {
            found
        } else if waited < self.bound / 2 {
            waited_for + 1
        } else {
            waited_for
        };
        let cap = ceiling.min(self.last_senders.get() / 2).max(1);
        self.want.set(next.clamp(1, cap));
    }
}

#[cfg(test)]
mod tests {
    use super::{Gather, EPOCH, MOST, PROBE};
    use std::time::Duration;

    const BOUND: Duration = Duration::from_micros(20);
    const QUICK: Duration = Duration::from_micros(2);

    /// `parks` wake-ups, each finding at once what it waited for.
    fn busy(g: &Gather, parks: u32) {
        for _ in 0..parks {
            let (want, _) = g.want();
            g.woke(want, want as usize, QUICK);
        }
    }

    /// `clients` connections sent the last epoch's input, in turn.
    fn senders(g: &Gather, clients: u32) {
        let mut seen = vec![0; clients as usize];
        for i in 0..EPOCH {
            g.received(&mut seen[(i % clients) as usize]);
        }
    }

    #[test]
    fn one_client_is_never_held_back() {
        let g = Gather::new(BOUND);
        senders(&g, 1);
        for _ in 0..1000 {
            let (want, bound) = g.want();
            assert_eq!((want, bound), (1, None));
            g.woke(want, 1, QUICK);
        }
    }

    #[test]
    fn grows_with_the_load_and_falls_when_the_bound_runs_out() {
        let g = Gather::new(BOUND);
        senders(&g, 50);
        busy(&g, 100);
        assert_eq!(g.want(), (MOST, Some(BOUND)));
        g.woke(MOST, 3, BOUND);
        assert_eq!(g.want(), (3, Some(BOUND)));
        // Nothing found (a timer): no change.
        g.woke(3, 0, BOUND);
        assert_eq!(g.want(), (3, Some(BOUND)));
        // Slow arrivals keep it where it is.
        g.woke(3, 3, BOUND * 3 / 4);
        assert_eq!(g.want(), (3, Some(BOUND)));
        // It grows again, to one below the count that ran out, and tries
        // that count again after `PROBE` wake-ups.
        busy(&g, PROBE - 8);
        assert_eq!(g.want().0, MOST - 1);
        busy(&g, 8);
        assert_eq!(g.want().0, MOST);
    }

    #[test]
    fn few_clients_cap_the_count() {
        let g = Gather::new(BOUND);
        senders(&g, 6);
        busy(&g, 100);
        assert_eq!(g.want().0, 3);
        // Down to one client: the next epoch caps it at one.
        senders(&g, 1);
        g.woke(3, 3, QUICK);
        assert_eq!(g.want(), (1, None));
    }

    #[test]
    fn a_zero_bound_always_waits_for_one() {
        let g = Gather::new(Duration::ZERO);
        senders(&g, 50);
        g.woke(1, 50, QUICK);
        assert_eq!(g.want(), (1, None));
    }
}
