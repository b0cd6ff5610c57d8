//! Streams in RDB (rdb.c): `STREAM_LISTPACKS_2` (19), what Redis 7.0
//! writes, and the older `STREAM_LISTPACKS` (15) and 7.2's
//! `STREAM_LISTPACKS_3` (21, consumers' active time) on load. Nodes go out
//! as the listpacks they are.

use super::input::{Input, Result};
use super::output::{write_len, write_string};
use super::{kind, listpack, RdbError, SaveOptions};
use crate::types::stream::group::{Group, Nack};
use crate::types::stream::node::Node;
use crate::types::stream::{Stream, StreamId};
use std::sync::Arc;

pub const STREAM_LISTPACKS_3: u8 = 21;

pub fn write(out: &mut Vec<u8>, s: &Stream, opts: &SaveOptions) {
    write_len(out, s.nodes.len() as u64);
    for (master, node) in &s.nodes {
        write_string(out, &master.encode(), opts);
        write_string(out, &node.lp, opts);
    }
    write_len(out, s.length);
    for v in [s.last_id.ms, s.last_id.seq, s.first_id.ms, s.first_id.seq, s.max_deleted_id.ms, s.max_deleted_id.seq] {
        write_len(out, v);
    }
    write_len(out, s.entries_added);
    write_len(out, s.groups.len() as u64);
    for (name, g) in &s.groups {
        write_string(out, name, opts);
        write_len(out, g.last_id.ms);
        write_len(out, g.last_id.seq);
        write_len(out, g.entries_read as u64);
        write_len(out, g.pel.len() as u64);
        for (id, nack) in &g.pel {
            out.extend_from_slice(&id.encode());
            out.extend_from_slice(&(nack.delivery_time as i64).to_le_bytes());
            write_len(out, nack.delivery_count);
        }
        write_len(out, g.consumers.len() as u64);
        for (cname, c) in &g.consumers {
            write_string(out, cname, opts);
            out.extend_from_slice(&(c.seen_time as i64).to_le_bytes());
            write_len(out, c.pel.len() as u64);
            for id in &c.pel {
                out.extend_from_slice(&id.encode());
            }
        }
    }
}

fn corrupt(at: usize, what: &str) -> RdbError {
    RdbError::new(at, what.to_string())
}

fn time(input: &mut Input) -> Result<u64> {
    Ok(i64::from_le_bytes(input.array::<8>()?) as u64)
}

fn id(input: &mut Input) -> Result<StreamId> {
    let raw = input.array::<16>()?;
    Ok(StreamId::decode(&raw).unwrap_or_default())
}

/// Checks a node's listpack as a stream node: a valid listpack whose
/// master entry and entries parse, each entry's lp-count right.
fn valid_node(lp: &[u8]) -> bool {
    use crate::types::pack::Item;
    let Ok(items) = listpack::parse(lp) else { return false };
    let int = |i: usize| match items.get(i) {
        Some(Item::Int(n)) => Some(*n),
        _ => None,
    };
    let (Some(count), Some(deleted), Some(nf)) = (int(0), int(1), int(2)) else { return false };
    if nf < 0 || count < 0 || deleted < 0 {
        return false;
    }
    let mut p = 3 + nf as usize;
    if int(p) != Some(0) {
        return false;
    }
    p += 1;
    let mut entries = 0i64;
    while p < items.len() {
        let start = p;
        let Some(flags) = int(p) else { return false };
        if int(p + 1).is_none() || int(p + 2).is_none() {
            return false;
        }
        p += 3;
        let fields = if flags & crate::types::stream::node::FLAG_SAMEFIELDS != 0 {
            nf as usize
        } else {
            let Some(n) = int(p) else { return false };
            if n < 0 {
                return false;
            }
            p += 1;
            2 * n as usize
        };
        p += fields;
        if int(p) != Some((p - start) as i64) {
            return false;
        }
        p += 1;
        entries += 1;
    }
    p == items.len() && entries == count + deleted && entries > 0
}

/// Reads a stream of RDB type `t`; `None` for an empty stream without
/// groups (Redis keeps those, so only a file's never are: Some).
pub fn read(input: &mut Input, t: u8) -> Result<Stream> {
    let start = input.pos;
    let mut s = Stream::default();
    let nodes = input.len()?;
    for _ in 0..nodes {
        let key = input.string()?;
        if key.len() != 16 {
            return Err(corrupt(start, "Stream node key entry is not the size of a stream ID"));
        }
        let master = StreamId::decode(&key).unwrap_or_default();
        let lp = input.string()?.into_owned();
        if !valid_node(&lp) {
            return Err(corrupt(start, "Stream listpack integrity check failed."));
        }
        if s.nodes.insert(master, Node::from_lp(lp)).is_some() {
            return Err(corrupt(start, "Listpack re-added with existing key"));
        }
    }
    s.length = input.len()?;
    s.last_id = StreamId::new(input.len()?, input.len()?);
    if t == kind::STREAM_LISTPACKS {
        s.entries_added = s.length;
        s.first_id = s.edge_id(true, true).unwrap_or(StreamId::MAX);
    } else {
        s.first_id = StreamId::new(input.len()?, input.len()?);
        s.max_deleted_id = StreamId::new(input.len()?, input.len()?);
        s.entries_added = input.len()?;
    }
    if s.length != 0 && s.nodes.is_empty() {
        return Err(corrupt(start, "Stream length inconsistent with rax entries"));
    }
    let groups = input.len()?;
    for _ in 0..groups {
        let name: Box<[u8]> = input.string()?.into_owned().into();
        let last_id = StreamId::new(input.len()?, input.len()?);
        let entries_read = if t == kind::STREAM_LISTPACKS {
            s.estimate_distance(last_id).map_or(-1, |n| n as i64)
        } else {
            input.len()? as i64
        };
        let mut g = Group::new(last_id, entries_read);
        for _ in 0..input.len()? {
            let pid = id(input)?;
            let delivery_time = time(input)?;
            let delivery_count = input.len()?;
            if g.pel.insert(pid, Nack { delivery_time, delivery_count, consumer: None }).is_some() {
                return Err(corrupt(start, "Duplicated global PEL entry loading stream consumer group"));
            }
        }
        for _ in 0..input.len()? {
            let cname: Arc<[u8]> = input.string()?.into_owned().into();
            if !g.create_consumer(&cname, 0) {
                return Err(corrupt(start, "Duplicate stream consumer detected."));
            }
            let seen = time(input)?;
            if t == STREAM_LISTPACKS_3 {
                time(input)?;
            }
            let consumer = g.consumers.get_mut(&cname[..]).expect("consumer just created");
            consumer.seen_time = seen;
            let cname = consumer.name.clone();
            for _ in 0..input.len()? {
                let pid = id(input)?;
                let Some(nack) = g.pel.get_mut(&pid) else {
                    return Err(corrupt(start, "Consumer entry not found in group global PEL"));
                };
                nack.consumer = Some(cname.clone());
                let consumer = g.consumers.get_mut(&cname[..]).expect("consumer");
                if !consumer.pel.insert(pid) {
                    return Err(corrupt(start, "Duplicated consumer PEL entry  loading a stream consumer group"));
                }
            }
        }
        if g.pel.values().any(|n| n.consumer.is_none()) {
            return Err(corrupt(start, "Stream CG PEL entry without consumer"));
        }
        if s.groups.insert(name, g).is_some() {
            return Err(corrupt(start, "Duplicated consumer group name"));
        }
    }
    Ok(s)
}

/// Steps over a stream value.
pub fn skip(input: &mut Input, t: u8) -> Result<()> {
    read(input, t).map(|_| ())
}
