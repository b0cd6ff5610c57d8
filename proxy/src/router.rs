//! The router: one parsed command to where it runs. Checks (arity,
//! subcommand, AUTH, MISCONF, cluster redirections, MULTI queuing, unit
//! locks), then this core's shard, a batch for the owner, a split over
//! shards, or a proxy command family (`commands`). Work that must wait
//! for earlier replies comes back as `Deferred` and runs here too, EXEC's
//! queued commands included.

use crate::blocking::{self, BlockWait};
use crate::commands::{self, transactions};
use crate::coordinator::wait_for_release;
use crate::log;
use crate::pause::PauseKind;
use crate::persistence;
use crate::replication::replica::state::refusal;
use crate::session::{Connection, Deferred};
use shard::commands::{arity_error, flags};
use shard::reply::errors::NOAUTH;
use shard::{Args, Route};
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

impl Connection {
    /// Runs what `handle` deferred, after every earlier reply is in: waits
    /// out a unit holding the command's keys, then handles it again.
    pub async fn run_deferred(&mut self, mut deferred: Deferred, args: Args<'_>) -> Option<BlockWait> {
        loop {
            self.pipeline.flush(&self.core).await;
            match deferred {
                Deferred::Locked => {
                    // The unit may have let go while the flush waited: look
                    // again, and park only straight after a check (a release
                    // already past would never wake us). The waits are
                    // not the command's time.
                    self.tally.clock = Instant::now();
                    deferred = self.handle(args)?;
                    if matches!(deferred, Deferred::Locked) {
                        wait_for_release(&self.core).await;
                        self.tally.clock = Instant::now();
                        deferred = self.handle(args)?;
                    }
                }
                Deferred::Paused => {
                    self.pause_wait(&args).await;
                    if self.killed() {
                        self.state.close = true;
                        return None;
                    }
                    deferred = self.handle(args)?;
                }
                Deferred::Command(spec) if spec.name == "exec" => {
                    let from = self.pipeline.out.len();
                    self.tally.clock = Instant::now();
                    let ((), took) = crate::observe::busy(self.exec(args)).await;
                    self.tally.error_counted = false;
                    self.ran(spec, &args, took, Instant::now(), from, false);
                    return None;
                }
                Deferred::Command(spec) => {
                    let from = self.pipeline.out.len();
                    self.tally.error_counted = false;
                    self.tally.elsewhere = Duration::ZERO;
                    let (blocked, took) = crate::observe::busy(commands::run_deferred(self, spec, args)).await;
                    let took = took + self.tally.elsewhere;
                    self.ran(spec, &args, took, Instant::now(), from, blocked.is_some());
                    if self.core.monitored() {
                        commands::monitor::after_deferred(self, spec, &args);
                    }
                    return blocked;
                }
            }
        }
    }

    /// EXEC: `transactions` checks the transaction and takes its unit; the
    /// queued commands then run through this router, each reply as its own
    /// command's, in one array.
    async fn exec(&mut self, args: Args<'_>) {
        let Some(exec) = transactions::exec_begin(self, args).await else {
            if self.core.monitored() {
                commands::monitor::exec_done(self, &args);
            }
            return;
        };
        if let Some(q) = &exec.queued {
            let resp3 = self.state.resp3;
            self.pipeline.local(|out| shard::Reply::new(out, resp3).array(q.commands.len()));
            self.state.in_exec = true;
            for &(spec, first, count) in &q.commands {
                let args = Args::new(&q.data, &q.ranges[first as usize..(first + count) as usize]);
                if let Some(deferred) = self.handle(args) {
                    // Boxed: EXEC reaches itself through the router (refused there).
                    let deferred: Pin<Box<dyn Future<Output = _>>> = Box::pin(self.run_deferred(deferred, args));
                    if let Some(wait) = deferred.await {
                        let timeout_reply = wait.timeout_reply.clone();
                        let mut served = blocking::give_up(self, wait).await;
                        self.unblocked(true);
                        self.tally.clock = Instant::now();
                        // Redis runs these as their non-blocking forms: a null bulk.
                        if served == timeout_reply && matches!(spec.name, "blmove" | "brpoplpush") && !self.state.resp3
                        {
                            served = b"$-1\r\n".to_vec();
                        }
                        self.pipeline.local(|out| out.extend_from_slice(&served));
                    }
                }
            }
            self.state.in_exec = false;
        }
        transactions::exec_end(self, exec).await;
        if self.state.tracking {
            commands::tracking::end_transaction(self);
        }
        if self.core.monitored() {
            commands::monitor::exec_done(self, &args);
        }
    }

