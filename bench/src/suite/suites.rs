//! The named suites: what each starts, loads and measures.

use super::load::{args, measure, preload, LoadSettings};
use super::results::{Machine, Row, SuiteResult};
use super::servers::{version, Binaries, Kind, Servers};
use hdrhistogram::Histogram;
use std::collections::BTreeMap;

pub const ALL: &[&str] = &["qos", "get-small", "get-large", "set-mixed", "skewed", "pipeline", "scaling", "memory"];

/// Everything a suite needs to know about this run.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub bins: Binaries,
    pub server_cpus: Vec<usize>,
    pub client_cpus: Vec<usize>,
    pub quick: bool,
    pub load: LoadSettings,
    /// Keys in get-large's database.
    pub large_keys: u64,
    /// Key counts the memory suite loads.
    pub memory_keys: Vec<u64>,
    /// The scaling suite's shard counts, when not 1 to the server CPUs.
    pub shard_counts: Option<Vec<usize>>,
    /// `bench/run.sh` plus the options that shape results (CPUs, --quick...).
    pub rerun_prefix: String,
}

/// One suite being run: its rows and the commands that produced them.
struct Run<'a> {
    ctx: &'a Ctx,
    name: &'static str,
    rows: Vec<Row>,
    commands: Vec<String>,
}

impl Run<'_> {
    fn start(&mut self, kind: Kind, cpus: &[usize]) -> Result<Servers, String> {
        let s = Servers::start(&self.ctx.bins, kind, cpus)?;
        for c in &s.commands {
            if !self.commands.contains(c) {
                self.commands.push(c.clone());
            }
        }
        Ok(s)
    }

    /// corekv (shards = server CPUs) and one redis-server, both on the server CPUs.
    fn pair(&mut self) -> Result<[(&'static str, Servers); 2], String> {
        let cpus = self.ctx.server_cpus.clone();
        let shards = cpus.len();
        Ok([
            ("corekv", self.start(Kind::Corekv { shards, cluster: false }, &cpus)?),
            ("redis", self.start(Kind::Redis, &cpus)?),
        ])
    }

    fn preload(&mut self, s: &Servers, keys: &[String]) -> Result<f64, String> {
        preload(s, &self.ctx.load, keys, &mut self.commands)
    }

    fn point(&mut self, server: &str, s: &Servers, group: &str, x: f64, a: &[String]) -> Result<Row, String> {
        Ok(self.point_hist(server, s, group, x, a)?.0)
    }

    /// A point and its latency histogram.
    fn point_hist(
        &mut self,
        server: &str,
        s: &Servers,
        group: &str,
        x: f64,
        a: &[String],
    ) -> Result<(Row, Histogram<u64>), String> {
        let (mut row, hist) = measure(s, &self.ctx.load, a, &mut self.commands)?;
        row.group = group.to_string();
        row.x = x;
        row.server = server.to_string();
        eprintln!(
            "[{}] {server:<6} {group} @ {x}: {:.0} ops/s, p50 {:.3} ms, p99 {:.3} ms, server CPU {} µs/op{}",
            self.name,
            row.ops_per_sec,
            row.latency_us.p50 as f64 / 1000.0,
            row.latency_us.p99 as f64 / 1000.0,
            row.cpu_us_per_op.map_or("?".into(), |c| format!("{c:.2}")),
            if row.failures > 0 { format!(", {} FAILED requests", row.failures) } else { String::new() }
        );
        self.rows.push(row.clone());
        Ok((row, hist))
    }

    /// Clients per thread giving about `total` connections.
    fn per_thread(&self, total: usize) -> usize {
        total.div_ceil(self.ctx.load.threads).max(1)
    }

    fn conns(&self, total: usize) -> (f64, Vec<String>) {
        let c = self.per_thread(total);
        ((c * self.ctx.load.threads) as f64, args(["-c".to_string(), c.to_string()]))
    }

    fn pick<T: Copy>(&self, full: &[T], quick: &[T]) -> Vec<T> {
        if self.ctx.quick { quick } else { full }.to_vec()
    }
}

fn keyspace(max: u64) -> Vec<String> {
    args(["--key-minimum".to_string(), "0".into(), "--key-maximum".into(), (max - 1).to_string()])
}

