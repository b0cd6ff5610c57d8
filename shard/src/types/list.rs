//! Lists: a deque of small packed nodes (the shape of Redis's quicklist of
//! listpacks). Elements use the canonical element codec of `pack`, so small
//! integers take one or two bytes. A node holds up to `list-max-listpack-size`
//! elements (positive) or bytes (negative: -1 = 4 KB ... -5 = 64 KB).
//!
//! With a compress depth N > 0 (`list-compress-depth` when the list was
//! made, as Redis keeps it per quicklist), every node but the N at each end
//! is kept LZF-compressed when Redis would compress it (`node.rs`). The ends
//! never are, so pushes and pops cost what they cost without compression;
//! only the node crossing the depth boundary is compressed or decompressed
//! when a node is added or removed at an end. Reads into the middle
//! decompress one node at a time into a pooled buffer.

mod node;

use super::pack::{decode, Enc, Item, Pack};
use node::Node;
pub use node::{MIN_COMPRESS_BYTES, MIN_COMPRESS_IMPROVE};
use std::collections::VecDeque;

#[derive(Clone, Default)]
pub struct List {
    nodes: VecDeque<Node>,
    len: usize,
    /// Nodes kept uncompressed at each end; 0: no compression.
    depth: u16,
}

/// How full a node may get, from `list-max-listpack-size`.
#[derive(Clone, Copy, Debug)]
pub struct Fill(pub i64);

impl Fill {
    /// Whether a node of `count` elements in `bytes` takes one more of
    /// `extra` bytes.
    fn allows(self, count: usize, bytes: usize, extra: usize) -> bool {
        match self.0 {
            n if n > 0 => count < n as usize,
            n => {
                let limit = 4096usize << ((-n).clamp(1, 5) - 1);
                bytes + extra <= limit
            }
        }
    }

    fn fits(self, node: &Node, extra: usize) -> bool {
        self.allows(node.count(), node.raw_len(), extra)
    }

    /// Whether two nodes make one (_quicklistNodeAllowMerge).
    fn merges(self, a: &Node, b: &Node) -> bool {
        match self.0 {
            n if n > 0 => a.count() + b.count() <= n as usize,
            _ => self.allows(0, a.raw_len(), b.raw_len()),
        }
    }
}

/// Redis's quicklist keeps its compress depth in 16 bits (COMPRESS_MAX).
fn clamp_depth(depth: i64) -> u16 {
    depth.clamp(0, u16::MAX as i64) as u16
}

