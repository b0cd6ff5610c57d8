//! `corekv topology`: writes the cluster topology file for a set of hosts
//! and checks an existing one, with the same parser the server uses.
//!
//!   corekv topology generate --host 10.0.0.1:0-15 --host 10.0.0.2:0-15 [--port-base 7000]
//!   corekv topology generate --emulated --port 6379 --host 10.0.0.1 --host 10.0.0.2
//!   corekv topology check /etc/corekv/topology.conf

use crate::cpus::parse_list;
use proxy::cluster::topology::Topology;
use std::net::IpAddr;

pub const USAGE: &str = "Usage: corekv topology generate [--port-base 7000] --host IP:CPULIST [--host IP:CPULIST ...]
       corekv topology generate --emulated [--port 6379] --host IP [--host IP ...]
       corekv topology check FILE

generate prints a topology file: per-core (default), one node per shard with
shard i of a host on port-base + i, as many shards as CPUs in its list; with
--emulated, one node per host on the client port. Slots are spread evenly
and node ids derive from the addresses, so the output is the same on every
host. check validates a file (every slot owned exactly once) and summarises.";

/// Runs the subcommand; Ok(text to print) or Err(message).
pub fn run(args: &[String]) -> Result<String, String> {
    match args.first().map(String::as_str) {
        Some("generate") => generate(&args[1..]),
        Some("check") => check(&args[1..]),
        _ => Err(USAGE.into()),
    }
}

fn generate(args: &[String]) -> Result<String, String> {
    let (mut hosts, mut port_base, mut port, mut emulated) = (Vec::new(), 7000u16, 6379u16, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("{a} needs a value\n\n{USAGE}"));
        match a.as_str() {
            "--host" => hosts.push(value()?),
            "--port-base" => port_base = value()?.parse().map_err(|_| "--port-base must be a port number")?,
            "--port" => port = value()?.parse().map_err(|_| "--port must be a port number")?,
            "--emulated" => emulated = true,
            other => return Err(format!("unknown option '{other}'\n\n{USAGE}")),
        }
    }
    if hosts.is_empty() {
        return Err(format!("at least one --host is needed\n\n{USAGE}"));
    }
    let mut addrs: Vec<(IpAddr, u16)> = Vec::new();
    for h in &hosts {
        let (ip, cpus) = h.split_once(':').map_or((h.as_str(), None), |(a, b)| (a, Some(b)));
        let ip: IpAddr = ip.parse().map_err(|_| format!("--host {h}: '{ip}' is not an IP address"))?;
        if emulated {
            addrs.push((ip, port));
            continue;
        }
        let cpus =
            cpus.ok_or_else(|| format!("--host {h}: per-core mode needs the host's CPU list, e.g. {ip}:0-15"))?;
        let n = parse_list(cpus).map_err(|e| format!("--host {h}: {e}"))?.len();
        for i in 0..n {
            let p = port_base.checked_add(i as u16).ok_or("port-base + shards exceeds 65535")?;
            addrs.push((ip, p));
        }
    }
    let topology = Topology::even(&addrs);
    topology.validate().map_err(|e| e.to_string())?;
    Ok(topology.render())
}

fn check(args: &[String]) -> Result<String, String> {
    let [path] = args else {
        return Err(USAGE.into());
    };
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let t = Topology::parse(&text).map_err(|e| format!("{path}: {e}"))?;
    let mut hosts: Vec<IpAddr> = t.nodes.iter().map(|n| n.ip).collect();
    hosts.sort();
    hosts.dedup();
    Ok(format!("{path}: OK, {} nodes on {} host(s), all 16384 slots assigned exactly once", t.nodes.len(), hosts.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn three_hosts_of_four_cores() {
        let text = run(&s(&["generate", "--host", "10.0.0.1:0-3", "--host", "10.0.0.2:0-3", "--host", "10.0.0.3:4-7"]))
            .unwrap();
        let t = Topology::parse(&text).unwrap();
        assert_eq!(t.nodes.len(), 12);
        assert_eq!(t.nodes[11].port, 7003);
        assert!(run(&s(&["generate", "--host", "10.0.0.1"])).unwrap_err().contains("CPU list"));
        let emulated = run(&s(&["generate", "--emulated", "--host", "10.0.0.1", "--host", "10.0.0.2"])).unwrap();
        assert_eq!(Topology::parse(&emulated).unwrap().nodes.len(), 2);
    }
}
