//! Streams (Redis 7.0's t_stream.c): entries by ID in an ordered map of
//! nodes, each one Redis's listpack of up to `stream-node-max-entries`
//! entries / `stream-node-max-bytes` bytes with the master-entry field
//! compression (`stream/node.rs`), so approximate trimming removes the same
//! whole nodes Redis removes and nodes go to RDB as they are. Consumer
//! groups with their pending entries live in `stream/group.rs`.

pub mod group;
pub mod node;

use crate::types::pack::Item;
use group::Group;
use node::Node;
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    pub const MAX: StreamId = StreamId { ms: u64::MAX, seq: u64::MAX };

    pub fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    pub fn is_zero(&self) -> bool {
        *self == StreamId::MIN
    }

    /// The next ID; `None` past the last possible one.
    pub fn incr(self) -> Option<StreamId> {
        if self.seq == u64::MAX {
            if self.ms == u64::MAX {
                None
            } else {
                Some(StreamId::new(self.ms + 1, 0))
            }
        } else {
            Some(StreamId::new(self.ms, self.seq + 1))
        }
    }

    pub fn decr(self) -> Option<StreamId> {
        if self.seq == 0 {
            if self.ms == 0 {
                None
            } else {
                Some(StreamId::new(self.ms - 1, u64::MAX))
            }
        } else {
            Some(StreamId::new(self.ms, self.seq - 1))
        }
    }

    /// `ms-seq`.
    pub fn format(&self, out: &mut Vec<u8>) {
        let mut b = itoa::Buffer::new();
        out.extend_from_slice(b.format(self.ms).as_bytes());
        out.push(b'-');
        out.extend_from_slice(b.format(self.seq).as_bytes());
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(24);
        self.format(&mut v);
        v
    }

    /// Big-endian 128 bits, as Redis keys its radix trees.
    pub fn encode(&self) -> [u8; 16] {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&self.ms.to_be_bytes());
        k[8..].copy_from_slice(&self.seq.to_be_bytes());
        k
    }

    pub fn decode(b: &[u8]) -> Option<StreamId> {
        let ms = u64::from_be_bytes(b.get(..8)?.try_into().ok()?);
        let seq = u64::from_be_bytes(b.get(8..16)?.try_into().ok()?);
        Some(StreamId { ms, seq })
    }
}

/// `STREAM_LISTPACK_MAX_SIZE`: no node past 1 GB.
pub const LISTPACK_MAX_SIZE: u64 = 1 << 30;

/// Node limits from the settings.
#[derive(Clone, Copy, Debug)]
pub struct NodeLimits {
    pub max_bytes: u64,
    pub max_entries: u64,
}

impl NodeLimits {
    pub fn of(config: &crate::config::Config) -> NodeLimits {
        NodeLimits { max_bytes: config.stream_node_max_bytes, max_entries: config.stream_node_max_entries }
    }
}