impl List {
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty list that compresses all but `depth` nodes at each end.
    pub fn with_depth(depth: i64) -> Self {
        List { depth: clamp_depth(depth), ..Self::default() }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The compress depth the list was made with.
    pub fn depth(&self) -> usize {
        self.depth as usize
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// How many nodes are held compressed.
    pub fn compressed_nodes(&self) -> usize {
        self.nodes.iter().filter(|n| n.is_compressed()).count()
    }

    /// Bytes of node `n`'s packed form (without decompressing it).
    pub fn node_bytes(&self, n: usize) -> usize {
        self.nodes.get(n).map_or(0, Node::raw_len)
    }

    /// Runs `f` on node `n`'s packed elements (decompressed into a pooled
    /// buffer if it is compressed); the RDB encoder writes one listpack per
    /// node, like Redis's quicklist.
    pub fn with_node<R>(&self, n: usize, f: impl FnOnce(&Pack) -> R) -> Option<R> {
        self.nodes.get(n).map(|node| node.with_pack(f))
    }

    /// Heap bytes of each node, front to back (MEMORY USAGE samples them).
    pub fn node_heap_sizes(&self) -> impl Iterator<Item = usize> + '_ {
        self.nodes.iter().map(Node::heap_size)
    }

    pub fn heap_size(&self) -> usize {
        self.nodes.iter().map(Node::heap_size).sum::<usize>() + self.nodes.capacity() * std::mem::size_of::<Node>()
    }

    /// Whether node `i` lies past the depth from both ends.
    fn interior(&self, i: usize) -> bool {
        let depth = self.depth as usize;
        depth > 0 && i >= depth && i < self.nodes.len() && self.nodes.len() - i > depth
    }

    /// Puts node `i` in the form its place asks for: compressed inside the
    /// depth (when Redis would compress it), packed at the ends.
    fn settle(&mut self, i: usize) {
        let interior = self.interior(i);
        let Some(node) = self.nodes.get_mut(i) else { return };
        match (interior, node.is_compressed()) {
            (true, false) => node.compress(),
            (false, true) => {
                node.raw_mut();
            }
            _ => {}
        }
    }

    /// After one node was added or removed in the middle (a split, a
    /// merge): only the nodes next to the depth boundary at either end can
    /// have changed sides.
    fn settle_bounds(&mut self) {
        let depth = self.depth as usize;
        if depth == 0 {
            return;
        }
        let n = self.nodes.len();
        for i in [depth - 1, depth, n.wrapping_sub(depth + 1), n.wrapping_sub(depth)] {
            self.settle(i);
        }
    }

    /// After whole nodes left the ends (LTRIM): the new end nodes may have
    /// been inside the depth.
    fn settle_ends(&mut self) {
        let (depth, n) = (self.depth as usize, self.nodes.len());
        for i in (0..depth.min(n)).chain(n.saturating_sub(depth)..n) {
            self.settle(i);
        }
    }

    pub fn push_back(&mut self, value: &[u8], fill: Fill) {
        let e = Enc::new(value);
        self.len += 1;
        if let Some(node) = self.nodes.back_mut() {
            if fill.fits(node, e.len()) {
                return node.raw_mut().push(&e);
            }
        }
        let mut pack = Pack::default();
        pack.push(&e);
        self.nodes.push_back(Node::Raw(pack));
        // The node now `depth` from the tail went inside.
        if self.depth > 0 {
            self.settle(self.nodes.len().wrapping_sub(self.depth as usize + 1));
        }
    }

    pub fn push_front(&mut self, value: &[u8], fill: Fill) {
        let e = Enc::new(value);
        self.len += 1;
        if let Some(node) = self.nodes.front_mut() {
            if fill.fits(node, e.len()) {
                return node.raw_mut().insert(0, &e);
            }
        }
        let mut pack = Pack::default();
        pack.push(&e);
        self.nodes.push_front(Node::Raw(pack));
        if self.depth > 0 {
            self.settle(self.depth as usize);
        }
    }

    pub fn pop_front(&mut self) -> Option<Vec<u8>> {
        let node = self.nodes.front_mut()?.raw_mut();
        let value = decode(node.at(0)?).to_vec();
        node.remove(0, 1);
        if node.count() == 0 {
            self.nodes.pop_front();
            // The node now `depth - 1` from the head came out.
            if self.depth > 0 {
                self.settle(self.depth as usize - 1);
            }
        }
        self.len -= 1;
        Some(value)
    }

    pub fn pop_back(&mut self) -> Option<Vec<u8>> {
        let node = self.nodes.back_mut()?.raw_mut();
        let pos = node.nth_pos(node.count() - 1)?;
        let value = decode(node.at(pos)?).to_vec();
        node.remove(pos, 1);
        if node.count() == 0 {
            self.nodes.pop_back();
            if self.depth > 0 {
                self.settle(self.nodes.len().wrapping_sub(self.depth as usize));
            }
        }
        self.len -= 1;
        Some(value)
    }

    /// (node, index in the node) of element `index`, walking the node
    /// counts from the nearer end (no node is decompressed).
    fn locate(&self, index: usize) -> Option<(usize, usize)> {
        if index >= self.len {
            return None;
        }
        if index < self.len / 2 {
            let mut i = index;
            for (n, node) in self.nodes.iter().enumerate() {
                if i < node.count() {
                    return Some((n, i));
                }
                i -= node.count();
            }
        } else {
            let mut from_end = self.len - 1 - index;
            for (n, node) in self.nodes.iter().enumerate().rev() {
                if from_end < node.count() {
                    return Some((n, node.count() - 1 - from_end));
                }
                from_end -= node.count();
            }
        }
        None
    }

    /// Runs `f` on element `index`; `None` when out of range.
    pub fn get<R>(&self, index: usize, f: impl FnOnce(Item) -> R) -> Option<R> {
        let (n, i) = self.locate(index)?;
        self.nodes[n].with_pack(|p| p.nth_pos(i).and_then(|pos| p.at(pos)).map(|raw| f(decode(raw))))
    }

    /// Replaces element `index`; false when out of range.
    pub fn set(&mut self, index: usize, value: &[u8]) -> bool {
        let Some((n, i)) = self.locate(index) else { return false };
        let e = Enc::new(value);
        self.edit(n, |p| {
            if let Some(pos) = p.nth_pos(i) {
                p.replace(pos, &e);
            }
        });
        true
    }

    /// Changes node `n` in place, keeping it compressed if it is, and
    /// trying to compress an interior node that was not.
    fn edit(&mut self, n: usize, f: impl FnOnce(&mut Pack)) {
        let node = &mut self.nodes[n];
        if node.is_compressed() {
            node.edit_compressed(f);
        } else {
            f(node.raw_mut());
            self.settle(n);
        }
    }

    /// Calls `f` on the elements from index `from` towards the tail (or the
    /// head, `rev`) until it returns false.
    pub fn walk(&self, from: usize, rev: bool, mut f: impl FnMut(Item) -> bool) {
        let Some((mut n, mut first)) = self.locate(from) else { return };
        let mut offsets = Vec::new();
        loop {
            let go_on = self.nodes[n].with_pack(|p| {
                if rev {
                    offsets.clear();
                    let mut pos = 0;
                    for raw in p.elems().take(first + 1) {
                        offsets.push(pos);
                        pos += raw.len();
                    }
                    offsets.iter().rev().all(|&pos| p.at(pos).is_some_and(|raw| f(decode(raw))))
                } else {
                    p.elems().skip(first).all(|raw| f(decode(raw)))
                }
            });
            if !go_on {
                return;
            }
            if rev {
                if n == 0 {
                    return;
                }
                n -= 1;
                first = self.nodes[n].count().saturating_sub(1);
            } else {
                n += 1;
                if n == self.nodes.len() {
                    return;
                }
                first = 0;
            }
        }
    }

    /// Every element, front to back (tests, debugging).
    pub fn to_vecs(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::with_capacity(self.len);
        self.walk(0, false, |e| {
            out.push(e.to_vec());
            true
        });
        out
    }

    /// LINSERT: inserts `value` before or after the first `pivot`. Returns
    /// false when the pivot is not in the list. Nodes change as in Redis's
    /// _quicklistInsert: the pivot's node takes it if it has room; else,
    /// with the pivot at its node's edge (on the insertion's side), the
    /// neighbour there if it has room, or a new node; else the pivot's
    /// node is split at the insertion point and merged with its
    /// neighbours where they fit.
    pub fn insert(&mut self, pivot: &[u8], before: bool, value: &[u8], fill: Fill) -> bool {
        let pivot = Enc::new(pivot);
        let Some((n, pos, pivot_len)) = (0..self.nodes.len()).find_map(|n| {
            self.nodes[n].with_pack(|p| p.find(&pivot, 1).map(|pos| (n, pos, p.at(pos).map_or(0, <[u8]>::len))))
        }) else {
            return false;
        };
        let e = Enc::new(value);
        let at = if before { pos } else { pos + pivot_len };
        self.len += 1;
        let at_edge = if before { at == 0 } else { at == self.nodes[n].raw_len() };
        if fill.fits(&self.nodes[n], e.len()) {
            self.edit(n, |p| p.insert(at, &e));
            return true;
        }
        // The pivot at its node's edge, towards the neighbour: into the
        // neighbour if it has room, else a node of its own between them.
        if at_edge {
            let neighbour = if before { n.checked_sub(1) } else { Some(n + 1).filter(|&m| m < self.nodes.len()) };
            if let Some(m) = neighbour.filter(|&m| fill.fits(&self.nodes[m], e.len())) {
                self.edit(m, |p| if before { p.push(&e) } else { p.insert(0, &e) });
            } else {
                let mut pack = Pack::default();
                pack.push(&e);
                let at = if before { n } else { n + 1 };
                self.nodes.insert(at, Node::Raw(pack));
                self.settle(at);
                self.settle_bounds();
            }
            return true;
        }
        // Split: the new element joins the side without the pivot, so
        // neither side is empty; then the pivot's node may merge with
        // its neighbours.
        let left = self.nodes[n].raw_mut();
        let mut right = left.split_off(at);
        if before {
            left.push(&e);
        } else {
            right.insert(0, &e);
        }
        self.nodes.insert(n + 1, Node::Raw(right));
        self.settle(n);
        self.settle(n + 1);
        self.settle_bounds();
        self.merge_around(if before { n + 1 } else { n }, fill);
        true
    }

    /// Redis's _quicklistMergeNodes around node `c`: the two before it, the
    /// two after it, then `c` with the one before and with the one after.
    fn merge_around(&mut self, mut c: usize, fill: Fill) {
        let joins = |l: &List, i: usize| i + 1 < l.nodes.len() && fill.merges(&l.nodes[i], &l.nodes[i + 1]);
        if c >= 2 && joins(self, c - 2) {
            self.merge(c - 2);
            c -= 1;
        }
        if joins(self, c + 1) {
            self.merge(c + 1);
        }
        if c >= 1 && joins(self, c - 1) {
            self.merge(c - 1);
            c -= 1;
        }
        if joins(self, c) {
            self.merge(c);
        }
    }

    /// Node `i + 1`'s elements appended to node `i`, which takes its place.
    fn merge(&mut self, i: usize) {
        let Some(next) = self.nodes.remove(i + 1) else { return };
        let mut next = next;
        let tail = next.raw_mut();
        self.nodes[i].raw_mut().append(tail);
        self.settle(i);
        self.settle_bounds();
    }

    /// LREM: removes up to `count` elements equal to `value` from the head
    /// (count > 0), from the tail (count < 0), or all (0). Returns how many.
    /// Node by node in place, as Redis deletes entries; a node left empty
    /// goes.
    pub fn remove(&mut self, count: i64, value: &[u8]) -> usize {
        let e = Enc::new(value);
        let limit = if count == 0 { usize::MAX } else { count.unsigned_abs() as usize };
        let mut removed = 0;
        let nodes = self.nodes.len();
        for k in 0..nodes {
            if removed == limit {
                break;
            }
            let n = if count < 0 { nodes - 1 - k } else { k };
            let matches = self.nodes[n].with_pack(|p| p.elems().filter(|raw| e.matches(raw)).count());
            if matches == 0 {
                continue;
            }
            let take = matches.min(limit - removed);
            // From the head: the node's first `take` matches; from the
            // tail: its last `take`.
            let keep_first = if count < 0 { matches - take } else { 0 };
            self.edit(n, |p| {
                let (mut seen, mut left) = (0, take);
                p.retain(|raw| {
                    if !e.matches(raw) {
                        return true;
                    }
                    seen += 1;
                    if seen <= keep_first || left == 0 {
                        return true;
                    }
                    left -= 1;
                    false
                });
            });
            removed += take;
        }
        if removed > 0 {
            // Nodes leaving only bring others nearer the ends.
            self.nodes.retain(|n| n.count() > 0);
            self.settle_ends();
        }
        self.len -= removed;
        removed
    }

    /// LTRIM to `start..=end` (in range), or empty when `None`: whole nodes
    /// leave the ends, the new end nodes lose what is left to remove (as
    /// Redis's quicklistDelRange).
    pub fn trim(&mut self, keep: Option<(usize, usize)>) {
        let Some((start, end)) = keep.filter(|&(s, e)| s <= e && e < self.len) else {
            self.nodes.clear();
            self.len = 0;
            return;
        };
        let (mut front, mut back) = (start, self.len - 1 - end);
        self.len = end + 1 - start;
        while front > 0 {
            let Some(node) = self.nodes.front_mut() else { break };
            if node.count() <= front {
                front -= node.count();
                self.nodes.pop_front();
            } else {
                node.raw_mut().remove(0, front);
                front = 0;
            }
        }
        while back > 0 {
            let Some(node) = self.nodes.back_mut() else { break };
            let count = node.count();
            if count <= back {
                back -= count;
                self.nodes.pop_back();
            } else {
                let p = node.raw_mut();
                if let Some(pos) = p.nth_pos(count - back) {
                    p.remove(pos, back);
                }
                back = 0;
            }
        }
        self.settle_ends();
    }
}

impl PartialEq for List {
    /// Same elements in the same order (node layout and depth aside).
    fn eq(&self, other: &List) -> bool {
        self.len == other.len && self.to_vecs() == other.to_vecs()
    }
}

impl std::fmt::Debug for List {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.to_vecs().iter().map(|v| String::from_utf8_lossy(v))).finish()
    }
}

impl List {
    /// Checks the layout: counts add up, no node is empty, and a node is
    /// compressed exactly when it lies inside the depth and Redis would
    /// compress it (tests).
    #[doc(hidden)]
    pub fn check_layout(&self) -> Result<(), String> {
        let total: usize = self.nodes.iter().map(Node::count).sum();
        if total != self.len {
            return Err(format!("nodes hold {total} elements, len is {}", self.len));
        }
        for (i, node) in self.nodes.iter().enumerate() {
            if node.count() == 0 {
                return Err(format!("node {i} is empty"));
            }
            let want = self.interior(i) && {
                let mut probe = node.clone();
                probe.raw_mut();
                probe.compress();
                probe.is_compressed()
            };
            if node.is_compressed() != want {
                return Err(format!(
                    "node {i} of {} (depth {}) compressed: {}, should be: {want}",
                    self.nodes.len(),
                    self.depth,
                    node.is_compressed()
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
