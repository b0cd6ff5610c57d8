//! Results: a memtier-like text table, JSON, and HdrHistogram percentile
//! distribution files. Latencies are microseconds in JSON and milliseconds
//! (3 decimals) in text, like memtier_benchmark.

use crate::cli::{Config, Stop};
use crate::procstat::ServerCpu;
use crate::run::{Outcome, PhaseResult};
use crate::stats::{CmdStats, Latency};
use crate::workload::Mix;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{self, Write};

#[derive(Serialize)]
pub struct Report {
    pub tool: &'static str,
    pub version: &'static str,
    /// The exact command that reproduces this run (seed included).
    pub command_line: String,
    pub seed: u64,
    pub config: ConfigSummary,
    pub nodes: Vec<String>,
    pub preload: Option<PhaseSummary>,
    pub run: PhaseSummary,
}

#[derive(Serialize)]
pub struct ConfigSummary {
    pub server: String,
    pub port: u16,
    pub cluster: bool,
    pub threads: usize,
    pub clients_per_thread: usize,
    pub pipeline: usize,
    pub refill: crate::cli::Refill,
    pub mode: &'static str,
    pub rate: Option<f64>,
    pub max_inflight: Option<usize>,
    pub workload: String,
    pub key_pattern: crate::keys::KeyPattern,
    pub key_minimum: u64,
    pub key_maximum: u64,
    pub key_prefix: String,
    /// (size in bytes, weight) pairs.
    pub data_sizes: Vec<(u32, u32)>,
    pub test_time_s: Option<f64>,
    pub requests_per_client: Option<u64>,
    pub warmup_s: f64,
}

#[derive(Serialize)]
pub struct PhaseSummary {
    pub duration_s: f64,
    pub ops: u64,
    pub ops_per_sec: f64,
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub bytes_out_per_sec: f64,
    pub bytes_in_per_sec: f64,
    pub errors: u64,
    pub mismatches: u64,
    pub connection_errors: u64,
    pub unanswered: u64,
    pub moved: u64,
    pub ask: u64,
    pub first_error: Option<String>,
    pub first_mismatch: Option<String>,
    pub latency_us: Latency,
    /// Open loop only: actual minus scheduled send time.
    pub send_lag_us: Option<Latency>,
    pub commands: BTreeMap<String, CommandSummary>,
    /// Command names in workload order (SET before GET), for the text table.
    #[serde(skip)]
    pub order: Vec<String>,
    /// Completed requests per second of wall time, warm-up included.
    pub ops_per_second_timeline: Vec<u64>,
    /// With --server-pid: the servers' CPU time over the measured window.
    pub server_cpu: Option<ServerCpu>,
}

#[derive(Serialize)]
pub struct CommandSummary {
    pub ops: u64,
    pub ops_per_sec: f64,
    pub hits: u64,
    pub misses: u64,
    pub hits_per_sec: f64,
    pub misses_per_sec: f64,
    pub errors: u64,
    pub mismatches: u64,
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub latency_us: Latency,
}

fn command_summary(c: &CmdStats, secs: f64) -> CommandSummary {
    let rate = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
    CommandSummary {
        ops: c.ops,
        ops_per_sec: rate(c.ops),
        hits: c.hits,
        misses: c.misses,
        hits_per_sec: rate(c.hits),
        misses_per_sec: rate(c.misses),
        errors: c.errors,
        mismatches: c.mismatches,
        bytes_out: c.bytes_out,
        bytes_in: c.bytes_in,
        latency_us: Latency::of(&c.hist),
    }
}

fn phase_summary(r: &PhaseResult, names: &[String], pids: &[u32]) -> PhaseSummary {
    let secs = r.measured.as_secs_f64();
    let s = &r.stats;
    let total = command_summary(&s.total(), secs);
    PhaseSummary {
        duration_s: secs,
        ops: total.ops,
        ops_per_sec: total.ops_per_sec,
        bytes_out: total.bytes_out,
        bytes_in: total.bytes_in,
        bytes_out_per_sec: if secs > 0.0 { total.bytes_out as f64 / secs } else { 0.0 },
        bytes_in_per_sec: if secs > 0.0 { total.bytes_in as f64 / secs } else { 0.0 },
        errors: total.errors,
        mismatches: total.mismatches,
        connection_errors: s.connection_errors,
        unanswered: s.unanswered,
        moved: s.moved,
        ask: s.ask,
        first_error: s.first_error.clone(),
        first_mismatch: s.first_mismatch.clone(),
        latency_us: total.latency_us,
        send_lag_us: (!s.send_lag.is_empty()).then(|| Latency::of(&s.send_lag)),
        commands: names.iter().cloned().zip(s.cmds.iter().map(|c| command_summary(c, secs))).collect(),
        order: names.to_vec(),
        ops_per_second_timeline: r.timeline.clone(),
        server_cpu: r.server_cpu.map(|w| ServerCpu::new(pids, w, total.ops_per_sec)),
    }
}

