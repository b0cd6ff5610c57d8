//! Every shard's feed merged into the one ordered replication stream (a
//! leaf: plain data, no I/O).
//!
//! Each shard's items arrive in the order the shard made them. Ordinary
//! items go out in that order, interleaved freely across shards (their keys
//! are disjoint). A coordinator unit's parts are held until every shard it
//! spans has released it, then go out as one MULTI/EXEC. That is safe
//! because of strict two-phase locking:
//! - on a shard, an item between the unit's first part and its end marker
//!   ran while the unit held its keys, so it commutes with the unit;
//! - an item after the end marker may not: the shard's queue stops at the
//!   marker until the unit has gone out;
//! - a unit goes out once its end marker is in every shard's queue and, on
//!   every shard where it wrote, its first part has been reached (whatever
//!   came before it there is out). A queue stopped at another unit's end
//!   never waits on this one in a circle: that would need a unit that
//!   locked a shard after releasing another.
//!
//! A snapshot's cut is a marker on every shard: each queue stops at it
//! until all have reached it, and the stream's offset there is where the
//! snapshot's replica starts.

use super::block::Block;
use std::collections::{HashMap, VecDeque};

/// One item as a shard ships it to the hub.
pub enum Shipped {
    Block(Block),
    UnitPart { unit: u64, bytes: Vec<u8> },
    UnitEnd { unit: u64, shards: u16 },
    Cut(u64),
}

/// What the stream gets next.
pub enum Emitted {
    Block(Block),
    /// A unit's parts, to go out between MULTI and EXEC.
    Unit(Vec<Vec<u8>>),
    /// Snapshot `seq`'s cut is here.
    Cut(u64),
}

/// One shard's items not yet out, with their numbers in the shard's order.
#[derive(Default)]
struct Queue {
    items: VecDeque<Shipped>,
    seqs: VecDeque<u64>,
    /// The next item's number (items taken in so far).
    next: u64,
}

impl Queue {
    fn push(&mut self, item: Shipped) {
        self.items.push_back(item);
        self.seqs.push_back(self.next);
        self.next += 1;
    }

    fn front(&self) -> Option<&Shipped> {
        self.items.front()
    }

    fn pop_front(&mut self) -> Option<(u64, Shipped)> {
        Some((self.seqs.pop_front()?, self.items.pop_front()?))
    }

    fn remove(&mut self, i: usize) -> Option<(u64, Shipped)> {
        Some((self.seqs.remove(i)?, self.items.remove(i)?))
    }
}

#[derive(Default)]
struct UnitState {
    parts: Vec<Vec<u8>>,
    /// (shard, number) of each part taken in but not out yet.
    part_seqs: Vec<(usize, u64)>,
    /// Shards where the unit's parts have started being collected.
    reached: Vec<usize>,
    ends: u16,
    shards: u16,
}

pub struct Merger {
    queues: Vec<Queue>,
    units: HashMap<u64, UnitState>,
}

impl Merger {
    pub fn new(shards: usize) -> Merger {
        Merger { queues: (0..shards).map(|_| Queue::default()).collect(), units: HashMap::new() }
    }

    /// Items of `shard`, in its order.
    pub fn push(&mut self, shard: usize, items: impl IntoIterator<Item = Shipped>) {
        for item in items {
            if let Shipped::UnitEnd { unit, shards } = &item {
                let u = self.units.entry(*unit).or_default();
                u.ends += 1;
                u.shards = *shards;
            }
            self.queues[shard].push(item);
        }
    }

    /// Moves everything that may go out now into `out`, in stream order.
    pub fn drain(&mut self, out: &mut Vec<Emitted>) {
        loop {
            let mut progress = false;
            for s in 0..self.queues.len() {
                progress |= self.advance(s, out);
            }
            progress |= self.cut(out);
            progress |= self.finish_units(out);
            if !progress {
                return;
            }
        }
    }

    /// Pops `shard`'s queue up to a marker it must stop at.
    fn advance(&mut self, shard: usize, out: &mut Vec<Emitted>) -> bool {
        let mut progress = false;
        while let Some(head) = self.queues[shard].front() {
            match head {
                Shipped::Block(_) => {
                    if let Some((_, Shipped::Block(b))) = self.queues[shard].pop_front() {
                        out.push(Emitted::Block(b));
                    }
                }
                Shipped::UnitPart { .. } => {
                    if let Some((seq, Shipped::UnitPart { unit, bytes })) = self.queues[shard].pop_front() {
                        let u = self.units.entry(unit).or_default();
                        if !u.reached.contains(&shard) {
                            u.reached.push(shard);
                        }
                        u.parts.push(bytes);
                        u.part_seqs.push((shard, seq));
                    }
                }
                Shipped::UnitEnd { .. } | Shipped::Cut(_) => return progress,
            }
            progress = true;
        }
        progress
    }

