//! The large sorted-set encoding: an order-statistic B+tree keyed by (score,
//! member). Leaves are packed runs ([`Pack`]) of up to about 1 KB; inner
//! nodes keep each child's element count, so rank, select and range
//! counts are O(log n), and a lower bound of each child's keys to route by.
//! The bounds need not be exact: everything in child i-1 sorts before
//! bound i, which sorts at or before everything in child i; removals never
//! have to touch them. Members are found by score through the [`Index`].

use super::index::Index;
use super::pack::{cmp_key, entry_len, Pack};
use crate::bytes::CompactBytes;
use std::cell::Cell;
use std::cmp::Ordering;

/// A leaf splits past this many bytes of entries...
const LEAF_BYTES: usize = 1024;
/// ...or this many entries (bounds the linear scans).
const LEAF_ITEMS: usize = 128;
/// Children of an inner node.
const FANOUT: usize = 64;

#[derive(Clone)]
struct Bound {
    score: f64,
    member: CompactBytes,
}

impl Bound {
    fn new(score: f64, member: &[u8]) -> Bound {
        Bound { score, member: CompactBytes::new(member) }
    }

    fn lowest() -> Bound {
        Bound::new(f64::NEG_INFINITY, b"")
    }
}

#[derive(Clone)]
struct Kid {
    node: Box<Node>,
    count: usize,
    /// Lower bound of this child's keys (unused for the first child).
    bound: Bound,
}

#[derive(Clone)]
enum Node {
    Leaf(Pack),
    Inner(Vec<Kid>),
}

/// Whether a node is on the tree's left or right edge: appends and
/// prepends split there so sequential loads fill nodes completely.
#[derive(Clone, Copy)]
struct Edge {
    left: bool,
    right: bool,
}

/// A new right sibling: its lower bound, the node, its element count.
type Split = (Bound, Box<Node>, usize);

/// The child holding keys for which `before` is false first: children
/// before it hold only keys satisfying `before`.
#[inline]
fn route(kids: &[Kid], before: &dyn Fn(f64, &[u8]) -> bool) -> usize {
    kids.get(1..).map_or(0, |rest| rest.partition_point(|k| before(k.bound.score, &k.bound.member)))
}

fn at_or_before(score: f64, member: &[u8]) -> impl Fn(f64, &[u8]) -> bool + '_ {
    move |s, m| cmp_key(s, m, score, member) != Ordering::Greater
}

impl Node {
    fn underfull(&self) -> bool {
        match self {
            Node::Leaf(p) => p.bytes() < LEAF_BYTES / 4 && p.len() < LEAF_ITEMS / 2,
            Node::Inner(kids) => kids.len() < FANOUT / 4,
        }
    }

    fn fits_with(&self, other: &Node) -> bool {
        match (self, other) {
            (Node::Leaf(a), Node::Leaf(b)) => a.bytes() + b.bytes() <= LEAF_BYTES && a.len() + b.len() <= LEAF_ITEMS,
            (Node::Inner(a), Node::Inner(b)) => a.len() + b.len() <= FANOUT,
            _ => false,
        }
    }

    /// Inserts an absent key; `Err` when it was present.
    fn insert(&mut self, score: f64, member: &[u8], edge: Edge) -> Result<Option<Split>, ()> {
        match self {
            Node::Leaf(pack) => {
                let idx = pack.insert(score, member).ok_or(())?;
                if (pack.bytes() <= LEAF_BYTES && pack.len() <= LEAF_ITEMS) || pack.len() < 2 {
                    return Ok(None);
                }
                let at = if edge.right && idx + 1 == pack.len() {
                    idx
                } else if edge.left && idx == 0 {
                    1
                } else {
                    pack.middle()
                };
                let right = pack.split_off(at);
                let bound = right.first().map_or_else(Bound::lowest, |(s, m)| Bound::new(s, m));
                let count = right.len();
                Ok(Some((bound, Box::new(Node::Leaf(right)), count)))
            }
            Node::Inner(kids) => {
                let i = route(kids, &at_or_before(score, member));
                let last = kids.len() - 1;
                let kid_edge = Edge { left: edge.left && i == 0, right: edge.right && i == last };
                let kid = kids.get_mut(i).ok_or(())?;
                let split = kid.node.insert(score, member, kid_edge)?;
                kid.count += 1;
                let Some((bound, node, count)) = split else {
                    return Ok(None);
                };
                kid.count -= count;
                kids.insert(i + 1, Kid { node, count, bound });
                if kids.len() <= FANOUT {
                    return Ok(None);
                }
                let at = if kid_edge.right {
                    kids.len() - 1
                } else if kid_edge.left {
                    1
                } else {
                    kids.len() / 2
                };
                let rest = kids.split_off(at);
                let count = rest.iter().map(|k| k.count).sum();
                let bound = rest.first().map_or_else(Bound::lowest, |k| k.bound.clone());
                Ok(Some((bound, Box::new(Node::Inner(rest)), count)))
            }
        }
    }