pub fn run(ctx: &Ctx, name: &str) -> Result<SuiteResult, String> {
    let name: &'static str = ALL.iter().copied().find(|&n| n == name).ok_or(format!("unknown suite {name:?}"))?;
    let mut r = Run { ctx, name, rows: Vec::new(), commands: Vec::new() };
    let (description, x_label) = match name {
        "qos" => qos(&mut r)?,
        "get-small" => get(&mut r, 1024, "GET, 1024 keys")?,
        "get-large" => get(&mut r, ctx.large_keys, &format!("GET, {} keys", ctx.large_keys))?,
        "set-mixed" => set_mixed(&mut r)?,
        "skewed" => skewed(&mut r)?,
        "pipeline" => pipeline(&mut r)?,
        "scaling" => scaling(&mut r)?,
        _ => memory(&mut r)?,
    };
    let mut versions = BTreeMap::new();
    versions.insert("corekv".to_string(), version(&ctx.bins.corekv));
    versions.insert("redis".to_string(), version(&ctx.bins.redis));
    Ok(SuiteResult {
        suite: name.to_string(),
        description,
        x_label: x_label.to_string(),
        date: super::results::utc_now(),
        machine: Machine::detect(),
        versions,
        rerun: format!("{} {name}", ctx.rerun_prefix),
        commands: r.commands,
        server_cpus: super::cpus::format_list(&ctx.server_cpus),
        client_cpus: super::cpus::format_list(&ctx.client_cpus),
        quick: ctx.quick,
        rows: r.rows,
    })
}

fn timing(ctx: &Ctx) -> String {
    format!(
        "Each point: {} s warm-up, then {} s measured; {} load-generator thread(s), one per client CPU.",
        ctx.load.warmup_s, ctx.load.measure_s, ctx.load.threads
    )
}

