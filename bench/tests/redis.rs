//! End-to-end runs against a real redis-server (standalone and cluster)
//! and against a fake server that corrupts values.

mod common;

use common::fake_server::{Behaviour, FakeServer};
use common::{bench, Redis};
use std::process::Command;
use std::time::Duration;

#[test]
fn set_get_mix_against_redis() {
    let redis = Redis::start(&[]);
    let port = redis.port.to_string();
    let r = bench(&[
        "-p",
        &port,
        "-t",
        "2",
        "-c",
        "4",
        "--pipeline",
        "4",
        "--ratio",
        "1:3",
        "--key-maximum",
        "499",
        "--data-size-list",
        "64:9,4096:1",
        "--test-time",
        "1",
        "--seed",
        "11",
    ]);
    r.assert_clean();
    assert!(r.num("ops_per_sec") > 0.0, "{}", r.stdout);
    assert!(r.num("commands/SET/ops") > 0.0 && r.num("commands/GET/ops") > 0.0);
    // 500 keys are all written early on, so most GETs hit and were verified.
    assert!(r.num("commands/GET/hits") > r.num("commands/GET/misses"), "{}", r.stdout);
    assert!(r.num("bytes_in") > 0.0 && r.num("bytes_out") > 0.0);
    for q in ["p50", "p99", "p99.9", "p99.99", "max"] {
        assert!(r.num(&format!("latency_us/{q}")) > 0.0);
    }
    assert!(r.stdout.contains("Totals"), "text report printed");
}

/// --server-pid charges the server's CPU time over the measured window to
/// the requests of that window.
#[test]
fn server_cpu_per_request() {
    let redis = Redis::start(&[]);
    let (port, pid) = (redis.port.to_string(), redis.pid().to_string());
    let args = ["-p", &port, "-t", "1", "-c", "8", "--test-time", "1", "--warmup", "0.3", "--server-pid", &pid];
    let r = bench(&args);
    r.assert_clean();
    let us = r.num("server_cpu/us_per_op");
    // A loopback request costs a server at least ~1 µs and far below 1 ms.
    assert!(us > 0.5 && us < 1000.0, "{us} µs/op\n{}", r.stdout);
    assert!((r.num("server_cpu/window_s") - 1.0).abs() < 0.2, "window is the measured second");
    assert!(r.stdout.contains("server CPU"), "{}", r.stdout);
    let bad = bench(&["-p", &port, "-n", "1", "--server-pid", "4294967295"]);
    assert_eq!(bad.code, 2, "an unreadable pid is refused before the run: {}", bad.stderr);
}

#[test]
fn preload_then_verified_gets() {
    let redis = Redis::start(&[]);
    let port = redis.port.to_string();
    let r = bench(&[
        "-p",
        &port,
        "-t",
        "2",
        "-c",
        "3",
        "--preload",
        "--ratio",
        "0:1",
        "--key-maximum",
        "1999",
        "--data-size-list",
        "100:9,20000:1",
        "-n",
        "300",
        "--key-pattern",
        "G",
    ]);
    r.assert_clean();
    assert_eq!(r.json()["preload"]["ops"].as_f64(), Some(2000.0), "every key preloaded once");
    assert_eq!(redis.cli(&["DBSIZE"]), "2000");
    assert_eq!(r.num("commands/GET/ops"), 1800.0, "-n is per client: 6 clients x 300");
    assert_eq!(r.num("commands/GET/hits"), 1800.0);
    // Rerunnable: the command line in the report carries the random seed.
    assert!(r.json()["command_line"].as_str().unwrap().contains("--seed="));
}

