//! bench/RESULTS.md: the runner owns the sections between
//! `<!-- suite:NAME -->` and `<!-- /suite:NAME -->` and leaves every other
//! line alone.

use super::results::{Row, SuiteResult};
use std::fmt::Write as _;

fn markers(name: &str) -> (String, String) {
    (format!("<!-- suite:{name} -->"), format!("<!-- /suite:{name} -->"))
}

/// `doc` with section `name`'s body replaced by `body`. A missing section
/// is created after the nearest earlier section of `order` that exists, or
/// else before the first later one, or else before the first `## ` heading
/// (or at the end).
pub fn replace_section(doc: &str, name: &str, body: &str, order: &[&str]) -> String {
    let (open, close) = markers(name);
    let block = format!("{open}\n{}\n{close}", body.trim_end());
    if let (Some(a), Some(b)) = (doc.find(&open), doc.find(&close)) {
        if a < b {
            return format!("{}{block}{}", &doc[..a], &doc[b + close.len()..]);
        }
    }
    let pos = order.iter().position(|&n| n == name).unwrap_or(order.len());
    let after = order[..pos].iter().rev().find_map(|n| {
        let close = markers(n).1;
        doc.find(&close).map(|i| i + close.len())
    });
    let before = || order[pos..].iter().filter_map(|n| doc.find(&markers(n).0)).min();
    let first_heading = || if doc.starts_with("## ") { 0 } else { doc.find("\n## ").map_or(doc.len(), |i| i + 1) };
    let at = after.or_else(before).unwrap_or_else(first_heading);
    let (head, tail) = doc.split_at(at);
    let head = head.trim_end_matches('\n');
    let sep = if head.is_empty() { "" } else { "\n\n" };
    format!("{head}{sep}{block}\n\n{}", tail.trim_start_matches('\n'))
}

pub fn ms(us: u64) -> String {
    format!("{:.3}", us as f64 / 1000.0)
}

fn cpu(r: &Row) -> String {
    r.cpu_us_per_op.map_or("–".into(), |c| format!("{c:.2}"))
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}

fn x_text(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

/// Geometric mean (ignoring non-positive or non-finite values).
pub fn geomean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let logs: Vec<f64> = v.filter(|x| x.is_finite() && *x > 0.0).map(f64::ln).collect();
    (!logs.is_empty()).then(|| (logs.iter().sum::<f64>() / logs.len() as f64).exp())
}

/// Highest achieved throughput whose p99 stayed under `slo_us` while the
/// server kept up with the schedule (achieved ≥ 95% of offered).
pub fn qos_max<'a>(rows: impl Iterator<Item = &'a Row>, slo_us: u64) -> Option<&'a Row> {
    rows.filter(|r| r.latency_us.p99 < slo_us && r.offered.is_none_or(|o| r.ops_per_sec >= 0.95 * o) && r.failures == 0)
        .max_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec))
}

pub const QOS_SLO_US: u64 = 1000;

/// Ratios this close to 1 print as 1.00 and count as a tie.
const TIE: f64 = 0.005;

/// One suite's section body.
pub fn section(r: &SuiteResult, plots: &[String]) -> String {
    let mut s = String::new();
    let _ =
        writeln!(s, "## Suite `{}`{}\n", r.suite, if r.quick { " (QUICK RUN: shortened, not a result)" } else { "" });
    let _ = writeln!(s, "{}\n", r.description);
    let _ = writeln!(s, "- date: {} UTC", r.date);
    let _ = writeln!(s, "- machine: {}", r.machine.describe());
    let _ = writeln!(s, "- servers on CPUs {}, load generator on CPUs {}", r.server_cpus, r.client_cpus);
    for (name, v) in &r.versions {
        let _ = writeln!(s, "- {name}: {v}");
    }
    let _ = writeln!(s, "- rerun: `{}`\n", r.rerun);
    let _ = writeln!(s, "<details><summary>exact commands</summary>\n\n```");
    for c in &r.commands {
        let _ = writeln!(s, "{c}");
    }
    let _ = writeln!(s, "```\n</details>\n");
    match r.suite.as_str() {
        "memory" => memory_table(&mut s, r),
        "qos" => {
            qos_headline(&mut s, r);
            throughput_table(&mut s, &r.without_runs(), false);
        }
        "skewed" => throughput_table(&mut s, r, true),
        _ => throughput_table(&mut s, r, false),
    }
    let _ = writeln!(s, "\n{}\n", behind(&r.without_runs()));
    for p in plots {
        let _ = writeln!(s, "![{p}](plots/{p})");
    }
    s
}

