//! CLUSTER subcommands, READONLY, READWRITE and ASKING, with Redis Cluster's
//! reply shapes. In `cluster-mode no` they answer as Redis does with cluster
//! support disabled.

use super::reply::{help, reply};
use crate::cluster::reload::reload_topology;
use crate::cluster::topology::Node;
use crate::cluster::ClusterView;
use crate::coordinator::dispatch::call;
use crate::resp::Value;
use crate::session::Connection;
use crate::slot::{key_slot, SLOTS};
use shard::args::parse_i64;
use shard::reply::errors::NOT_INTEGER;
use shard::{Args, CommandSpec};

const DISABLED: &str = "ERR This instance has cluster support disabled";

fn bulk(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec())
}

/// The node a connection talks to: its port's node, else (per-core main
/// port) the first shard's node.
fn myself(view: &ClusterView, conn: &Connection) -> u16 {
    conn.state.port_node.unwrap_or(view.shard_nodes[0])
}

/// READONLY, READWRITE, ASKING: accepted in cluster modes (there are no
/// replicas and no slot migrations to act on).
pub fn flag_command(conn: &mut Connection) {
    if !conn.core.cluster().enabled() {
        return conn.error(DISABLED);
    }
    reply(conn, |r| r.ok());
}

/// Subcommands that run without waiting for other cores.
pub fn run(conn: &mut Connection, spec: &CommandSpec, args: Args) {
    let view = conn.core.cluster();
    if !view.enabled() {
        return conn.error(DISABLED);
    }
    let me = myself(&view, conn);
    let resp3 = conn.state.resp3;
    let value = match spec.name {
        "cluster|myid" => bulk(&view.node(me).id),
        "cluster|myshardid" => bulk(&view.node(me).shard_id()),
        "cluster|keyslot" => Value::Int(key_slot(args.get(2)) as i64),
        "cluster|info" => Value::Verbatim(info(&view, me).into_bytes()),
        "cluster|nodes" => Value::Verbatim(nodes(&view, me).into_bytes()),
        "cluster|slots" => slots(&view),
        "cluster|shards" => shards(&view),
        "cluster|links" => Value::Array(Vec::new()),
        _ => return help(conn, CLUSTER_HELP),
    };
    drop(view);
    conn.pipeline.local(|out| value.encode(out, resp3));
}

fn info(view: &ClusterView, me: u16) -> String {
    let n = view.topology.nodes.len();
    format!(
        "cluster_state:ok\r\ncluster_slots_assigned:{SLOTS}\r\ncluster_slots_ok:{SLOTS}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{n}\r\ncluster_size:{n}\r\ncluster_current_epoch:{n}\r\ncluster_my_epoch:{}\r\ncluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\ntotal_cluster_links_buffer_limit_exceeded:0\r\n",
        me + 1
    )
}

/// CLUSTER NODES: one line per node, as Redis Cluster prints it (the bus
/// port is the usual port + 10000; corekv has no bus).
fn nodes(view: &ClusterView, me: u16) -> String {
    let mut out = String::new();
    for (i, n) in view.topology.nodes.iter().enumerate() {
        let flags = if i as u16 == me { "myself,master" } else { "master" };
        let ranges: Vec<String> =
            n.slots.iter().map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect();
        out.push_str(&format!(
            "{} {}@{} {flags} - 0 0 {} connected {}\n",
            n.id,
            n.addr(),
            n.port as u32 + 10000,
            i + 1,
            ranges.join(" ")
        ));
    }
    out
}

fn node_entry(n: &Node) -> Value {
    Value::Array(vec![bulk(&n.ip.to_string()), Value::Int(n.port as i64), bulk(&n.id), Value::Map(Vec::new())])
}

fn slots(view: &ClusterView) -> Value {
    let mut ranges: Vec<(u16, u16, usize)> = view
        .topology
        .nodes
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.slots.iter().map(move |&(a, b)| (a, b, i)))
        .collect();
    ranges.sort_unstable();
    Value::Array(
        ranges
            .into_iter()
            .map(|(a, b, i)| {
                Value::Array(vec![Value::Int(a as i64), Value::Int(b as i64), node_entry(&view.topology.nodes[i])])
            })
            .collect(),
    )
}

