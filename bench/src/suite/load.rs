//! Drives the corekv-bench library in-process against running servers:
//! one measured point, or a bulk load.

use super::results::Row;
use super::servers::{shell_words, Servers};
use crate::cli::{Args, Config};
use crate::report::Report;
use clap::Parser;
use hdrhistogram::Histogram;

/// How long each point warms up and is measured, and how many load
/// generator threads run (one per client CPU).
#[derive(Debug, Clone)]
pub struct LoadSettings {
    pub threads: usize,
    pub warmup_s: f64,
    pub measure_s: f64,
    pub seed: u64,
}

/// Runs corekv-bench with `args` (plus server address, threads, CPU pids)
/// and returns the report with the latency histogram of all commands.
/// `log` collects the command line with the
/// run-specific port and pids replaced by placeholders.
pub fn bench(
    servers: &Servers,
    threads: usize,
    args: &[String],
    log: &mut Vec<String>,
) -> Result<(Report, Histogram<u64>), String> {
    let mut full: Vec<String> = vec!["corekv-bench".into(), "-p".into(), servers.port.to_string()];
    full.extend(["-t".into(), threads.to_string()]);
    if servers.cluster {
        full.push("--cluster".into());
    }
    full.extend(args.iter().cloned());
    let mut shown = full.clone();
    shown[2] = "PORT".into();
    let line = format!("{} --server-pid PID", shell_words(&shown));
    if !log.contains(&line) {
        log.push(line);
    }
    for pid in servers.pids() {
        full.extend(["--server-pid".into(), pid.to_string()]);
    }
    full.push("--quiet".into());
    let parsed = Args::try_parse_from(&full).map_err(|e| format!("{}: {e}", shell_words(&full)))?;
    let cfg = Config::from_args(parsed)?;
    let outcome = crate::run::execute(&cfg)?;
    Ok((Report::new(&cfg, &outcome), outcome.run.stats.total().hist))
}

/// One measured point: closed loop unless `args` has --rate. Also returns
/// the latency histogram, for merging repeated runs.
pub fn measure(
    servers: &Servers,
    s: &LoadSettings,
    args: &[String],
    log: &mut Vec<String>,
) -> Result<(Row, Histogram<u64>), String> {
    let mut a: Vec<String> = vec![
        "--warmup".into(),
        s.warmup_s.to_string(),
        "--test-time".into(),
        s.measure_s.to_string(),
        "--seed".into(),
        s.seed.to_string(),
        "--allow-errors".into(),
    ];
    a.extend(args.iter().cloned());
    let (rep, hist) = bench(servers, s.threads, &a, log)?;
    let r = &rep.run;
    let row = Row {
        ops_per_sec: r.ops_per_sec,
        latency_us: r.latency_us.clone(),
        cpu_us_per_op: r.server_cpu.as_ref().map(|c| c.us_per_op),
        offered: rep.config.rate,
        failures: r.errors + r.mismatches + r.connection_errors + r.unanswered,
        ..Row::default()
    };
    if let (true, Some(e)) = (row.failures > 0, &r.first_error) {
        eprintln!("  first error: {e}");
    }
    Ok((row, hist))
}

/// SETs every key of `keys` (e.g. `--key-minimum 0 --key-maximum 1023` and
/// value options) once, 64 deep per connection. Returns SETs per second.
pub fn preload(servers: &Servers, s: &LoadSettings, keys: &[String], log: &mut Vec<String>) -> Result<f64, String> {
    let mut a: Vec<String> =
        ["--preload", "--command", "PING", "-n", "1", "-c", "16", "--seed"].iter().map(|x| x.to_string()).collect();
    a.push(s.seed.to_string());
    a.extend(keys.iter().cloned());
    let (rep, _) = bench(servers, s.threads, &a, log)?;
    let p = rep.preload.ok_or("no preload phase")?;
    let failed = p.errors + p.mismatches + p.connection_errors + p.unanswered;
    if failed > 0 {
        return Err(format!("preload: {failed} SETs failed: {:?}", p.first_error));
    }
    Ok(p.ops_per_sec)
}

/// Strings from anything printable.
pub fn args<I: IntoIterator<Item = T>, T: ToString>(items: I) -> Vec<String> {
    items.into_iter().map(|i| i.to_string()).collect()
}