/// A latency column: its name and how to read it from a row.
type Percentile = (&'static str, fn(&Row) -> u64);

fn throughput_table(s: &mut String, r: &SuiteResult, tails: bool) {
    let pcts: &[Percentile] = if tails {
        &[
            ("p95", |r| r.latency_us.p95),
            ("p99", |r| r.latency_us.p99),
            ("p99.9", |r| r.latency_us.p999),
            ("p99.99", |r| r.latency_us.p9999),
        ]
    } else {
        &[("p50", |r| r.latency_us.p50), ("p99", |r| r.latency_us.p99)]
    };
    let mut head = format!("| workload | {} | corekv ops/s | Redis ops/s | ratio |", r.x_label);
    for (p, _) in pcts {
        let _ = write!(head, " corekv {p} ms | Redis {p} ms |");
    }
    head += " corekv CPU µs/op | Redis CPU µs/op | CPU ratio |";
    let _ = writeln!(s, "{head}\n|{}", "---|".repeat(head.matches('|').count() - 1));
    for (c, rd) in r.pairs() {
        let _ = write!(
            s,
            "| {} | {} | {:.0} | {:.0} | {:.2} |",
            c.group,
            x_text(c.x),
            c.ops_per_sec,
            rd.ops_per_sec,
            ratio(c.ops_per_sec, rd.ops_per_sec)
        );
        for (_, f) in pcts {
            let _ = write!(s, " {} | {} |", ms(f(c)), ms(f(rd)));
        }
        let cr = match (c.cpu_us_per_op, rd.cpu_us_per_op) {
            (Some(a), Some(b)) => format!("{:.2}", ratio(a, b)),
            _ => "–".into(),
        };
        let _ = writeln!(s, " {} | {} | {cr} |", cpu(c), cpu(rd));
    }
    let failed: u64 = r.rows.iter().map(|x| x.failures).sum();
    if failed > 0 {
        let _ = writeln!(s, "\nWarning: {failed} requests failed (errors, mismatches or unanswered) in this suite.");
    }
}

fn qos_headline(s: &mut String, r: &SuiteResult) {
    let runs = qos_runs(r);
    if !runs.is_empty() {
        let _ = writeln!(
            s,
            "| run | corekv: highest ops/s with p99 < 1 ms | Redis: highest ops/s with p99 < 1 ms | corekv / Redis |"
        );
        let _ = writeln!(s, "|---|---|---|---|");
        let text = |v: Option<f64>| v.map_or("none of the offered loads".to_string(), |v| format!("{v:.0}"));
        for run in &runs {
            let q = run.ratio().map_or("–".to_string(), |q| format!("{q:.2}"));
            let _ = writeln!(s, "| {} | {} | {} | {q} |", run.run, text(run.corekv), text(run.redis));
        }
        match qos_spread(r) {
            Some((median, lo, hi, n)) => {
                let _ = writeln!(
                    s,
                    "\nRatio corekv/Redis: **{median:.2}** (median of {n} runs; spread {lo:.2}–{hi:.2}).\n"
                );
            }
            None => {
                let _ = writeln!(s, "\nNo ratio: no run had both servers under the bound.\n");
            }
        }
        let _ = writeln!(s, "Each offered load with the runs' latency histograms merged:\n");
        return;
    }
    let _ = writeln!(s, "| server | highest throughput with p99 < 1 ms (ops/s) | p99 there (ms) | CPU µs/op there |");
    let _ = writeln!(s, "|---|---|---|---|");
    for server in ["corekv", "redis"] {
        let best = qos_max(r.rows.iter().filter(|x| x.server == server), QOS_SLO_US);
        match best {
            Some(b) => {
                let _ = writeln!(s, "| {server} | {:.0} | {} | {} |", b.ops_per_sec, ms(b.latency_us.p99), cpu(b));
            }
            None => {
                let _ = writeln!(s, "| {server} | none of the offered loads | – | – |");
            }
        }
    }
    match qos_ratio(r) {
        Some(q) => {
            let _ = writeln!(s, "\nRatio corekv/Redis: **{q:.2}**.\n");
        }
        None => {
            let _ = writeln!(s, "\nNo ratio: {} ops/s under the bound.\n", qos_best_text(r));
        }
    }
    let _ = writeln!(s, "The whole sweep (ops/s achieved at each offered load):\n");
}

/// One run of a repeated qos sweep: each server's highest throughput under
/// the bound.
#[derive(Debug, PartialEq)]
pub struct QosRun {
    pub run: u32,
    pub corekv: Option<f64>,
    pub redis: Option<f64>,
}

impl QosRun {
    fn ratio(&self) -> Option<f64> {
        Some(ratio(self.corekv?, self.redis?))
    }
}

/// The runs of a repeated sweep (rows carrying `extra["run"]`), in order;
/// empty for a result of one sweep.
pub fn qos_runs(r: &SuiteResult) -> Vec<QosRun> {
    let mut ids: Vec<u32> = r.rows.iter().filter_map(|x| x.extra.get("run")).map(|&v| v as u32).collect();
    ids.sort_unstable();
    ids.dedup();
    let best = |run: u32, server: &str| {
        let rows = r.rows.iter().filter(|x| x.server == server && x.extra.get("run") == Some(&(run as f64)));
        qos_max(rows, QOS_SLO_US).map(|b| b.ops_per_sec)
    };
    ids.into_iter().map(|run| QosRun { run, corekv: best(run, "corekv"), redis: best(run, "redis") }).collect()
}

/// Median, lowest and highest of the runs' ratios, and how many runs had one.
pub fn qos_spread(r: &SuiteResult) -> Option<(f64, f64, f64, usize)> {
    let mut q: Vec<f64> = qos_runs(r).iter().filter_map(QosRun::ratio).collect();
    q.sort_by(f64::total_cmp);
    let n = q.len();
    let median = match n {
        0 => return None,
        _ if n % 2 == 1 => q[n / 2],
        _ => (q[n / 2 - 1] + q[n / 2]) / 2.0,
    };
    Some((median, q[0], q[n - 1], n))
}

/// Each server's best throughput under the bound, or "none".
fn qos_best_text(r: &SuiteResult) -> String {
    let best = |server: &str| {
        qos_max(r.rows.iter().filter(|x| x.server == server), QOS_SLO_US)
            .map_or("none".to_string(), |b| format!("{:.0}", b.ops_per_sec))
    };
    format!("corekv {} vs Redis {}", best("corekv"), best("redis"))
}

/// The qos headline: the median of the runs' ratios for a repeated sweep,
/// else the ratio of the one sweep's bests.
pub fn qos_ratio(r: &SuiteResult) -> Option<f64> {
    if !qos_runs(r).is_empty() {
        return qos_spread(r).map(|(median, ..)| median);
    }
    let best = |server: &str| qos_max(r.rows.iter().filter(|x| x.server == server), QOS_SLO_US).map(|b| b.ops_per_sec);
    Some(ratio(best("corekv")?, best("redis")?))
}

fn memory_table(s: &mut String, r: &SuiteResult) {
    let _ = writeln!(
        s,
        "| values | keys | corekv used_memory B/key | Redis used_memory B/key | corekv RSS B/key | Redis RSS B/key | RSS ratio |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    let g = |r: &Row, k: &str| r.extra.get(k).copied().unwrap_or(f64::NAN);
    for (c, rd) in r.pairs() {
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} |",
            c.group,
            x_text(c.x),
            g(c, "used_memory_per_key"),
            g(rd, "used_memory_per_key"),
            g(c, "rss_per_key"),
            g(rd, "rss_per_key"),
            ratio(g(c, "rss_per_key"), g(rd, "rss_per_key"))
        );
    }
    let _ = writeln!(
        s,
        "\nEach figure is the server's memory after the load minus the empty server's, per key. corekv's \
         used_memory counts its allocator's committed memory, Redis's counts jemalloc's allocated bytes, \
         so RSS is the like-for-like column (lower is better)."
    );
}