impl Default for NodeLimits {
    fn default() -> Self {
        NodeLimits { max_bytes: 4096, max_entries: 100 }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Trim {
    MaxLen(u64),
    MinId(StreamId),
}

/// XADD/XTRIM's trimming: strategy, `~`, LIMIT (0: none).
#[derive(Clone, Copy, Debug)]
pub struct TrimArgs {
    pub trim: Trim,
    pub approx: bool,
    pub limit: u64,
}

/// One entry as read out: its ID and field-value pairs.
pub type Fields<'a> = Vec<(Item<'a>, Item<'a>)>;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stream {
    /// Nodes by their master ID.
    pub nodes: BTreeMap<StreamId, Node>,
    pub length: u64,
    pub last_id: StreamId,
    /// The first live entry; zero when empty.
    pub first_id: StreamId,
    pub max_deleted_id: StreamId,
    pub entries_added: u64,
    /// Consumer groups by name.
    pub groups: BTreeMap<Box<[u8]>, Group>,
}

/// Why XADD could not add.
#[derive(Debug, PartialEq)]
pub enum AddError {
    /// The ID is not above the top item.
    NotGreater,
    TooLarge,
}

impl Stream {
    pub fn len(&self) -> u64 {
        self.length
    }

    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// Redis's streamAppendItem. `id`: `None` generates one from `now`;
    /// `Some((id, false))` takes its ms and picks the sequence.
    pub fn append(
        &mut self,
        fields: &[(&[u8], &[u8])],
        id: Option<(StreamId, bool)>,
        now: u64,
        limits: NodeLimits,
    ) -> Result<StreamId, AddError> {
        let id = match id {
            Some((id, true)) => id,
            Some((id, false)) => {
                if self.last_id.ms == id.ms {
                    if self.last_id.seq == u64::MAX {
                        return Err(AddError::NotGreater);
                    }
                    StreamId::new(id.ms, self.last_id.seq + 1)
                } else {
                    StreamId::new(id.ms, 0)
                }
            }
            None => {
                if now > self.last_id.ms {
                    StreamId::new(now, 0)
                } else {
                    self.last_id.incr().unwrap_or(StreamId::MIN)
                }
            }
        };
        if id <= self.last_id {
            return Err(AddError::NotGreater);
        }
        let total: u64 = fields.iter().map(|(f, v)| (f.len() + v.len()) as u64).sum();
        if total > LISTPACK_MAX_SIZE {
            return Err(AddError::TooLarge);
        }
        let mut max_bytes = limits.max_bytes;
        if max_bytes == 0 || max_bytes > LISTPACK_MAX_SIZE {
            max_bytes = LISTPACK_MAX_SIZE;
        }
        let tail_has_room = match self.nodes.iter().next_back() {
            None => false,
            Some((_, node)) => {
                let full = node.bytes() as u64 + total >= max_bytes
                    || (limits.max_entries != 0 && (node.count() + node.deleted()) as u64 >= limits.max_entries);
                !full
            }
        };
        if tail_has_room {
            let (master, node) = self.nodes.iter_mut().next_back().expect("tail node");
            node.append(*master, id, fields);
        } else {
            // A full node keeps no slack (Redis's lpShrinkToFit).
            if let Some((_, tail)) = self.nodes.iter_mut().next_back() {
                tail.lp.shrink_to_fit();
            }
            let mut node = Node::new(fields.iter().map(|(f, _)| *f));
            node.append(id, id, fields);
            self.nodes.insert(id, node);
        }
        self.length += 1;
        self.entries_added += 1;
        self.last_id = id;
        if self.length == 1 {
            self.first_id = id;
        }
        Ok(id)
    }

