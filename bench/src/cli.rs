//! Command-line options (memtier_benchmark-compatible where it makes sense)
//! and their validation into a run configuration.

use crate::data::DataSet;
use crate::keys::KeyPattern;
use crate::workload::{Mix, Template, Values, Workload};
use clap::Parser;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "corekv-bench",
    version,
    about = "Load generator for Redis-compatible servers: closed-loop (memtier-style) or \
             open-loop (--rate, coordinated-omission-free) with HDR latency percentiles."
)]
pub struct Args {
    /// Server host (any node, with --cluster).
    #[arg(short = 's', long, default_value = "127.0.0.1")]
    pub server: String,
    #[arg(short = 'p', long, default_value_t = 6379)]
    pub port: u16,
    /// Password sent with AUTH on every connection.
    #[arg(short = 'a', long)]
    pub auth: Option<String>,

    /// Worker threads, each running its own event loop.
    #[arg(short = 't', long, default_value_t = 4)]
    pub threads: usize,
    /// Clients per thread (one connection per client, per master with --cluster).
    #[arg(short = 'c', long, default_value_t = 50)]
    pub clients: usize,
    /// Requests in flight per client (closed loop). With --cluster this
    /// spans the client's connections to all masters.
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// When a pipelined client sends again: `batch` once all its replies are
    /// in, then a full pipeline (redis-benchmark -P); `eager` after every
    /// reply, keeping the pipeline topped up (memtier_benchmark).
    #[arg(long, value_enum, default_value = "batch")]
    pub refill: Refill,

    /// SET:GET ratio, e.g. 1:10, 1:0, 0:1.
    #[arg(long, default_value = "1:10")]
    pub ratio: Ratio,
    /// Custom command instead of the SET/GET mix; `__key__` and `__data__`
    /// are substituted, e.g. "INCR __key__" or "PING".
    #[arg(long)]
    pub command: Option<String>,

    #[arg(long, value_enum, default_value = "R")]
    pub key_pattern: KeyPattern,
    #[arg(long, default_value_t = 0)]
    pub key_minimum: u64,
    #[arg(long, default_value_t = 9_999_999)]
    pub key_maximum: u64,
    #[arg(long, default_value = "key:")]
    pub key_prefix: String,
    /// Gaussian pattern: centre (default: middle of the range).
    #[arg(long)]
    pub key_median: Option<f64>,
    /// Gaussian pattern: standard deviation (default: range / 6).
    #[arg(long)]
    pub key_stddev: Option<f64>,
    /// Zipf pattern: the exponent s (default 0.99).
    #[arg(long)]
    pub key_zipf_exp: Option<f64>,

    /// Value size in bytes.
    #[arg(short = 'd', long, default_value_t = 32)]
    pub data_size: u32,
    /// Weighted value sizes, e.g. 100:99,102400:1 (size:weight,...).
    #[arg(long)]
    pub data_size_list: Option<SizeList>,

    /// What values hold: the self-verifying pattern, or a data set of the
    /// replication study (random bytes, one repeated character, text-like
    /// records), which GETs cannot verify.
    #[arg(long, value_enum, default_value = "pattern")]
    pub data: DataSet,

    /// Run for this many seconds (after --warmup).
    #[arg(long, conflicts_with = "requests")]
    pub test_time: Option<f64>,
    /// Requests per client (default 10000 when --test-time is not given).
    #[arg(short = 'n', long)]
    pub requests: Option<u64>,
    /// Seconds of load before measuring starts (needs --test-time).
    #[arg(long, default_value_t = 0.0)]
    pub warmup: f64,
    /// Seed for all randomness; each client derives its own from it.
    #[arg(long)]
    pub seed: Option<u64>,

    /// Redis Cluster mode: route each key to its slot's master.
    #[arg(long)]
    pub cluster: bool,

    /// Open loop: total requests per second, spread evenly over all clients.
    /// Latency is measured from each request's scheduled send time.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Open loop: most requests in flight per client; sends beyond it wait
    /// (and that wait counts as latency).
    #[arg(long, default_value_t = 1000)]
    pub max_inflight: usize,
    /// Seconds to wait for outstanding replies after the run before
    /// counting them as timeouts.
    #[arg(long, default_value_t = 10.0)]
    pub drain_timeout: f64,

    /// SET every key of the range once before the run.
    #[arg(long)]
    pub preload: bool,