    /// Removes a key; false when absent.
    fn remove(&mut self, score: f64, member: &[u8]) -> bool {
        match self {
            Node::Leaf(pack) => pack.remove(score, member),
            Node::Inner(kids) => {
                let i = route(kids, &at_or_before(score, member));
                let Some(kid) = kids.get_mut(i) else {
                    return false;
                };
                if !kid.node.remove(score, member) {
                    return false;
                }
                kid.count -= 1;
                fix(kids, i);
                true
            }
        }
    }

    /// Removes the elements of ranks `lo..hi` below this node.
    fn remove_ranks(&mut self, lo: usize, hi: usize, removed: &mut dyn FnMut(f64, &[u8])) {
        match self {
            Node::Leaf(pack) => pack.remove_range(lo, hi, removed),
            Node::Inner(kids) => {
                let mut start = 0;
                for kid in kids.iter_mut() {
                    let end = start + kid.count;
                    if end > lo && start < hi {
                        let (a, b) = (lo.max(start) - start, hi.min(end) - start);
                        if a == 0 && b == kid.count {
                            kid.node.walk(0, false, &mut |s, m| {
                                removed(s, m);
                                true
                            });
                            kid.count = 0;
                        } else {
                            kid.node.remove_ranks(a, b, removed);
                            kid.count -= b - a;
                        }
                    }
                    start = end;
                }
                kids.retain(|k| k.count > 0);
                let mut i = 0;
                while i + 1 < kids.len() {
                    let small = kids[i].node.underfull() || kids[i + 1].node.underfull();
                    if small && kids[i].node.fits_with(&kids[i + 1].node) {
                        merge(kids, i);
                    } else {
                        i += 1;
                    }
                }
            }
        }
    }

    /// Shows elements from rank `start` on (or down to rank 0 when `rev`) to
    /// `f` until it returns false; false when it did.
    fn walk<'a>(&'a self, start: usize, rev: bool, f: &mut dyn FnMut(f64, &'a [u8]) -> bool) -> bool {
        match self {
            Node::Leaf(pack) => pack.walk(start, rev, f),
            Node::Inner(kids) => {
                let (mut i, mut skipped) = (0, 0);
                while i < kids.len() && skipped + kids[i].count <= start {
                    skipped += kids[i].count;
                    i += 1;
                }
                let Some(kid) = kids.get(i) else {
                    return true;
                };
                if !kid.node.walk(start - skipped, rev, f) {
                    return false;
                }
                if rev {
                    kids[..i].iter().rev().all(|k| k.node.walk(k.count.saturating_sub(1), true, f))
                } else {
                    kids[i + 1..].iter().all(|k| k.node.walk(0, false, f))
                }
            }
        }
    }

    fn heap_size(&self) -> usize {
        std::mem::size_of::<Node>()
            + match self {
                Node::Leaf(p) => p.heap_size(),
                Node::Inner(kids) => {
                    kids.capacity() * std::mem::size_of::<Kid>()
                        + kids.iter().map(|k| k.bound.member.heap_size() + k.node.heap_size()).sum::<usize>()
                }
            }
    }
}

/// After a removal below `kids[i]`: drops it when empty, else merges it
/// with a neighbour when it got small and they fit together.
fn fix(kids: &mut Vec<Kid>, i: usize) {
    let Some(kid) = kids.get(i) else {
        return;
    };
    if kid.count == 0 {
        if kids.len() > 1 {
            kids.remove(i);
        }
        return;
    }
    if !kid.node.underfull() {
        return;
    }
    if i > 0 && kids[i - 1].node.fits_with(&kids[i].node) {
        merge(kids, i - 1);
    } else if i + 1 < kids.len() && kids[i].node.fits_with(&kids[i + 1].node) {
        merge(kids, i);
    }
}