    /// Every queue at the same cut: it goes out, the queues go on.
    fn cut(&mut self, out: &mut Vec<Emitted>) -> bool {
        let seq = match self.queues.first().and_then(|q| q.front()) {
            Some(Shipped::Cut(seq)) => *seq,
            _ => return false,
        };
        if !self.queues.iter().all(|q| matches!(q.front(), Some(Shipped::Cut(s)) if *s == seq)) {
            return false;
        }
        for q in &mut self.queues {
            q.pop_front();
        }
        out.push(Emitted::Cut(seq));
        true
    }

    /// Sends out every unit whose end is everywhere and whose parts can all
    /// be taken.
    fn finish_units(&mut self, out: &mut Vec<Emitted>) -> bool {
        let ready: Vec<u64> = self
            .units
            .iter()
            .filter(|(_, u)| u.shards > 0 && u.ends == u.shards)
            .map(|(&id, _)| id)
            .filter(|&id| self.takeable(id))
            .collect();
        for &id in &ready {
            let mut state = self.units.remove(&id).unwrap_or_default();
            for q in &mut self.queues {
                let mut i = 0;
                while i < q.items.len() {
                    match &q.items[i] {
                        Shipped::UnitPart { unit, .. } if *unit == id => {
                            if let Some((_, Shipped::UnitPart { bytes, .. })) = q.remove(i) {
                                state.parts.push(bytes);
                            }
                        }
                        Shipped::UnitEnd { unit, .. } if *unit == id => {
                            q.remove(i);
                            break;
                        }
                        _ => i += 1,
                    }
                }
            }
            if !state.parts.is_empty() {
                out.push(Emitted::Unit(state.parts));
            }
        }
        !ready.is_empty()
    }

    /// On every shard, the unit's parts still queued come after its first
    /// part was reached (or it has none there).
    fn takeable(&self, id: u64) -> bool {
        let reached = &self.units[&id].reached;
        self.queues.iter().enumerate().all(|(s, q)| {
            reached.contains(&s)
                || !q
                    .items
                    .iter()
                    .take_while(|item| !matches!(item, Shipped::UnitEnd { unit, .. } if *unit == id))
                    .any(|item| matches!(item, Shipped::UnitPart { unit, .. } if *unit == id))
        })
    }

    /// The number of `shard`'s first item not out yet (everything of the
    /// shard before it is in the stream): what WAIT waits for.
    pub fn out_before(&self, shard: usize) -> u64 {
        let q = &self.queues[shard];
        let parts = self.units.values().flat_map(|u| &u.part_seqs).filter(|(s, _)| *s == shard).map(|(_, n)| *n);
        parts.chain(q.seqs.front().copied()).min().unwrap_or(q.next)
    }

