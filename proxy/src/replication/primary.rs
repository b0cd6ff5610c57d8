//! This process as a primary: the state core 0 keeps (a leaf). The merged
//! stream, its backlog, and every replica's link: where it reads, what it
//! acknowledged, what its output buffer holds.

use super::backlog::Backlog;
use super::block::Block;
use super::merge::{Emitted, Merger, Shipped};
use shard::config::{OutputBufferLimit, ReplCompression};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::Waker;
use std::time::Instant;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LinkState {
    /// Waiting for its snapshot.
    WaitBgsave,
    /// Receiving its snapshot.
    SendBulk,
    Online,
}

impl LinkState {
    pub fn name(self) -> &'static str {
        match self {
            LinkState::WaitBgsave => "wait_bgsave",
            LinkState::SendBulk => "send_bulk",
            LinkState::Online => "online",
        }
    }
}

pub struct ReplicaLink {
    /// The replica connection's client id.
    pub id: u64,
    /// Its socket, shut down when it must go (its core's feeder may be
    /// stuck in a send).
    pub fd: i32,
    pub ip: String,
    pub listening_port: u16,
    pub state: LinkState,
    /// Next stream position it is sent from; while it waits for its
    /// snapshot, the position the stream is kept from.
    pub pos: u64,
    /// Offset it acknowledged (REPLCONF ACK) and when.
    pub ack: u64,
    pub ack_at: Instant,
    /// It acknowledged since its resync began: its snapshot is loaded
    /// (until then the stream for it is held compressed).
    pub loaded: bool,
    /// Set when it must be disconnected (output buffer limit).
    pub killed: bool,
    /// Since when its buffer is over the soft limit.
    pub soft_since: Option<Instant>,
    /// The feeder waiting for more stream.
    pub waker: Option<Waker>,
    /// Peak bytes held for it, and the raw bytes they stood for.
    pub peak_held: u64,
    pub peak_raw: u64,
    /// Bytes held for it now, as its connection's core shows them
    /// (CLIENT LIST omem=): written here at every change of the stream.
    pub held: Arc<AtomicU64>,
}

/// Where a group of replicas sharing one snapshot stands
/// (`snapshot_group.rs`).
#[derive(Clone, PartialEq, Debug)]
pub enum Stage {
    /// The leader waits for more replicas before its save starts.
    Gathering,
    Saving,
    /// The snapshot is in `file`, cut at save `seq`.
    Saved {
        seq: u64,
        file: String,
    },
    Failed,
}

/// Replicas sharing one snapshot.
pub struct Group {
    pub id: u64,
    /// The leader's client id: joiners are kept from its stream position.
    pub leader: u64,
    pub stage: Stage,
    /// Members not done with the file yet.
    pub users: u32,
}

#[derive(Default)]
pub struct SyncStats {
    pub full: u64,
    pub partial_ok: u64,
    pub partial_err: u64,
}

pub struct Primary {
    pub replid: String,
    /// The replid this process had before (promoted replica), valid for
    /// partial resyncs up to `second_offset`.
    pub replid2: String,
    pub second_offset: i64,
    pub merger: Merger,
    pub backlog: Backlog,
    pub replicas: Vec<ReplicaLink>,
    /// Recent snapshot cuts: (save seq, stream offset).
    pub cuts: Vec<(u64, u64)>,
    pub stats: SyncStats,
    /// Blocks merged from the shards so far: raw and held bytes (INFO's
    /// ratio).
    pub raw_in: u64,
    pub held_in: u64,
    /// Since when no replica is connected (repl-backlog-ttl).
    pub alone_since: Option<Instant>,
    /// WAIT callers to wake at the next acknowledgement.
    pub ack_waiters: Vec<Waker>,
    /// Replicas sharing a snapshot (`snapshot_group.rs`), and how many
    /// groups were ever started (their ids).
    pub snapshot_groups: Vec<Group>,
    pub groups_started: u64,
    emitted: Vec<Emitted>,
}

/// What a replica's output buffer limit says about it.
pub fn over_limit(limit: &OutputBufferLimit, held: u64, soft_since: &mut Option<Instant>, now: Instant) -> bool {
    if limit.hard > 0 && held >= limit.hard {
        return true;
    }
    if limit.soft > 0 && held >= limit.soft {
        let since = *soft_since.get_or_insert(now);
        return now.duration_since(since).as_secs() >= limit.soft_seconds;
    }
    *soft_since = None;
    false
}

impl Primary {
    pub fn new(shards: usize, replid: String, replid2: String, offset: u64, second_offset: i64) -> Primary {
        Primary {
            replid,
            replid2,
            second_offset,
            merger: Merger::new(shards),
            backlog: Backlog::starting_at(offset),
            replicas: Vec::new(),
            cuts: Vec::new(),
            stats: SyncStats::default(),
            raw_in: 0,
            held_in: 0,
            alone_since: None,
            ack_waiters: Vec::new(),
            snapshot_groups: Vec::new(),
            groups_started: 0,
            emitted: Vec::new(),
        }
    }