impl Report {
    pub fn new(cfg: &Config, out: &Outcome) -> Self {
        let a = &cfg.args;
        let names = cfg.workload.command_names();
        let workload = match &cfg.workload.mix {
            Mix::Ratio { sets, gets } => format!("SET:GET {sets}:{gets}"),
            Mix::Custom(_) => a.command.clone().unwrap_or_default(),
        };
        Report {
            tool: "corekv-bench",
            version: env!("CARGO_PKG_VERSION"),
            command_line: command_line(cfg.seed, a.seed.is_some()),
            seed: cfg.seed,
            config: ConfigSummary {
                server: a.server.clone(),
                port: a.port,
                cluster: a.cluster,
                threads: a.threads,
                clients_per_thread: a.clients,
                pipeline: a.pipeline,
                refill: a.refill,
                mode: if a.rate.is_some() { "open-loop" } else { "closed-loop" },
                rate: a.rate,
                max_inflight: a.rate.map(|_| a.max_inflight),
                workload,
                key_pattern: a.key_pattern,
                key_minimum: a.key_minimum,
                key_maximum: a.key_maximum,
                key_prefix: a.key_prefix.clone(),
                data_sizes: cfg.sizes.clone(),
                test_time_s: match cfg.stop {
                    Stop::Time(d) => Some(d.as_secs_f64()),
                    Stop::Requests(_) => None,
                },
                requests_per_client: match cfg.stop {
                    Stop::Requests(n) => Some(n),
                    Stop::Time(_) => None,
                },
                warmup_s: cfg.warmup.as_secs_f64(),
            },
            nodes: out.nodes.clone(),
            preload: out.preload.as_ref().map(|p| phase_summary(p, &["SET".into(), "GET".into()], &[])),
            run: phase_summary(&out.run, &names, &a.server_pid),
        }
    }

    pub fn text(&self) -> String {
        let c = &self.config;
        let mut s = String::new();
        let mode = match c.rate {
            Some(r) => format!(
                "open loop at {r} req/s (latency from scheduled send; max {} in flight per client)",
                c.max_inflight.unwrap_or(0)
            ),
            None if c.pipeline > 1 => format!("closed loop, pipeline {} ({:?} refill)", c.pipeline, c.refill),
            None => "closed loop, pipeline 1".to_string(),
        };
        let _ = writeln!(
            s,
            "corekv-bench {}: {} threads x {} clients, {mode}",
            self.version, c.threads, c.clients_per_thread
        );
        let _ = writeln!(
            s,
            "server {}:{}{}, workload {}",
            c.server,
            c.port,
            if c.cluster { " (cluster)" } else { "" },
            c.workload
        );
        let _ = writeln!(s, "rerun: {}", self.command_line);
        if let Some(p) = &self.preload {
            let _ = writeln!(s, "preload: {} keys in {:.2} s ({:.0} SET/s)", p.ops, p.duration_s, p.ops_per_sec);
        }
        let r = &self.run;
        let _ = writeln!(s, "measured {:.2} s (after {:.1} s warm-up)\n", r.duration_s, c.warmup_s);
        let header = [
            "Type",
            "Ops/sec",
            "Hits/sec",
            "Misses/sec",
            "Avg(ms)",
            "p50(ms)",
            "p90(ms)",
            "p99(ms)",
            "p99.9(ms)",
            "p99.99(ms)",
            "Max(ms)",
            "KB/s in",
            "KB/s out",
        ];
        let _ = writeln!(s, "{:<8}{}", header[0], header[1..].iter().map(|h| format!("{h:>12}")).collect::<String>());
        let _ = writeln!(s, "{}", "-".repeat(8 + 12 * (header.len() - 1)));
        let row = |s: &mut String, name: &str, x: &CommandSummary, secs: f64| {
            let l = &x.latency_us;
            let ms = |us: u64| format!("{:>12.3}", us as f64 / 1000.0);
            let kb = |b: u64| {
                if secs > 0.0 {
                    b as f64 / 1024.0 / secs
                } else {
                    0.0
                }
            };
            let _ = writeln!(
                s,
                "{name:<8}{:>12.2}{:>12.2}{:>12.2}{:>12.3}{}{}{}{}{}{}{:>12.2}{:>12.2}",
                x.ops_per_sec,
                x.hits_per_sec,
                x.misses_per_sec,
                l.mean / 1000.0,
                ms(l.p50),
                ms(l.p90),
                ms(l.p99),
                ms(l.p999),
                ms(l.p9999),
                ms(l.max),
                kb(x.bytes_in),
                kb(x.bytes_out),
            );
        };
        for name in &r.order {
            row(&mut s, name, &r.commands[name], r.duration_s);
        }
        let total = CommandSummary {
            ops: r.ops,
            ops_per_sec: r.ops_per_sec,
            hits: r.commands.values().map(|x| x.hits).sum(),
            misses: r.commands.values().map(|x| x.misses).sum(),
            hits_per_sec: r.commands.values().map(|x| x.hits_per_sec).sum(),
            misses_per_sec: r.commands.values().map(|x| x.misses_per_sec).sum(),
            errors: r.errors,
            mismatches: r.mismatches,
            bytes_out: r.bytes_out,
            bytes_in: r.bytes_in,
            latency_us: r.latency_us.clone(),
        };
        row(&mut s, "Totals", &total, r.duration_s);
        let _ = writeln!(
            s,
            "\nerrors {}  mismatches {}  connection errors {}  unanswered {}",
            r.errors, r.mismatches, r.connection_errors, r.unanswered
        );
        if let Some(lag) = &r.send_lag_us {
            let _ = writeln!(
                s,
                "send lag behind schedule (client side, ms): p50 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}",
                lag.p50 as f64 / 1000.0,
                lag.p99 as f64 / 1000.0,
                lag.p999 as f64 / 1000.0,
                lag.max as f64 / 1000.0
            );
        }
        if let Some(target) = c.rate.filter(|&t| r.ops_per_sec < 0.95 * t) {
            let _ = writeln!(
                s,
                "warning: achieved {:.0} of the {target} req/s schedule: the server (or this client) \
                 could not keep up, and latencies include the growing backlog",
                r.ops_per_sec
            );
        }
        if let Some(cpu) = &r.server_cpu {
            let _ = writeln!(
                s,
                "server CPU (pids {:?}): {:.2} µs per request, {:.2} cores busy over {:.2} s",
                cpu.pids, cpu.us_per_op, cpu.cores_busy, cpu.window_s
            );
        }
        if c.cluster {
            let _ = writeln!(s, "cluster: {} nodes, {} MOVED, {} ASK redirects", self.nodes.len(), r.moved, r.ask);
        }
        for (what, msg) in [("first error", &r.first_error), ("first mismatch", &r.first_mismatch)] {
            if let Some(m) = msg {
                let _ = writeln!(s, "{what}: {m}");
            }
        }
        s
    }