/// The computed sentence on where corekv is behind Redis, and by how much.
pub fn behind(r: &SuiteResult) -> String {
    let pairs = r.pairs();
    if pairs.is_empty() {
        return "No point has both servers measured.".into();
    }
    let label = |c: &Row| format!("{}, {} {}", c.group, r.x_label, x_text(c.x));
    if r.suite == "memory" {
        let worse: Vec<String> = pairs
            .iter()
            .filter_map(|(c, rd)| {
                let q = ratio(c.extra.get("rss_per_key")?.to_owned(), *rd.extra.get("rss_per_key")?);
                (q > 1.0 + TIE)
                    .then(|| format!("{} ({q:.2}× Redis's RSS per key, +{:.0}%)", label(c), (q - 1.0) * 100.0))
            })
            .collect();
        return if worse.is_empty() {
            "Where corekv is behind Redis: nowhere; it uses no more RSS per key than Redis in any load.".into()
        } else {
            format!("Where corekv is behind Redis: it uses more memory per key in {}.", worse.join("; "))
        };
    }
    let mut slow: Vec<(f64, String)> = pairs
        .iter()
        .map(|(c, rd)| (ratio(c.ops_per_sec, rd.ops_per_sec), label(c)))
        .filter(|(q, _)| *q < 1.0 - TIE)
        .collect();
    slow.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out = String::from("Where corekv is behind Redis: ");
    if let (true, Some(q)) = (r.suite == "qos", qos_ratio(r)) {
        if q < 1.0 - TIE {
            let _ = write!(
                out,
                "its highest throughput under the 1 ms p99 bound is {q:.2}× Redis's ({:.0}% lower); ",
                (1.0 - q) * 100.0
            );
        }
    }
    if slow.is_empty() {
        let _ = write!(out, "throughput at no point (of {}). ", pairs.len());
    } else {
        let list: Vec<String> =
            slow.iter().map(|(q, l)| format!("{l}: {q:.2}× ({:.0}% fewer ops/s)", (1.0 - q) * 100.0)).collect();
        let _ = write!(out, "throughput at {} of {} points — {}. ", slow.len(), pairs.len(), list.join("; "));
    }
    let more_cpu: Vec<(f64, String)> = pairs
        .iter()
        .filter_map(|(c, rd)| Some((ratio(c.cpu_us_per_op?, rd.cpu_us_per_op?), label(c))))
        .filter(|(q, _)| *q > 1.0 + TIE)
        .collect();
    if let Some((worst, at)) = more_cpu.iter().max_by(|a, b| a.0.total_cmp(&b.0)) {
        let _ = write!(
            out,
            "Server CPU per request is higher than Redis's at {} of {} points (worst {at}: +{:.0}%).",
            more_cpu.len(),
            pairs.len(),
            (worst - 1.0) * 100.0
        );
    } else if pairs.iter().any(|(c, _)| c.cpu_us_per_op.is_some()) {
        out += "Server CPU per request is at most Redis's at every point.";
    }
    out
}

