//! The cluster view: which node owns each slot and, for this host's slots,
//! which local shard. It is the single source of truth for ownership in all
//! modes (`cluster-mode no` simply has no nodes), built once at start and
//! rebuilt on reload; every core holds its own copy.

pub mod reload;
pub mod topology;

use crate::slot::SLOTS;
use shard::config::{ClusterMode, Config};
use std::net::IpAddr;
use topology::{Node, Topology};

/// Who serves a slot.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Owner {
    /// This process: the shard, and the node (index into `nodes`) it belongs
    /// to (`u16::MAX` when not in a cluster mode).
    Local { shard: u16, node: u16 },
    /// Another host's node.
    Remote { node: u16 },
}

#[derive(Clone, Debug)]
pub struct ClusterView {
    pub mode: ClusterMode,
    pub topology: Topology,
    /// Per local shard, its node (per-core: one node per shard; emulated:
    /// every shard belongs to the one self node).
    pub shard_nodes: Vec<u16>,
    owner: Box<[Owner]>,
    /// Each slot's local shard (`NOT_LOCAL` for another host's): the
    /// router's lookup per command, 32 KB where `owner` is 96 KB.
    local: Box<[u16]>,
}

const NOT_LOCAL: u16 = u16::MAX;

const NO_NODE: u16 = u16::MAX;

impl ClusterView {
    /// Plain Redis endpoint: contiguous slot ranges per shard, no nodes.
    pub fn standalone(shards: usize) -> ClusterView {
        let owner = (0..SLOTS).map(|s| Owner::Local { shard: (s * shards / SLOTS) as u16, node: NO_NODE }).collect();
        Self::new(ClusterMode::No, Topology { nodes: Vec::new() }, vec![NO_NODE; shards], owner)
    }

    fn new(mode: ClusterMode, topology: Topology, shard_nodes: Vec<u16>, owner: Box<[Owner]>) -> ClusterView {
        let local = owner
            .iter()
            .map(|o| match *o {
                Owner::Local { shard, .. } => shard,
                Owner::Remote { .. } => NOT_LOCAL,
            })
            .collect();
        ClusterView { mode, topology, shard_nodes, owner, local }
    }

    /// Builds the view for this process from its configuration (and the
    /// topology file's text, when one is configured). `port` is the client
    /// port actually bound.
    pub fn build(config: &Config, shards: usize, port: u16, file_text: Option<&str>) -> Result<ClusterView, String> {
        if config.cluster_mode == ClusterMode::No {
            return Ok(ClusterView::standalone(shards));
        }
        let ip = announce_ip(config)?;
        // tls-cluster: the emulated node is announced at the TLS port.
        let tls_node = config.tls.cluster && config.tls.port != 0 && config.cluster_mode == ClusterMode::Emulated;
        let port = if tls_node { config.tls.port } else { port };
        let base = if config.cluster_port_base != 0 { config.cluster_port_base } else { port.saturating_add(1) };
        let per_core = config.cluster_mode == ClusterMode::PerCore;
        let topology = match file_text {
            Some(text) => Topology::parse(text).map_err(|e| format!("{}: {e}", config.cluster_config_file))?,
            None if per_core => {
                let addrs: Vec<(IpAddr, u16)> = (0..shards).map(|i| (ip, base + i as u16)).collect();
                if addrs.iter().any(|a| a.1 < base) {
                    return Err("cluster-port-base + shards exceeds 65535".into());
                }
                Topology::even(&addrs)
            }
            None => Topology::even(&[(ip, port)]),
        };
        // This host's nodes: per-core, one per shard (in port order);
        // emulated, the node at the client port.
        let mut mine: Vec<usize> = (0..topology.nodes.len())
            .filter(|&i| {
                let n = &topology.nodes[i];
                n.ip == ip && (per_core || n.port == port)
            })
            .collect();
        mine.sort_by_key(|&i| topology.nodes[i].port);
        let want = if per_core { shards } else { 1 };
        if mine.len() != want {
            let what =
                if per_core { format!("{shards} nodes (one per shard)") } else { format!("a node at {ip}:{port}") };
            return Err(format!(
                "{}: this host ({ip}) has {} node line(s) in the topology, expected {what}: unreachable self",
                config.cluster_config_file,
                mine.len()
            ));
        }
        if per_core && topology.nodes[mine[0]].port == port {
            return Err(format!("node port {port} is also the client port; pick another cluster-port-base"));
        }
        let shard_nodes: Vec<u16> =
            if per_core { mine.iter().map(|&i| i as u16).collect() } else { vec![mine[0] as u16; shards] };
        let mut owner = vec![Owner::Remote { node: 0 }; SLOTS];
        for (n, node) in topology.nodes.iter().enumerate() {
            for &(a, b) in &node.slots {
                for s in a..=b {
                    owner[s as usize] = Owner::Remote { node: n as u16 };
                }
            }
        }
        if per_core {
            for (shard, &n) in shard_nodes.iter().enumerate() {
                for &(a, b) in &topology.nodes[n as usize].slots {
                    for s in a..=b {
                        owner[s as usize] = Owner::Local { shard: shard as u16, node: n };
                    }
                }
            }
        } else {
            // The one local node's slots, split evenly over the shards in
            // slot order.
            let n = shard_nodes[0];
            let slots: Vec<u16> = topology.nodes[n as usize].slots.iter().flat_map(|&(a, b)| a..=b).collect();
            for (i, s) in slots.iter().enumerate() {
                owner[*s as usize] = Owner::Local { shard: (i * shards / slots.len()) as u16, node: n };
            }
        }
        Ok(Self::new(config.cluster_mode, topology, shard_nodes, owner.into()))
    }

