//! The cluster topology: every node (one per shard in per-core mode, one per
//! host in emulated mode) with its address and slot ranges. Read from a file
//! shared by all hosts (`cluster-config-file`) or derived from this process's
//! own configuration, validated so every slot has exactly one owner.
//!
//! File format, one node per line (`#` starts a comment):
//!
//! ```text
//! node <40-hex-id> <ip>:<port> <first>-<last>[,<first>-<last>...]
//! ```

use crate::slot::SLOTS;
use std::fmt;
use std::net::IpAddr;

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub id: String,
    pub ip: IpAddr,
    pub port: u16,
    /// Inclusive slot ranges, ascending.
    pub slots: Vec<(u16, u16)>,
    /// Line of the topology file (0 when derived).
    pub line: usize,
}

impl Node {
    pub fn addr(&self) -> String {
        match self.ip {
            IpAddr::V6(ip) => format!("[{ip}]:{}", self.port),
            IpAddr::V4(ip) => format!("{ip}:{}", self.port),
        }
    }

    /// A stable id for the shard (Redis 7.2's CLUSTER MYSHARDID).
    pub fn shard_id(&self) -> String {
        sha1_hex(&format!("corekv-shard:{}", self.id))
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    pub nodes: Vec<Node>,
}

#[derive(Debug, PartialEq)]
pub struct TopologyError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "line {}: {}", self.line, self.message)
        } else {
            write!(f, "{}", self.message)
        }
    }
}

fn err(line: usize, message: impl Into<String>) -> TopologyError {
    TopologyError { line, message: message.into() }
}

/// 40 lower-case hex digits of SHA-1, the shape of a Redis Cluster node id.
pub fn sha1_hex(text: &str) -> String {
    sha1_smol::Sha1::from(text).digest().to_string()
}

/// The id a node gets from its address: stable across restarts and the same
/// on every host that computes it.
pub fn node_id(ip: IpAddr, port: u16) -> String {
    sha1_hex(&format!("corekv-node:{ip}:{port}"))
}

fn parse_ranges(text: &str, line: usize) -> Result<Vec<(u16, u16)>, TopologyError> {
    let mut ranges = Vec::new();
    for part in text.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let bad = || err(line, format!("bad slot range '{part}' (expected e.g. 0-5460, slots 0..{})", SLOTS - 1));
        let a: u16 = a.parse().map_err(|_| bad())?;
        let b: u16 = b.parse().map_err(|_| bad())?;
        if a > b || b as usize >= SLOTS {
            return Err(bad());
        }
        ranges.push((a, b));
    }
    ranges.sort_unstable();
    Ok(ranges)
}

/// Splits "ip:port" or "[v6]:port".
fn parse_addr(text: &str, line: usize) -> Result<(IpAddr, u16), TopologyError> {
    let bad = || err(line, format!("bad address '{text}' (expected ip:port)"));
    let (host, port) = text.rsplit_once(':').ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip: IpAddr = host.parse().map_err(|_| bad())?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    if port == 0 {
        return Err(bad());
    }
    Ok((ip, port))
}

