//! The replies of one read batch, in request order. Replies of commands run
//! on this core are written straight into `out`; once a command goes to
//! another core, the rest of the batch is recorded as parts (byte ranges of
//! `out`, remote replies, merges of split commands) and assembled when the
//! remote replies are in. One batch per destination core per read.

use crate::coordinator::locks::UnitId;
use crate::coordinator::unit::LastShard;
use crate::core::{Core, CoreStats};
use crate::mesh::{Batch, BatchReply, Request, Response};
use crate::resp::skip_value;
use shard::{Args, CommandSpec, Merge};
use std::rc::Rc;

#[derive(Clone, Copy)]
enum Piece {
    Local(u32, u32),
    Remote(u16, u32),
}

enum Part {
    /// CLIENT REPLY: the replies of the parts that follow are dropped
    /// (true) or kept (false).
    Mute(bool),
    Bytes(u32, u32),
    One(Piece),
    /// `pieces` and `keys` are ranges of `Pipeline::pieces` / `key_shards`.
    Merge {
        merge: Merge,
        pieces: (u32, u32),
        keys: (u32, u32),
    },
    /// A command's end: its own invalidations from other cores follow it.
    CommandEnd,
}

pub struct Pipeline {
    pub out: Vec<u8>,
    /// Where parts begin in `out`; `None` while everything is in order.
    parts_from: Option<usize>,
    parts: Vec<Part>,
    pieces: Vec<(u16, Piece)>,
    key_shards: Vec<u16>,
    /// One batch per shard, allocated with the connection's first remote
    /// command (an idle connection that never had one holds none).
    outgoing: Vec<Batch>,
    shards: u16,
    /// While a flush is under way (`flush_some`): the bytes `Part::Bytes`
    /// and `Piece::Local` point at, the next part to move into `out`, the
    /// latest reply from each shard and the rest of its batch still to run.
    held: Vec<u8>,
    next_part: usize,
    replies: Vec<Option<BatchReply>>,
    rests: Vec<Option<Batch>>,
    /// The shards whose rest the next round sends.
    stalled: Vec<u16>,
    ranges: Vec<(u32, u32)>,
    /// The coordinator unit the connection is running, if any: its batches
    /// pass its own locks.
    pub unit: Option<UnitId>,
    /// The unit's last shard, still to be locked by its first batch there.
    pub lock_with: Option<LastShard>,
    /// CLIENT TRACKING: the identity the current command runs with.
    pub caller: shard::tracking::Caller,
    /// MONITOR: the current command's line, taken by where it runs.
    pub monitor_line: Option<Box<[u8]>>,
    /// The current command went whole to another core (which counts it).
    pub sent_whole: bool,
    /// Slow-log entries of this connection's commands that ran on other
    /// cores, for the connection to log (`observe.rs`).
    pub slow: Vec<shard::observe::slowlog::Entry>,
    /// CLIENT REPLY OFF/SKIP: the current command's reply is dropped,
    /// wherever it is produced (`set_silent`).
    silent: bool,
    /// While parts are moved into `out`: the last `Part::Mute` seen.
    muted: bool,
    /// CLIENT TRACKING: this connection's own invalidations that came back
    /// with remote replies, by (shard, op), until their reply is placed...
    own: Vec<(u16, u32, shard::tracking::Invalidation)>,
    /// ...and then their pushes, due after the command's reply (Redis's
    /// pending keys, sent once the command is done).
    own_due: Vec<u8>,
}

const SHARD_LOST: &[u8] = b"-ERR shard unavailable (server shutting down)\r\n";

impl Pipeline {
    pub fn new(shards: usize) -> Self {
        Pipeline {
            out: Vec::new(),
            parts_from: None,
            held: Vec::new(),
            next_part: 0,
            replies: Vec::new(),
            rests: Vec::new(),
            stalled: Vec::new(),
            parts: Vec::new(),
            pieces: Vec::new(),
            key_shards: Vec::new(),
            outgoing: Vec::new(),
            shards: shards as u16,
            ranges: Vec::new(),
            unit: None,
            lock_with: None,
            caller: Default::default(),
            monitor_line: None,
            sent_whole: false,
            slow: Vec::new(),
            silent: false,
            muted: false,
            own: Vec::new(),
            own_due: Vec::new(),
        }
    }

