//! corekv-suite end to end: one tiny --quick suite against real servers
//! (corekv, redis-server alone and as a one-node Redis Cluster), then the
//! files it writes: per-suite JSON, SVG plots and RESULTS.md sections that
//! leave the hand-written text alone.

mod common;

use common::temp_dir;
use std::path::{Path, PathBuf};
use std::process::Command;

const SUITE: &str = env!("CARGO_BIN_EXE_corekv-suite");

/// The corekv binary: built by the workspace's tests, or built here.
fn corekv() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    for profile in ["debug", "release"] {
        let bin = target.join(profile).join("corekv");
        if bin.exists() {
            return bin;
        }
    }
    let ok = Command::new(env!("CARGO")).args(["build", "-q", "-p", "corekv"]).status().expect("cargo build");
    assert!(ok.success(), "building corekv failed");
    target.join("debug/corekv")
}

/// corekv-suite writing into `dir` (results/, plots/, RESULTS.md), with `args`.
fn suite_in(dir: &Path, args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(SUITE)
        .args(args)
        .arg("--results-dir")
        .arg(dir.join("results"))
        .arg("--plots-dir")
        .arg(dir.join("plots"))
        .arg("--markdown")
        .arg(dir.join("RESULTS.md"))
        .output()
        .expect("run corekv-suite")
}

#[test]
fn quick_scaling_suite_writes_results_plots_and_markdown() {
    let dir = temp_dir("suite");
    let md = dir.join("RESULTS.md");
    std::fs::write(&md, "# Results\n\nintro\n\n## Hand-written\n\nkeep me\n").unwrap();
    let bin = corekv();
    let quick = ["--quick", "--warmup", "0.1", "--seconds", "0.3", "--corekv"].map(std::ffi::OsStr::new);
    let out = suite_in(&dir, &[&quick[..], &[bin.as_os_str(), "scaling".as_ref()]].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "corekv-suite failed:\n{stderr}");

    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("results/scaling.json")).unwrap()).unwrap();
    let rows = json["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "corekv and redis, plain and cluster client:\n{stderr}");
    for r in rows {
        assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["cpu_us_per_op"].as_f64().unwrap() > 0.0, "server CPU sampled: {r}");
        assert_eq!(r["failures"].as_u64(), Some(0), "{r}");
    }
    assert_eq!(json["quick"], true);

    let svg = std::fs::read_to_string(dir.join("plots/scaling-throughput.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches(r#"class="series""#).count(), 4);

    let text = std::fs::read_to_string(&md).unwrap();
    for want in [
        "<!-- suite:scoreboard -->",
        "<!-- suite:scaling -->",
        "<!-- /suite:scaling -->",
        "| scaling (quick) |",
        "Where corekv is behind Redis:",
        "](plots/scaling-throughput.svg)",
        "## Hand-written\n\nkeep me\n",
    ] {
        assert!(text.contains(want), "{want:?} missing from\n{text}");
    }
    assert!(text.find("intro").unwrap() < text.find("<!-- suite:scoreboard -->").unwrap());

    // Regenerating from the saved JSON gives the same document.
    let again = suite_in(&dir, &["--report-only".as_ref()]);
    assert!(again.status.success());
    assert_eq!(std::fs::read_to_string(&md).unwrap(), text);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn free_port_prints_a_port() {
    let out = Command::new(SUITE).arg("free-port").output().unwrap();
    let port: u16 = String::from_utf8_lossy(&out.stdout).trim().parse().expect("a port number");
    assert!(port >= 20000);
}
