//! redis-benchmark, the tool users reach for first, runs to completion with
//! no errors against one and two shards, with and without pipelining.

mod common;

use common::{ensure_test_deps, Server};
use std::process::Command;

#[test]
fn redis_benchmark_runs_clean() {
    ensure_test_deps();
    for shards in [1, 2] {
        let server = Server::shards(shards);
        for pipeline in ["1", "16"] {
            let out = Command::new("redis-benchmark")
                .args(["-p", &server.port.to_string(), "-q", "-t", "set,get,incr,mset,ping", "-n", "20000", "-c", "50"])
                .args(["-P", pipeline])
                .output()
                .expect("redis-benchmark");
            let text = String::from_utf8_lossy(&out.stdout).replace('\r', "\n");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{text}\n{err}");
            for test in ["PING_INLINE", "PING_MBULK", "SET", "GET", "INCR", "MSET (10 keys)"] {
                assert!(
                    text.lines().any(|l| l.starts_with(&format!("{test}: ")) && l.contains("requests per second")),
                    "{shards} shard(s), -P {pipeline}: no result for {test}:\n{text}"
                );
            }
            assert!(!text.contains("rror") && !err.contains("rror"), "{text}\n{err}");
        }
    }
}