    /// A tracking connection's command is done: its own invalidations that
    /// ran elsewhere follow its reply (once that is in).
    pub fn command_end(&mut self) {
        if self.parts_from.is_some() {
            self.parts.push(Part::CommandEnd);
        } else if !self.own_due.is_empty() {
            self.out.append(&mut self.own_due);
        }
    }

    /// CLIENT REPLY: drop (true) or keep the replies of the commands that
    /// follow, local or from other cores. Pushes go through `push_local`.
    pub fn set_silent(&mut self, silent: bool) {
        if silent != self.silent {
            self.silent = silent;
            if self.parts_from.is_some() {
                self.parts.push(Part::Mute(silent));
            }
        }
    }

    pub fn silent(&self) -> bool {
        self.silent
    }

    /// Bytes produced on this core (a local command's reply, an error).
    #[inline]
    pub fn local(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        let start = self.out.len();
        write(&mut self.out);
        if self.silent {
            self.out.truncate(start);
        } else if self.parts_from.is_some() {
            self.parts.push(Part::Bytes(start as u32, self.out.len() as u32));
        }
    }

    /// A push written while a command runs (Pub/Sub's subscribe notices):
    /// sent even under CLIENT REPLY OFF, as Redis's CLIENT_PUSHING.
    pub fn push_local(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        let silent = self.silent;
        self.set_silent(false);
        self.local(write);
        self.set_silent(silent);
    }

    fn batch(&mut self, shard: usize) -> &mut Batch {
        if self.outgoing.is_empty() {
            self.outgoing.resize_with(self.shards as usize, Batch::default);
        }
        &mut self.outgoing[shard]
    }

    fn enter_parts(&mut self) {
        if self.parts_from.is_none() {
            self.parts_from = Some(self.out.len());
            if self.silent {
                self.parts.push(Part::Mute(true));
            }
        }
    }