/// The scoreboard: one line per suite with its headline ratio.
pub fn scoreboard(results: &[SuiteResult]) -> String {
    let mut s = String::from("## Scoreboard: corekv / Redis\n\n");
    s += "Generated by `bench/run.sh` from bench/results/*.json; each suite's section below has the details. \
          Throughput ratios above 1 favour corekv; CPU and memory ratios below 1 favour corekv.\n\n";
    s += "| suite | headline | corekv / Redis | range over points | server CPU/op ratio (geomean) | points behind | date |\n";
    s += "|---|---|---|---|---|---|---|\n";
    for r in results {
        let view = r.without_runs();
        let pairs = view.pairs();
        let ops: Vec<f64> = pairs.iter().map(|(c, rd)| ratio(c.ops_per_sec, rd.ops_per_sec)).collect();
        let lo = ops.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ops.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let cpu = geomean(pairs.iter().filter_map(|(c, rd)| Some(ratio(c.cpu_us_per_op?, rd.cpu_us_per_op?))));
        let fmt = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.2}"));
        let behind_n = ops.iter().filter(|q| **q < 1.0 - TIE).count();
        let (headline, value, range) = match r.suite.as_str() {
            "qos" => {
                let spread =
                    qos_spread(r).map_or("–".into(), |(_, lo, hi, n)| format!("{lo:.2}–{hi:.2} over {n} runs"));
                ("max ops/s with p99 < 1 ms", qos_ratio(r), spread)
            }
            "memory" => {
                let m: Vec<f64> = pairs
                    .iter()
                    .filter_map(|(c, rd)| Some(ratio(*c.extra.get("rss_per_key")?, *rd.extra.get("rss_per_key")?)))
                    .collect();
                let range = format!(
                    "{:.2}–{:.2}",
                    m.iter().copied().fold(f64::INFINITY, f64::min),
                    m.iter().copied().fold(f64::NEG_INFINITY, f64::max)
                );
                ("RSS bytes per key (lower is better)", geomean(m.into_iter()), range)
            }
            _ => ("ops/s (geomean over points)", geomean(ops.iter().copied()), format!("{lo:.2}–{hi:.2}")),
        };
        let value = match (value, r.suite.as_str()) {
            (Some(v), _) => format!("{v:.2}"),
            (None, "qos") => qos_best_text(&view),
            (None, _) => "–".into(),
        };
        let behind_cell = if r.suite == "memory" { "–".to_string() } else { format!("{behind_n} of {}", ops.len()) };
        let _ = writeln!(
            s,
            "| {}{} | {headline} | **{value}** | {range} | {} | {behind_cell} | {} |",
            r.suite,
            if r.quick { " (quick)" } else { "" },
            fmt(cpu),
            r.date
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::results::sample;

    const ORDER: &[&str] = &["scoreboard", "qos", "get-small"];

    #[test]
    fn sections_are_replaced_in_place_and_other_text_kept() {
        let doc = "# Title\n\nintro\n\n## Hand-written\n\nkeep me\n";
        let d1 = replace_section(doc, "get-small", "first", ORDER);
        assert!(d1.contains("intro\n\n<!-- suite:get-small -->\nfirst\n<!-- /suite:get-small -->\n\n## Hand-written"));
        let d2 = replace_section(&d1, "scoreboard", "board", ORDER);
        assert!(d2.find("board").unwrap() < d2.find("first").unwrap(), "scoreboard goes before the suites");
        let d3 = replace_section(&d2, "qos", "q", ORDER);
        let (b, q, g) = (d3.find("board").unwrap(), d3.find("\nq\n").unwrap(), d3.find("first").unwrap());
        assert!(b < q && q < g, "fixed order: {d3}");
        let d4 = replace_section(&d3, "get-small", "second", ORDER);
        assert!(!d4.contains("first") && d4.contains("second"));
        assert_eq!(d4.matches("<!-- suite:get-small -->").count(), 1);
        for kept in ["# Title", "intro", "## Hand-written\n\nkeep me\n"] {
            assert!(d4.contains(kept), "{kept:?} kept in {d4}");
        }
        assert_eq!(replace_section(&d4, "get-small", "second", ORDER), d4, "idempotent");
        assert!(replace_section("", "qos", "x", ORDER).starts_with("<!-- suite:qos -->"));
    }

    #[test]
    fn section_has_table_ratio_and_behind_sentence() {
        let mut r = sample();
        let s = section(&r, &["get-small-throughput.svg".into()]);
        assert!(s.contains("| GET | 10 | 120 | 100 | 1.20 |"), "{s}");
        assert!(s.contains("![get-small-throughput.svg](plots/get-small-throughput.svg)"));
        assert!(s.contains("throughput at no point (of 1)"), "{s}");
        assert!(s.contains("Test CPU, 2 CPUs online, 24 GiB, Linux 6.1"));
        r.rows[0].ops_per_sec = 80.0;
        r.rows[0].cpu_us_per_op = Some(21.0);
        let b = behind(&r);
        assert!(b.contains("throughput at 1 of 1 points — GET, connections 10: 0.80× (20% fewer ops/s)"), "{b}");
        assert!(b.contains("(worst GET, connections 10: +100%)"), "{b}");
        let board = scoreboard(&[r]);
        assert!(board.contains("| get-small | ops/s (geomean over points) | **0.80** |"), "{board}");
    }

    #[test]
    fn qos_headline_respects_slo_and_schedule() {
        let mut r = sample();
        r.suite = "qos".into();
        for (row, offered) in r.rows.iter_mut().zip([120.0, 100.0, 200.0]) {
            row.offered = Some(offered);
        }
        // redis at x=50 missed its schedule (80 of 200): not counted.
        assert_eq!(qos_max(r.rows.iter().filter(|x| x.server == "redis"), QOS_SLO_US).unwrap().ops_per_sec, 100.0);
        assert_eq!(qos_ratio(&r), Some(1.2));
        r.rows[0].latency_us.p99 = 1500;
        assert_eq!(qos_ratio(&r), None);
        assert!(section(&r, &[]).contains("| corekv | none of the offered loads |"));
    }

    #[test]
    fn qos_headline_is_the_median_of_repeated_runs() {
        let mut r = sample();
        r.suite = "qos".into();
        r.rows.clear();
        // Three runs; run 2 has a p99 excursion on corekv at its best load.
        for (run, corekv, redis, corekv_p99) in
            [(1, 120.0, 100.0, 500), (2, 120.0, 100.0, 5000), (3, 130.0, 100.0, 500)]
        {
            for (server, ops, p99) in [("corekv", corekv, corekv_p99), ("corekv", 90.0, 400), ("redis", redis, 600)] {
                let mut row = Row { server: server.into(), ops_per_sec: ops, x: ops, ..Row::default() };
                row.group = format!("open loop, run {run}");
                row.latency_us.p99 = p99;
                row.extra.insert("run".into(), run as f64);
                r.rows.push(row);
            }
        }
        let runs = qos_runs(&r);
        assert_eq!(runs.len(), 3);
        assert_eq!(runs[1], QosRun { run: 2, corekv: Some(90.0), redis: Some(100.0) });
        let (median, lo, hi, n) = qos_spread(&r).unwrap();
        assert_eq!((median, lo, hi, n), (1.2, 0.9, 1.3, 3));
        assert_eq!(qos_ratio(&r), Some(1.2));
        let text = section(&r, &[]);
        assert!(text.contains("**1.20** (median of 3 runs; spread 0.90–1.30)"), "{text}");
        assert!(scoreboard(&[r]).contains("0.90–1.30 over 3 runs"));
    }

    #[test]
    fn geomeans() {
        assert!((geomean([2.0, 8.0].into_iter()).unwrap() - 4.0).abs() < 1e-9);
        assert_eq!(geomean([f64::NAN].into_iter()), None);
    }
}