#[test]
fn custom_commands_and_auth() {
    let redis = Redis::start(&["--requirepass", "s3cret"]);
    let port = redis.port.to_string();
    let r = bench(&[
        "-p",
        &port,
        "-a",
        "s3cret",
        "-t",
        "1",
        "-c",
        "2",
        "--command",
        "INCR __key__",
        "-n",
        "200",
        "--key-maximum",
        "0",
    ]);
    r.assert_clean();
    assert_eq!(redis.cli(&["-a", "s3cret", "--no-auth-warning", "GET", "key:0"]), "400");
    assert!(!r.json()["command_line"].as_str().unwrap().contains("s3cret"), "password masked in the report");
    let ping = bench(&["-p", &port, "-a", "s3cret", "-t", "1", "-c", "2", "--command", "PING", "-n", "100"]);
    ping.assert_clean();
    assert_eq!(ping.num("commands/PING/ops"), 200.0);
    // A wrong password is a clear start-up failure, not a hang.
    let bad = bench(&["-p", &port, "-a", "wrong", "-n", "10"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("WRONGPASS") || bad.stderr.contains("AUTH"), "{}", bad.stderr);
}

#[test]
fn wrong_values_are_detected_and_fail_the_run() {
    let server = FakeServer::start(Behaviour { corrupt_gets: true, ..Default::default() });
    let port = server.port.to_string();
    let args = ["-p", &port, "-t", "1", "-c", "2", "--ratio", "1:1", "--key-maximum", "9", "-n", "200"];
    let r = bench(&args);
    assert_eq!(r.code, 1, "mismatches must fail the run\n{}", r.stdout);
    assert!(r.num("mismatches") > 0.0);
    assert!(r.stdout.contains("first mismatch"), "{}", r.stdout);
    let allowed = bench(&[&args[..], &["--allow-errors"]].concat());
    assert_eq!(allowed.code, 0);
}

#[test]
fn unreachable_server_fails_fast() {
    let port = common::free_port().to_string();
    let r = bench(&["-p", &port, "-n", "1"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("cannot reach"), "{}", r.stderr);
}

#[test]
fn cluster_single_node() {
    let node = Redis::start_cluster_node();
    node.cli(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
    node.wait_cluster_ok();
    let port = node.port.to_string();
    let r = bench(&[
        "-p",
        &port,
        "--cluster",
        "-t",
        "2",
        "-c",
        "2",
        "--ratio",
        "1:1",
        "--key-maximum",
        "999",
        "--test-time",
        "1",
    ]);
    r.assert_clean();
    assert!(r.num("ops") > 0.0);
    assert_eq!(r.num("moved"), 0.0);
    assert_eq!(r.json()["nodes"].as_array().unwrap().len(), 1);
}

/// Three masters: keys must reach their slot's owner (no redirects), and a
/// live reshard during the run must be followed via MOVED/ASK without errors.
#[test]
fn cluster_three_nodes_routes_and_follows_resharding() {
    let nodes: Vec<Redis> = (0..3).map(|_| Redis::start_cluster_node()).collect();
    let ranges = [("0", "5460"), ("5461", "10922"), ("10923", "16383")];
    for (n, (lo, hi)) in nodes.iter().zip(ranges) {
        n.cli(&["CLUSTER", "ADDSLOTSRANGE", lo, hi]);
    }
    for n in &nodes[1..] {
        n.cli(&["CLUSTER", "MEET", "127.0.0.1", &nodes[0].port.to_string()]);
    }
    for n in &nodes {
        n.wait_cluster_ok();
    }
    nodes[0].wait_for(|| nodes[0].cli(&["CLUSTER", "INFO"]).contains("cluster_known_nodes:3"), "all nodes known");
    let port = nodes[0].port.to_string();
    let common = ["-p", &port, "--cluster", "-t", "2", "-c", "2", "--pipeline", "2", "--key-maximum", "2999"];

    let r = bench(&[&common[..], &["--ratio", "1:1", "-n", "500"]].concat());
    r.assert_clean();
    assert_eq!(r.num("moved") + r.num("ask"), 0.0, "a fresh map needs no redirects\n{}", r.stdout);
    assert_eq!(r.json()["nodes"].as_array().unwrap().len(), 3);
    for n in &nodes {
        let keys: u64 = n.cli(&["DBSIZE"]).parse().unwrap();
        assert!(keys > 0, "every master got its share of keys");
    }

    // Move 1000 slots from node 0 to node 1 while a run is going on.
    let (from, to) = (nodes[0].node_id(), nodes[1].node_id());
    let run = std::thread::spawn({
        let args: Vec<String> =
            [&common[..], &["--ratio", "1:1", "--test-time", "4"]].concat().iter().map(|s| s.to_string()).collect();
        move || bench(&args.iter().map(String::as_str).collect::<Vec<_>>())
    });
    std::thread::sleep(Duration::from_millis(800));
    let target = format!("127.0.0.1:{}", nodes[0].port);
    let reshard = Command::new("redis-cli")
        .args(["--cluster", "reshard", &target, "--cluster-from", &from, "--cluster-to", &to])
        .args(["--cluster-slots", "1000", "--cluster-yes"])
        .output()
        .expect("redis-cli --cluster reshard");
    assert!(reshard.status.success(), "reshard failed: {}", String::from_utf8_lossy(&reshard.stderr));
    let r = run.join().unwrap();
    eprintln!("run during reshard:\n{}", r.stdout);
    r.assert_clean();
    assert!(r.num("moved") > 0.0, "requests for moved slots were redirected\n{}", r.stdout);
}