impl Topology {
    pub fn parse(text: &str) -> Result<Topology, TopologyError> {
        let mut nodes = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let content = raw.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let fields: Vec<&str> = content.split_whitespace().collect();
            if fields[0] != "node" {
                return Err(err(line, format!("unknown directive '{}' (only 'node' lines are allowed)", fields[0])));
            }
            if fields.len() != 4 {
                return Err(err(line, "expected: node <40-hex-id> <ip>:<port> <first>-<last>[,...]"));
            }
            let id = fields[1];
            if id.len() != 40 || !id.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()) {
                return Err(err(line, format!("bad node id '{id}' (expected 40 lower-case hex digits)")));
            }
            let (ip, port) = parse_addr(fields[2], line)?;
            let slots = parse_ranges(fields[3], line)?;
            nodes.push(Node { id: id.to_string(), ip, port, slots, line });
        }
        let t = Topology { nodes };
        t.validate()?;
        Ok(t)
    }

    /// Every slot owned exactly once; ids and addresses unique.
    pub fn validate(&self) -> Result<(), TopologyError> {
        if self.nodes.is_empty() {
            return Err(err(0, "no nodes"));
        }
        let mut owner: Vec<Option<usize>> = vec![None; SLOTS];
        for (n, node) in self.nodes.iter().enumerate() {
            if let Some(other) = self.nodes[..n].iter().find(|o| o.id == node.id) {
                return Err(err(node.line, format!("node id {} already used on line {}", node.id, other.line)));
            }
            if let Some(other) = self.nodes[..n].iter().find(|o| o.ip == node.ip && o.port == node.port) {
                return Err(err(node.line, format!("address {} already used on line {}", node.addr(), other.line)));
            }
            for &(a, b) in &node.slots {
                for slot in a..=b {
                    if let Some(prev) = owner[slot as usize] {
                        let prev = &self.nodes[prev];
                        return Err(err(node.line, format!("slot {slot} is also assigned on line {}", prev.line)));
                    }
                    owner[slot as usize] = Some(n);
                }
            }
        }
        let missing = ranges_of(&owner.iter().map(|o| o.is_none()).collect::<Vec<_>>());
        if !missing.is_empty() {
            let list: Vec<String> = missing.iter().map(|(a, b)| format!("{a}-{b}")).collect();
            return Err(err(0, format!("slots not assigned to any node: {}", list.join(","))));
        }
        Ok(())
    }

    /// The file text for this topology.
    pub fn render(&self) -> String {
        let mut out = String::from("# corekv cluster topology: node <id> <ip>:<port> <slot ranges>\n");
        for n in &self.nodes {
            let ranges: Vec<String> = n.slots.iter().map(|(a, b)| format!("{a}-{b}")).collect();
            out.push_str(&format!("node {} {} {}\n", n.id, n.addr(), ranges.join(",")));
        }
        out
    }

    /// `count` nodes at the given addresses with even contiguous slot ranges.
    pub fn even(addrs: &[(IpAddr, u16)]) -> Topology {
        let n = addrs.len().max(1);
        let nodes = addrs
            .iter()
            .enumerate()
            .map(|(i, &(ip, port))| {
                let first = (i * SLOTS / n) as u16;
                let last = ((i + 1) * SLOTS / n - 1) as u16;
                Node { id: node_id(ip, port), ip, port, slots: vec![(first, last)], line: 0 }
            })
            .collect();
        Topology { nodes }
    }
}

/// Inclusive ranges of the `true` positions.
pub fn ranges_of(flags: &[bool]) -> Vec<(u16, u16)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, &f) in flags.iter().chain(std::iter::once(&false)).enumerate() {
        match (f, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s as u16, (i - 1) as u16));
                start = None;
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_topologies_round_trip() {
        let addrs: Vec<(IpAddr, u16)> =
            (0..12).map(|i| (format!("10.0.0.{}", i / 4 + 1).parse().unwrap(), 7000 + (i % 4) as u16)).collect();
        let t = Topology::even(&addrs);
        t.validate().unwrap();
        let mut back = Topology::parse(&t.render()).unwrap();
        for n in &mut back.nodes {
            n.line = 0;
        }
        assert_eq!(back, t);
        assert_eq!(t.nodes[0].id.len(), 40);
        assert_eq!(node_id("10.0.0.1".parse().unwrap(), 7000), t.nodes[0].id);
    }

    #[test]
    fn bad_files_name_the_line() {
        let id = |c: char| c.to_string().repeat(40);
        let ok = format!("node {} 127.0.0.1:7000 0-8191\nnode {} 127.0.0.1:7001 8192-16383\n", id('a'), id('b'));
        assert!(Topology::parse(&ok).is_ok());
        let overlap =
            format!("node {} 127.0.0.1:7000 0-8191\n# c\nnode {} 127.0.0.1:7001 8000-16383\n", id('a'), id('b'));
        assert_eq!(Topology::parse(&overlap).unwrap_err().line, 3);
        let missing = format!("node {} 127.0.0.1:7000 0-8191\n", id('a'));
        assert!(Topology::parse(&missing).unwrap_err().message.contains("8192-16383"));
        let unknown = format!("nodes {} 127.0.0.1:7000 0-16383\n", id('a'));
        assert_eq!(Topology::parse(&unknown).unwrap_err().line, 1);
        let bad_id = "node xyz 127.0.0.1:7000 0-16383\n";
        assert!(Topology::parse(bad_id).unwrap_err().message.contains("node id"));
        let bad_range = format!("node {} 127.0.0.1:7000 0-16384\n", id('a'));
        assert!(Topology::parse(&bad_range).unwrap_err().message.contains("slot range"));
        let dup = format!("node {} 127.0.0.1:7000 0-8191\nnode {} 127.0.0.1:7000 8192-16383\n", id('a'), id('b'));
        assert!(Topology::parse(&dup).unwrap_err().message.contains("already used"));
    }
}
