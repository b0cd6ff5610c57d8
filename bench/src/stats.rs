//! Per-thread counters and HDR latency histograms, merged after the run.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Histograms track 1 µs .. 1 h with 3 significant digits (0.1% error).
pub const MAX_LATENCY_US: u64 = 3_600_000_000;

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid histogram bounds")
}

/// Duration in whole microseconds, rounded up (so nothing records as 0).
#[inline]
pub fn micros(d: Duration) -> u64 {
    (d.as_nanos() as u64).div_ceil(1000)
}

#[derive(Clone, Debug)]
pub struct CmdStats {
    /// Completed requests inside the measurement window.
    pub ops: u64,
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub hits: u64,
    pub misses: u64,
    /// Error replies (whole run, warm-up included).
    pub errors: u64,
    /// Replies that failed verification (whole run).
    pub mismatches: u64,
    pub hist: Histogram<u64>,
}

impl Default for CmdStats {
    fn default() -> Self {
        CmdStats {
            ops: 0,
            bytes_out: 0,
            bytes_in: 0,
            hits: 0,
            misses: 0,
            errors: 0,
            mismatches: 0,
            hist: new_histogram(),
        }
    }
}

impl CmdStats {
    #[inline]
    pub fn record(&mut self, latency: Duration, bytes_out: u64, bytes_in: u64) {
        self.ops += 1;
        self.bytes_out += bytes_out;
        self.bytes_in += bytes_in;
        self.hist.saturating_record(micros(latency));
    }

    pub fn merge(&mut self, o: &CmdStats) {
        self.ops += o.ops;
        self.bytes_out += o.bytes_out;
        self.bytes_in += o.bytes_in;
        self.hits += o.hits;
        self.misses += o.misses;
        self.errors += o.errors;
        self.mismatches += o.mismatches;
        self.hist.add(&o.hist).expect("histograms share bounds");
    }
}

#[derive(Clone, Debug)]
pub struct Stats {
    pub cmds: Vec<CmdStats>,
    /// Open loop: how late requests were actually sent versus their
    /// schedule. Large values mean this client, not the server, fell behind.
    pub send_lag: Histogram<u64>,
    pub moved: u64,
    pub ask: u64,
    pub connection_errors: u64,
    /// Requests that never got a reply: their connection failed, or the
    /// server stayed silent for the drain timeout.
    pub unanswered: u64,
    pub first_error: Option<String>,
    pub first_mismatch: Option<String>,
    /// Completion time of the last measured request.
    pub last_completion: Option<Instant>,
}

impl Stats {
    pub fn new(commands: usize) -> Self {
        Stats {
            cmds: vec![CmdStats::default(); commands],
            send_lag: new_histogram(),
            moved: 0,
            ask: 0,
            connection_errors: 0,
            unanswered: 0,
            first_error: None,
            first_mismatch: None,
            last_completion: None,
        }
    }

    pub fn merge(&mut self, o: &Stats) {
        for (a, b) in self.cmds.iter_mut().zip(&o.cmds) {
            a.merge(b);
        }
        self.send_lag.add(&o.send_lag).expect("histograms share bounds");
        self.moved += o.moved;
        self.ask += o.ask;
        self.connection_errors += o.connection_errors;
        self.unanswered += o.unanswered;
        self.first_error = self.first_error.take().or_else(|| o.first_error.clone());
        self.first_mismatch = self.first_mismatch.take().or_else(|| o.first_mismatch.clone());
        self.last_completion = self.last_completion.max(o.last_completion);
    }

    pub fn note_error(&mut self, msg: impl FnOnce() -> String) {
        if self.first_error.is_none() {
            self.first_error = Some(msg());
        }
    }

    pub fn note_mismatch(&mut self, msg: impl FnOnce() -> String) {
        if self.first_mismatch.is_none() {
            self.first_mismatch = Some(msg());
        }
    }

    /// All commands combined.
    pub fn total(&self) -> CmdStats {
        let mut t = CmdStats::default();
        for c in &self.cmds {
            t.merge(c);
        }
        t
    }

    pub fn failures(&self) -> u64 {
        let t = self.total();
        t.errors + t.mismatches + self.connection_errors + self.unanswered
    }
}

/// Latency summary in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub mean: f64,
    pub p50: u64,
    pub p90: u64,
    pub p95: u64,
    pub p99: u64,
    #[serde(rename = "p99.9")]
    pub p999: u64,
    #[serde(rename = "p99.99")]
    pub p9999: u64,
    pub max: u64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Self {
        let q = |p: f64| h.value_at_quantile(p);
        Latency {
            mean: h.mean(),
            p50: q(0.5),
            p90: q(0.9),
            p95: q(0.95),
            p99: q(0.99),
            p999: q(0.999),
            p9999: q(0.9999),
            max: h.max(),
        }
    }
}
