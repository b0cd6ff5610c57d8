//! `corekv-suite`: the side-by-side runner behind `bench/run.sh`. Starts
//! corekv and redis-server pinned to the same CPUs, drives this crate's load
//! generator in-process from the other CPUs, and writes per-suite JSON
//! (bench/results/), SVG plots (bench/plots/) and bench/RESULTS.md's
//! generated sections.
//!
//! `cpus` CPU lists and pinning, `servers` server processes, `load` one
//! measured point, `suites` the workloads, `results` the JSON, `markdown`
//! RESULTS.md, `plots`/`svg` the charts.

pub mod cpus;
pub mod load;
pub mod markdown;
pub mod plots;
pub mod results;
pub mod servers;
pub mod suites;
pub mod svg;

use clap::Parser;
use results::SuiteResult;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(
    name = "corekv-suite",
    about = "Side-by-side benchmark suites, corekv vs redis-server on the same pinned CPUs. \
             Normally run through bench/run.sh."
)]
pub struct SuiteArgs {
    /// Suites to run: qos get-small get-large set-mixed skewed pipeline
    /// scaling memory, or all (the default). `free-port` prints a free TCP
    /// port and exits.
    pub suites: Vec<String>,
    /// Run nothing: regenerate RESULTS.md and the plots from bench/results/.
    #[arg(long)]
    pub report_only: bool,
    /// CPUs for the servers (default: the first half of this process's CPUs).
    #[arg(long)]
    pub server_cpus: Option<String>,
    /// CPUs for the load generator (default: the rest).
    #[arg(long)]
    pub client_cpus: Option<String>,
    /// Short points and small databases: a smoke test, not a result.
    #[arg(long)]
    pub quick: bool,
    /// Keys in get-large's database (default 10M; --quick 10k).
    #[arg(long)]
    pub large_keys: Option<u64>,
    /// Key counts for the memory suite, e.g. 1000000,10000000 (default; --quick 10000,100000).
    #[arg(long, value_delimiter = ',')]
    pub memory_keys: Option<Vec<u64>>,
    /// Shard counts the scaling suite measures, e.g. 1,2,4,8,14 (default:
    /// 1 to the number of server CPUs; --quick: 1 and that number).
    #[arg(long, value_delimiter = ',')]
    pub shard_counts: Option<Vec<usize>>,
    /// Seconds of warm-up and of measurement per point (default 2 and 5; --quick 0.5 and 1).
    #[arg(long)]
    pub warmup: Option<f64>,
    #[arg(long)]
    pub seconds: Option<f64>,
    #[arg(long, default_value = "target/release/corekv")]
    pub corekv: PathBuf,
    #[arg(long, default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// Where per-suite JSON goes.
    #[arg(long, default_value = "bench/results")]
    pub results_dir: PathBuf,
    /// Where SVG plots go (linked from RESULTS.md as plots/<name>).
    #[arg(long, default_value = "bench/plots")]
    pub plots_dir: PathBuf,
    #[arg(long, default_value = "bench/RESULTS.md")]
    pub markdown: PathBuf,
}

