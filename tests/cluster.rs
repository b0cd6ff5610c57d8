//! Redis Cluster protocol over the in-process slot map: the `redis` crate's
//! cluster client and `redis-cli --cluster check` / `redis-cli -c` against
//! corekv in emulated and per-core modes, a three-host cluster on
//! 127.0.0.1-3, redirections and errors as Redis Cluster gives them.

mod common;

use common::{ensure_test_deps, Redis, Server};
use proxy::resp::Value;
use redis::Commands;
use std::net::TcpListener;
use std::process::Command;

/// Free loopback ports (each probed with a bind to port 0 on `ip`).
fn free_ports(ip: &str, n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n).map(|_| TcpListener::bind((ip, 0)).unwrap()).collect();
    held.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

struct Dir(std::path::PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("corekv-cluster-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    fn file(&self, name: &str, text: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `corekv topology generate` for the given host:cpus list and port base.
fn topology(hosts: &[&str], port_base: u16) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_corekv"));
    cmd.args(["topology", "generate", "--port-base", &port_base.to_string()]);
    for h in hosts {
        cmd.args(["--host", h]);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Consecutive free ports starting at the returned base.
fn free_base(ip: &str, n: u16) -> u16 {
    loop {
        let base = free_ports(ip, 1)[0];
        if base < 60000 && (0..n).all(|i| TcpListener::bind((ip, base + i)).is_ok()) {
            return base;
        }
    }
}

fn per_core(shards: usize) -> (Server, u16) {
    let base = free_base("127.0.0.1", shards as u16);
    let server = Server::start(&[
        "--shards",
        &shards.to_string(),
        "--cluster-mode",
        "per-core",
        "--cluster-port-base",
        &base.to_string(),
    ]);
    (server, base)
}

fn cluster_client(port: u16) -> redis::cluster::ClusterConnection {
    redis::cluster::ClusterClient::new(vec![format!("redis://127.0.0.1:{port}/")]).unwrap().get_connection().unwrap()
}

/// The workload the issue asks for, through a cluster client.
fn exercise(conn: &mut redis::cluster::ClusterConnection) {
    for i in 0..10_000 {
        let _: () = conn.set(format!("key:{i}"), i).unwrap();
    }
    for i in (0..10_000).step_by(7) {
        let v: i64 = conn.get(format!("key:{i}")).unwrap();
        assert_eq!(v, i);
    }
    let _: () = conn.mset(&[("{user:1}:name", "ada"), ("{user:1}:lang", "rust")]).unwrap();
    let got: Vec<String> = conn.mget(&["{user:1}:name", "{user:1}:lang"]).unwrap();
    assert_eq!(got, vec!["ada", "rust"]);
    let mut pipe = redis::cluster::cluster_pipe();
    for i in 0..100 {
        pipe.cmd("INCR").arg(format!("counter:{i}")).ignore();
    }
    pipe.cmd("GET").arg("counter:99");
    let (last,): (i64,) = pipe.query(conn).unwrap();
    assert_eq!(last, 1);
    // Two keys in different slots in one command: refused by the server.
    let err = redis::cmd("RENAME").arg("key:1").arg("key:2").query::<()>(conn).unwrap_err();
    assert!(err.to_string().contains("CROSSSLOT") || format!("{err:?}").contains("CrossSlot"), "{err:?}");
}

fn raw_crossslot(port: u16) {
    let mut raw = common::Raw::connect(port);
    let crossslot = Value::Error(b"CROSSSLOT Keys in request don't hash to the same slot".to_vec());
    assert_eq!(raw.cmd_str("MSET a 1 b 2"), crossslot);
    assert_eq!(raw.cmd_str("MGET a b"), crossslot);
    assert_eq!(raw.cmd_str("DEL a b"), crossslot);
    assert_eq!(raw.cmd_str("SELECT 1"), Value::Error(b"ERR SELECT is not allowed in cluster mode".to_vec()));
    assert_eq!(raw.cmd_str("SELECT 0"), Value::Simple(b"OK".to_vec()));
}

fn cluster_check(addr: &str) -> String {
    ensure_test_deps();
    let out = Command::new("redis-cli").args(["--cluster", "check", addr]).output().expect("redis-cli");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("[OK] All 16384 slots covered."), "{text}");
    assert!(text.contains("[OK] All nodes agree about slots configuration."), "{text}");
    assert!(!text.contains("[ERR]"), "{text}");
    text
}

fn info_field(raw: &mut common::Raw, section: &str, field: &str) -> u64 {
    let Value::Bulk(text) = raw.cmd(&[b"INFO", section.as_bytes()]) else { panic!("INFO") };
    String::from_utf8_lossy(&text)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")).map(|v| v.trim().parse().unwrap()))
        .unwrap_or_else(|| panic!("{field} missing"))
}

#[test]
fn emulated_mode_is_one_node_with_every_slot() {
    let server = Server::start(&["--shards", "2", "--cluster-mode", "emulated"]);
    let mut conn = cluster_client(server.port);
    exercise(&mut conn);
    raw_crossslot(server.port);
    let mut raw = server.raw();
    assert_eq!(info_field(&mut raw, "cluster", "cluster_enabled"), 1);
    let Value::Array(slots) = raw.cmd_str("CLUSTER SLOTS") else { panic!() };
    assert_eq!(slots.len(), 1);
    cluster_check(&format!("127.0.0.1:{}", server.port));
}

#[test]
fn per_core_mode_routes_clients_straight_to_the_owning_core() {
    let (server, base) = per_core(2);
    let mut conn = cluster_client(base);
    let mut raw = server.raw();
    let before = info_field(&mut raw, "stats", "cross_core_batches");
    exercise(&mut conn);
    let after = info_field(&mut raw, "stats", "cross_core_batches");
    // INFO itself gathers from every core; nothing else may have hopped.
    assert_eq!(after, before, "a cluster client's request crossed cores");
    let Value::Array(slots) = raw.cmd_str("CLUSTER SLOTS") else { panic!() };
    assert_eq!(slots.len(), 2);
    // A key sent to the wrong node's port is redirected; the main port
    // routes internally.
    let mut node0 = common::Raw::connect(base);
    assert_eq!(node0.cmd_str("GET foo"), Value::Error(format!("MOVED 12182 127.0.0.1:{}", base + 1).into_bytes()));
    assert_eq!(raw.cmd_str("SET foo bar"), Value::Simple(b"OK".to_vec()));
    raw_crossslot(base);
    cluster_check(&format!("127.0.0.1:{base}"));
    cluster_check(&format!("127.0.0.1:{}", server.port));
    // redis-cli -c follows MOVED from one shard's port to the other's.
    let out = Command::new("redis-cli").args(["-c", "-p", &base.to_string(), "GET", "foo"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "bar");
}

#[test]
fn three_hosts_share_one_topology() {
    let base = free_base("127.0.0.1", 2);
    let dir = Dir::new("three");
    let file = dir.file("topology.conf", &topology(&["127.0.0.1:0-1", "127.0.0.2:0-1", "127.0.0.3:0-1"], base));
    let client_port = free_ports("127.0.0.1", 1)[0].to_string();
    let hosts: Vec<Server> = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
        .iter()
        .map(|ip| {
            Server::start(&[
                "--port",
                &client_port,
                "--bind",
                ip,
                "--shards",
                "2",
                "--cluster-mode",
                "per-core",
                "--cluster-config-file",
                &file,
            ])
        })
        .collect();
    for seed in ["127.0.0.2", "127.0.0.3"] {
        let url = format!("redis://{seed}:{base}/");
        let mut conn = redis::cluster::ClusterClient::new(vec![url]).unwrap().get_connection().unwrap();
        for i in 0..3000 {
            let _: () = conn.set(format!("{seed}:k{i}"), i).unwrap();
        }
        for i in (0..3000).step_by(11) {
            let v: i64 = conn.get(format!("{seed}:k{i}")).unwrap();
            assert_eq!(v, i);
        }
    }
    let total: u64 = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
        .iter()
        .map(|ip| {
            let mut c = redis::Client::open(format!("redis://{ip}:{client_port}/")).unwrap().get_connection().unwrap();
            redis::cmd("DBSIZE").query::<u64>(&mut c).unwrap()
        })
        .sum();
    assert_eq!(total, 6000, "every key stored exactly once across the hosts");
    cluster_check(&format!("127.0.0.3:{}", base + 1));
    // redis-cli -c follows MOVED across hosts.
    let set =
        Command::new("redis-cli").args(["-c", "-h", "127.0.0.1", "-p", &base.to_string(), "SET", "a", "1"]).output();
    assert_eq!(String::from_utf8_lossy(&set.unwrap().stdout).trim(), "OK");
    let get = Command::new("redis-cli").args(["-c", "-h", "127.0.0.2", "-p", &base.to_string(), "GET", "a"]).output();
    assert_eq!(String::from_utf8_lossy(&get.unwrap().stdout).trim(), "1");
    drop(hosts);
}

#[test]
fn reload_moves_slot_ownership() {
    let base = free_base("127.0.0.1", 1);
    let dir = Dir::new("reload");
    let one = dir.file("topology.conf", &topology(&["127.0.0.1:0", "127.0.0.2:0"], base));
    let server = Server::start(&["--shards", "1", "--cluster-mode", "per-core", "--cluster-config-file", &one]);
    let mut raw = common::Raw::connect(base);
    // "foo" (slot 12182) belongs to the second host at first.
    assert_eq!(raw.cmd_str("GET foo"), Value::Error(format!("MOVED 12182 127.0.0.2:{base}").into_bytes()));
    let text = std::fs::read_to_string(&one).unwrap().replace(" 0-8191", " 0-16383").replace(" 8192-16383", " ");
    let lines: Vec<&str> = text.lines().filter(|l| !l.contains("127.0.0.2")).collect();
    std::fs::write(&one, lines.join("\n")).unwrap();
    // SIGHUP (the first core reloads at its next tick) or CLUSTER RELOAD.
    unsafe { libc::kill(server.child.id() as i32, libc::SIGHUP) };
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(raw.cmd_str("GET foo"), Value::Nil);
    assert_eq!(raw.cmd_str("CLUSTER RELOAD"), Value::Simple(b"OK".to_vec()));
    std::fs::write(&one, "node zzz 1.2.3.4:5 0-16383\n").unwrap();
    let Value::Error(e) = raw.cmd_str("CLUSTER RELOAD") else { panic!("a bad file must be refused") };
    assert!(String::from_utf8_lossy(&e).contains("line 1"), "{}", String::from_utf8_lossy(&e));
}

#[test]
fn bad_topologies_are_rejected_at_start() {
    let dir = Dir::new("bad");
    let good = topology(&["127.0.0.1:0", "127.0.0.2:0"], 7000);
    let cases = [
        (good.replace("0-8191", "0-8000"), "slots not assigned"),
        (good.replace("8192-16383", "8000-16383"), "line 3"),
        (format!("{good}bogus line\n"), "line 4"),
        (good.replace("127.0.0.1", "127.0.0.9"), "unreachable self"),
    ];
    for (i, (text, expect)) in cases.iter().enumerate() {
        let file = dir.file(&format!("t{i}.conf"), text);
        let out = Command::new(env!("CARGO_BIN_EXE_corekv"))
            .args(["--port", "0", "--cluster-mode", "per-core", "--shards", "1", "--cluster-config-file", &file])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(expect), "case {i}: {err}");
        let check = Command::new(env!("CARGO_BIN_EXE_corekv")).args(["topology", "check", &file]).output().unwrap();
        assert_eq!(check.status.success(), *expect == "unreachable self", "topology check, case {i}");
    }
}

/// Cluster-mode replies and errors against a real one-node Redis Cluster.
#[test]
fn cluster_commands_agree_with_redis_cluster() {
    ensure_test_deps();
    let dir = Dir::new("redis");
    let redis = Redis::start_with(&["--cluster-enabled", "yes", "--cluster-config-file", &dir.file("nodes.conf", "")]);
    let mut r = redis.raw();
    r.cmd_str("CLUSTER ADDSLOTSRANGE 0 16383");
    for _ in 0..100 {
        if let Value::Bulk(info) = r.cmd_str("CLUSTER INFO") {
            if String::from_utf8_lossy(&info).contains("cluster_state:ok") {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let server = Server::start(&["--shards", "3", "--cluster-mode", "emulated"]);
    let mut c = server.raw();
    let script = [
        "CLUSTER KEYSLOT foo",
        "CLUSTER KEYSLOT {user}.x",
        "SET foo 1",
        "MSET {t}a 1 {t}b 2",
        "CLUSTER COUNTKEYSINSLOT 12182",
        "CLUSTER COUNTKEYSINSLOT 16384",
        "CLUSTER COUNTKEYSINSLOT -1",
        "CLUSTER COUNTKEYSINSLOT x",
        "CLUSTER GETKEYSINSLOT 12182 10",
        "CLUSTER GETKEYSINSLOT 12182 -1",
        "CLUSTER GETKEYSINSLOT 99999 1",
        "MSET a 1 b 2",
        "MGET {t}a {t}b",
        "EXISTS a b",
        "DEL {t}a {t}b",
        "SELECT 1",
        "SELECT 0",
        "COPY foo {x}bar",
        "COPY foo foo2 DB 1",
        "READONLY",
        "READWRITE",
        "ASKING",
        "CLUSTER NOSUCH",
        "CLUSTER LINKS",
        "PING",
    ];
    for line in script {
        let (want, got) = (r.cmd_str(line), c.cmd_str(line));
        assert_eq!(want, got, "{line}");
    }
}

/// Issue 6: the generator's output for 3 hosts × 4 cores covers every slot
/// exactly once and every host's server accepts it.
#[test]
fn generated_topology_for_three_hosts_of_four_cores_is_accepted() {
    let dir = Dir::new("gen");
    let text = topology(&["127.0.0.1:0-3", "127.0.0.2:0-3", "127.0.0.3:4-7"], 7000);
    let file = dir.file("topology.conf", &text);
    let mut owners = vec![0u32; 16384];
    let mut nodes = 0;
    for line in text.lines().filter(|l| l.starts_with("node ")) {
        nodes += 1;
        let ranges = line.split_whitespace().nth(3).unwrap();
        for r in ranges.split(',') {
            let (a, b) = r.split_once('-').unwrap();
            let (a, b) = (a.parse::<usize>().unwrap(), b.parse::<usize>().unwrap());
            owners[a..=b].iter_mut().for_each(|n| *n += 1);
        }
    }
    assert_eq!(nodes, 12);
    assert!(owners.iter().all(|&n| n == 1), "every slot exactly once");
    let check = Command::new(env!("CARGO_BIN_EXE_corekv")).args(["topology", "check", &file]).output().unwrap();
    assert!(check.status.success());
    for ip in ["127.0.0.1", "127.0.0.2", "127.0.0.3"] {
        let out = Command::new(env!("CARGO_BIN_EXE_corekv"))
            .args(["--check-config", "--bind", ip, "--shards", "4", "--cluster-mode", "per-core"])
            .args(["--cluster-config-file", &file])
            .output()
            .unwrap();
        assert!(out.status.success(), "{ip}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let wrong = Command::new(env!("CARGO_BIN_EXE_corekv"))
        .args(["--check-config", "--bind", "127.0.0.1", "--shards", "3", "--cluster-mode", "per-core"])
        .args(["--cluster-config-file", &file])
        .output()
        .unwrap();
    assert!(!wrong.status.success(), "3 shards against 4 node lines must be refused");
}