    /// A shard's items: merged, appended to the stream.
    pub fn absorb(&mut self, shard: usize, items: Vec<Shipped>, compression: (ReplCompression, i32)) {
        self.merger.push(shard, items);
        self.merger.drain(&mut self.emitted);
        for e in std::mem::take(&mut self.emitted) {
            match e {
                Emitted::Block(b) => self.append(b),
                Emitted::Unit(parts) => {
                    let mut raw = Vec::with_capacity(parts.iter().map(Vec::len).sum::<usize>() + 32);
                    raw.extend_from_slice(b"*1\r\n$5\r\nMULTI\r\n");
                    for p in parts {
                        raw.extend_from_slice(&p);
                    }
                    raw.extend_from_slice(b"*1\r\n$4\r\nEXEC\r\n");
                    self.append(Block::seal(&raw, compression.0, compression.1));
                }
                Emitted::Cut(seq) => {
                    self.cuts.push((seq, self.backlog.end));
                    if self.cuts.len() > 16 {
                        self.cuts.remove(0);
                    }
                }
            }
        }
    }

    /// Appends a block to the stream and wakes the replicas' feeders.
    pub fn append(&mut self, block: Block) {
        self.raw_in += block.raw_len() as u64;
        self.held_in += block.held() as u64;
        self.backlog.push(block);
        for r in &mut self.replicas {
            if let Some(w) = r.waker.take() {
                w.wake();
            }
        }
    }

    /// Applies the output buffer limit to every replica (marking those over
    /// it), records peaks, then drops what no one needs. Returns the links
    /// newly marked (for the log) and their sockets.
    pub fn enforce(&mut self, limit: &OutputBufferLimit, backlog_size: u64, now: Instant) -> Vec<(String, i32)> {
        let mut killed = Vec::new();
        for r in &mut self.replicas {
            let (held, raw) = self.backlog.held_from(r.pos);
            r.held.store(held, Relaxed);
            if held > r.peak_held {
                r.peak_held = held;
                r.peak_raw = raw;
            }
            if !r.killed && over_limit(limit, held, &mut r.soft_since, now) {
                r.killed = true;
                let client = format!(
                    "id={} addr={}:{} flags=S omem={held} state={}",
                    r.id,
                    r.ip,
                    r.listening_port,
                    r.state.name()
                );
                killed.push((client, r.fd));
                if let Some(w) = r.waker.take() {
                    w.wake();
                }
            }
        }
        let pinned = self.replicas.iter().filter(|r| !r.killed).map(|r| r.pos).min();
        self.backlog.trim(backlog_size, pinned);
        killed
    }

    /// Online replicas that acknowledged within `max_lag` seconds.
    pub fn good_replicas(&self, max_lag: u64) -> usize {
        let now = Instant::now();
        self.replicas
            .iter()
            .filter(|r| r.state == LinkState::Online && now.duration_since(r.ack_at).as_secs() <= max_lag)
            .count()
    }

    pub fn link(&mut self, id: u64) -> Option<&mut ReplicaLink> {
        self.replicas.iter_mut().find(|r| r.id == id)
    }

    /// Whether `replid` at `pos` (the next byte the replica needs) can
    /// continue from the backlog.
    pub fn can_continue(&self, replid: &str, pos: u64) -> bool {
        let ours = replid == self.replid || (replid == self.replid2 && (pos as i64) < self.second_offset);
        ours && self.backlog.has(pos)
    }

    pub fn wake_ack_waiters(&mut self) {
        for w in self.ack_waiters.drain(..) {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_soft_limit_cuts_only_after_its_seconds_and_the_hard_one_at_once() {
        let limit = OutputBufferLimit { hard: 100, soft: 50, soft_seconds: 2 };
        let (t0, mut since) = (Instant::now(), None);
        assert!(!over_limit(&limit, 10, &mut since, t0));
        assert!(!over_limit(&limit, 60, &mut since, t0));
        assert!(!over_limit(&limit, 60, &mut since, t0 + Duration::from_secs(1)));
        assert!(over_limit(&limit, 60, &mut since, t0 + Duration::from_secs(2)));
        // Back under the soft limit: the clock starts again.
        assert!(!over_limit(&limit, 10, &mut since, t0 + Duration::from_secs(3)));
        assert!(!over_limit(&limit, 60, &mut since, t0 + Duration::from_secs(4)));
        assert!(over_limit(&limit, 100, &mut None, t0));
        assert!(!over_limit(&OutputBufferLimit::default(), u64::MAX, &mut None, t0));
    }
}
