//! A per-core histogram of command latency with fixed buckets, for the
//! Prometheus endpoint (metrics.rs): plain cells, no lock, no allocation.
//! A batch of commands read together is recorded once, weighted by its
//! command count: each waited from the read to its batch's replies.

use std::cell::Cell;
use std::time::Duration;

/// Upper bounds of the buckets in seconds (Prometheus's `le`); one more
/// bucket (+Inf) holds the rest.
pub const BOUNDS: [f64; 15] =
    [0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0];

const BOUNDS_NS: [u64; 15] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    1_000_000_000,
];

#[derive(Default)]
pub struct LatencyHistogram {
    /// Per bucket (not cumulative), the last one +Inf.
    counts: [Cell<u64>; 16],
    sum_ns: Cell<u64>,
}

/// A copy to send over the mesh.
#[derive(Clone, Copy, Default, Debug)]
pub struct LatencySnapshot {
    pub counts: [u64; 16],
    pub sum_seconds: f64,
}

impl LatencyHistogram {
    #[inline]
    pub fn record(&self, took: Duration, commands: u64) {
        let ns = took.as_nanos().min(u64::MAX as u128) as u64;
        let bucket = BOUNDS_NS.iter().position(|&b| ns <= b).unwrap_or(BOUNDS_NS.len());
        let c = &self.counts[bucket];
        c.set(c.get() + commands);
        self.sum_ns.set(self.sum_ns.get().wrapping_add(ns.saturating_mul(commands)));
    }

    pub fn snapshot(&self) -> LatencySnapshot {
        LatencySnapshot {
            counts: std::array::from_fn(|i| self.counts[i].get()),
            sum_seconds: self.sum_ns.get() as f64 / 1e9,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_by_upper_bound() {
        let h = LatencyHistogram::default();
        h.record(Duration::from_micros(10), 1);
        h.record(Duration::from_micros(11), 2);
        h.record(Duration::from_secs(2), 1);
        let s = h.snapshot();
        assert_eq!(s.counts[0], 1);
        assert_eq!(s.counts[1], 2);
        assert_eq!(s.counts[15], 1);
        assert!((s.sum_seconds - 2.000032).abs() < 1e-9);
    }
}