    /// Write results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write HdrHistogram percentile distributions to PREFIX_<CMD>.txt.
    #[arg(long)]
    pub hdr_prefix: Option<String>,
    /// Exit 0 even if errors or mismatches occurred.
    #[arg(long)]
    pub allow_errors: bool,
    /// Server process to charge CPU time to (utime + stime from
    /// /proc/PID/stat over the measured window); repeat for several
    /// processes. Adds server CPU µs per request to the report.
    #[arg(long = "server-pid")]
    pub server_pid: Vec<u32>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Refill {
    Batch,
    Eager,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Ratio {
    pub sets: u32,
    pub gets: u32,
}

impl FromStr for Ratio {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, b) = s.split_once(':').ok_or("expected SET:GET, e.g. 1:10")?;
        let sets = a.trim().parse().map_err(|_| format!("bad SET count {a:?}"))?;
        let gets = b.trim().parse().map_err(|_| format!("bad GET count {b:?}"))?;
        if sets == 0 && gets == 0 {
            return Err("ratio 0:0 sends nothing".into());
        }
        Ok(Ratio { sets, gets })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeList(pub Vec<(u32, u32)>);

impl FromStr for SizeList {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let items = s
            .split(',')
            .map(|item| {
                let (size, weight) = item.split_once(':').ok_or(format!("expected size:weight, got {item:?}"))?;
                let size: u32 = size.trim().parse().map_err(|_| format!("bad size {size:?}"))?;
                let weight: u32 = weight.trim().parse().map_err(|_| format!("bad weight {weight:?}"))?;
                if size == 0 || weight == 0 {
                    return Err(format!("size and weight must be positive in {item:?}"));
                }
                Ok((size, weight))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(SizeList(items))
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    /// Requests per client.
    Requests(u64),
    Time(Duration),
}

/// Validated run configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub args: Args,
    pub workload: Workload,
    pub sizes: Vec<(u32, u32)>,
    pub stop: Stop,
    pub warmup: Duration,
    pub seed: u64,
    pub drain_timeout: Duration,
}

impl Config {
    pub fn from_args(args: Args) -> Result<Self, String> {
        let positive = |name: &str, v: usize| {
            if v == 0 {
                Err(format!("--{name} must be at least 1"))
            } else {
                Ok(())
            }
        };
        positive("threads", args.threads)?;
        positive("clients", args.clients)?;
        positive("pipeline", args.pipeline)?;
        positive("max-inflight", args.max_inflight)?;
        if args.key_maximum < args.key_minimum {
            return Err("--key-maximum must be >= --key-minimum".into());
        }
        let secs = |name: &str, v: f64| {
            Duration::try_from_secs_f64(v).map_err(|_| format!("--{name} must be a non-negative number of seconds"))
        };
        let stop = match (args.test_time, args.requests) {
            (Some(t), _) if t > 0.0 => Stop::Time(secs("test-time", t)?),
            (Some(_), _) => return Err("--test-time must be positive".into()),
            (None, n) => Stop::Requests(n.unwrap_or(10_000)),
        };
        let warmup = secs("warmup", args.warmup)?;
        if !warmup.is_zero() && !matches!(stop, Stop::Time(_)) {
            return Err("--warmup needs --test-time".into());
        }
        if let Some(r) = args.rate {
            if !(r > 0.0 && r.is_finite()) {
                return Err("--rate must be positive".into());
            }
        }
        let sizes = match &args.data_size_list {
            Some(list) => list.0.clone(),
            None if args.data_size == 0 => return Err("--data-size must be at least 1".into()),
            None => vec![(args.data_size, 1)],
        };
        let mix = match &args.command {
            Some(c) => Mix::Custom(Template::parse(c)?),
            None => Mix::Ratio { sets: args.ratio.sets, gets: args.ratio.gets },
        };
        let workload = Workload {
            mix,
            key_prefix: args.key_prefix.clone().into_bytes(),
            values: Values::new(&sizes).with_data(args.data),
        };
        let seed = args.seed.unwrap_or_else(|| {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            t.as_nanos() as u64 ^ u64::from(std::process::id())
        });
        Ok(Config {
            drain_timeout: secs("drain-timeout", args.drain_timeout)?,
            args,
            workload,
            sizes,
            stop,
            warmup,
            seed,
        })
    }

    pub fn total_clients(&self) -> usize {
        self.args.threads * self.args.clients
    }
}

/// SplitMix64: turns (seed, client index) into well-separated RNG seeds.
pub fn derive_seed(seed: u64, stream: u64) -> u64 {
    let mut z = seed.wrapping_add(stream.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