    /// Visits live entries with IDs in `start..=end`, forwards or backwards,
    /// until `visit` returns false.
    pub fn range<'s>(
        &'s self,
        start: StreamId,
        end: StreamId,
        rev: bool,
        mut visit: impl FnMut(StreamId, &'s Node, &node::EntryRef) -> bool,
    ) {
        if start > end {
            return;
        }
        // The node holding `start` begins at or before it.
        let from = self.nodes.range(..=start).next_back().map(|(k, _)| *k).unwrap_or(StreamId::MIN);
        let nodes = self.nodes.range(from..=end);
        let mut forward = |master: &StreamId, n: &'s Node| -> bool {
            // Entries decoded one by one: a read of a few entries from a
            // full node decodes only up to them.
            let mut more = true;
            n.walk(*master, |e| {
                if e.id > end {
                    more = false;
                    return false;
                }
                if e.deleted() || e.id < start {
                    return true;
                }
                more = visit(e.id, n, e);
                more
            });
            more
        };
        if !rev {
            for (m, n) in nodes {
                if !forward(m, n) {
                    return;
                }
            }
            return;
        }
        let mut each = |master: &StreamId, n: &'s Node| -> bool {
            let entries = n.entries(*master);
            let mut go = |e: &node::EntryRef| -> Option<bool> {
                if e.deleted() {
                    return None;
                }
                if e.id < start || e.id > end {
                    return None;
                }
                Some(visit(e.id, n, e))
            };
            for e in entries.iter().rev() {
                if go(e) == Some(false) {
                    return false;
                }
            }
            true
        };
        for (m, n) in nodes.rev() {
            if !each(m, n) {
                return;
            }
        }
    }

    /// The fields of entry `id` if it is live.
    pub fn get(&self, id: StreamId) -> Option<Fields<'_>> {
        let mut found = None;
        self.range(id, id, false, |_, n, e| {
            found = Some(n.fields(e));
            false
        });
        found
    }

    pub fn exists(&self, id: StreamId) -> bool {
        let mut found = false;
        self.range(id, id, false, |_, _, _| {
            found = true;
            false
        });
        found
    }

    /// First or last entry ID, tombstones included or not
    /// (streamGetEdgeID); `None` when there is none.
    pub fn edge_id(&self, first: bool, skip_tombstones: bool) -> Option<StreamId> {
        let pick = |(m, n): (&StreamId, &Node)| -> Option<StreamId> {
            let entries = n.entries(*m);
            let mut it: Box<dyn Iterator<Item = &node::EntryRef>> =
                if first { Box::new(entries.iter()) } else { Box::new(entries.iter().rev()) };
            it.find(|e| !skip_tombstones || !e.deleted()).map(|e| e.id)
        };
        if first {
            self.nodes.iter().find_map(pick)
        } else {
            self.nodes.iter().rev().find_map(|(m, n)| n.last(*m, skip_tombstones))
        }
    }

    /// The last live ID (streamLastValidID), zero when empty.
    pub fn last_valid_id(&self) -> StreamId {
        self.edge_id(false, true).unwrap_or(StreamId::MIN)
    }

    /// XDEL of one ID: true when it was live.
    pub fn delete(&mut self, id: StreamId) -> bool {
        let Some((&master, node)) = self.nodes.range_mut(..=id).next_back() else { return false };
        let (nf, _, mut p) = node.master();
        let mut at = None;
        while let Some(pos) = p {
            let e = node.entry(master, nf, pos);
            if e.id == id {
                if !e.deleted() {
                    at = Some(pos);
                }
                break;
            }
            if e.id > id {
                break;
            }
            p = e.next;
        }
        let Some(at) = at else { return false };
        if node.count() == 1 {
            self.nodes.remove(&master);
        } else {
            node.mark_deleted(at);
        }
        self.length -= 1;
        if id == self.first_id {
            self.first_id = if self.length == 0 { StreamId::MIN } else { self.edge_id(true, true).unwrap_or_default() };
        }
        if id > self.max_deleted_id {
            self.max_deleted_id = id;
        }
        if self.length == 0 {
            self.first_id = StreamId::MIN;
        }
        true
    }

    /// Redis's streamTrim: the number of entries removed.
    pub fn trim(&mut self, args: &TrimArgs) -> u64 {
        let mut deleted = 0u64;
        loop {
            if let Trim::MaxLen(max) = args.trim {
                if self.length <= max {
                    break;
                }
            }
            let Some((&master, node)) = self.nodes.iter_mut().next() else { break };
            let entries = node.count() as u64;
            if args.limit != 0 && deleted + entries > args.limit {
                break;
            }
            let remove = match args.trim {
                Trim::MaxLen(max) => self.length - entries >= max,
                Trim::MinId(min) => {
                    let last = node.entries(master).last().map(|e| e.id).unwrap_or(master);
                    last < min
                }
            };
            if remove {
                self.nodes.remove(&master);
                self.length -= entries;
                deleted += entries;
                continue;
            }
            if args.approx {
                break;
            }
            let (nf, _, mut p) = node.master();
            let mut from_node = 0;
            while let Some(pos) = p {
                let e = node.entry(master, nf, pos);
                let stop = match args.trim {
                    Trim::MaxLen(max) => self.length <= max,
                    Trim::MinId(min) => e.id >= min,
                };
                if stop {
                    break;
                }
                let after = e.next.map(|n| node.lp.len() - n);
                if !e.deleted() {
                    let before = node.lp.len();
                    node.replace_int(pos, e.flags | node::FLAG_DELETED);
                    debug_assert_eq!(before, node.lp.len());
                    from_node += 1;
                    self.length -= 1;
                }
                p = after.map(|a| node.lp.len() - a);
            }
            node.add_counts(-from_node, from_node);
            deleted += from_node as u64;
            break;
        }
        if self.length == 0 {
            self.first_id = StreamId::MIN;
        } else if deleted > 0 {
            self.first_id = self.edge_id(true, true).unwrap_or_default();
        }
        deleted
    }

    /// The first entry ID including tombstones (what an approximate trim
    /// propagates as MINID), zero when there is none... Redis answers the
    /// maximal ID for an empty stream (streamGetEdgeID).
    pub fn first_id_any(&self) -> StreamId {
        self.edge_id(true, false).unwrap_or(StreamId::MAX)
    }

    /// Whether `start..=end` may hold a tombstone (streamRangeHasTombstones).
    pub fn range_has_tombstones(&self, start: Option<StreamId>, end: Option<StreamId>) -> bool {
        if self.length == 0 || self.max_deleted_id.is_zero() {
            return false;
        }
        if self.first_id > self.max_deleted_id {
            return false;
        }
        let start = start.unwrap_or(StreamId::MIN);
        let end = end.unwrap_or(StreamId::MAX);
        start <= self.max_deleted_id && self.max_deleted_id <= end
    }

    /// streamEstimateDistanceFromFirstEverEntry: `None` when unknown.
    pub fn estimate_distance(&self, id: StreamId) -> Option<u64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if self.length == 0 && id <= self.last_id {
            return Some(self.entries_added);
        }
        if id == self.last_id {
            return Some(self.entries_added);
        } else if id > self.last_id {
            return None;
        }
        if self.max_deleted_id.is_zero() || self.max_deleted_id < self.first_id {
            if id < self.first_id {
                return Some(self.entries_added - self.length);
            } else if id == self.first_id {
                return Some(self.entries_added - self.length + 1);
            }
        }
        None
    }

    /// A group's lag (streamReplyWithCGLag); `None`: unknown.
    pub fn lag(&self, g: &Group) -> Option<i64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if g.entries_read != group::INVALID_ENTRIES_READ && !self.range_has_tombstones(Some(g.last_id), None) {
            return Some(self.entries_added as i64 - g.entries_read);
        }
        self.estimate_distance(g.last_id).map(|read| self.entries_added as i64 - read as i64)
    }

    /// Nodes of Redis's radix tree for these keys (XINFO's
    /// radix-tree-nodes): the compressed trie of the 16-byte node keys.
    pub fn rax_nodes(&self) -> u64 {
        fn count(keys: &[[u8; 16]], depth: usize) -> u64 {
            if keys.len() == 1 {
                return if depth == 16 { 1 } else { 2 };
            }
            // Common prefix from `depth`.
            let (a, b) = (&keys[0], &keys[keys.len() - 1]);
            let mut d = depth;
            while d < 16 && a[d] == b[d] {
                d += 1;
            }
            let compressed = (d > depth) as u64;
            let mut total = compressed + 1;
            let mut i = 0;
            while i < keys.len() {
                let mut j = i + 1;
                while j < keys.len() && keys[j][d] == keys[i][d] {
                    j += 1;
                }
                total += count(&keys[i..j], d + 1);
                i = j;
            }
            total
        }
        let keys: Vec<[u8; 16]> = self.nodes.keys().map(StreamId::encode).collect();
        if keys.is_empty() {
            return 1;
        }
        count(&keys, 0)
    }

    pub fn heap_size(&self) -> usize {
        let nodes: usize = self.nodes.values().map(|n| n.lp.capacity() + 48).sum();
        let groups: usize = self.groups.values().map(Group::heap_size).sum();
        nodes + groups + std::mem::size_of::<Stream>()
    }
}

#[cfg(test)]
mod tests;
