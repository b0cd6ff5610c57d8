//! Coordinated omission: a server that freezes for 200 ms once a second.
//! The open-loop run must charge every request scheduled during a freeze
//! with the time it waited; a closed-loop run of the same shape only ever
//! has `clients` requests caught in each freeze, so its p99 hides it.
//! The same holds against a real redis-server slowed by `DEBUG SLEEP`.

mod common;

use common::fake_server::{Behaviour, FakeServer};
use common::{bench, Redis};
use std::time::Duration;

const STALL_MS: f64 = 200.0;

fn stalling_server() -> FakeServer {
    FakeServer::start(Behaviour {
        stall_every: Some(Duration::from_secs(1)),
        stall_for: Duration::from_millis(STALL_MS as u64),
        corrupt_gets: false,
    })
}

#[test]
fn open_loop_latency_includes_server_stalls() {
    let server = stalling_server();
    let port = server.port.to_string();
    let shape = ["-p", &port, "-t", "1", "-c", "4", "--ratio", "1:1", "--key-maximum", "999", "--test-time", "3"];

    // 1000 req/s for 3 s: ~400 of ~3000 requests fall into the two or three
    // freezes, waiting up to the whole 200 ms.
    let open = bench(&[&shape[..], &["--rate", "1000", "--seed", "7"]].concat());
    open.assert_clean();
    eprintln!("open loop:\n{}", open.stdout);
    let ops = open.num("ops");
    assert!((2000.0..=3300.0).contains(&ops), "open loop should keep its schedule, did {ops} requests");
    let p999_ms = open.num("latency_us/p99.9") / 1000.0;
    let p99_ms = open.num("latency_us/p99") / 1000.0;
    assert!(p999_ms >= 0.9 * STALL_MS, "open-loop p99.9 {p999_ms} ms hides the {STALL_MS} ms stall\n{}", open.stdout);
    assert!(p99_ms >= 0.6 * STALL_MS, "open-loop p99 {p99_ms} ms hides the {STALL_MS} ms stall\n{}", open.stdout);

    // Closed loop: only 4 requests per freeze see it, out of many thousands.
    let closed = bench(&[&shape[..], &["--seed", "7"]].concat());
    closed.assert_clean();
    eprintln!("closed loop:\n{}", closed.stdout);
    let closed_p99_ms = closed.num("latency_us/p99") / 1000.0;
    assert!(
        closed_p99_ms < 0.5 * STALL_MS,
        "closed-loop p99 {closed_p99_ms} ms: expected coordinated omission to hide the stall\n{}",
        closed.stdout
    );
    // The stall is still the maximum in both modes.
    assert!(closed.num("latency_us/max") / 1000.0 >= 0.9 * STALL_MS);
}

#[test]
fn open_loop_warmup_is_excluded() {
    let server = stalling_server();
    let port = server.port.to_string();
    // The first freeze starts 1 s in, inside the 1.5 s warm-up; the measured
    // second (1.5 s .. 2.5 s) sees at most the start of the next one at 2.2 s.
    let r = bench(&["-p", &port, "-t", "1", "-c", "2", "--rate", "500", "--warmup", "1.5", "--test-time", "1"]);
    r.assert_clean();
    let ops = r.num("ops");
    assert!((350.0..=650.0).contains(&ops), "expected ~500 measured requests, got {ops}");
}

#[test]
fn debug_sleep_on_real_redis_shows_in_open_loop_p999() {
    let redis = Redis::start(&["--enable-debug-command", "yes"]);
    let port = redis.port.to_string();
    // A second client freezes the server for 200 ms twice during the run.
    let sleeper = {
        let port = port.clone();
        std::thread::spawn(move || {
            for _ in 0..2 {
                std::thread::sleep(Duration::from_millis(900));
                let out = std::process::Command::new("redis-cli")
                    .args(["-p", &port, "DEBUG", "SLEEP", "0.2"])
                    .output()
                    .expect("redis-cli");
                assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK");
            }
        })
    };
    let r = bench(&[
        "-p",
        &port,
        "-t",
        "1",
        "-c",
        "4",
        "--ratio",
        "1:1",
        "--key-maximum",
        "999",
        "--test-time",
        "2.5",
        "--rate",
        "1000",
        "--seed",
        "3",
    ]);
    sleeper.join().unwrap();
    r.assert_clean();
    eprintln!("{}", r.stdout);
    // ~400 of ~2500 requests were scheduled during the two freezes.
    let p999_ms = r.num("latency_us/p99.9") / 1000.0;
    assert!(
        p999_ms >= 0.9 * STALL_MS,
        "open-loop p99.9 {p999_ms} ms hides two {STALL_MS} ms DEBUG SLEEPs\n{}",
        r.stdout
    );
}