type Described = (String, &'static str);

/// How many times the qos sweep runs.
pub const QOS_RUNS: usize = 3;
/// The qos sweep's group; each run's rows are "<group>, run N".
pub const QOS_GROUP: &str = "SET:GET 1:10, open loop";
/// The group of the rows merging every run.
pub const QOS_MERGED: &str = "SET:GET 1:10, open loop, runs merged";

/// One row for the same point measured several times: latency from the
/// merged histogram, throughput and CPU per request averaged, failures
/// summed.
pub fn merge_runs(runs: &[(Row, Histogram<u64>)], group: &str) -> Row {
    let mut hist = crate::stats::new_histogram();
    for (_, h) in runs {
        hist.add(h).expect("histograms of the same bounds");
    }
    let n = runs.len().max(1) as f64;
    let cpu: Vec<f64> = runs.iter().filter_map(|(r, _)| r.cpu_us_per_op).collect();
    let first = &runs[0].0;
    Row {
        group: group.to_string(),
        x: first.x,
        server: first.server.clone(),
        ops_per_sec: runs.iter().map(|(r, _)| r.ops_per_sec).sum::<f64>() / n,
        latency_us: crate::stats::Latency::of(&hist),
        cpu_us_per_op: (cpu.len() == runs.len()).then(|| cpu.iter().sum::<f64>() / n),
        offered: first.offered,
        failures: runs.iter().map(|(r, _)| r.failures).sum(),
        extra: BTreeMap::new(),
    }
}

fn qos(r: &mut Run) -> Result<Described, String> {
    let keys: u64 = if r.ctx.quick { 10_000 } else { 100_000 };
    let mut base = keyspace(keys);
    base.extend(args(["--ratio", "1:10", "-d", "32"]));
    let (_, c) = r.conns(50);
    base.extend(c);
    let servers = r.pair()?;
    // Capacity first (closed loop), then a common grid of offered loads.
    let mut cap: f64 = 0.0;
    for (name, s) in &servers {
        r.preload(s, &[keyspace(keys), args(["-d", "32"])].concat())?;
        cap = cap.max(r.point(name, s, "closed loop (capacity)", 0.0, &base)?.ops_per_sec);
    }
    r.rows.clear();
    let fracs = r.pick(&[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0], &[0.25, 0.5, 0.75, 1.0]);
    let rates: Vec<f64> = fracs.iter().map(|f| (cap * f / 100.0).round().max(1.0) * 100.0).collect();
    // The sweep runs QOS_RUNS times so one p99 excursion cannot decide the
    // headline; each (server, rate) also gets a row of all runs merged.
    let mut merged: Vec<Vec<(Row, Histogram<u64>)>> = vec![Vec::new(); rates.len() * servers.len()];
    for run in 1..=QOS_RUNS {
        let group = format!("{QOS_GROUP}, run {run}");
        for (i, &rate) in rates.iter().enumerate() {
            for (j, (name, s)) in servers.iter().enumerate() {
                let a = [base.clone(), args(["--rate".to_string(), rate.to_string()])].concat();
                let (row, hist) = r.point_hist(name, s, &group, rate, &a)?;
                r.rows.last_mut().expect("the point's row").extra.insert("run".into(), run as f64);
                merged[i * servers.len() + j].push((row, hist));
            }
        }
    }
    for runs in &merged {
        r.rows.push(merge_runs(runs, QOS_MERGED));
    }
    let d = format!(
        "Open-loop sweep (coordinated-omission-free: latency counts from each request's scheduled send). \
         SET:GET 1:10, 32-byte values, {keys} preloaded keys, 50 connections. Offered loads are fractions of \
         the higher closed-loop throughput of the two servers ({cap:.0} ops/s). The headline is the highest \
         throughput each server achieved with p99 under 1 ms while keeping up with the schedule; the sweep \
         runs {QOS_RUNS} times (servers interleaved at every point) and the headline is the median of the runs' \
         ratios, with their spread; the table shows each offered load with the runs' histograms merged. {}",
        timing(r.ctx)
    );
    Ok((d, "offered req/s"))
}

fn get(r: &mut Run, keys: u64, group: &str) -> Result<Described, String> {
    let servers = r.pair()?;
    for (_, s) in &servers {
        r.preload(s, &[keyspace(keys), args(["-d", "8"])].concat())?;
    }
    let points =
        if keys <= 1024 { r.pick(&[1, 5, 10, 25, 50, 100, 200], &[5, 50]) } else { r.pick(&[10, 50, 200], &[50]) };
    for n in points {
        let (x, c) = r.conns(n);
        let a = [keyspace(keys), args(["--ratio", "0:1", "-d", "8", "--key-pattern", "R"]), c].concat();
        for (name, s) in &servers {
            r.point(name, s, group, x, &a)?;
        }
    }
    let d = format!(
        "GET only, uniform random keys over a preloaded database of {keys} keys with 8-byte values, closed \
         loop, pipeline 1, varying the number of connections. {}",
        timing(r.ctx)
    );
    Ok((d, "connections"))
}

fn set_mixed(r: &mut Run) -> Result<Described, String> {
    let keys: u64 = if r.ctx.quick { 10_000 } else { 100_000 };
    let servers = r.pair()?;
    let (_, c) = r.conns(50);
    for size in [8u32, 128, 2048] {
        for (name, s) in &servers {
            let d = args(["-d".to_string(), size.to_string()]);
            r.preload(s, &[keyspace(keys), d.clone()].concat())?;
            for (group, ratio) in [("SET only", "1:0"), ("SET:GET 20:80", "1:4")] {
                let a = [keyspace(keys), d.clone(), c.clone(), args(["--ratio", ratio])].concat();
                r.point(name, s, group, f64::from(size), &a)?;
            }
        }
    }
    let d = format!(
        "Pure SET and SET:GET 20:80 with 8, 128 and 2048-byte values, {keys} keys (preloaded with the same \
         value size), 50 connections, closed loop, pipeline 1. {}",
        timing(r.ctx)
    );
    Ok((d, "value bytes"))
}

fn skewed(r: &mut Run) -> Result<Described, String> {
    let keys: u64 = if r.ctx.quick { 10_000 } else { 100_000 };
    let sizes = args(["--data-size-list", "100:99,102400:1"]);
    let servers = r.pair()?;
    for (_, s) in &servers {
        r.preload(s, &[keyspace(keys), sizes.clone()].concat())?;
    }
    for n in r.pick(&[24, 48, 96, 192, 384, 768], &[24, 96]) {
        let (x, c) = r.conns(n);
        let a = [keyspace(keys), sizes.clone(), c, args(["--ratio", "1:2"])].concat();
        for (name, s) in &servers {
            r.point(name, s, "SET:GET 1:2, 99% 100 B / 1% 100 KB", x, &a)?;
        }
    }
    let d = format!(
        "SET:GET 1:2 with skewed values (99% 100 bytes, 1% 100 KB), {keys} preloaded keys, 24 to 768 \
         connections, closed loop, pipeline 1: the tail percentiles show how large values delay small ones. {}",
        timing(r.ctx)
    );
    Ok((d, "connections"))
}

fn pipeline(r: &mut Run) -> Result<Described, String> {
    let keys: u64 = if r.ctx.quick { 10_000 } else { 100_000 };
    let servers = r.pair()?;
    for (_, s) in &servers {
        r.preload(s, &[keyspace(keys), args(["-d", "100"])].concat())?;
    }
    let (_, c) = r.conns(50);
    for depth in [1usize, 16, 64] {
        for (group, ratio) in [("GET", "0:1"), ("SET", "1:0")] {
            let a =
                [keyspace(keys), c.clone(), args(["--ratio", ratio, "-d", "100", "--pipeline", &depth.to_string()])]
                    .concat();
            for (name, s) in &servers {
                r.point(name, s, group, depth as f64, &a)?;
            }
        }
    }
    let d = format!(
        "GET and SET at pipeline depths 1, 16 and 64 (a full batch per connection, as redis-benchmark -P), \
         100-byte values, {keys} preloaded keys, 50 connections. {}",
        timing(r.ctx)
    );
    Ok((d, "pipeline depth"))
}

fn scaling(r: &mut Run) -> Result<Described, String> {
    let keys: u64 = if r.ctx.quick { 10_000 } else { 100_000 };
    let n = r.ctx.server_cpus.len();
    let mut counts: Vec<usize> = match &r.ctx.shard_counts {
        Some(counts) => counts.clone(),
        None if r.ctx.quick => vec![1, n],
        None => (1..=n).collect(),
    };
    counts.dedup();
    let counts_text = counts.iter().map(usize::to_string).collect::<Vec<_>>().join(", ");
    let mut a = [keyspace(keys), args(["--ratio", "1:10", "-d", "32"])].concat();
    a.extend(r.conns(50).1);
    for k in counts {
        let cpus = r.ctx.server_cpus[..k].to_vec();
        let setups = [
            ("plain client", "corekv", Kind::Corekv { shards: k, cluster: false }),
            ("plain client", "redis", Kind::Redis),
            ("cluster client", "corekv", Kind::Corekv { shards: k, cluster: true }),
            ("cluster client", "redis", Kind::RedisCluster),
        ];
        for (group, name, kind) in setups {
            let s = r.start(kind, &cpus)?;
            r.preload(&s, &[keyspace(keys), args(["-d", "32"])].concat())?;
            r.point(name, &s, group, k as f64, &a)?;
        }
    }
    let d = format!(
        "{} shards on as many server CPUs (of CPUs {}), SET:GET 1:10, 32-byte values, {keys} preloaded keys, \
         50 connections per load-generator thread. Plain client (rows \"plain client\"): corekv --shards k on the shared port (most \
         requests hop between cores when k > 1) against one redis-server pinned to the same k CPUs. Cluster \
         client (rows \"cluster client\": corekv-bench --cluster, keys routed by slot): corekv --cluster-mode per-core against k \
         cluster-mode redis-servers, one pinned to each CPU, slots split evenly (the Redis Cluster baseline). \
         On a 2-core machine only k = 1 fits beside the load generator; pass --server-cpus/--client-cpus on a \
         bigger one. {}",
        counts_text,
        super::cpus::format_list(&r.ctx.server_cpus),
        timing(r.ctx)
    );
    Ok((d, "shards"))
}

fn memory(r: &mut Run) -> Result<Described, String> {
    let cpu = vec![r.ctx.server_cpus[0]];
    for &n in &r.ctx.memory_keys.clone() {
        for size in [8u32, 100] {
            let group = format!("{size} B values");
            for (name, kind) in [("corekv", Kind::Corekv { shards: 1, cluster: false }), ("redis", Kind::Redis)] {
                let s = r.start(kind, &cpu)?;
                let before = (s.info_sum("memory", "used_memory")?, s.rss()?);
                // 16-byte keys: "memkey:" + 9 digits.
                let keys = args([
                    "--key-prefix".to_string(),
                    "memkey:".into(),
                    "--key-minimum".into(),
                    "100000000".into(),
                    "--key-maximum".into(),
                    (100_000_000 + n - 1).to_string(),
                    "-d".into(),
                    size.to_string(),
                ]);
                let rate = r.preload(&s, &keys)?;
                std::thread::sleep(std::time::Duration::from_millis(300));
                let after = (s.info_sum("memory", "used_memory")?, s.rss()?);
                let dbsize: f64 = super::servers::command(s.port, &["DBSIZE"])?.parse().unwrap_or(0.0);
                let mut row = Row { group: group.clone(), x: n as f64, server: name.into(), ..Row::default() };
                row.ops_per_sec = rate;
                row.extra.insert("keys_loaded".into(), dbsize);
                row.extra.insert("used_memory_per_key".into(), (after.0 - before.0) / n as f64);
                row.extra.insert("rss_per_key".into(), (after.1 - before.1) / n as f64);
                row.extra.insert("rss_baseline".into(), before.1);
                eprintln!(
                    "[memory] {name:<6} {n} keys, {size} B: used_memory {:.1} B/key, RSS {:.1} B/key ({dbsize} keys)",
                    row.extra["used_memory_per_key"], row.extra["rss_per_key"]
                );
                if dbsize as u64 != n {
                    return Err(format!("{name}: loaded {dbsize} keys, expected {n}"));
                }
                r.rows.push(row);
            }
        }
    }
    let d = format!(
        "Bytes per key after loading {} keys of 16 bytes with 8- and 100-byte values into a fresh server \
         (corekv --shards 1, redis-server; each on CPU {}): used_memory from INFO memory and the process's \
         VmRSS, each minus the empty server's, divided by the keys loaded.",
        r.ctx.memory_keys.iter().map(u64::to_string).collect::<Vec<_>>().join(" and "),
        cpu[0]
    );
    Ok((d, "keys"))
}
