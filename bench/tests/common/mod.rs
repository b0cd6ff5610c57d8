//! Helpers shared by the integration tests: running the built binary,
//! reading its JSON report, and owning real or fake servers for a test.
#![allow(dead_code)] // each test crate uses a different subset

pub mod fake_server;

use serde_json::Value;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BENCH: &str = env!("CARGO_BIN_EXE_corekv-bench");

/// Result of one corekv-bench invocation.
pub struct BenchRun {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub json: Option<Value>,
}

impl BenchRun {
    pub fn json(&self) -> &Value {
        self.json
            .as_ref()
            .unwrap_or_else(|| panic!("no JSON report\nstdout:\n{}\nstderr:\n{}", self.stdout, self.stderr))
    }

    /// `run.<path>` as f64, e.g. `latency_us/p99.9` or `commands/GET/hits`.
    pub fn num(&self, path: &str) -> f64 {
        let v = path.split('/').fold(&self.json()["run"], |v, k| &v[k]);
        v.as_f64().unwrap_or_else(|| panic!("run/{path} missing in {}", self.json()))
    }

    pub fn assert_clean(&self) {
        assert_eq!(self.code, 0, "corekv-bench failed\nstdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        for k in ["errors", "mismatches", "connection_errors", "unanswered"] {
            assert_eq!(self.num(k), 0.0, "{k} in\n{}", self.stdout);
        }
    }
}

/// Runs corekv-bench with `args` plus `--json <tmp>` and collects everything.
pub fn bench(args: &[&str]) -> BenchRun {
    let json_path = temp_dir("json").join("report.json");
    let out = Command::new(BENCH)
        .args(args)
        .arg("--json")
        .arg(&json_path)
        .stdin(Stdio::null())
        .output()
        .expect("run corekv-bench");
    let json = std::fs::read(&json_path).ok().map(|b| serde_json::from_slice(&b).expect("valid JSON report"));
    let _ = std::fs::remove_dir_all(json_path.parent().unwrap());
    BenchRun {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        json,
    }
}

pub fn temp_dir(tag: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("corekv-bench-{tag}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A port that is free now, and whose cluster bus port (+10000) is too.
pub fn free_port() -> u16 {
    loop {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        if !(20000..=55535).contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
}

/// A redis-server child process, killed on drop.
pub struct Redis {
    pub port: u16,
    child: Child,
    dir: PathBuf,
}

impl Redis {
    pub fn start(extra: &[&str]) -> Redis {
        let found = Command::new("redis-server").arg("--version").stdout(Stdio::null()).status().is_ok();
        assert!(
            found,
            "redis-server is not on PATH: run the project's setup script (it installs redis-server, \
             redis-cli and redis-benchmark) before `cargo test -p corekv-bench`"
        );
        let dir = temp_dir("redis");
        let port = free_port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dir", dir.to_str().unwrap()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        let r = Redis { port, child, dir };
        // Any reply (PONG, or NOAUTH with --requirepass) means it is up.
        r.wait_for(|| !r.cli(&["PING"]).is_empty(), "redis-server to answer PING");
        r
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A cluster-enabled server (no slots assigned yet).
    pub fn start_cluster_node() -> Redis {
        Redis::start(&["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"])
    }

    /// Runs redis-cli against this server and returns trimmed stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        let out =
            Command::new("redis-cli").args(["-p", &self.port.to_string()]).args(args).output().expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    pub fn node_id(&self) -> String {
        self.cli(&["CLUSTER", "MYID"])
    }

    pub fn wait_for(&self, mut ok: impl FnMut() -> bool, what: &str) {
        let give_up = Instant::now() + Duration::from_secs(20);
        while !ok() {
            assert!(Instant::now() < give_up, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn wait_cluster_ok(&self) {
        self.wait_for(|| self.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"), "cluster_state:ok");
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