    /// A whole command for another core.
    pub fn remote<'a>(
        &mut self,
        shard: usize,
        spec: &'static CommandSpec,
        db: usize,
        resp3: bool,
        args: impl Iterator<Item = &'a [u8]>,
    ) {
        self.enter_parts();
        let (caller, line) = (self.caller, self.monitor_line.take());
        let batch = self.batch(shard);
        let op = batch.push(spec, db, resp3, caller, args);
        batch.ops[op as usize].monitor = line;
        batch.ops[op as usize].whole = true;
        self.sent_whole = true;
        self.parts.push(Part::One(Piece::Remote(shard as u16, op)));
    }

    /// A command split over shards: `groups` lists, per shard in shard order,
    /// the argument indexes of its part (after the command name). For
    /// `Merge::ByKey`, `key_shards` gives each key's shard in request order.
    #[allow(clippy::too_many_arguments)]
    pub fn split(
        &mut self,
        core: &Core,
        spec: &'static CommandSpec,
        merge: Merge,
        db: usize,
        resp3: bool,
        now: u64,
        args: Args,
        groups: &[(usize, Vec<usize>)],
        key_shards: &[u16],
    ) {
        self.enter_parts();
        let first_piece = self.pieces.len() as u32;
        for (shard, indexes) in groups {
            let piece = if *shard == core.index {
                self.ranges.clear();
                self.ranges.push(args.ranges()[0]);
                self.ranges.extend(indexes.iter().map(|&i| args.ranges()[i]));
                let start = self.out.len() as u32;
                let args = Args::new(args.buf(), &self.ranges);
                core.execute_local(self.caller, spec, db, resp3, now, args, &mut self.out);
                if let Some(line) = self.monitor_line.take() {
                    core.feed_monitors(&line);
                }
                Piece::Local(start, self.out.len() as u32)
            } else {
                let parts = std::iter::once(args.get(0)).chain(indexes.iter().map(|&i| args.get(i)));
                let (caller, line) = (self.caller, self.monitor_line.take());
                let batch = self.batch(*shard);
                let op = batch.push(spec, db, resp3, caller, parts);
                batch.ops[op as usize].monitor = line;
                Piece::Remote(*shard as u16, op)
            };
            self.pieces.push((*shard as u16, piece));
        }
        let first_key = self.key_shards.len() as u32;
        self.key_shards.extend_from_slice(key_shards);
        self.parts.push(Part::Merge {
            merge,
            pieces: (first_piece, self.pieces.len() as u32),
            keys: (first_key, self.key_shards.len() as u32),
        });
    }

    /// An integer reply summed from `local` (this core's part, already
    /// done) and the replies of the whole command sent to each of `shards`
    /// (PUBLISH reaching the cores with subscribers).
    pub fn sum_with_remote(
        &mut self,
        local: usize,
        shards: &[usize],
        spec: &'static CommandSpec,
        db: usize,
        resp3: bool,
        args: &Args,
    ) {
        self.enter_parts();
        let first_piece = self.pieces.len() as u32;
        let start = self.out.len() as u32;
        self.out.push(b':');
        self.out.extend_from_slice(itoa::Buffer::new().format(local).as_bytes());
        self.out.extend_from_slice(b"\r\n");
        self.pieces.push((u16::MAX, Piece::Local(start, self.out.len() as u32)));
        for &shard in shards {
            let op = self.batch(shard).push(spec, db, resp3, Default::default(), args.iter());
            self.pieces.push((shard as u16, Piece::Remote(shard as u16, op)));
        }
        let keys = self.key_shards.len() as u32;
        self.parts.push(Part::Merge {
            merge: Merge::Sum,
            pieces: (first_piece, self.pieces.len() as u32),
            keys: (keys, keys),
        });
    }

    /// Sends the batches, waits for every remote reply and puts all replies
    /// in order into `out`.
    pub async fn flush(&mut self, core: &Rc<Core>) {
        while self.flush_some(core).await {}
    }

    /// One round of [`flush`](Self::flush): sends what is still to run,
    /// then moves into `out` the replies, in order, up to the first one an
    /// owner has not run yet (it stopped at `REPLY_CAP`). True when more
    /// remain: the caller sends `out` first, then calls again, so a slow
    /// reader holds back the owners instead of piling up their replies.
    pub async fn flush_some(&mut self, core: &Rc<Core>) -> bool {
        let Some(from) = self.parts_from else {
            return false;
        };
        let first_round = self.replies.is_empty();
        // BCAST changes the replies bring are sent with this core's pass.
        let _hold = crate::tracking::hold(core);
        let mut tickets = Vec::new();
        for shard in 0..self.outgoing.len() {
            let batch = if first_round {
                (!self.outgoing[shard].is_empty()).then(|| std::mem::take(&mut self.outgoing[shard]))
            } else {
                // Only a shard whose replies are all used: resending
                // replaces its reply.
                self.stalled.contains(&(shard as u16)).then(|| self.rests[shard].take()).flatten()
            };
            let Some(mut batch) = batch else { continue };
            if first_round {
                batch.unit = self.unit;
                if self.lock_with.as_ref().is_some_and(|(s, ..)| *s == shard) {
                    batch.lock = self.lock_with.take().map(|(_, keys, whole)| Box::new((keys, whole)));
                }
                CoreStats::add(&core.stats.hops_sent, 1);
                CoreStats::add(&core.stats.remote_commands, batch.ops.len() as u64);
            }
            tickets.push((shard, core.mesh.send(shard, Request::Batch(batch)).await));
        }
        if first_round {
            self.held = std::mem::take(&mut self.out);
            self.out.extend_from_slice(&self.held[..from]);
            self.replies.resize_with(self.shards as usize, || None);
            self.rests.resize_with(self.shards as usize, || None);
        }
        self.stalled.clear();
        for (shard, ticket) in tickets {
            self.replies[shard] = match ticket.await {
                Response::Batch(mut r) => {
                    self.rests[shard] = r.rest.take();
                    self.slow.append(&mut r.slow);
                    if let Some(back) = r.tracking.take() {
                        let crate::tracking::Returned { changed, own } = *back;
                        self.own.extend(own.into_iter().map(|(op, inv)| (shard as u16, op, inv)));
                        crate::tracking::returned(core, crate::tracking::Returned { changed, own: Vec::new() }.boxed());
                    }
                    Some(r)
                }
                _ => None,
            };
        }
        let (held, replies, rests) = (&self.held, &self.replies, &self.rests);
        // A piece still to run: its shard's reply stops before it.
        let later = |p: Piece| {
            matches!(p, Piece::Remote(s, op) if rests[s as usize].is_some()
            && !replies[s as usize].as_ref().is_some_and(|r| r.holds(op)))
        };
        let resolve = |p: Piece| -> &[u8] {
            match p {
                Piece::Local(a, b) => &held[a as usize..b as usize],
                Piece::Remote(s, op) => replies[s as usize].as_ref().map_or(SHARD_LOST, |r| r.get(op)),
            }
        };
        while let Some(part) = self.parts.get(self.next_part) {
            match *part {
                Part::Mute(on) => self.muted = on,
                Part::Bytes(a, b) if !self.muted => self.out.extend_from_slice(&held[a as usize..b as usize]),
                Part::Bytes(..) => {}
                Part::One(Piece::Remote(s, op)) if later(Piece::Remote(s, op)) => {
                    self.stalled.push(s);
                    return true;
                }
                Part::One(p) => {
                    if !self.own.is_empty() {
                        own_around(core, &mut self.own, &mut self.out, &mut self.own_due, &[(0, p)]);
                    }
                    if !self.muted {
                        self.out.extend_from_slice(resolve(p));
                    }
                }
                Part::CommandEnd => self.out.append(&mut self.own_due),
                Part::Merge { merge, pieces, keys } => {
                    let pieces = &self.pieces[pieces.0 as usize..pieces.1 as usize];
                    if pieces.iter().any(|&(_, p)| later(p)) {
                        self.stalled.extend(pieces.iter().filter(|&&(_, p)| later(p)).map(|&(s, _)| s));
                        return true;
                    }
                    if !self.own.is_empty() {
                        own_around(core, &mut self.own, &mut self.out, &mut self.own_due, pieces);
                    }
                    if !self.muted {
                        let bytes: Vec<(u16, &[u8])> = pieces.iter().map(|&(s, p)| (s, resolve(p))).collect();
                        let keys = &self.key_shards[keys.0 as usize..keys.1 as usize];
                        merge_replies(merge, &bytes, keys, &mut self.out);
                    }
                }
            }
            self.next_part += 1;
        }
        self.parts_from = None;
        self.muted = false;
        self.next_part = 0;
        self.held = Vec::new();
        self.replies.clear();
        self.rests.clear();
        self.parts.clear();
        self.pieces.clear();
        self.key_shards.clear();
        false
    }

    /// Some replies of this batch come from other cores.
    pub fn has_remote(&self) -> bool {
        self.parts_from.is_some()
    }

    /// Bytes held for this connection's replies: `out`, and while a flush
    /// is under way the local replies and remote replies not yet moved.
    pub fn held_bytes(&self) -> usize {
        self.out.len() + self.held.len() + self.replies.iter().flatten().map(|r| r.data.len()).sum::<usize>()
    }
}