    #[inline]
    pub fn enabled(&self) -> bool {
        self.mode != ClusterMode::No
    }

    #[inline]
    pub fn owner(&self, slot: u16) -> Owner {
        self.owner[slot as usize]
    }

    /// The shard serving `slot` on this host, if it is local.
    #[inline]
    pub fn local_shard(&self, slot: u16) -> Option<usize> {
        match self.local[slot as usize] {
            NOT_LOCAL => None,
            shard => Some(shard as usize),
        }
    }

    pub fn node(&self, index: u16) -> &Node {
        &self.topology.nodes[index as usize]
    }

    /// The port of shard `i`'s own node (per-core mode).
    pub fn shard_port(&self, shard: usize) -> Option<u16> {
        if self.mode != ClusterMode::PerCore {
            return None;
        }
        Some(self.topology.nodes[self.shard_nodes[shard] as usize].port)
    }
}

/// The address this host advertises: `cluster-announce-ip`, else the first
/// bind address when it names one host.
fn announce_ip(config: &Config) -> Result<IpAddr, String> {
    let text = if config.cluster_announce_ip.is_empty() {
        config.bind.first().cloned().unwrap_or_default()
    } else {
        config.cluster_announce_ip.clone()
    };
    let ip: IpAddr = text.trim_start_matches('-').parse().map_err(|_| {
        format!(
            "cluster-mode {} needs cluster-announce-ip (bind '{text}' is not one address)",
            config.cluster_mode.name()
        )
    })?;
    if ip.is_unspecified() {
        return Err(format!(
            "cluster-mode {} with bind {ip} needs cluster-announce-ip: clients must be told a reachable address",
            config.cluster_mode.name()
        ));
    }
    Ok(ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(mode: ClusterMode) -> Config {
        Config { cluster_mode: mode, ..Config::default() }
    }

    #[test]
    fn emulated_owns_everything_split_over_shards() {
        let v = ClusterView::build(&config(ClusterMode::Emulated), 3, 6379, None).unwrap();
        assert_eq!(v.topology.nodes.len(), 1);
        assert_eq!(v.owner(0), Owner::Local { shard: 0, node: 0 });
        assert_eq!(v.owner(16383), Owner::Local { shard: 2, node: 0 });
    }

    #[test]
    fn per_core_nodes_and_remote_hosts() {
        let v = ClusterView::build(&config(ClusterMode::PerCore), 2, 6379, None).unwrap();
        assert_eq!(v.shard_port(1), Some(6381));
        assert_eq!(v.owner(16383), Owner::Local { shard: 1, node: 1 });
        let addrs: Vec<(IpAddr, u16)> = ["127.0.0.1", "127.0.0.2"]
            .iter()
            .flat_map(|ip| (0..2).map(move |i| (ip.parse().unwrap(), 7000 + i)))
            .collect();
        let text = Topology::even(&addrs).render();
        let mut c = config(ClusterMode::PerCore);
        c.bind = vec!["127.0.0.2".into()];
        c.cluster_config_file = "t.conf".into();
        let v = ClusterView::build(&c, 2, 6379, Some(&text)).unwrap();
        assert_eq!(v.owner(0), Owner::Remote { node: 0 });
        assert_eq!(v.owner(16383), Owner::Local { shard: 1, node: 3 });
        c.bind = vec!["127.0.0.3".into()];
        assert!(ClusterView::build(&c, 2, 6379, Some(&text)).unwrap_err().contains("unreachable self"));
    }
}
