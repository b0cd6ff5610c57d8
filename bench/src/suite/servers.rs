//! The servers under test: corekv and redis-server (alone, or one node per
//! CPU as a Redis Cluster), each pinned to the server CPUs, on free ports,
//! answered PING before use, and killed when dropped.

use super::cpus;
use crate::cluster::call;
use crate::protocol::Reply;
use std::io;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A port that is free now, and so are the `span - 1` after it and its
/// cluster bus port (+10000, which redis-server in cluster mode needs).
pub fn free_port(span: u16) -> io::Result<u16> {
    for _ in 0..1000 {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if !(20000..=55000).contains(&port) {
            continue;
        }
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if (port..port + span).all(|p| free(p) && free(p + 10000)) {
            return Ok(port);
        }
    }
    Err(io::Error::other("no free port range found"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// corekv with this many shards; `cluster`: per-core cluster mode.
    Corekv { shards: usize, cluster: bool },
    /// One redis-server on all the server CPUs.
    Redis,
    /// One cluster-mode redis-server per server CPU, slots split evenly.
    RedisCluster,
}

/// Running server processes, stopped (and their files removed) on drop.
pub struct Servers {
    pub kind: Kind,
    /// The port a client connects to (any node, for cluster clients).
    pub port: u16,
    /// Clients must route keys with `--cluster`.
    pub cluster: bool,
    /// The command lines that started them, for the report.
    pub commands: Vec<String>,
    children: Vec<Child>,
    dir: PathBuf,
}

/// Where the binaries are.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub corekv: PathBuf,
    pub redis: PathBuf,
}

impl Servers {
    pub fn start(bins: &Binaries, kind: Kind, server_cpus: &[usize]) -> Result<Servers, String> {
        let dir = std::env::temp_dir().join(format!("corekv-suite-{}-{}", std::process::id(), unique()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let span = match kind {
            Kind::Corekv { shards, cluster: true } => shards + 1,
            Kind::RedisCluster => server_cpus.len(),
            _ => 1,
        };
        let port = free_port(span as u16).map_err(|e| e.to_string())?;
        let mut s = Servers { kind, port, cluster: false, commands: Vec::new(), children: Vec::new(), dir };
        match kind {
            Kind::Corekv { shards, cluster } => {
                let cpus = &server_cpus[..shards.min(server_cpus.len())];
                let list = cpus::format_list(cpus);
                let mut args = vec![
                    "--port".into(),
                    port.to_string(),
                    "--shards".into(),
                    shards.to_string(),
                    "--cpus".into(),
                    list,
                    // No snapshots, as redis-server runs here: a save point
                    // would save mid-run and at exit into the working dir.
                    "--save".into(),
                    String::new(),
                ];
                if cluster {
                    let base = (port + 1).to_string();
                    args.extend(["--cluster-mode".into(), "per-core".into(), "--cluster-port-base".into(), base]);
                    s.port = port + 1;
                    s.cluster = true;
                }
                s.spawn(&bins.corekv, &args, cpus, "corekv")?;
                s.wait_ping(port)?;
            }
            Kind::Redis => {
                s.spawn(&bins.redis, &redis_args(port, &s.dir, false), server_cpus, "redis")?;
                s.wait_ping(port)?;
            }
            Kind::RedisCluster => s.start_redis_cluster(bins, server_cpus)?,
        }
        Ok(s)
    }

    fn start_redis_cluster(&mut self, bins: &Binaries, cpus: &[usize]) -> Result<(), String> {
        let n = cpus.len();
        for (i, &cpu) in cpus.iter().enumerate() {
            let port = self.port + i as u16;
            let dir = self.dir.join(format!("node{i}"));
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            self.spawn(&bins.redis, &redis_args(port, &dir, true), &[cpu], &format!("redis{i}"))?;
        }
        for i in 0..n {
            let port = self.port + i as u16;
            self.wait_ping(port)?;
            let (lo, hi) = (16384 * i / n, 16384 * (i + 1) / n - 1);
            command(port, &["CLUSTER", "ADDSLOTSRANGE", &lo.to_string(), &hi.to_string()])?;
            if i > 0 {
                command(port, &["CLUSTER", "MEET", "127.0.0.1", &self.port.to_string()])?;
            }
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for i in 0..n {
            let port = self.port + i as u16;
            loop {
                let info = command(port, &["CLUSTER", "INFO"])?;
                if info.contains("cluster_state:ok") && info.contains(&format!("cluster_known_nodes:{n}\r")) {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!("redis cluster node {port} not ready:\n{info}"));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        self.cluster = true;
        Ok(())
    }

    fn spawn(&mut self, bin: &Path, args: &[String], cpus: &[usize], name: &str) -> Result<(), String> {
        let log = self.dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let pin = cpus.to_vec();
        let mut cmd = Command::new(bin);
        cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
        // SAFETY: only sched_setaffinity (a plain syscall) runs in the child.
        unsafe {
            cmd.pre_exec(move || cpus::pin(&pin));
        }
        let child = cmd.spawn().map_err(|e| format!("starting {}: {e}", bin.display()))?;
        self.commands.push(format!("taskset -c {} {} {}", cpus::format_list(cpus), bin.display(), shell_words(args)));
        self.children.push(child);
        Ok(())
    }

    fn wait_ping(&mut self, port: u16) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if command(port, &["PING"]).is_ok() {
                return Ok(());
            }
            for c in &mut self.children {
                if let Ok(Some(status)) = c.try_wait() {
                    return Err(format!("server exited ({status}) before answering:\n{}", self.logs()));
                }
            }
            if Instant::now() > deadline {
                return Err(format!("no PING reply on port {port} within 30 s:\n{}", self.logs()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn logs(&self) -> String {
        let mut s = String::new();
        for e in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            if e.path().extension().is_some_and(|x| x == "log") {
                s += &std::fs::read_to_string(e.path()).unwrap_or_default();
            }
        }
        s
    }

    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// Every node's client port.
    pub fn node_ports(&self) -> Vec<u16> {
        match self.kind {
            Kind::RedisCluster => (0..self.children.len() as u16).map(|i| self.port + i).collect(),
            _ => vec![self.port],
        }
    }

    /// A field of `INFO <section>`, summed over the nodes.
    pub fn info_sum(&self, section: &str, field: &str) -> Result<f64, String> {
        let mut total = 0.0;
        for port in self.node_ports() {
            let text = command(port, &["INFO", section])?;
            total += info_field(&text, field).ok_or_else(|| format!("INFO {section} has no {field}"))?;
        }
        Ok(total)
    }

    /// Resident set size of the server processes, bytes (VmRSS).
    pub fn rss(&self) -> Result<f64, String> {
        let mut total = 0.0;
        for pid in self.pids() {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| e.to_string())?;
            let kb = status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                .ok_or("no VmRSS")?;
            total += kb * 1024.0;
        }
        Ok(total)
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn redis_args(port: u16, dir: &Path, cluster: bool) -> Vec<String> {
    let mut a: Vec<String> = ["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend(["--dir".into(), dir.display().to_string()]);
    if cluster {
        a.extend(["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"].map(String::from));
    }
    a
}

/// Sends one command and returns the reply as text (errors are errors).
pub fn command(port: u16, args: &[&str]) -> Result<String, String> {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    call("127.0.0.1", port, None, &args, |r| match r {
        Reply::Error(e) => Err(io::Error::other(String::from_utf8_lossy(e).into_owned())),
        Reply::Simple(b) | Reply::Bulk(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        Reply::Integer(i) => Ok(i.to_string()),
        _ => Ok(String::new()),
    })
    .map_err(|e| format!("{} on port {port}: {e}", String::from_utf8_lossy(args[0])))
}

/// `name:value` from INFO text, as a number.
pub fn info_field(info: &str, name: &str) -> Option<f64> {
    info.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
}

/// `--version` output's first line.
pub fn version(bin: &Path) -> String {
    Command::new(bin)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().next().unwrap_or("").trim().to_string())
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

/// Joins arguments into a shell command line, quoting where needed.
pub fn shell_words<S: AsRef<str>>(args: &[S]) -> String {
    args.iter()
        .map(|a| {
            let a = a.as_ref();
            if !a.is_empty() && a.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_=:,./@%+".contains(&b)) {
                a.to_string()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn unique() -> usize {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields_and_quoting() {
        let info = "# Memory\r\nused_memory:1234\r\nused_memory_rss:99\r\n";
        assert_eq!(info_field(info, "used_memory"), Some(1234.0));
        assert_eq!(info_field(info, "used_memory_peak"), None);
        assert_eq!(shell_words(&["--save", "", "a b"]), "--save '' 'a b'");
    }

    #[test]
    fn free_ports_leave_room_for_cluster_buses() {
        let p = free_port(3).unwrap();
        assert!((20000..=55000).contains(&p));
    }
}