fn shards(view: &ClusterView) -> Value {
    let items = view
        .topology
        .nodes
        .iter()
        .map(|n| {
            let slots = n.slots.iter().flat_map(|&(a, b)| [Value::Int(a as i64), Value::Int(b as i64)]).collect();
            let ip = n.ip.to_string();
            let node = Value::Map(vec![
                (bulk("id"), bulk(&n.id)),
                (bulk("port"), Value::Int(n.port as i64)),
                (bulk("ip"), bulk(&ip)),
                (bulk("endpoint"), bulk(&ip)),
                (bulk("role"), bulk("master")),
                (bulk("replication-offset"), Value::Int(0)),
                (bulk("health"), bulk("online")),
            ]);
            Value::Map(vec![(bulk("slots"), Value::Array(slots)), (bulk("nodes"), Value::Array(vec![node]))])
        })
        .collect();
    Value::Array(items)
}

/// COUNTKEYSINSLOT and GETKEYSINSLOT: asked of the shard owning the slot.
pub async fn keys_in_slot(conn: &mut Connection, spec: &CommandSpec, args: Args<'_>) {
    if !conn.core.cluster().enabled() {
        return conn.error(DISABLED);
    }
    let counting = spec.name == "cluster|countkeysinslot";
    let Some(slot) = parse_i64(args.get(2)) else {
        return conn.error(NOT_INTEGER);
    };
    let limit = if counting {
        i64::MAX
    } else {
        match parse_i64(args.get(3)) {
            Some(n) => n,
            None => return conn.error(NOT_INTEGER),
        }
    };
    if !(0..SLOTS as i64).contains(&slot) || limit < 0 {
        return conn.error(if counting { "ERR Invalid slot" } else { "ERR Invalid slot or number of keys" });
    }
    let slot = slot as u16;
    let owner = conn.core.cluster().local_shard(slot);
    let keys = match owner {
        None => Vec::new(),
        Some(shard) => {
            let limit = limit as usize;
            call(&conn.core, shard, move |core| {
                let s = core.shard.borrow();
                let now = shard::unix_ms();
                // A scan of this shard's keys: resharding tools call this
                // rarely; a per-slot index would cost every write.
                s.dbs[0]
                    .iter_live(now)
                    .filter(|e| key_slot(&e.key) == slot)
                    .take(if counting { usize::MAX } else { limit })
                    .map(|e| if counting { Vec::new() } else { e.key.to_vec() })
                    .collect::<Vec<Vec<u8>>>()
            })
            .await
            .unwrap_or_default()
        }
    };
    if counting {
        return reply(conn, |r| r.int(keys.len() as i64));
    }
    reply(conn, |r| {
        r.array(keys.len());
        for k in &keys {
            r.bulk(k);
        }
    });
}

/// CLUSTER RELOAD (corekv's own): re-reads the topology file on every core.
pub async fn reload(conn: &mut Connection) {
    match reload_topology(&conn.core).await {
        Ok(()) => reply(conn, |r| r.ok()),
        Err(e) => conn.error(&format!("ERR {e}")),
    }
}

const CLUSTER_HELP: &[&str] = &[
    "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "COUNTKEYSINSLOT <slot>",
    "    Return the number of keys in <slot>.",
    "GETKEYSINSLOT <slot> <count>",
    "    Return key names stored by current node in a slot.",
    "INFO",
    "    Return information about the cluster.",
    "KEYSLOT <key>",
    "    Return the hash slot for <key>.",
    "LINKS",
    "    Return information about all network links between this node and its peers.",
    "MYID",
    "    Return the node id.",
    "MYSHARDID",
    "    Return the node's shard id.",
    "NODES",
    "    Return cluster configuration seen by node. Output format:",
    "    <id> <ip:port@bus-port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
    "RELOAD",
    "    Re-read the topology file (cluster-config-file) on every shard.",
    "SHARDS",
    "    Return information about slot range mappings and the nodes associated with them.",
    "SLOTS",
    "    Return information about slots range mappings. Each range is made of:",
    "    start, end, master and replicas IP addresses, ports and ids",
    "HELP",
    "    Prints this help.",
];