/// Moves `kids[i + 1]` into `kids[i]` (same depth, checked by `fits_with`).
fn merge(kids: &mut Vec<Kid>, i: usize) {
    let right = kids.remove(i + 1);
    let Kid { node, count, bound } = right;
    let left = &mut kids[i];
    left.count += count;
    match (&mut *left.node, *node) {
        (Node::Leaf(a), Node::Leaf(b)) => a.append(&b),
        (Node::Inner(a), Node::Inner(mut b)) => {
            // The right node's own first bound was unused; its bound in the
            // parent is valid inside the merged node.
            if let Some(first) = b.first_mut() {
                first.bound = bound;
            }
            a.append(&mut b);
        }
        _ => debug_assert!(false, "merging nodes of different depths"),
    }
}

#[derive(Clone)]
pub struct Tree {
    root: Node,
    len: usize,
    index: Index,
}

impl Default for Tree {
    fn default() -> Self {
        Tree { root: Node::Leaf(Pack::new()), len: 0, index: Index::default() }
    }
}

impl Tree {
    /// Builds from entries in strictly increasing (score, member) order,
    /// filling every node.
    pub fn from_sorted<'a>(items: impl Iterator<Item = (f64, &'a [u8])>, len_hint: usize) -> Tree {
        let mut tree = Tree::default();
        tree.index.reserve(len_hint);
        let mut level: Vec<Kid> = Vec::new();
        let mut leaf = Pack::new();
        for (score, member) in items {
            let full = leaf.bytes() + entry_len(score, member) > LEAF_BYTES || leaf.len() >= LEAF_ITEMS;
            if full && !leaf.is_empty() {
                level.push(leaf_kid(std::mem::take(&mut leaf)));
            }
            leaf.push(score, member);
            tree.index.insert(member, score);
            tree.len += 1;
        }
        if !leaf.is_empty() || level.is_empty() {
            level.push(leaf_kid(leaf));
        }
        while level.len() > 1 {
            let mut upper = Vec::with_capacity(level.len().div_ceil(FANOUT));
            let mut rest = level.into_iter().peekable();
            while rest.peek().is_some() {
                let kids: Vec<Kid> = rest.by_ref().take(FANOUT).collect();
                let count = kids.iter().map(|k| k.count).sum();
                let bound = kids.first().map_or_else(Bound::lowest, |k| k.bound.clone());
                upper.push(Kid { node: Box::new(Node::Inner(kids)), count, bound });
            }
            level = upper;
        }
        if let Some(top) = level.pop() {
            tree.root = *top.node;
        }
        tree
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Rank of the key, if present.
    fn locate(&self, score: f64, member: &[u8]) -> Option<usize> {
        let before = at_or_before(score, member);
        let mut node = &self.root;
        let mut rank = 0;
        loop {
            match node {
                Node::Leaf(pack) => return pack.index_of(score, member).map(|i| rank + i),
                Node::Inner(kids) => {
                    let i = route(kids, &before);
                    rank += kids[..i].iter().map(|k| k.count).sum::<usize>();
                    node = &kids.get(i)?.node;
                }
            }
        }
    }

    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.index.find(member, |score| self.locate(score, member).is_some())
    }

    /// (rank, score) of a member.
    pub fn rank(&self, member: &[u8]) -> Option<(usize, f64)> {
        let rank = Cell::new(0);
        let score = self.index.find(member, |score| match self.locate(score, member) {
            Some(r) => {
                rank.set(r);
                true
            }
            None => false,
        })?;
        Some((rank.get(), score))
    }

    /// Adds a member known to be absent.
    pub fn insert(&mut self, score: f64, member: &[u8]) {
        let edge = Edge { left: true, right: true };
        let split = match self.root.insert(score, member, edge) {
            Ok(split) => split,
            Err(()) => return,
        };
        self.len += 1;
        self.index.insert(member, score);
        if let Some((bound, node, count)) = split {
            let old = std::mem::replace(&mut self.root, Node::Inner(Vec::new()));
            let left = Kid { node: Box::new(old), count: self.len - count, bound: Bound::lowest() };
            self.root = Node::Inner(vec![left, Kid { node, count, bound }]);
        }
    }

    /// Removes a member; its score if it was present.
    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        let score = self.score(member)?;
        self.remove_key(score, member);
        Some(score)
    }

    fn remove_key(&mut self, score: f64, member: &[u8]) {
        if self.root.remove(score, member) {
            self.len -= 1;
            self.index.remove(member, score);
            self.index.maybe_shrink();
            self.settle();
        }
    }

    /// Moves a present member from score `old` to `new`.
    pub fn rescore(&mut self, member: &[u8], old: f64, new: f64) {
        if self.root.remove(old, member) {
            self.settle();
            let edge = Edge { left: true, right: true };
            if let Ok(Some((bound, node, count))) = self.root.insert(new, member, edge) {
                let old_root = std::mem::replace(&mut self.root, Node::Inner(Vec::new()));
                let left = Kid { node: Box::new(old_root), count: self.len - count, bound: Bound::lowest() };
                self.root = Node::Inner(vec![left, Kid { node, count, bound }]);
            }
            self.index.rescore(member, old, new);
        }
    }

    /// Collapses a root left with one child (or none).
    fn settle(&mut self) {
        loop {
            match &mut self.root {
                Node::Inner(kids) if kids.len() <= 1 => {
                    self.root = match kids.pop() {
                        Some(kid) => *kid.node,
                        None => Node::Leaf(Pack::new()),
                    }
                }
                _ => return,
            }
        }
    }

    /// How many leading elements satisfy `before` (true for a prefix).
    pub fn count_before(&self, before: &dyn Fn(f64, &[u8]) -> bool) -> usize {
        let mut node = &self.root;
        let mut count = 0;
        loop {
            match node {
                Node::Leaf(pack) => return count + pack.count_while(before),
                Node::Inner(kids) => {
                    let i = route(kids, before);
                    count += kids[..i].iter().map(|k| k.count).sum::<usize>();
                    match kids.get(i) {
                        Some(k) => node = &k.node,
                        None => return count,
                    }
                }
            }
        }
    }

    /// The element of rank `rank`.
    pub fn nth(&self, mut rank: usize) -> Option<(f64, &[u8])> {
        let mut node = &self.root;
        loop {
            match node {
                Node::Leaf(pack) => return pack.nth(rank),
                Node::Inner(kids) => {
                    let mut next = None;
                    for k in kids {
                        if rank < k.count {
                            next = Some(&k.node);
                            break;
                        }
                        rank -= k.count;
                    }
                    node = next?;
                }
            }
        }
    }

    pub fn walk<'a>(&'a self, start: usize, rev: bool, f: &mut dyn FnMut(f64, &'a [u8]) -> bool) {
        if start < self.len {
            self.root.walk(start, rev, f);
        }
    }

    /// Removes ranks `lo..hi`; returns how many went.
    pub fn remove_ranks(&mut self, lo: usize, hi: usize) -> usize {
        let hi = hi.min(self.len);
        if lo >= hi {
            return 0;
        }
        let Tree { root, index, .. } = self;
        root.remove_ranks(lo, hi, &mut |score, member| index.remove(member, score));
        self.len -= hi - lo;
        self.index.maybe_shrink();
        self.settle();
        hi - lo
    }

    pub fn heap_size(&self) -> usize {
        self.root.heap_size() + self.index.heap_size()
    }

    /// Checks every structural invariant (tests).
    #[doc(hidden)]
    pub fn check(&self) -> Result<(), String> {
        fn visit(node: &Node, depth: usize, leaf_depth: &mut Option<usize>) -> Result<usize, String> {
            match node {
                Node::Leaf(p) => {
                    if *leaf_depth.get_or_insert(depth) != depth {
                        return Err("leaves at different depths".into());
                    }
                    Ok(p.len())
                }
                Node::Inner(kids) => {
                    let mut total = 0;
                    for (i, k) in kids.iter().enumerate() {
                        let n = visit(&k.node, depth + 1, leaf_depth)?;
                        if n != k.count {
                            return Err(format!("count {} but {} below", k.count, n));
                        }
                        if i > 0 {
                            let prev = &kids[i - 1];
                            let mut last = None;
                            prev.node.walk(prev.count.saturating_sub(1), true, &mut |s, m| {
                                last = Some((s, m.to_vec()));
                                false
                            });
                            if let Some((s, m)) = last {
                                if cmp_key(s, &m, k.bound.score, &k.bound.member) != Ordering::Less {
                                    return Err("bound not above the previous child's keys".into());
                                }
                            }
                            let mut first = None;
                            k.node.walk(0, false, &mut |s, m| {
                                first = Some((s, m.to_vec()));
                                false
                            });
                            if let Some((s, m)) = first {
                                if cmp_key(k.bound.score, &k.bound.member, s, &m) == Ordering::Greater {
                                    return Err("bound above its child's first key".into());
                                }
                            }
                        }
                        total += n;
                    }
                    Ok(total)
                }
            }
        }
        let n = visit(&self.root, 0, &mut None)?;
        if n != self.len {
            return Err(format!("len {} but {} elements", self.len, n));
        }
        let mut prev: Option<(f64, Vec<u8>)> = None;
        let mut ordered = true;
        self.walk(0, false, &mut |s, m| {
            if let Some((ps, pm)) = &prev {
                ordered &= cmp_key(*ps, pm, s, m) == Ordering::Less;
            }
            prev = Some((s, m.to_vec()));
            true
        });
        if !ordered {
            return Err("elements out of order".into());
        }
        Ok(())
    }
}

