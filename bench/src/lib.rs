//! corekv-bench: a memtier_benchmark-style load generator for
//! Redis-compatible servers, with a coordinated-omission-free open-loop mode.
//!
//! Layout: `cli` (options) → `run` (orchestration) → `worker` (one event
//! loop per thread; `worker::replies` accounts for replies) driving `conn`s
//! (socket, buffers, in-flight FIFO) as described by a `phase`.
//! `workload`/`keys` decide what to send (`data` the study's data sets), `protocol` speaks RESP, `cluster`
//! routes keys to slots, `timer` paces the open loop, `stats` collects HDR
//! histograms and `report` prints text, JSON and HDR files.

pub mod cli;
pub mod cluster;
pub mod conn;
pub mod data;
pub mod keys;
pub mod phase;
pub mod procstat;
pub mod protocol;
pub mod report;
pub mod run;
pub mod stats;
pub mod suite;
pub mod timer;
pub mod worker;
pub mod workload;

use std::process::ExitCode;

/// Parses `args`, runs the benchmark and prints the report. Exit status: 0
/// success, 1 errors or mismatches (unless --allow-errors), 2 unusable
/// options or an unreachable server.
pub fn main_with(args: cli::Args) -> ExitCode {
    let cfg = match cli::Config::from_args(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if cfg.args.rate.is_some() && cfg.args.pipeline > 1 {
        eprintln!("note: --pipeline is ignored in open-loop mode; --max-inflight caps requests in flight");
    }
    let outcome = match run::execute(&cfg) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let report = report::Report::new(&cfg, &outcome);
    print!("{}", report.text());
    if let Some(path) = &cfg.args.json {
        if let Err(e) = report.write_json(path) {
            eprintln!("error: writing {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if let Some(prefix) = &cfg.args.hdr_prefix {
        if let Err(e) = report::write_hdr_files(prefix, &cfg.workload.command_names(), &outcome.run) {
            eprintln!("error: writing HDR files: {e}");
            return ExitCode::from(2);
        }
    }
    let failures = outcome.run.stats.failures() + outcome.preload.as_ref().map_or(0, |p| p.stats.failures());
    if failures > 0 && !cfg.args.allow_errors {
        eprintln!("error: {failures} failed requests (errors, mismatches or unanswered); see the report");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
