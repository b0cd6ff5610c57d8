//! MEMORY's table and MEMORY USAGE, which runs on the key's owner. The
//! figure means what Redis's objectComputeSize means (the key, its entry
//! and its value), measured on corekv's own structures: every block at the
//! allocator's usable size where the value is a few blocks (strings,
//! listpack and intset encodings), the capacities of every block for the
//! larger encodings, and lists sampled node by node as Redis samples its
//! quicklist. STATS, DOCTOR, MALLOC-STATS, PURGE and HELP run in the proxy
//! (proxy/src/commands/memory.rs).

use super::prelude::*;
use super::Ctx;
use crate::args::{parse_i64, Args};
use crate::db::Entry;
use crate::memory::block_size;
use crate::reply::errors::{NOT_INTEGER, SYNTAX};
use crate::shard::Shard;
use crate::types::{hash::Hash, list::List, pack::Pack, set::Set, stream::Stream, zset::ZSet};
use crate::value::Value;
use std::mem::size_of;

/// Redis's OBJ_COMPUTE_SIZE_DEF_SAMPLES.
const DEFAULT_SAMPLES: usize = 5;

/// MEMORY USAGE key [SAMPLES count]: options first (Redis's order), then
/// the key as `dictFind` sees it (a logically expired key still counts).
pub fn usage(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let mut samples = DEFAULT_SAMPLES;
    let mut j = 3;
    while j < args.len() {
        if !(args.is(j, "samples") && j + 1 < args.len()) {
            return ctx.reply.error(SYNTAX);
        }
        match parse_i64(args.get(j + 1)) {
            None => return ctx.reply.error(NOT_INTEGER),
            Some(n) if n < 0 => return ctx.reply.error(SYNTAX),
            Some(0) => samples = usize::MAX,
            Some(n) => samples = n as usize,
        }
        j += 2;
    }
    match super::debug::raw_entry(&s.dbs[ctx.db], args.get(2)) {
        Some(e) => ctx.reply.int(entry_usage(e, samples) as i64),
        None => ctx.reply.null(),
    }
}

/// The table's index per entry: a 4-byte slot (`table/index.rs`) at its
/// 7/8 load.
const INDEX_PER_ENTRY: usize = 5;

/// The bytes one key costs: its entry in the table (key handle, value
/// handle, expiry, access time: Redis's dictEntry and robj) and the index
/// over it, the key's own block if it is not inline, and the value.
pub fn entry_usage(e: &Entry, samples: usize) -> usize {
    size_of::<Entry>() + INDEX_PER_ENTRY + block_size(e.key.heap_size()) + value_usage(&e.value, samples)
}

/// The heap bytes a value holds beyond its place in the entry.
pub fn value_usage(v: &Value, samples: usize) -> usize {
    match v {
        Value::Int(_) => 0,
        Value::Emb(b) => block_size(b.heap_size()),
        Value::Long(b) => block_size(b.len()),
        Value::Raw(r) => block_size(size_of::<Vec<u8>>()) + block_size(r.capacity()),
        Value::Hash(h) => {
            block_size(size_of::<Hash>())
                + match &**h {
                    Hash::Pack(p) => block_size(p.heap_size()),
                    Hash::Table(t) => block_size(size_of_val(&**t)) + t.heap_size(),
                }
        }
        Value::Set(set) => {
            block_size(size_of::<Set>())
                + match &**set {
                    Set::Ints(i) => block_size(i.heap_size()),
                    Set::Pack(p) => block_size(p.heap_size()),
                    Set::Table(t) => block_size(size_of_val(&**t)) + t.heap_size(),
                }
        }
        Value::ZSet(z) => {
            block_size(size_of::<ZSet>())
                + match &**z {
                    ZSet::Pack(p) => block_size(p.heap_size()),
                    ZSet::Tree(t) => block_size(size_of_val(&**t)) + t.heap_size(),
                }
        }
        Value::List(l) => block_size(size_of::<List>()) + list_usage(l, samples),
        Value::Stream(s) => block_size(size_of::<Stream>()) + s.heap_size().saturating_sub(size_of::<Stream>()),
    }
}

/// A list as Redis measures a quicklist: the first `samples` nodes' blocks,
/// their average times the number of nodes, plus the deque of node handles.
fn list_usage(l: &List, samples: usize) -> usize {
    let (mut sampled, mut bytes) = (0usize, 0usize);
    let mut nodes = 0usize;
    for node in l.node_heap_sizes() {
        if sampled < samples {
            bytes += block_size(node);
            sampled += 1;
        }
        nodes += 1;
    }
    let average = if sampled == 0 { 0.0 } else { bytes as f64 / sampled as f64 };
    block_size(nodes * size_of::<Pack>()) + (average * nodes as f64) as usize
}

/// One database's figures for MEMORY STATS: (keys, keys with a TTL, bytes
/// of the table itself: its slots and index, Redis's main dict overhead).
pub fn db_overheads(shard: &Shard) -> Vec<(usize, usize, usize)> {
    shard.dbs.iter().map(|db| (db.len(), db.volatile(), db.table.allocation_size())).collect()
}

pub static MEMORY_SUBCOMMANDS: &[CommandSpec] = &[
    cmd!("memory|doctor", 2, 0, NOKEYS, Proxy, None),
    cmd!("memory|help", 2, LOADING | STALE, NOKEYS, Proxy, None),
    cmd!("memory|malloc-stats", 2, 0, NOKEYS, Proxy, None),
    cmd!("memory|purge", 2, 0, NOKEYS, Proxy, None),
    cmd!("memory|stats", 2, 0, NOKEYS, Proxy, None),
    cmd!("memory|usage", -3, READONLY, (2, 2, 1), Keyed, Some(usage)),
];

pub static COMMANDS: &[CommandSpec] = &[cmd!("memory", -2, 0, NOKEYS, Proxy, None, MEMORY_SUBCOMMANDS)];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{Db, Ttl};

    #[test]
    fn bigger_values_cost_more() {
        let mut db = Db::default();
        db.set(b"small", Value::from_bytes(b"x"), Ttl::Clear, 0);
        db.set(b"big", Value::from_bytes(&[b'x'; 1000]), Ttl::Clear, 0);
        let small = entry_usage(db.find(b"small", 0).unwrap(), 5);
        let big = entry_usage(db.find(b"big", 0).unwrap(), 5);
        assert!(small > 0);
        assert!(big >= small + 1000, "{small} {big}");
    }

    #[test]
    fn lists_sample_their_nodes() {
        let mut l = List::new();
        for i in 0..10_000 {
            l.push_back(format!("element-{i}").as_bytes(), crate::types::list::Fill(-2));
        }
        let all = list_usage(&l, usize::MAX);
        let few = list_usage(&l, 1);
        assert!(all > 10_000 * 8, "{all}");
        // Equal nodes: sampling one estimates all of them closely.
        assert!(few.abs_diff(all) < all / 10, "{few} {all}");
    }
}