    /// Raw bytes held in the queues (waiting behind a unit or a cut).
    pub fn pending(&self) -> usize {
        let queued: usize = self
            .queues
            .iter()
            .flat_map(|q| &q.items)
            .map(|item| match item {
                Shipped::Block(b) => b.held(),
                Shipped::UnitPart { bytes, .. } => bytes.len(),
                _ => 0,
            })
            .sum();
        queued + self.units.values().flat_map(|u| &u.parts).map(Vec::len).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(s: &str) -> Shipped {
        Shipped::Block(Block::raw(s.as_bytes().to_vec()))
    }

    fn part(unit: u64, s: &str) -> Shipped {
        Shipped::UnitPart { unit, bytes: s.as_bytes().to_vec() }
    }

    fn end(unit: u64, shards: u16) -> Shipped {
        Shipped::UnitEnd { unit, shards }
    }

    fn text(out: &[Emitted]) -> Vec<String> {
        out.iter()
            .map(|e| match e {
                Emitted::Block(b) => {
                    let mut v = Vec::new();
                    b.decode_into(&mut v).unwrap();
                    String::from_utf8(v).unwrap()
                }
                Emitted::Unit(parts) => {
                    format!("[{}]", parts.iter().map(|p| String::from_utf8_lossy(p)).collect::<Vec<_>>().join(","))
                }
                Emitted::Cut(seq) => format!("cut{seq}"),
            })
            .collect()
    }

    #[test]
    fn a_unit_waits_for_every_part_and_what_follows_it_waits_for_the_unit() {
        let mut m = Merger::new(2);
        let mut out = Vec::new();
        m.push(0, [block("a"), part(7, "u0"), end(7, 2), block("after0")]);
        m.push(1, [block("b")]);
        m.drain(&mut out);
        assert_eq!(text(&out), ["a", "b"]);
        m.push(1, [part(7, "u1"), block("during1"), end(7, 2), block("after1")]);
        m.drain(&mut out);
        assert_eq!(text(&out), ["a", "b", "during1", "[u0,u1]", "after0", "after1"]);
    }

    #[test]
    fn what_waits_in_the_merge_is_not_out() {
        let mut m = Merger::new(2);
        let mut out = Vec::new();
        m.push(0, [block("a"), part(7, "u0"), end(7, 2), block("after0")]);
        m.drain(&mut out);
        // "a" is out; the unit's part (item 1) and what follows are not.
        assert_eq!((m.out_before(0), m.out_before(1)), (1, 0));
        m.push(1, [part(7, "u1"), end(7, 2)]);
        m.drain(&mut out);
        assert_eq!((m.out_before(0), m.out_before(1)), (4, 2));
    }

    #[test]
    fn units_released_in_different_orders_do_not_wait_on_each_other() {
        // Units 1 and 2 held disjoint keys on both shards at once and were
        // released in opposite orders.
        let mut m = Merger::new(2);
        let mut out = Vec::new();
        m.push(0, [part(1, "1a"), part(2, "2a"), end(1, 2), end(2, 2)]);
        m.push(1, [part(1, "1b"), part(2, "2b"), end(2, 2), end(1, 2)]);
        m.drain(&mut out);
        let mut got = text(&out);
        got.sort();
        assert_eq!(got, ["[1a,1b]", "[2a,2b]"]);
    }

    #[test]
    fn a_cut_goes_out_once_every_shard_reached_it() {
        let mut m = Merger::new(2);
        let mut out = Vec::new();
        m.push(0, [block("a"), Shipped::Cut(3), block("c")]);
        m.drain(&mut out);
        assert_eq!(text(&out), ["a"]);
        m.push(1, [block("b"), Shipped::Cut(3), block("d")]);
        m.drain(&mut out);
        assert_eq!(text(&out), ["a", "b", "cut3", "c", "d"]);
    }

    /// A random strict-2PL history over `shards` shards of 3 keys each:
    /// plain writes, units that lock keys on several shards, write them,
    /// then release shard by shard (never writing after a release).
    /// Returns each shard's items and the writes in execution order.
    fn history(shards: usize, steps: &[(u8, u8, u8)]) -> (Vec<Vec<Shipped>>, Vec<String>) {
        struct Open {
            id: u64,
            keys: Vec<(usize, u8)>,
            left: Vec<usize>,
            released: bool,
        }
        let (mut items, mut executed) = ((0..shards).map(|_| Vec::new()).collect::<Vec<_>>(), Vec::new());
        let mut open: Vec<Open> = Vec::new();
        let mut next = 0u64;
        let held =
            |open: &Vec<Open>, s: usize, k: u8| open.iter().any(|u| u.keys.contains(&(s, k)) && u.left.contains(&s));
        for (n, &(op, a, b)) in steps.iter().enumerate() {
            let (s, k) = (a as usize % shards, b % 3);
            let write = format!("{s}.{k}={n};");
            match op % 4 {
                0 if !held(&open, s, k) => {
                    items[s].push(Shipped::Block(Block::raw(write.clone().into_bytes())));
                    executed.push(write);
                }
                1 if open.len() < 3 => {
                    let other = (s + 1 + b as usize % shards) % shards;
                    let keys: Vec<(usize, u8)> = vec![(s, k), (other, (k + 1) % 3)];
                    if keys.iter().all(|&(s, k)| !held(&open, s, k)) {
                        next += 1;
                        let mut left: Vec<usize> = keys.iter().map(|&(s, _)| s).collect();
                        left.dedup();
                        open.push(Open { id: next, keys, left, released: false });
                    }
                }
                2 if !open.is_empty() => {
                    let u = &open[a as usize % open.len()];
                    let (s, k) = u.keys[b as usize % u.keys.len()];
                    if !u.released && u.left.contains(&s) {
                        let write = format!("{s}.{k}={n};");
                        items[s].push(Shipped::UnitPart { unit: u.id, bytes: write.clone().into_bytes() });
                        executed.push(write);
                    }
                }
                3 if !open.is_empty() => {
                    let i = a as usize % open.len();
                    let u = &mut open[i];
                    let s = u.left.remove(b as usize % u.left.len());
                    let shards_of_unit =
                        u.keys.iter().map(|&(s, _)| s).collect::<std::collections::BTreeSet<_>>().len();
                    items[s].push(Shipped::UnitEnd { unit: u.id, shards: shards_of_unit as u16 });
                    u.released = true;
                    if u.left.is_empty() {
                        open.remove(i);
                    }
                }
                _ => {}
            }
        }
        for u in open {
            let count = u.keys.iter().map(|&(s, _)| s).collect::<std::collections::BTreeSet<_>>().len();
            for s in u.left {
                items[s].push(Shipped::UnitEnd { unit: u.id, shards: count as u16 });
            }
        }
        (items, executed)
    }

    /// Each key's writes, in the order given.
    fn per_key(writes: &[String]) -> std::collections::BTreeMap<String, Vec<String>> {
        let mut keys: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for w in writes.iter().flat_map(|w| w.split(';')).filter(|w| !w.is_empty()) {
            let (k, v) = w.split_once('=').unwrap();
            keys.entry(k.to_string()).or_default().push(v.to_string());
        }
        keys
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
        /// Whatever the shards' histories and however their items arrive,
        /// everything goes out, every key's writes keep their order, and
        /// each unit goes out whole.
        #[test]
        fn the_merged_stream_is_a_serial_order_of_a_2pl_history(
            shards in 2usize..4,
            steps in proptest::collection::vec((0u8..4, proptest::num::u8::ANY, proptest::num::u8::ANY), 0..120),
            chunks in proptest::collection::vec((0usize..4, 1usize..5), 1..200),
        ) {
            let (items, executed) = history(shards, &steps);
            let shown: Vec<Vec<String>> = items.iter().map(|q| q.iter().map(|i| match i {
                Shipped::Block(b) => { let mut v = Vec::new(); b.decode_into(&mut v).unwrap(); String::from_utf8(v).unwrap() }
                Shipped::UnitPart { unit, bytes } => format!("U{unit}:{}", String::from_utf8_lossy(bytes)),
                Shipped::UnitEnd { unit, shards } => format!("E{unit}/{shards}"),
                Shipped::Cut(c) => format!("cut{c}"),
            }).collect()).collect();
            let mut queues: Vec<VecDeque<Shipped>> = items.into_iter().map(VecDeque::from).collect();
            let mut m = Merger::new(shards);
            let mut out = Vec::new();
            // Items arrive in random chunks, then whatever is left.
            let rest = (0..shards).map(|s| (s, usize::MAX));
            for (s, n) in chunks.into_iter().chain(rest) {
                let q = &mut queues[s % shards];
                let take: Vec<Shipped> = (0..n.min(q.len())).filter_map(|_| q.pop_front()).collect();
                m.push(s % shards, take);
                m.drain(&mut out);
            }
            proptest::prop_assert_eq!(m.pending(), 0);
            for s in 0..shards {
                proptest::prop_assert_eq!(m.out_before(s), m.queues[s].next);
            }
            proptest::prop_assert!(m.units.is_empty());
            let emitted: Vec<String> = out
                .iter()
                .map(|e| match e {
                    Emitted::Block(b) => {
                        let mut v = Vec::new();
                        b.decode_into(&mut v).unwrap();
                        String::from_utf8(v).unwrap()
                    }
                    Emitted::Unit(parts) => parts.iter().map(|p| String::from_utf8_lossy(p).into_owned()).collect(),
                    Emitted::Cut(_) => String::new(),
                })
                .collect();
            proptest::prop_assert_eq!(per_key(&emitted), per_key(&executed), "emitted {:?} executed {:?} items {:?}", emitted, executed, shown);
        }
    }

    #[test]
    fn a_unit_with_no_writes_leaves_nothing() {
        let mut m = Merger::new(2);
        let mut out = Vec::new();
        m.push(0, [end(4, 2), block("x")]);
        m.push(1, [end(4, 2)]);
        m.drain(&mut out);
        assert_eq!(text(&out), ["x"]);
        assert_eq!(m.pending(), 0);
    }
}
