//! Running commands on this core's shard: one from a local connection, or
//! a batch another core sent; either way the waiters of keys each command
//! made ready are served right after it (unless a transaction or a script
//! running here holds serving back until it ends).

use crate::coordinator::locks::blocked;
use crate::core::Core;
use crate::mesh::{Batch, BatchReply, REPLY_CAP};
use crate::pubsub::fanout::publish_op;
use shard::commands::flags::WRITE;
use shard::commands::{execute, Ctx};
use shard::observe::slowlog::Entry;
use shard::tracking::Caller;
use shard::{Args, CommandSpec, Reply, Route};
use std::time::Instant;

impl Core {
    /// `execute_local` for a script's command: MONITOR shows it as `lua`
    /// (a client's commands are shown by the router); `caller` is the
    /// script's client (CLIENT TRACKING).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn execute_scripted(
        &self,
        caller: Caller,
        spec: &CommandSpec,
        db: usize,
        resp3: bool,
        now: u64,
        args: Args,
        out: &mut Vec<u8>,
    ) {
        let line =
            if self.monitored() { crate::monitor::line(spec, db, crate::monitor::Origin::Lua, &args) } else { None };
        self.shard.borrow_mut().scripted = true;
        self.execute_local(caller, spec, db, resp3, now, args, out);
        self.shard.borrow_mut().scripted = false;
        if let Some(line) = line {
            self.feed_monitors(&line);
        }
    }

    /// maxmemory's eviction ahead of a write of `caller`'s, run apart so
    /// that the invalidations it raises for `caller` itself reach its push
    /// queue before the command's reply is written (Redis sends them at
    /// once, ahead of it). True when some did.
    pub fn evict_before(&self, caller: Caller, spec: &CommandSpec, now: u64) -> bool {
        let mut shard = self.shard.borrow_mut();
        if shard.config.maxmemory == 0 || !spec.has_flag(WRITE) || !self.locks.borrow().is_idle() {
            return false;
        }
        shard.caller = caller;
        shard.make_room(now);
        shard.caller = Caller::default();
        let invalidated = shard.tracking.as_ref().is_some_and(|t| t.pending());
        drop(shard);
        if invalidated {
            self.send_invalidations();
        }
        invalidated
    }

    /// Runs one command on this core's shard for `caller` (CLIENT
    /// TRACKING), appending its reply to `out`.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn execute_local(
        &self,
        caller: Caller,
        spec: &CommandSpec,
        db: usize,
        resp3: bool,
        now: u64,
        args: Args,
        out: &mut Vec<u8>,
    ) {
        let mut shard = self.shard.borrow_mut();
        shard.caller = caller;
        // maxmemory: evict before a write, never inside a unit's keys.
        if shard.config.maxmemory != 0 && spec.has_flag(WRITE) && self.locks.borrow().is_idle() {
            shard.make_room(now);
        }
        let mut ctx = Ctx { db, now, reply: Reply::new(out, resp3) };
        execute(spec, &mut shard, &mut ctx, args);
        let (ready, notified) = (!shard.ready.is_empty(), shard.notify_mask != 0);
        shard.caller = Caller::default();
        let invalidated = shard.tracking.as_ref().is_some_and(|t| t.pending());
        drop(shard);
        if invalidated {
            self.send_invalidations();
        }
        if ready {
            self.serve_ready();
        }
        if notified {
            crate::notify::drain(self);
        }
    }

    /// Runs a batch sent by another core, from its op `reply.next_op()` on.
    /// Returns false when it stopped at an op whose keys a coordinator unit
    /// holds: the caller waits for a release and calls again. Outside a
    /// unit it also stops (returning true) once the replies pass
    /// `REPLY_CAP`; `reply.next_op()` then says where.
    pub fn execute_batch(&self, batch: &Batch, reply: &mut BatchReply) -> bool {
        let locks = self.locks.borrow();
        let mut shard = self.shard.borrow_mut();
        if reply.ends.is_empty() && batch.first == 0 {
            shard.stats.remote_batches += 1;
        }
        let now = shard::unix_ms();
        // maxmemory: evict before each write (Redis: before each command).
        let evicting = shard.config.maxmemory != 0 && locks.is_idle();
        // CLIENT TRACKING: what the ops raise for the sender's core goes
        // back with the reply (`tracking.rs`).
        let tracking_mark = crate::tracking::mark(self);
        let mut own = Vec::new();
        let mut done = true;
        let capped = batch.unit.is_none();
        let ran_from = reply.next_op();
        // Each whole command's time: from the previous one's end.
        let mut clock = Instant::now();
        let mut look_ahead_at = ran_from;
        for (at, op) in batch.ops.iter().enumerate().skip(ran_from) {
            if capped && reply.data.len() >= REPLY_CAP {
                break;
            }
            if at >= look_ahead_at {
                look_ahead_at = crate::prefetch::batch(&shard, batch, at);
            }
            let args = batch.args(op);
            if !locks.is_idle() && blocked(&locks, op.spec, op.db as usize, &args, batch.unit) {
                done = false;
                break;
            }
            if op.spec.route == Route::Proxy && matches!(op.spec.name, "publish" | "spublish") {
                // PUBLISH / SPUBLISH: this core's subscribers, not the shard
                // (whose configuration the pushes read).
                drop(shard);
                publish_op(self, op.spec, &args, &mut reply.data);
                reply.ends.push(reply.data.len() as u32);
                shard = self.shard.borrow_mut();
                continue;
            }
            let from = reply.data.len();
            shard.caller = op.caller;
            let raised = shard.tracking.as_ref().map_or(0, |t| t.out.len());
            if evicting && op.spec.has_flag(WRITE) {
                shard.make_room(now);
            }
            let mut ctx = Ctx { db: op.db as usize, now, reply: Reply::new(&mut reply.data, op.resp3) };
            execute(op.spec, &mut shard, &mut ctx, args);
            reply.ends.push(reply.data.len() as u32);
            if let Some(t) = shard.tracking.as_mut() {
                own.extend(t.take_own(raised, op.caller.id()).into_iter().map(|inv| (at as u32, inv)));
            }
            let end = Instant::now();
            let usec = end.duration_since(clock).as_micros() as u64;
            let s = &mut *shard;
            if !op.whole {
                // A split command's part: its time, counted once by the sender.
                s.observe.part(op.spec, usec);
            } else if s.observe.ran(&s.config, op.spec, usec, &reply.data[from..], false, false) {
                let redacted = crate::monitor::redacted_args(op.spec, &args);
                reply.slow.push(Entry::new(args.len(), args.iter(), &redacted, usec, end));
            }
            clock = end;
            // Redis serves blocked clients after each command of a
            // pipeline, not once after the batch: a push then a DEL in one
            // batch still hands the push to a waiter.
            if !shard.ready.is_empty() {
                shard.caller = Caller::default();
                drop(shard);
                self.serve_ready();
                shard = self.shard.borrow_mut();
            }
        }
        let notified = shard.notify_mask != 0;
        shard.caller = Caller::default();
        let invalidated = shard.tracking.as_ref().is_some_and(|t| t.pending());
        drop((shard, locks));
        // MONITOR: the lines of what ran, in the order it ran.
        if self.monitored() {
            for op in &batch.ops[ran_from..reply.next_op()] {
                if let Some(line) = &op.monitor {
                    self.feed_monitors(line);
                }
            }
        }
        if invalidated {
            self.send_invalidations();
        }
        let changed = crate::tracking::take_changed(self, tracking_mark);
        if !changed.is_empty() || !own.is_empty() {
            let back = reply.tracking.get_or_insert_with(Default::default);
            back.changed.extend(changed);
            back.own.extend(own);
        }
        self.serve_ready();
        if notified {
            crate::notify::drain(self);
        }
        done
    }

    /// maxmemory's refusal state for a `denyoom` command arriving here:
    /// over the limit with noeviction, or with no shard that has anything
    /// left to evict (each owner evicts before its writes). A replica never
    /// refuses (its primary's writes decide).
    pub fn out_of_memory(&self) -> bool {
        let config = self.config();
        let (max, policy) = (config.maxmemory, config.maxmemory_policy);
        drop(config);
        max != 0
            && self.repl.replica.mode.get() == 0
            && shard::memory::out_of_memory(max, policy == shard::evict::Policy::NoEviction)
    }
}
