//! One suite's results: what ran, where, and one row per measured point,
//! kept as bench/results/<suite>.json so a suite can be rerun alone.

use crate::stats::Latency;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteResult {
    pub suite: String,
    /// What the suite measures, one paragraph.
    #[serde(default)]
    pub description: String,
    /// What `Row::x` is, e.g. "connections".
    #[serde(default)]
    pub x_label: String,
    /// UTC, `YYYY-MM-DD HH:MM`.
    pub date: String,
    pub machine: Machine,
    /// Server name -> `--version` line.
    pub versions: BTreeMap<String, String>,
    /// The command that reruns this suite.
    pub rerun: String,
    /// Server and load-generator command lines, one per distinct setup.
    pub commands: Vec<String>,
    pub server_cpus: String,
    pub client_cpus: String,
    /// Shortened run (--quick): not for the scoreboard.
    pub quick: bool,
    pub rows: Vec<Row>,
}

/// One measured point of one server.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Row {
    /// What is compared, e.g. "GET, 1024 keys" or "SET, 128 B".
    pub group: String,
    /// The varied parameter (connections, offered load, depth, shards...).
    pub x: f64,
    /// "corekv" or "redis".
    pub server: String,
    pub ops_per_sec: f64,
    pub latency_us: Latency,
    /// Server CPU µs per request over the measured window.
    pub cpu_us_per_op: Option<f64>,
    /// Open loop: the offered load, requests/s.
    pub offered: Option<f64>,
    /// Errors, mismatches, connection errors and unanswered requests.
    pub failures: u64,
    /// Suite-specific figures (memory: bytes per key...).
    #[serde(default)]
    pub extra: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Machine {
    pub cpu_model: String,
    pub cpus_online: usize,
    pub memory_gib: f64,
    pub kernel: String,
}

impl Machine {
    pub fn detect() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name")?.split_once(':').map(|(_, v)| v.trim().to_string()))
            .unwrap_or_else(|| "unknown".into());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kb: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:")?.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
        // SAFETY: sysconf has no preconditions.
        let cpus_online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
        Machine { cpu_model, cpus_online, memory_gib: mem_kb / 1024.0 / 1024.0, kernel }
    }

    pub fn describe(&self) -> String {
        format!(
            "{}, {} CPUs online, {:.0} GiB, Linux {}",
            self.cpu_model, self.cpus_online, self.memory_gib, self.kernel
        )
    }
}

impl SuiteResult {
    pub fn path(dir: &Path, suite: &str) -> std::path::PathBuf {
        dir.join(format!("{suite}.json"))
    }

    pub fn save(&self, dir: &Path) -> Result<(), String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())? + "\n";
        let path = Self::path(dir, &self.suite);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The saved result of `suite`, if it has been run.
    pub fn load(dir: &Path, suite: &str) -> Result<Option<SuiteResult>, String> {
        let path = Self::path(dir, suite);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// Rows of `server` in `group`, in x order.
    pub fn series(&self, group: &str, server: &str) -> Vec<&Row> {
        let mut rows: Vec<&Row> = self.rows.iter().filter(|r| r.group == group && r.server == server).collect();
        rows.sort_by(|a, b| a.x.total_cmp(&b.x));
        rows
    }

    /// This result without the rows of individual repeated runs (rows with
    /// an `extra["run"]`), leaving the merged ones: what tables and plots show.
    pub fn without_runs(&self) -> SuiteResult {
        let mut r = self.clone();
        r.rows.retain(|row| !row.extra.contains_key("run"));
        r
    }

    /// Groups in first-seen order.
    pub fn groups(&self) -> Vec<String> {
        let mut g: Vec<String> = Vec::new();
        for r in &self.rows {
            if !g.contains(&r.group) {
                g.push(r.group.clone());
            }
        }
        g
    }

    /// The corekv and Redis rows at the same (group, x).
    pub fn pairs(&self) -> Vec<(&Row, &Row)> {
        let mut out = Vec::new();
        for g in self.groups() {
            for c in self.series(&g, "corekv") {
                if let Some(r) = self.series(&g, "redis").into_iter().find(|r| r.x == c.x) {
                    out.push((c, r));
                }
            }
        }
        out
    }
}

/// Now, UTC, as `YYYY-MM-DD HH:MM`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format_utc(secs)
}

/// Unix seconds as a UTC `YYYY-MM-DD HH:MM` (civil-from-days, proleptic Gregorian).
pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let (h, m) = ((secs % 86400) / 3600, (secs % 3600) / 60);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{m:02}")
}

/// A small result for the tests of this and other modules.
#[cfg(test)]
pub(crate) fn sample() -> SuiteResult {
    let row = |x: f64, server: &str, ops: f64| Row {
        group: "GET".into(),
        x,
        server: server.into(),
        ops_per_sec: ops,
        latency_us: Latency { p50: 100, p99: 900, ..Default::default() },
        cpu_us_per_op: Some(10.5),
        ..Default::default()
    };
    SuiteResult {
        suite: "get-small".into(),
        description: "GETs.".into(),
        x_label: "connections".into(),
        date: "2026-11-22 10:00".into(),
        machine: Machine { cpu_model: "Test CPU".into(), cpus_online: 2, memory_gib: 24.0, kernel: "6.1".into() },
        versions: [("redis".to_string(), "Redis server v=7.0.15".to_string())].into(),
        rerun: "bench/run.sh get-small".into(),
        commands: vec!["corekv --port 1".into()],
        server_cpus: "0".into(),
        client_cpus: "1".into(),
        quick: false,
        rows: vec![row(10.0, "corekv", 120.0), row(10.0, "redis", 100.0), row(50.0, "redis", 80.0)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trip_and_pairs() {
        let dir = std::env::temp_dir().join(format!("suite-results-{}", std::process::id()));
        let r = sample();
        r.save(&dir).unwrap();
        let back = SuiteResult::load(&dir, "get-small").unwrap().unwrap();
        assert_eq!(back, r);
        assert!(SuiteResult::load(&dir, "qos").unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
        let pairs = r.pairs();
        assert_eq!(pairs.len(), 1, "x=50 has no corekv row");
        assert_eq!((pairs[0].0.ops_per_sec, pairs[0].1.ops_per_sec), (120.0, 100.0));
    }

    #[test]
    fn utc_dates() {
        assert_eq!(format_utc(0), "1970-01-01 00:00");
        assert_eq!(format_utc(951_782_400), "2000-02-29 00:00");
        assert_eq!(format_utc(1_700_000_000), "2023-11-14 22:13");
    }
}