fn leaf_kid(pack: Pack) -> Kid {
    let bound = pack.first().map_or_else(Bound::lowest, |(s, m)| Bound::new(s, m));
    Kid { count: pack.len(), node: Box::new(Node::Leaf(pack)), bound }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deep trees under random inserts, rescores and removals (single and by
    /// rank ranges) stay consistent with a sorted model.
    #[test]
    fn deep_tree_agrees_with_a_sorted_model() {
        let mut tree = Tree::default();
        let mut model: std::collections::BTreeMap<Vec<u8>, f64> = Default::default();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..60_000 {
            let r = next();
            let member = format!("m{}", (r >> 20) % 30_000).into_bytes();
            let score = ((r >> 40) % 500) as f64 / 4.0;
            match (r % 10, model.get(&member).copied()) {
                (0..=5, None) => {
                    tree.insert(score, &member);
                    model.insert(member, score);
                }
                (0..=5, Some(old)) | (6, Some(old)) => {
                    tree.rescore(&member, old, score);
                    model.insert(member, score);
                }
                (7..=8, Some(_)) => {
                    assert_eq!(tree.remove(&member), model.remove(&member));
                }
                (9, _) if round % 50 == 0 && !model.is_empty() => {
                    let lo = (next() as usize) % model.len();
                    let hi = (lo + (next() as usize) % 300).min(model.len());
                    let mut sorted: Vec<(f64, Vec<u8>)> = model.iter().map(|(m, s)| (*s, m.clone())).collect();
                    sorted.sort_by(|a, b| cmp_key(a.0, &a.1, b.0, &b.1));
                    for (_, m) in &sorted[lo..hi] {
                        model.remove(m);
                    }
                    assert_eq!(tree.remove_ranks(lo, hi), hi - lo);
                }
                _ => assert_eq!(tree.score(&member), model.get(&member).copied()),
            }
            if round % 5000 == 0 {
                tree.check().unwrap();
            }
        }
        tree.check().unwrap();
        assert!(matches!(&tree.root, Node::Inner(kids) if kids.iter().any(|k| matches!(*k.node, Node::Inner(_)))));
        let mut sorted: Vec<(f64, Vec<u8>)> = model.iter().map(|(m, s)| (*s, m.clone())).collect();
        sorted.sort_by(|a, b| cmp_key(a.0, &a.1, b.0, &b.1));
        for (rank, (s, m)) in sorted.iter().enumerate().step_by(97) {
            assert_eq!(tree.rank(m), Some((rank, *s)));
            assert_eq!(tree.nth(rank), Some((*s, &m[..])));
        }
        let all = tree.len();
        assert_eq!(tree.remove_ranks(0, all), all);
        tree.check().unwrap();
        assert!(tree.is_empty());
    }
}
