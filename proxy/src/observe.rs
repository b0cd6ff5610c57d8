//! A command's statistics on the connection's core: what Redis's call()
//! and rejectCommand record (shard/src/observe/), for the commands the
//! router handles. A command's time runs from the end of the previous
//! one (or the batch's start) to its own end: one clock read per command.
//! A deferred command (one that waits for other cores) counts only the
//! time this core spent running it, not its waits (`busy`), as Redis
//! counts the time its thread was held. A command sent whole to its keys'
//! owner is recorded there (`execute.rs`), which sends a slow one's entry
//! back with its reply so the slow log shows this client's address and
//! name. Commands run by scripts are recorded by the script's host
//! (`scripting/host.rs`).

use crate::session::{Blocked, Connection};
use shard::observe::{is_error, slowlog};
use shard::{Args, CommandSpec};
use std::future::Future;
use std::time::{Duration, Instant};

/// Runs `f`, timing only its polls: the time this core spent on it.
pub async fn busy<F: Future>(f: F) -> (F::Output, Duration) {
    let mut f = std::pin::pin!(f);
    let mut total = Duration::ZERO;
    let out = std::future::poll_fn(|cx| {
        let t = Instant::now();
        let r = f.as_mut().poll(cx);
        total += t.elapsed();
        r
    })
    .await;
    (out, total)
}

/// Unix seconds, as the slow log stamps entries.
fn unix_secs() -> i64 {
    (shard::unix_ms() / 1000) as i64
}

impl Connection {
    /// After the router handled a command without deferring it: records a
    /// rejection, or the command if it ran here. `t0` and `from` are the
    /// command's start and where its reply began in the output.
    #[inline]
    pub fn account(&mut self, args: &Args, t0: Instant, from: usize) {
        if !self.pipeline.slow.is_empty() {
            self.take_remote_slow();
        }
        let spec = self.tally.spec;
        if !self.tally.routed {
            let reply = self.pipeline.out.get(from..).unwrap_or_default();
            if is_error(reply) {
                self.core.shard.borrow_mut().observe.rejected(spec, reply);
            }
            return;
        }
        match spec {
            Some(spec) if !self.pipeline.sent_whole => {
                let now = Instant::now();
                self.ran(spec, args, now.duration_since(t0), now, from, false);
            }
            _ => {}
        }
    }

    /// A command that ran from this core (inline, split, multi-phase or
    /// deferred) for `took`, ending `now`; `blocked`: it waits for data,
    /// its slow-log entry waits.
    pub fn ran(
        &mut self,
        spec: &'static CommandSpec,
        args: &Args,
        took: Duration,
        now: Instant,
        from: usize,
        blocked: bool,
    ) {
        if !self.pipeline.slow.is_empty() {
            self.take_remote_slow();
        }
        self.tally.clock = now;
        let usec = took.as_micros() as u64;
        let reply = self.pipeline.out.get(from..).unwrap_or_default();
        let mut shard = self.core.shard.borrow_mut();
        let s = &mut *shard;
        if self.state.master && is_error(reply) {
            s.observe.unexpected_error_replies += 1;
        }
        let slow = s.observe.ran(&s.config, spec, usec, reply, self.tally.error_counted, blocked);
        if blocked {
            let threshold = s.config.slowlog_log_slower_than;
            let due = threshold >= 0 && usec >= threshold as u64;
            drop(shard);
            let args =
                due.then(|| slowlog::entry_args(args.len(), args.iter(), &crate::monitor::redacted_args(spec, args)));
            self.tally.blocked = Some(Box::new(Blocked { spec, usec, args }));
            return;
        }
        drop(shard);
        if slow {
            let args = slowlog::entry_args(args.len(), args.iter(), &crate::monitor::redacted_args(spec, args));
            self.log_slow(usec, args, now);
        }
    }

    /// A blocked command's wait ended: served, its histogram sample and
    /// slow-log entry (Redis records neither after a timeout).
    pub fn unblocked(&mut self, served: bool) {
        let Some(b) = self.tally.blocked.take() else { return };
        if !served {
            return;
        }
        let slow = {
            let mut shard = self.core.shard.borrow_mut();
            let s = &mut *shard;
            s.observe.unblocked(&s.config, b.spec, b.usec)
        };
        if let (true, Some(args)) = (slow, b.args) {
            self.log_slow(b.usec, args, Instant::now());
        }
    }

    /// Entries of this connection's commands that ran slow on other cores.
    pub fn take_remote_slow(&mut self) {
        for e in std::mem::take(&mut self.pipeline.slow) {
            self.log_slow(e.duration, e.args, e.at);
        }
    }

    fn log_slow(&mut self, usec: u64, args: Vec<Vec<u8>>, at: Instant) {
        let (peer, name) = {
            let clients = self.core.clients.borrow();
            match clients.list.get(self.state.registry_key) {
                Some(c) => (c.addr.to_string(), c.name.clone()),
                None => ("?:0".to_string(), Vec::new()),
            }
        };
        let entry = slowlog::Entry { id: 0, time: unix_secs(), duration: usec, args, peer, name, at };
        let (index, count) = (self.core.index, self.core.count);
        let mut shard = self.core.shard.borrow_mut();
        let s = &mut *shard;
        s.observe.log_slow(&s.config, index, count, entry);
    }
}
