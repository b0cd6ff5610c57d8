//! `metrics-port`: a real scrape of the Prometheus endpoint, checked
//! against the text exposition format: every sample's family has one TYPE
//! line before it, names and labels are well formed, each shard has its
//! own samples, histograms are cumulative and end at +Inf = _count.

mod common;

use common::Server;
use proxy::resp::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// (status line, headers and body) of one HTTP request.
fn get(port: u16, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    (head.to_string(), body.to_string())
}

struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Parses the exposition; panics on any line the format does not allow.
fn parse(body: &str) -> (BTreeMap<String, String>, Vec<Sample>) {
    let mut types = BTreeMap::new();
    let mut samples = Vec::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert!(valid_name(name), "{line}");
            assert!(["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind), "{line}");
            assert!(types.insert(name.to_string(), kind.to_string()).is_none(), "second TYPE line: {line}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            assert!(valid_name(rest.split(' ').next().unwrap()), "{line}");
            continue;
        }
        assert!(!line.starts_with('#') && !line.is_empty(), "unexpected line {line:?}");
        let (series, value) = line.rsplit_once(' ').expect("name value");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value in {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((name, rest)) => {
                let inner = rest.strip_suffix('}').expect("closing brace");
                let labels = inner
                    .split(',')
                    .map(|pair| {
                        let (k, v) = pair.split_once('=').expect("label=value");
                        assert!(valid_name(k), "{line}");
                        let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')).expect("quoted label value");
                        (k.to_string(), v.to_string())
                    })
                    .collect();
                (name, labels)
            }
        };
        assert!(valid_name(name), "{line}");
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| types.get(*f).map(String::as_str) == Some("histogram")))
            .unwrap_or(name);
        assert!(types.contains_key(family), "sample before its TYPE line: {line}");
        samples.push(Sample { name: name.to_string(), labels, value });
    }
    (types, samples)
}

#[test]
fn scrape_parses_with_per_shard_labels() {
    let metrics = free_port();
    let server = Server::start(&["--shards", "2", "--metrics-port", &metrics.to_string()]);
    let mut c = server.raw();
    for i in 0..200 {
        c.cmd_str(&format!("SET key:{i} {i}"));
        c.cmd_str(&format!("GET key:{i}"));
    }
    c.cmd_str("GET missing");
    let (head, body) = get(metrics, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.contains("Content-Type: text/plain; version=0.0.4"), "{head}");
    let (types, samples) = parse(&body);
    for (name, kind) in [
        ("corekv_commands_processed_total", "counter"),
        ("corekv_keyspace_hits_total", "counter"),
        ("corekv_keyspace_misses_total", "counter"),
        ("corekv_expired_keys_total", "counter"),
        ("corekv_evicted_keys_total", "counter"),
        ("corekv_connected_clients", "gauge"),
        ("corekv_memory_used_bytes", "gauge"),
        ("corekv_memory_rss_bytes", "gauge"),
        ("corekv_command_latency_seconds", "histogram"),
    ] {
        assert_eq!(types.get(name).map(String::as_str), Some(kind), "{name}");
    }
    let per_shard = |name: &str| -> Vec<f64> {
        let shards: BTreeMap<String, f64> = samples
            .iter()
            .filter(|s| s.name == name)
            .map(|s| (s.labels.get("shard").cloned().expect("a shard label"), s.value))
            .collect();
        assert_eq!(shards.keys().cloned().collect::<BTreeSet<_>>(), ["0", "1"].map(String::from).into());
        shards.into_values().collect()
    };
    assert_eq!(per_shard("corekv_keyspace_hits_total").iter().sum::<f64>(), 200.0);
    assert_eq!(per_shard("corekv_keyspace_misses_total").iter().sum::<f64>(), 1.0);
    assert_eq!(per_shard("corekv_keys").iter().sum::<f64>(), 200.0);
    assert_eq!(per_shard("corekv_connected_clients").iter().sum::<f64>(), 1.0);
    assert!(per_shard("corekv_commands_processed_total").iter().sum::<f64>() >= 401.0);
    // Histograms: cumulative buckets, +Inf last and equal to _count.
    for shard in ["0", "1"] {
        let buckets: Vec<(f64, f64)> = samples
            .iter()
            .filter(|s| s.name == "corekv_command_latency_seconds_bucket" && s.labels["shard"] == shard)
            .map(|s| {
                let le = &s.labels["le"];
                (if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap() }, s.value)
            })
            .collect();
        assert!(buckets.len() > 2);
        assert!(buckets.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1), "{buckets:?}");
        assert_eq!(buckets.last().unwrap().0, f64::INFINITY);
        let count = samples
            .iter()
            .find(|s| s.name == "corekv_command_latency_seconds_count" && s.labels["shard"] == shard)
            .unwrap();
        assert_eq!(count.value, buckets.last().unwrap().1);
    }
    let total: f64 = per_shard("corekv_command_latency_seconds_count").iter().sum();
    assert!(total >= 401.0, "latency samples {total}");
    let (head, _) = get(metrics, "/other");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
}

#[test]
fn metrics_port_off_by_default_and_checked_at_start() {
    let server = Server::start(&[]);
    let mut c = server.raw();
    assert_eq!(
        c.cmd_str("CONFIG GET metrics-port"),
        Value::Array(vec![Value::Bulk(b"metrics-port".to_vec()), Value::Bulk(b"0".to_vec())])
    );
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let err = Server::try_start(&["--metrics-port", &port]).err().expect("started on a taken metrics port");
    assert!(err.contains(&format!("Failed listening on port {port} (metrics)")), "{err}");
}