    /// While a script on any core runs past `busy-reply-threshold`, Redis's
    /// BUSY for every command but the few it allows (`CMD_ALLOW_BUSY`).
    fn busy_refusal(&self, spec: &shard::CommandSpec) -> Option<&'static str> {
        use crate::scripting::context::BUSY_SCRIPTS;
        use std::sync::atomic::Ordering::Relaxed;
        if BUSY_SCRIPTS.load(Relaxed) == 0 {
            return None;
        }
        let allowed = matches!(
            spec.name,
            "auth"
                | "discard"
                | "function|kill"
                | "function|stats"
                | "hello"
                | "multi"
                | "quit"
                | "reset"
                | "script|kill"
                | "shutdown"
                | "unwatch"
                | "watch"
        );
        let busy = self.core.process.scripts.iter().map(|s| s.running.load(Relaxed)).find(|&r| r != 0)?;
        match (allowed, busy) {
            (true, _) => None,
            (false, 1) => {
                Some("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.")
            }
            (false, _) => {
                Some("BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.")
            }
        }
    }

    /// CLIENT PAUSE holds this command back (Redis's processCommand): every
    /// command under ALL; under WRITE, writes, what may replicate and EXEC
    /// of a transaction holding one of those. Never the commands EXEC
    /// runs; the primary's stream on a replica waits too, as in Redis.
    fn paused(&self, spec: &shard::CommandSpec) -> bool {
        if !self.core.pause.recorded() || self.state.in_exec {
            return false;
        }
        match self.core.pause.kind(self.core.now_ms()) {
            PauseKind::Off => false,
            PauseKind::All => true,
            PauseKind::Write => {
                may_replicate(spec)
                    || (spec.name == "exec"
                        && self.state.multi.as_ref().is_some_and(|q| q.commands.iter().any(|(s, ..)| may_replicate(s))))
            }
        }
    }

    /// Waits while a pause holds this connection's command: until it is
    /// lifted or runs out, or the connection is killed (CLIENT KILL wakes
    /// the pause's waiters). Shown as blocked (flags=b, blocked_clients)
    /// meanwhile; the caller handles the command again.
    pub async fn pause_wait(&mut self, args: &Args<'_>) {
        let core = self.core.clone();
        let key = self.state.registry_key;
        let killed = || core.clients.borrow().list.get(key).is_some_and(|c| c.killed.get());
        self.show_blocked(true, args);
        core.blocked_here.set(core.blocked_here.get() + 1);
        // At most a minute at a time (the caller looks again): a pause of
        // any length never overflows the timer.
        let wait = (core.pause.end_ms().saturating_sub(shard::unix_ms()) + 1).min(60_000);
        let mut timer = Box::pin(glommio::timer::sleep(std::time::Duration::from_millis(wait)));
        std::future::poll_fn(|cx| {
            if killed() || core.pause.kind(shard::unix_ms()) == PauseKind::Off || timer.as_mut().poll(cx).is_ready() {
                return std::task::Poll::Ready(());
            }
            core.pause.park(cx.waker().clone());
            std::task::Poll::Pending
        })
        .await;
        core.blocked_here.set(core.blocked_here.get() - 1);
        self.show_blocked(false, args);
    }

    /// CLIENT LIST's view of a command that waits: flags=b and its
    /// arguments' bytes (argv-mem=) while it does.
    pub fn show_blocked(&self, blocked: bool, args: &Args) {
        if let Some(c) = self.core.clients.borrow_mut().list.get_mut(self.state.registry_key) {
            c.blocked = blocked;
            c.argv_mem = if blocked { args.iter().map(<[u8]>::len).sum() } else { 0 };
            (c.last_cmd, c.db) = (self.last_cmd, self.state.db);
        }
    }

    /// The connection was closed by CLIENT KILL.
    pub fn killed(&self) -> bool {
        self.core.clients.borrow().list.get(self.state.registry_key).is_some_and(|c| c.killed.get())
    }

    /// maxmemory (Redis's processCommand): a `denyoom` command, or anything
    /// queued in MULTI, is refused while used memory is over the limit and
    /// eviction cannot bring it back (EXEC: `transactions::exec_begin`).
    /// This core's shard evicts first, as Redis does before every command.
    pub(crate) fn out_of_memory(&self, spec: &shard::CommandSpec) -> bool {
        let deny = spec.has_flag(flags::DENYOOM)
            || (self.state.multi.is_some() && !matches!(spec.name, "exec" | "discard" | "quit" | "reset"));
        // A pause keeps the dataset as it is: no eviction, no refusal.
        deny && !self.state.master && !self.core.pause.recorded() && self.core.out_of_memory()
    }

    /// Routes one command. Returns the work that must wait for earlier
    /// replies (multi-phase and server-wide commands); what did not wait
    /// is counted in the command statistics (`observe.rs`).
    pub(crate) fn handle(&mut self, args: Args) -> Option<Deferred> {
        let (t0, from) = (self.tally.clock, self.pipeline.out.len());
        self.tally.begin();
        self.pipeline.sent_whole = false;
        let deferred = self.checked(args);
        if deferred.is_none() {
            self.account(&args, t0, from);
        }
        deferred
    }

    fn checked(&mut self, args: Args) -> Option<Deferred> {
        let name = args.get(0);
        let Some(mut spec) = self.core.commands.lookup(name) else {
            if name.eq_ignore_ascii_case(b"host:") || name.eq_ignore_ascii_case(b"post") {
                log::warning("Possible SECURITY ATTACK detected. It looks like somebody is sending POST or Host: commands to Redis. Connection aborted.");
                self.state.close = true;
                return None;
            }
            self.reject(&unknown_command(&args));
            return None;
        };
        self.tally.spec = Some(spec);
        if !spec.arity_ok(args.len()) {
            if spec.name == "exec" {
                // EXECABORT, with or without MULTI, as Redis's rejectCommand.
                return Some(Deferred::Command(spec));
            }
            self.reject(&arity_error(spec.name));
            return None;
        }
        if !spec.subcommands.is_empty() && args.len() >= 2 {
            match spec.subcommand(args.get(1)) {
                Some(sub) => {
                    spec = sub;
                    self.tally.spec = Some(spec);
                }
                None => {
                    self.tally.spec = None;
                    let msg = format!(
                        "ERR unknown subcommand '{}'. Try {} HELP.",
                        truncated(args.get(1), 128),
                        spec.name.to_uppercase()
                    );
                    self.reject(&msg);
                    return None;
                }
            }
            if !spec.arity_ok(args.len()) {
                self.reject(&arity_error(spec.name));
                return None;
            }
        }
        self.last_cmd = spec.name;
        // DEBUG, MODULE LOAD...: their enable-*-command setting decides,
        // before AUTH (Redis's processCommand).
        if let Some(refusal) = commands::debug::protected_refusal(self, spec) {
            self.reject(&refusal);
            return None;
        }
        if !self.state.authenticated && !spec.has_flag(flags::NO_AUTH) && commands::acl::auth_required(self) {
            self.reject(NOAUTH);
            return None;
        }
        // ACL: skipped for users allowed everything while the table is unchanged.
        let acl_changed = self.state.acl_generation != self.core.acl.generation.get();
        if (!self.state.unrestricted || acl_changed) && commands::acl::refused(self, spec, &args) {
            return None;
        }
        if self.out_of_memory(spec) {
            self.reject(shard::reply::errors::OOM);
            return None;
        }
        // Redis refuses writes (and PING) after a failed BGSAVE, or while
        // the AOF cannot be written.
        let (rdb_failed, aof_failing) = (self.core.save.deny_writes.get(), self.core.aof.refusals.any.get());
        // The primary's stream is applied regardless (Redis 7.0 with
        // repl-ignore-disk-write-error; it waits out a busy script too).
        if (rdb_failed || aof_failing) && (spec.has_flag(flags::WRITE) || spec.name == "ping") && !self.state.master {
            match rdb_failed {
                true => self.reject(persistence::MISCONF),
                false => self.reject(&persistence::aof::misconf(&self.core)),
            }
            return None;
        }
        if spec.has_flag(flags::WRITE) && !self.state.master && self.too_few_replicas() {
            self.reject("NOREPLICAS Not enough good replicas to write.");
            return None;
        }
        let replica_mode = self.core.repl.replica.mode.get();
        if replica_mode != 0 && !self.state.master {
            let config = self.core.config();
            let refused = refusal(replica_mode, spec, config.replica_read_only, config.replica_serve_stale_data);
            drop(config);
            if let Some(msg) = refused {
                self.reject(msg);
                return None;
            }
        }
        // RESP2 with subscriptions: Redis's subscribed context.
        if self.state.subscriptions.total() > 0
            && !self.state.resp3
            && commands::pubsub::refused_in_context(self, spec, &args)
        {
            return None;
        }
        if self.cluster && self.redirected(spec, &args) {
            if let Some(q) = &mut self.state.multi {
                q.failed = true;
            }
            return None;
        }
        // EXEC's commands run whatever happens meanwhile (Redis runs them
        // without processCommand's checks): none is refused halfway.
        if let Some(busy) = self.busy_refusal(spec).filter(|_| !self.state.master && !self.state.in_exec) {
            self.reject(busy);
            return None;
        }
        if self.paused(spec) {
            return Some(Deferred::Paused);
        }
        if self.state.multi.is_some() && matches!(spec.name, "shutdown" | "save" | "sync" | "psync") {
            self.reject("ERR Command not allowed inside a transaction");
            return None;
        }
        if self.state.multi.is_some() && !transactions::runs_in_multi(spec) {
            transactions::queue(self, spec, &args);
            return None;
        }
        if !self.core.locks.borrow().is_idle() && self.locked_here(spec, &args) {
            return Some(Deferred::Locked);
        }
        if self.state.tracking {
            commands::tracking::before_command(self);
        }
        if !self.core.monitored() {
            return self.route(spec, args);
        }
        commands::monitor::prepare(self, spec, &args);
        let deferred = self.route(spec, args);
        commands::monitor::finish(self, spec, &args, deferred.is_some());
        deferred
    }

    /// Runs or sends a command that passed every check.
    fn route(&mut self, spec: &'static shard::CommandSpec, args: Args) -> Option<Deferred> {
        self.tally.routed = true;
        let (db, resp3) = (self.state.db, self.state.resp3);
        match spec.route {
            Route::Local => self.run_local(spec, args),
            Route::Keyed => match self.owner_of_keys(spec, &args) {
                Some(shard) if shard == self.core.index => self.run_local(spec, args),
                Some(shard) => self.pipeline.remote(shard, spec, db, resp3, args.iter()),
                None => return Some(Deferred::Command(spec)),
            },
            Route::SplitKeys(merge) => {
                let step = spec.keys.2 as usize;
                if !(args.len() - 1).is_multiple_of(step) {
                    self.reject(&arity_error(spec.name));
                    return None;
                }
                match self.owner_of_keys(spec, &args) {
                    Some(shard) if shard == self.core.index => self.run_local(spec, args),
                    Some(shard) => self.pipeline.remote(shard, spec, db, resp3, args.iter()),
                    // Over several shards: atomically, as a coordinator unit.
                    None if self.pipeline.unit.is_none() => return Some(Deferred::Command(spec)),
                    None => self.split_by_key(spec, merge, args, step),
                }
            }
            Route::AllShards(merge) => {
                if self.core.count == 1 || self.state.shard_port {
                    self.run_local(spec, args);
                } else if spec.has_flag(flags::WRITE) && self.pipeline.unit.is_none() {
                    // FLUSHALL, SWAPDB: every shard at one instant.
                    return Some(Deferred::Command(spec));
                } else {
                    self.split_all(spec, merge, args);
                }
            }
            Route::Proxy => return commands::run_now(self, spec, args),
        }
        None
    }
}

/// What CLIENT PAUSE WRITE holds back: writes and Redis 7.0's
/// `may_replicate` commands (a flag COMMAND INFO hides).
fn may_replicate(spec: &shard::CommandSpec) -> bool {
    spec.has_flag(flags::WRITE)
        || matches!(spec.name, "eval" | "evalsha" | "fcall" | "publish" | "spublish" | "pfcount")
}

fn truncated(b: &[u8], max: usize) -> String {
    String::from_utf8_lossy(&b[..b.len().min(max)]).into_owned()
}

/// Redis's text, quoting up to 128 bytes of arguments.
fn unknown_command(args: &Args) -> String {
    let mut quoted = String::new();
    for a in args.iter().skip(1) {
        if quoted.len() >= 128 {
            break;
        }
        let room = 128 - quoted.len();
        quoted.push_str(&format!("'{}' ", truncated(a, room)));
    }
    format!("ERR unknown command '{}', with args beginning with: {}", truncated(args.get(0), 128), quoted)
}