pub fn main_with(a: SuiteArgs) -> ExitCode {
    if a.suites.first().map(String::as_str) == Some("free-port") {
        return match servers::free_port(1) {
            Ok(p) => {
                println!("{p}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        };
    }
    match run(&a) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn ctx(a: &SuiteArgs) -> Result<suites::Ctx, String> {
    let available = cpus::affinity().map_err(|e| format!("reading CPU affinity: {e}"))?;
    let (def_s, def_c) = cpus::split(&available);
    let server_cpus = a.server_cpus.as_deref().map_or(Ok(def_s), cpus::parse_list)?;
    let client_cpus = a.client_cpus.as_deref().map_or(Ok(def_c), cpus::parse_list)?;
    if server_cpus.iter().any(|c| client_cpus.contains(c)) {
        eprintln!("warning: server and client CPUs overlap: the load generator competes with the servers");
    }
    let mut rerun = String::from("bench/run.sh");
    if a.server_cpus.is_some() || a.client_cpus.is_some() {
        rerun += &format!(
            " --server-cpus {} --client-cpus {}",
            cpus::format_list(&server_cpus),
            cpus::format_list(&client_cpus)
        );
    }
    if a.quick {
        rerun += " --quick";
    }
    if let Some(counts) = &a.shard_counts {
        if counts.iter().any(|&k| k == 0 || k > server_cpus.len()) {
            return Err(format!("--shard-counts: each count must be 1 to {} (the server CPUs)", server_cpus.len()));
        }
        rerun += &format!(" --shard-counts {}", counts.iter().map(usize::to_string).collect::<Vec<_>>().join(","));
    }
    let redis = which(&a.redis_server)
        .ok_or(format!("{} not found: run scripts/setup-test-deps.sh (bench/run.sh does)", a.redis_server.display()))?;
    if !a.corekv.exists() {
        return Err(format!("{} not found: cargo build --release -p corekv", a.corekv.display()));
    }
    Ok(suites::Ctx {
        bins: servers::Binaries { corekv: a.corekv.clone(), redis },
        load: load::LoadSettings {
            threads: client_cpus.len(),
            warmup_s: a.warmup.unwrap_or(if a.quick { 0.5 } else { 2.0 }),
            measure_s: a.seconds.unwrap_or(if a.quick { 1.0 } else { 5.0 }),
            seed: 1,
        },
        server_cpus,
        client_cpus,
        quick: a.quick,
        large_keys: a.large_keys.unwrap_or(if a.quick { 10_000 } else { 10_000_000 }),
        memory_keys: a.memory_keys.clone().unwrap_or(if a.quick {
            vec![10_000, 100_000]
        } else {
            vec![1_000_000, 10_000_000]
        }),
        shard_counts: a.shard_counts.clone(),
        rerun_prefix: rerun,
    })
}

fn which(bin: &Path) -> Option<PathBuf> {
    if bin.components().count() > 1 {
        return bin.exists().then(|| bin.to_path_buf());
    }
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(bin)).find(|p| p.is_file())
}

/// Runs the suites, then regenerates the report. Ok(false): a suite failed.
fn run(a: &SuiteArgs) -> Result<bool, String> {
    let mut names: Vec<&str> = Vec::new();
    if a.suites.is_empty() && !a.report_only {
        names.extend(suites::ALL);
    }
    for s in a.suites.iter().filter(|_| !a.report_only) {
        if s == "all" {
            names.extend(suites::ALL);
        } else if let Some(&n) = suites::ALL.iter().find(|&&n| n == s) {
            names.push(n);
        } else {
            return Err(format!("unknown suite {s:?}; suites: {} or all", suites::ALL.join(" ")));
        }
    }
    let mut ok = true;
    if !names.is_empty() {
        let ctx = ctx(a)?;
        // The load generator's threads inherit this; servers are pinned at spawn.
        cpus::pin(&ctx.client_cpus).map_err(|e| format!("pinning to CPUs {:?}: {e}", ctx.client_cpus))?;
        eprintln!(
            "servers on CPUs {}, load generator on CPUs {}{}",
            cpus::format_list(&ctx.server_cpus),
            cpus::format_list(&ctx.client_cpus),
            if ctx.quick { " (quick)" } else { "" }
        );
        for name in names {
            let t = Instant::now();
            eprintln!("== suite {name}");
            match suites::run(&ctx, name) {
                Ok(r) => {
                    r.save(&a.results_dir)?;
                    eprintln!("== suite {name} done in {:.0} s", t.elapsed().as_secs_f64());
                }
                Err(e) => {
                    eprintln!("== suite {name} FAILED: {e}");
                    ok = false;
                }
            }
        }
    }
    write_report(a)?;
    Ok(ok)
}

/// Regenerates every plot and RESULTS.md section from the saved results.
pub fn write_report(a: &SuiteArgs) -> Result<(), String> {
    let mut all: Vec<SuiteResult> = Vec::new();
    for name in suites::ALL {
        if let Some(r) = SuiteResult::load(&a.results_dir, name)? {
            all.push(r);
        }
    }
    let mut doc = std::fs::read_to_string(&a.markdown).unwrap_or_default();
    let order: Vec<&str> = std::iter::once("scoreboard").chain(suites::ALL.iter().copied()).collect();
    if !all.is_empty() {
        std::fs::create_dir_all(&a.plots_dir).map_err(|e| format!("{}: {e}", a.plots_dir.display()))?;
        doc = markdown::replace_section(&doc, "scoreboard", &markdown::scoreboard(&all), &order);
    }
    for r in &all {
        let mut names = Vec::new();
        for (file, chart) in plots::charts(r) {
            let path = a.plots_dir.join(&file);
            std::fs::write(&path, svg::render(&chart)).map_err(|e| format!("{}: {e}", path.display()))?;
            names.push(file);
        }
        doc = markdown::replace_section(&doc, &r.suite, &markdown::section(r, &names), &order);
    }
    std::fs::write(&a.markdown, doc).map_err(|e| format!("{}: {e}", a.markdown.display()))?;
    eprintln!("wrote {} ({} suites), plots in {}", a.markdown.display(), all.len(), a.plots_dir.display());
    Ok(())
}
