//! INFO's commandstats, errorstats and latencystats sections (Redis 7.0's
//! field names and formats), from every core's counters summed
//! (`shard::observe::Counters`) and its histograms added up.

use crate::coordinator::dispatch::call_all;
use crate::core::Core;
use shard::commands::numbered;
use shard::config::trim_double;
use shard::observe::hdr::Histogram;
use shard::observe::Counters;
use shard::Config;
use std::fmt::Write;
use std::rc::Rc;

/// Redis's getSafeInfoString: `#`, `:`, CR and LF become `_`.
fn safe(name: &[u8]) -> String {
    String::from_utf8_lossy(name).chars().map(|c| if matches!(c, '#' | ':' | '\n' | '\r') { '_' } else { c }).collect()
}

/// `cmdstat_<name>:calls=..,usec=..,usec_per_call=..,rejected_calls=..,failed_calls=..`.
pub fn commandstats(c: &Counters) -> String {
    let mut out = String::new();
    for (i, [calls, usec, rejected, failed]) in &c.commands {
        let Some(spec) = numbered().get(*i) else { continue };
        // Redis divides as C floats.
        let per_call = if *calls == 0 { 0.0 } else { (*usec as f32 / *calls as f32) as f64 };
        let _ = write!(
            out,
            "cmdstat_{}:calls={calls},usec={usec},usec_per_call={per_call:.2},rejected_calls={rejected},failed_calls={failed}\r\n",
            safe(spec.name.as_bytes())
        );
    }
    out
}

/// `errorstat_<CODE>:count=N`, codes in byte order.
pub fn errorstats(c: &Counters) -> String {
    let mut out = String::new();
    for (code, n) in &c.errors {
        let _ = write!(out, "errorstat_{}:count={n}\r\n", safe(code));
    }
    out
}

/// Every core's command histograms, added up by command.
pub async fn histograms(core: &Rc<Core>) -> Vec<(usize, Histogram)> {
    let parts = call_all(core, |core| core.shard.borrow().observe.histograms(None)).await;
    let mut merged: Vec<(usize, Histogram)> = Vec::new();
    for (i, h) in parts.into_iter().flatten().flatten() {
        match merged.iter_mut().find(|(j, _)| *j == i) {
            Some((_, m)) => m.add(&h),
            None => merged.push((i, h)),
        }
    }
    merged.sort_by_key(|(i, _)| *i);
    merged
}

/// `latency_percentiles_usec_<name>:p50=..,p99=..,p99.9=..` (empty while
/// latency-tracking is off).
pub fn latencystats(histograms: &[(usize, Histogram)], config: &Config) -> String {
    let mut out = String::new();
    if !config.latency_tracking {
        return out;
    }
    for (i, h) in histograms {
        let Some(spec) = numbered().get(*i) else { continue };
        let _ = write!(out, "latency_percentiles_usec_{}:", safe(spec.name.as_bytes()));
        let ps = &config.latency_tracking_info_percentiles;
        for (j, p) in ps.iter().enumerate() {
            let value = h.value_at_percentile(*p) as f64 / 1000.0;
            let _ = write!(out, "p{}={value:.3}", trim_double(*p));
            if j + 1 != ps.len() {
                out.push(',');
            }
        }
        out.push_str("\r\n");
    }
    out
}
