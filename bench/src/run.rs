//! Orchestration: server checks, the optional preload, the measured run on
//! N worker threads, and the progress display.

use crate::cli::{derive_seed, Config, Stop};
use crate::cluster::{self, SlotMap};
use crate::keys::{KeyGen, KeyPattern, KnownKeys};
use crate::phase::{ClientSpec, Phase, PhaseSync, Shared};
use crate::procstat::{CpuSample, CpuSampler, CpuWindow};
use crate::protocol::Reply;
use crate::stats::Stats;
use crate::worker;
use crate::workload::{Mix, Workload};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Preload pipelines at least this deep: it is a bulk load, not a measurement.
const PRELOAD_PIPELINE: usize = 64;
/// RNG stream offset keeping preload seeds apart from the run's.
const PRELOAD_STREAM: u64 = 1 << 40;

pub struct PhaseResult {
    pub stats: Stats,
    /// Measurement window: end of warm-up to the last measured reply.
    pub measured: Duration,
    /// Completed requests in each second since the start (warm-up included).
    pub timeline: Vec<u64>,
    /// CPU time of the --server-pid processes over the measured window.
    pub server_cpu: Option<CpuWindow>,
}

pub struct Outcome {
    pub preload: Option<PhaseResult>,
    pub run: PhaseResult,
    /// `host:port` of every node the run talked to.
    pub nodes: Vec<String>,
}

pub fn execute(cfg: &Config) -> Result<Outcome, String> {
    let a = &cfg.args;
    let sampler = if a.server_pid.is_empty() {
        None
    } else {
        Some(CpuSampler::new(&a.server_pid).map_err(|e| format!("--server-pid: {e}"))?)
    };
    let map = if a.cluster {
        let mut m = SlotMap::empty();
        m.fetch(&a.server, a.port, a.auth.as_deref())
            .map_err(|e| format!("reading CLUSTER SLOTS from {}:{}: {e}", a.server, a.port))?;
        match m.unassigned_slots() {
            0 => {}
            crate::cluster::SLOTS => return Err("the cluster has no slots assigned".into()),
            n => eprintln!("warning: {n} hash slots are not assigned to any node"),
        }
        m
    } else {
        cluster::call(&a.server, a.port, a.auth.as_deref(), &[b"PING"], |r| match r {
            Reply::Error(e) => Err(std::io::Error::other(String::from_utf8_lossy(e).into_owned())),
            _ => Ok(()),
        })
        .map_err(|e| format!("cannot reach {}:{}: {e}", a.server, a.port))?;
        SlotMap::single(&a.server, a.port).map_err(|e| e.to_string())?
    };
    let nodes = map.masters().iter().map(|&n| format!("{}:{}", map.nodes[n].host, map.nodes[n].port)).collect();
    let shared = Shared {
        auth: a.auth.clone(),
        cluster: a.cluster,
        seed_host: a.server.clone(),
        map,
        known: KnownKeys::new(a.key_minimum, a.key_maximum),
        abort: AtomicBool::new(false),
    };
    let preload = if a.preload {
        let r = run_phase(&shared, preload_phase(cfg), "preload", None, a.quiet)?;
        if r.stats.failures() == 0 {
            shared.known.mark_all();
        }
        Some(r)
    } else {
        None
    };
    let run = run_phase(&shared, main_phase(cfg), "run", sampler.as_ref(), a.quiet)?;
    Ok(Outcome { preload, run, nodes })
}

fn phase(cfg: &Config, workload: Workload, clients: Vec<ClientSpec>) -> Phase {
    let a = &cfg.args;
    Phase {
        workload,
        pipeline: a.pipeline,
        eager_refill: a.refill == crate::cli::Refill::Eager,
        rate: a.rate,
        max_inflight: a.max_inflight,
        warmup: cfg.warmup,
        duration: match cfg.stop {
            Stop::Time(d) => Some(d),
            Stop::Requests(_) => None,
        },
        drain_timeout: cfg.drain_timeout,
        threads: a.threads,
        clients_per_thread: a.clients,
        clients,
        sync: PhaseSync::new(a.threads + 1),
        progress: (0..a.threads).map(|_| AtomicU64::new(0)).collect(),
    }
}

fn main_phase(cfg: &Config) -> Phase {
    let a = &cfg.args;
    let total = cfg.total_clients();
    let requests = match cfg.stop {
        Stop::Requests(n) => n,
        Stop::Time(_) => u64::MAX,
    };
    let clients = (0..total)
        .map(|g| ClientSpec {
            keys: KeyGen::new(a.key_pattern, a.key_minimum, a.key_maximum, g, total)
                .with_gaussian(a.key_median, a.key_stddev)
                .with_zipf_exponent(a.key_zipf_exp),
            seed: derive_seed(cfg.seed, g as u64),
            requests,
        })
        .collect();
    phase(cfg, cfg.workload.clone(), clients)
}