/// CLIENT TRACKING: the own invalidations of a command's remote `pieces`
/// (as they came back with their replies) as Redis orders them around its
/// reply: the eviction's ahead of it, into `out` now; the command's own
/// after it, into `due` (written at the command's end).
fn own_around(
    core: &Rc<Core>,
    own: &mut Vec<(u16, u32, shard::tracking::Invalidation)>,
    out: &mut Vec<u8>,
    due: &mut Vec<u8>,
    pieces: &[(u16, Piece)],
) {
    let mine =
        |s: u16, op: u32| pieces.iter().any(|&(_, p)| matches!(p, Piece::Remote(ps, pop) if ps == s && pop == op));
    if !own.iter().any(|(s, op, _)| mine(*s, *op)) {
        return;
    }
    let (these, rest): (Vec<_>, Vec<_>) = std::mem::take(own).into_iter().partition(|(s, op, _)| mine(*s, *op));
    *own = rest;
    let (before, after): (Vec<_>, Vec<_>) = these.into_iter().map(|(_, _, inv)| inv).partition(|inv| inv.before);
    out.extend(crate::tracking::own_pushes(core, before));
    due.extend(crate::tracking::own_pushes(core, after));
}

/// Splits `*N\r\n` off an array reply: (N, body).
fn array_body(piece: &[u8]) -> Option<(usize, &[u8])> {
    let rest = piece.strip_prefix(b"*")?;
    let nl = rest.iter().position(|&b| b == b'\n')?;
    let n = std::str::from_utf8(&rest[..nl.checked_sub(1)?]).ok()?.parse().ok()?;
    Some((n, &rest[nl + 1..]))
}

