//! The replication stream kept on core 0 (a leaf): a deque of blocks with
//! their stream positions. It is Redis 7's shared replication buffer: the
//! backlog for partial resyncs and every replica's pending output at once
//! (a replica's output buffer is the part after its position), so a write
//! is held once however many replicas wait for it.

use super::block::Block;
use std::collections::VecDeque;
use std::sync::Arc;

struct Held {
    /// Stream position (0-based) of the block's first byte.
    start: u64,
    /// Bytes held by the blocks before this one since the deque began.
    held_before: u64,
    block: Arc<Block>,
}

#[derive(Default)]
pub struct Backlog {
    blocks: VecDeque<Held>,
    /// Stream bytes so far: Redis's master_repl_offset.
    pub end: u64,
    /// Bytes held by every block ever pushed (the running sum).
    held_total: u64,
}

impl Backlog {
    /// A backlog whose stream starts after `offset` bytes (a promoted
    /// replica continues its primary's offsets).
    pub fn starting_at(offset: u64) -> Backlog {
        Backlog { end: offset, ..Backlog::default() }
    }

    pub fn push(&mut self, block: Block) {
        let raw = block.raw_len() as u64;
        if raw == 0 {
            return;
        }
        let held = block.held() as u64;
        self.blocks.push_back(Held { start: self.end, held_before: self.held_total, block: Arc::new(block) });
        self.end += raw;
        self.held_total += held;
    }

    /// Position of the first byte still held.
    pub fn first(&self) -> u64 {
        self.blocks.front().map_or(self.end, |h| h.start)
    }

    /// Raw stream bytes held (Redis's repl_backlog_histlen).
    pub fn histlen(&self) -> u64 {
        self.end - self.first()
    }

    /// Bytes in memory for the stream from `pos` on (what a replica at
    /// `pos` is charged for its output buffer), and the raw bytes they
    /// stand for.
    pub fn held_from(&self, pos: u64) -> (u64, u64) {
        match self.index_of(pos) {
            Some(i) => (self.held_total - self.blocks[i].held_before, self.end - pos),
            None => (0, 0),
        }
    }

    /// Bytes in memory for the whole backlog.
    pub fn held(&self) -> u64 {
        self.held_from(self.first()).0
    }

    fn index_of(&self, pos: u64) -> Option<usize> {
        if pos >= self.end || pos < self.first() {
            return None;
        }
        let i = self.blocks.partition_point(|h| h.start <= pos);
        Some(i - 1)
    }

    /// Blocks from `pos` on (the first one's leading bytes before `pos` to
    /// skip), at least one and about `max_raw` bytes of stream.
    pub fn read_from(&self, pos: u64, max_raw: usize) -> Vec<(Arc<Block>, usize)> {
        let mut out = Vec::new();
        let Some(i) = self.index_of(pos) else { return out };
        let mut raw = 0;
        for (n, h) in self.blocks.range(i..).enumerate() {
            let skip = if n == 0 { (pos - h.start) as usize } else { 0 };
            raw += h.block.raw_len() - skip;
            out.push((h.block.clone(), skip));
            if raw >= max_raw {
                break;
            }
        }
        out
    }

    /// Drops blocks that neither the backlog's `size` (raw bytes kept for
    /// partial resyncs) nor a replica (reading from `pinned` on) needs.
    pub fn trim(&mut self, size: u64, pinned: Option<u64>) {
        let keep_from = self.end.saturating_sub(size).min(pinned.unwrap_or(u64::MAX));
        while let Some(h) = self.blocks.front() {
            if h.start + h.block.raw_len() as u64 > keep_from {
                break;
            }
            self.blocks.pop_front();
        }
    }

    /// Whether a replica may continue from `pos` (the next byte it needs).
    pub fn has(&self, pos: u64) -> bool {
        pos == self.end || self.index_of(pos).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(b: &Backlog, pos: u64) -> String {
        let mut out = Vec::new();
        for (block, skip) in b.read_from(pos, usize::MAX) {
            let mut raw = Vec::new();
            block.decode_into(&mut raw).unwrap();
            out.extend_from_slice(&raw[skip..]);
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn reads_from_any_position_and_trims_what_nobody_needs() {
        let mut b = Backlog::starting_at(10);
        for s in ["abc", "defg", "hi"] {
            b.push(Block::raw(s.as_bytes().to_vec()));
        }
        assert_eq!((b.first(), b.end), (10, 19));
        assert_eq!(text(&b, 11), "bcdefghi");
        assert_eq!(text(&b, 13), "defghi");
        assert!(b.has(19) && b.has(10) && !b.has(9) && !b.has(20));
        assert_eq!(b.held_from(14), (6, 5));
        b.trim(4, None);
        assert_eq!(b.first(), 13);
        b.trim(0, Some(17));
        assert_eq!(b.first(), 17);
        b.trim(0, None);
        assert_eq!(b.histlen(), 0);
    }
}