    pub fn write_json(&self, path: &std::path::Path) -> io::Result<()> {
        let mut f = io::BufWriter::new(std::fs::File::create(path)?);
        serde_json::to_writer_pretty(&mut f, self)?;
        f.write_all(b"\n")?;
        f.flush()
    }
}

/// Writes `PREFIX_<CMD>.txt` and `PREFIX_ALL.txt` in HdrHistogram's
/// percentile-distribution format (values in ms), as memtier's --hdr-file-prefix.
pub fn write_hdr_files(prefix: &str, names: &[String], r: &PhaseResult) -> io::Result<()> {
    let total = r.stats.total();
    let all = std::iter::once(("ALL", &total.hist))
        .chain(names.iter().map(|n| n.as_str()).zip(r.stats.cmds.iter().map(|c| &c.hist)));
    for (name, h) in all {
        std::fs::write(format!("{prefix}_{name}.txt"), percentile_distribution(h))?;
    }
    Ok(())
}

pub fn percentile_distribution(h: &Histogram<u64>) -> String {
    let mut s = format!("{:>12} {:>14} {:>10} {:>14}\n\n", "Value", "Percentile", "TotalCount", "1/(1-Percentile)");
    let mut count = 0;
    for v in h.iter_quantiles(5) {
        count += v.count_since_last_iteration();
        let q = v.quantile_iterated_to();
        let inv = if q < 1.0 { format!("{:>14.2}", 1.0 / (1.0 - q)) } else { format!("{:>14}", "inf") };
        let _ = writeln!(s, "{:>12.3} {:>14.12} {:>10} {inv}", v.value_iterated_to() as f64 / 1000.0, q, count);
    }
    let _ = writeln!(s, "#[Mean    = {:>12.3}, StdDeviation   = {:>12.3}]", h.mean() / 1000.0, h.stdev() / 1000.0);
    let _ = writeln!(s, "#[Max     = {:>12.3}, Total count    = {:>12}]", h.max() as f64 / 1000.0, h.len());
    s
}

/// The invocation, shell-quoted, with `--seed` appended if it was random
/// and the password masked (reports get shared).
fn command_line(seed: u64, seed_given: bool) -> String {
    let quote = |a: String| {
        if !a.is_empty() && a.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_=:,./@%+".contains(&b)) {
            a
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    };
    let mut mask_next = false;
    let mut args: Vec<String> = std::env::args()
        .map(|a| {
            let masked = if std::mem::take(&mut mask_next) {
                "***".to_string()
            } else if a == "-a" || a == "--auth" {
                mask_next = true;
                a
            } else if a.starts_with("--auth=") {
                "--auth=***".to_string()
            } else if a.starts_with("-a") && a.len() > 2 && !a.starts_with("--") {
                "-a***".to_string()
            } else {
                a
            };
            quote(masked)
        })
        .collect();
    if !seed_given {
        args.push(format!("--seed={seed}"));
    }
    args.join(" ")
}