/// SETs every key once: client g writes the g-th slice of the range.
fn preload_phase(cfg: &Config) -> Phase {
    let a = &cfg.args;
    let total = cfg.total_clients() as u128;
    let span = u128::from(a.key_maximum - a.key_minimum) + 1;
    let clients = (0..total)
        .map(|g| {
            let lo = a.key_minimum + (span * g / total) as u64;
            let n = ((span * (g + 1) / total) - (span * g / total)) as u64;
            ClientSpec {
                keys: KeyGen::new(KeyPattern::Sequential, lo, lo + n.saturating_sub(1), 0, 1),
                seed: derive_seed(cfg.seed, PRELOAD_STREAM + g as u64),
                requests: n,
            }
        })
        .collect();
    let workload = Workload { mix: Mix::Ratio { sets: 1, gets: 0 }, ..cfg.workload.clone() };
    let mut p = phase(cfg, workload, clients);
    p.pipeline = p.pipeline.max(PRELOAD_PIPELINE);
    p.rate = None;
    p.warmup = Duration::ZERO;
    p.duration = None;
    p
}

/// Runs one phase on its worker threads. With a sampler, the servers' CPU
/// time is read at the measured window's edges: the end of the warm-up and
/// the end of the test time (or when the last worker finishes).
fn run_phase(
    shared: &Shared,
    phase: Phase,
    label: &str,
    sampler: Option<&CpuSampler>,
    quiet: bool,
) -> Result<PhaseResult, String> {
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = (0..phase.threads)
            .map(|t| {
                let phase = &phase;
                std::thread::Builder::new()
                    .name(format!("bench-{t}"))
                    .spawn_scoped(s, move || worker::run(shared, phase, t))
                    .expect("spawn worker thread")
            })
            .collect();
        let start = phase.sync.start_now();
        let bar = if quiet { None } else { progress_bar(&phase, label) };
        let (cpu_from_at, cpu_to_at) = (start + phase.warmup, phase.duration.map(|d| start + phase.warmup + d));
        let mut cpu_from: Option<std::io::Result<CpuSample>> = None;
        let mut cpu_to: Option<std::io::Result<CpuSample>> = None;
        let mut timeline = Vec::new();
        let mut sampled = 0;
        let mut next_sample = start + Duration::from_secs(1);
        loop {
            let done = handles.iter().all(|h| h.is_finished());
            let now = Instant::now();
            if let Some(s) = sampler {
                if cpu_from.is_none() && (now >= cpu_from_at || done) {
                    cpu_from = Some(s.sample());
                }
                if cpu_to.is_none() && cpu_from.is_some() && (cpu_to_at.is_some_and(|t| now >= t) || done) {
                    cpu_to = Some(s.sample());
                }
            }
            let total: u64 = phase.progress.iter().map(|p| p.load(Relaxed)).sum();
            if now >= next_sample || done {
                timeline.push(total - sampled);
                sampled = total;
                next_sample += Duration::from_secs(1);
            }
            if let Some(bar) = &bar {
                let secs = now.duration_since(start).as_secs_f64();
                match phase.duration {
                    Some(_) => bar.set_position(secs as u64),
                    None => bar.set_position(total),
                }
                bar.set_message(format!("{:.0} ops/s avg", total as f64 / secs.max(1e-3)));
            }
            if done {
                break;
            }
            // Wake for the next CPU sample on time, not up to 50 ms late.
            let edge = if cpu_from.is_none() { Some(cpu_from_at) } else { cpu_to_at.filter(|_| cpu_to.is_none()) };
            let nap = edge
                .filter(|_| sampler.is_some())
                .map_or(Duration::from_millis(50), |e| e.saturating_duration_since(Instant::now()))
                .min(Duration::from_millis(50));
            std::thread::sleep(nap);
        }
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        let results: Vec<_> = handles.into_iter().map(|h| h.join().expect("worker thread panicked")).collect();
        let cpu = match (cpu_from, cpu_to) {
            (Some(a), Some(b)) => Some((a, b)),
            _ => None,
        };
        (results, start, timeline, cpu)
    });
    let (results, start, timeline, cpu) = results;
    let server_cpu = match (sampler, cpu) {
        (Some(s), Some((Ok(a), Ok(b)))) => Some(s.window(a, b)),
        (Some(_), Some((Err(e), _) | (_, Err(e)))) => return Err(format!("sampling server CPU: {e}")),
        _ => None,
    };
    let mut stats = Stats::new(phase.workload.command_names().len());
    for r in results {
        stats.merge(&r?);
    }
    let measure_start = start + phase.warmup;
    let measured = stats.last_completion.map_or(Duration::ZERO, |t| t.saturating_duration_since(measure_start));
    Ok(PhaseResult { stats, measured, timeline, server_cpu })
}

/// A progress bar on stderr, only when a person is watching it.
fn progress_bar(phase: &Phase, label: &str) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let (len, unit) = match phase.duration {
        Some(d) => ((phase.warmup + d).as_secs_f64().ceil() as u64, "s"),
        None => (phase.clients.iter().map(|c| c.requests).sum(), "req"),
    };
    let bar = ProgressBar::new(len);
    let template = format!("{label:>7} [{{elapsed_precise}}] {{wide_bar}} {{pos}}/{{len}} {unit}  {{msg}}");
    bar.set_style(ProgressStyle::with_template(&template).expect("valid template"));
    Some(bar)
}
