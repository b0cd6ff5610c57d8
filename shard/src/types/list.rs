//! Lists: a deque of small packed nodes (the shape of Redis's quicklist of
//! listpacks). Elements use the canonical element codec of `pack`, so small
//! integers take one or two bytes. A node holds up to `list-max-listpack-size`
//! elements (positive) or bytes (negative: -1 = 4 KB ... -5 = 64 KB).

use super::pack::{decode, Enc, Item, Pack};
use std::collections::VecDeque;

#[derive(Clone, Default, PartialEq)]
pub struct List {
    nodes: VecDeque<Pack>,
    len: usize,
}

/// How full a node may get, from `list-max-listpack-size`.
#[derive(Clone, Copy, Debug)]
pub struct Fill(pub i64);

impl Fill {
    fn fits(self, node: &Pack, extra: usize) -> bool {
        match self.0 {
            n if n > 0 => node.count() < n as usize,
            n => {
                let limit = 4096usize << ((-n).clamp(1, 5) - 1);
                node.bytes() + extra <= limit
            }
        }
    }
}

impl List {
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The packed nodes, front to back (the RDB encoder writes one listpack
    /// per node, like Redis's quicklist).
    pub fn nodes(&self) -> impl Iterator<Item = &Pack> + '_ {
        self.nodes.iter()
    }

    pub fn heap_size(&self) -> usize {
        self.nodes.iter().map(Pack::heap_size).sum::<usize>() + self.nodes.capacity() * std::mem::size_of::<Pack>()
    }

    pub fn push_back(&mut self, value: &[u8], fill: Fill) {
        let e = Enc::new(value);
        match self.nodes.back_mut() {
            Some(node) if fill.fits(node, e.len()) => node.push(&e),
            _ => {
                let mut node = Pack::default();
                node.push(&e);
                self.nodes.push_back(node);
            }
        }
        self.len += 1;
    }

    pub fn push_front(&mut self, value: &[u8], fill: Fill) {
        let e = Enc::new(value);
        match self.nodes.front_mut() {
            Some(node) if fill.fits(node, e.len()) => node.insert(0, &e),
            _ => {
                let mut node = Pack::default();
                node.push(&e);
                self.nodes.push_front(node);
            }
        }
        self.len += 1;
    }

    pub fn pop_front(&mut self) -> Option<Vec<u8>> {
        let node = self.nodes.front_mut()?;
        let value = decode(node.at(0)?).to_vec();
        node.remove(0, 1);
        if node.count() == 0 {
            self.nodes.pop_front();
        }
        self.len -= 1;
        Some(value)
    }

    pub fn pop_back(&mut self) -> Option<Vec<u8>> {
        let node = self.nodes.back_mut()?;
        let pos = node.nth_pos(node.count() - 1)?;
        let value = decode(node.at(pos)?).to_vec();
        node.remove(pos, 1);
        if node.count() == 0 {
            self.nodes.pop_back();
        }
        self.len -= 1;
        Some(value)
    }

    /// (node, byte offset) of element `index` (0-based, in range).
    fn locate(&self, index: usize) -> Option<(usize, usize)> {
        if index >= self.len {
            return None;
        }
        // Walk from the nearer end.
        if index < self.len / 2 {
            let mut i = index;
            for (n, node) in self.nodes.iter().enumerate() {
                if i < node.count() {
                    return Some((n, node.nth_pos(i)?));
                }
                i -= node.count();
            }
        } else {
            let mut from_end = self.len - 1 - index;
            for (n, node) in self.nodes.iter().enumerate().rev() {
                if from_end < node.count() {
                    return Some((n, node.nth_pos(node.count() - 1 - from_end)?));
                }
                from_end -= node.count();
            }
        }
        None
    }