fn integer(piece: &[u8]) -> Option<i64> {
    std::str::from_utf8(piece.strip_prefix(b":")?.strip_suffix(b"\r\n")?).ok()?.parse().ok()
}

/// Combines the per-shard replies of a split command into one reply.
pub fn merge_replies(merge: Merge, pieces: &[(u16, &[u8])], key_shards: &[u16], out: &mut Vec<u8>) {
    // An error from any part is the reply, as Redis would have stopped there.
    if let Some((_, err)) = pieces.iter().find(|(_, p)| p.first() == Some(&b'-')) {
        return out.extend_from_slice(err);
    }
    match merge {
        Merge::Sum => {
            let total: i64 = pieces.iter().filter_map(|(_, p)| integer(p)).sum();
            out.push(b':');
            out.extend_from_slice(itoa::Buffer::new().format(total).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Merge::AllOk => out.extend_from_slice(b"+OK\r\n"),
        Merge::Concat => {
            let bodies: Vec<(usize, &[u8])> = pieces.iter().filter_map(|(_, p)| array_body(p)).collect();
            let total: usize = bodies.iter().map(|b| b.0).sum();
            out.push(b'*');
            out.extend_from_slice(itoa::Buffer::new().format(total).as_bytes());
            out.extend_from_slice(b"\r\n");
            for (_, body) in bodies {
                out.extend_from_slice(body);
            }
        }
        Merge::ByKey => {
            let mut cursors: Vec<(u16, &[u8])> =
                pieces.iter().map(|&(s, p)| (s, array_body(p).map_or(&b""[..], |b| b.1))).collect();
            out.push(b'*');
            out.extend_from_slice(itoa::Buffer::new().format(key_shards.len()).as_bytes());
            out.extend_from_slice(b"\r\n");
            for shard in key_shards {
                let Some(cursor) = cursors.iter_mut().find(|(s, _)| s == shard) else {
                    continue;
                };
                let len = skip_value(cursor.1).unwrap_or(cursor.1.len());
                out.extend_from_slice(&cursor.1[..len]);
                cursor.1 = &cursor.1[len..];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merged(merge: Merge, pieces: &[(u16, &[u8])], keys: &[u16]) -> Vec<u8> {
        let mut out = Vec::new();
        merge_replies(merge, pieces, keys, &mut out);
        out
    }

    #[test]
    fn merges_like_one_reply() {
        assert_eq!(merged(Merge::Sum, &[(0, b":2\r\n"), (1, b":3\r\n")], &[]), b":5\r\n");
        assert_eq!(merged(Merge::AllOk, &[(0, b"+OK\r\n"), (1, b"+OK\r\n")], &[]), b"+OK\r\n");
        assert_eq!(merged(Merge::AllOk, &[(0, b"+OK\r\n"), (1, b"-ERR x\r\n")], &[]), b"-ERR x\r\n");
        assert_eq!(
            merged(Merge::Concat, &[(0, b"*1\r\n$1\r\na\r\n"), (1, b"*0\r\n"), (2, b"*1\r\n$1\r\nb\r\n")], &[]),
            b"*2\r\n$1\r\na\r\n$1\r\nb\r\n"
        );
        assert_eq!(
            merged(Merge::ByKey, &[(0, b"*2\r\n$1\r\na\r\n$-1\r\n"), (1, b"*1\r\n$2\r\nbb\r\n")], &[0, 1, 0]),
            b"*3\r\n$1\r\na\r\n$2\r\nbb\r\n$-1\r\n"
        );
    }
}
