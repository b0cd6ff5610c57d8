//! Which charts each suite gets, built from its rows.

use super::results::{Row, SuiteResult};
use super::svg::{Chart, Series, CORE_KV, REDIS};

const PERCENTILES: [&str; 6] = ["p50", "p90", "p95", "p99", "p99.9", "p99.99"];

fn percentiles(r: &Row) -> [u64; 6] {
    let l = &r.latency_us;
    [l.p50, l.p90, l.p95, l.p99, l.p999, l.p9999]
}

fn colour(server: &str) -> usize {
    if server == "corekv" {
        CORE_KV
    } else {
        REDIS
    }
}

/// One series per (server, group) with y = f(row).
fn lines(r: &SuiteResult, f: impl Fn(&Row) -> f64) -> Vec<Series> {
    let groups = r.groups();
    let mut out = Vec::new();
    for (gi, g) in groups.iter().enumerate() {
        for server in ["corekv", "redis"] {
            let rows = r.series(g, server);
            if rows.is_empty() {
                continue;
            }
            let name = if groups.len() > 1 { format!("{server}: {g}") } else { server.to_string() };
            let points = rows.iter().map(|row| (row.x, f(row))).collect();
            out.push(Series { name, colour: colour(server), dash: gi, points });
        }
    }
    out
}

fn chart(title: String, x: &str, y: &str, x_log: bool, y_log: bool, series: Vec<Series>) -> Chart {
    Chart { title, x_label: x.into(), y_label: y.into(), x_log, y_log, x_names: None, series }
}

/// Latency percentile curves for each server at the given x values.
fn percentile_chart(r: &SuiteResult, xs: &[f64]) -> Chart {
    let mut series = Vec::new();
    for g in r.groups() {
        for server in ["corekv", "redis"] {
            for (i, row) in r.series(&g, server).into_iter().filter(|row| xs.contains(&row.x)).enumerate() {
                let points =
                    percentiles(row).iter().enumerate().map(|(k, &us)| (k as f64, us as f64 / 1000.0)).collect();
                let name = format!("{server}, {} {}", row.x, r.x_label);
                series.push(Series { name, colour: colour(server), dash: i, points });
            }
        }
    }
    Chart {
        title: format!("{}: latency percentiles", r.suite),
        x_label: "percentile".into(),
        y_label: "latency ms".into(),
        x_log: false,
        y_log: true,
        x_names: Some(PERCENTILES.iter().map(|p| p.to_string()).collect()),
        series,
    }
}

/// The x values to draw percentile curves for: the middle and the largest.
fn representative(r: &SuiteResult) -> Vec<f64> {
    let mut xs: Vec<f64> = r.rows.iter().map(|row| row.x).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let mut pick = vec![xs[xs.len() / 2], xs[xs.len() - 1]];
    pick.dedup();
    pick
}

/// (file name, chart) pairs for a suite, files named `<suite>-<what>.svg`.
pub fn charts(r: &SuiteResult) -> Vec<(String, Chart)> {
    let view = r.without_runs();
    let r = &view;
    if r.rows.is_empty() {
        return Vec::new();
    }
    let name = |what: &str| format!("{}-{what}.svg", r.suite);
    let ops = |row: &Row| row.ops_per_sec;
    let title = |what: &str| format!("{}: {what}", r.suite);
    match r.suite.as_str() {
        "qos" => vec![
            (
                name("p99-vs-offered"),
                chart(
                    title("p99 latency vs offered load"),
                    "offered req/s",
                    "p99 ms",
                    false,
                    true,
                    lines(r, |row| row.latency_us.p99 as f64 / 1000.0),
                ),
            ),
            (
                name("throughput-vs-offered"),
                chart(title("achieved vs offered load"), "offered req/s", "ops/s", false, false, lines(r, ops)),
            ),
        ],
        "get-small" | "get-large" | "skewed" => vec![
            (
                name("throughput"),
                chart(title("throughput vs connections"), "connections", "ops/s", true, false, lines(r, ops)),
            ),
            (name("latency"), percentile_chart(r, &representative(r))),
        ],
        "set-mixed" => {
            vec![(
                name("throughput"),
                chart(title("throughput vs value size"), "value bytes", "ops/s", true, false, lines(r, ops)),
            )]
        }
        "pipeline" => {
            vec![(
                name("throughput"),
                chart(title("throughput vs pipeline depth"), "depth", "ops/s", true, false, lines(r, ops)),
            )]
        }
        "scaling" => vec![(
            name("throughput"),
            chart(title("throughput vs shards"), "shards", "ops/s", false, false, lines(r, ops)),
        )],
        "memory" => vec![(
            name("rss-per-key"),
            chart(
                title("RSS bytes per key"),
                "keys",
                "bytes/key",
                true,
                false,
                lines(r, |row| row.extra.get("rss_per_key").copied().unwrap_or(f64::NAN)),
            ),
        )],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::results::sample;
    use crate::suite::svg::render;

    #[test]
    fn suites_get_their_charts() {
        let r = sample();
        let c = charts(&r);
        let names: Vec<&str> = c.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["get-small-throughput.svg", "get-small-latency.svg"]);
        assert_eq!(c[0].1.series.len(), 2, "one line per server");
        assert_eq!(c[0].1.series[1].points, vec![(10.0, 100.0), (50.0, 80.0)]);
        let svg = render(&c[1].1);
        assert!(svg.contains(">p99.99<"));
        let mut q = r.clone();
        q.suite = "qos".into();
        assert_eq!(charts(&q)[0].0, "qos-p99-vs-offered.svg");
    }
}