    pub fn get(&self, index: usize) -> Option<Item<'_>> {
        let (n, pos) = self.locate(index)?;
        Some(decode(self.nodes[n].at(pos)?))
    }

    /// Replaces element `index`; false when out of range.
    pub fn set(&mut self, index: usize, value: &[u8]) -> bool {
        match self.locate(index) {
            Some((n, pos)) => {
                self.nodes[n].replace(pos, &Enc::new(value));
                true
            }
            None => false,
        }
    }

    /// Elements from the front.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Item<'_>> + '_ {
        self.nodes.iter().flat_map(|node| {
            let offsets = node.offsets();
            offsets.into_iter().filter_map(move |p| node.at(p).map(decode))
        })
    }

    /// Elements `start..=end` (in range, start <= end).
    pub fn range(&self, start: usize, end: usize) -> impl Iterator<Item = Item<'_>> + '_ {
        self.iter().skip(start).take(end + 1 - start)
    }

    /// Rebuilds the list from `items` (for the operations that rewrite it:
    /// LINSERT, LREM, LTRIM).
    fn rebuild<'a>(items: impl Iterator<Item = Item<'a>>, fill: Fill) -> List {
        let mut out = List::new();
        let mut scratch = itoa::Buffer::new();
        for item in items {
            out.push_back(item.bytes(&mut scratch), fill);
        }
        out
    }

    /// LINSERT: inserts `value` before or after the first `pivot`. Returns
    /// false when the pivot is not in the list.
    pub fn insert(&mut self, pivot: &[u8], before: bool, value: &[u8], fill: Fill) -> bool {
        let pivot = Item::arg(pivot);
        let Some(at) = self.iter().position(|e| e == pivot) else {
            return false;
        };
        let at = if before { at } else { at + 1 };
        let value = Item::arg(value);
        let rebuilt = {
            let head = self.iter().take(at);
            let tail = self.iter().skip(at);
            List::rebuild(head.chain(std::iter::once(value)).chain(tail), fill)
        };
        *self = rebuilt;
        true
    }

    /// LREM: removes up to `count` elements equal to `value` from the head
    /// (count > 0), from the tail (count < 0), or all (0). Returns how many.
    pub fn remove(&mut self, count: i64, value: &[u8], fill: Fill) -> usize {
        let value = Item::arg(value);
        let matches: Vec<usize> = self.iter().enumerate().filter(|(_, e)| *e == value).map(|(i, _)| i).collect();
        let limit = if count == 0 { usize::MAX } else { count.unsigned_abs() as usize };
        let doomed: Vec<usize> = if count < 0 {
            matches.iter().rev().take(limit).copied().collect()
        } else {
            matches.into_iter().take(limit).collect()
        };
        if doomed.is_empty() {
            return 0;
        }
        let doomed_set: std::collections::HashSet<usize> = doomed.iter().copied().collect();
        let rebuilt =
            List::rebuild(self.iter().enumerate().filter(|(i, _)| !doomed_set.contains(i)).map(|(_, e)| e), fill);
        *self = rebuilt;
        doomed.len()
    }

    /// LTRIM to `start..=end` (in range), or empty when `None`.
    pub fn trim(&mut self, keep: Option<(usize, usize)>, fill: Fill) {
        let rebuilt = match keep {
            None => List::new(),
            Some((s, e)) => List::rebuild(self.range(s, e), fill),
        };
        *self = rebuilt;
    }
}

impl std::fmt::Debug for List {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(l: &List) -> Vec<Vec<u8>> {
        l.iter().map(|e| e.to_vec()).collect()
    }

    #[test]
    fn deque_operations_across_nodes() {
        for fill in [Fill(3), Fill(-2)] {
            let mut l = List::new();
            let mut model = VecDeque::new();
            for i in 0..50 {
                let v = format!("v{i}").into_bytes();
                if i % 3 == 0 {
                    l.push_front(&v, fill);
                    model.push_front(v);
                } else {
                    l.push_back(&v, fill);
                    model.push_back(v);
                }
            }
            assert_eq!(items(&l), model.iter().cloned().collect::<Vec<_>>());
            assert_eq!(l.get(7).map(|e| e.to_vec()), model.get(7).cloned());
            assert!(l.set(49, b"last"));
            model[49] = b"last".to_vec();
            assert_eq!(l.pop_back(), model.pop_back());
            assert_eq!(l.pop_front(), model.pop_front());
            assert_eq!(l.len(), model.len());
            assert!(l.insert(b"v4", true, b"x", fill));
            let at = model.iter().position(|e| e == b"v4").unwrap();
            model.insert(at, b"x".to_vec());
            assert_eq!(items(&l), model.iter().cloned().collect::<Vec<_>>());
            assert_eq!(l.iter().next_back().map(|e| e.to_vec()), model.back().cloned());
        }
    }
}
