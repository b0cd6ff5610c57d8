//! The host scripts run against on a core: Redis's checks for commands
//! called from scripts (script.c's scriptCall), then the command on this
//! core's shard, or `cross::remote_call` for keys owned elsewhere.

use super::context::{CallState, Host};
use crate::cluster::Owner;
use crate::coordinator::dispatch::call_blocking;
use crate::core::Core;
use crate::slot::key_slot;
use shard::commands::{flags, Route};
use shard::observe::slowlog::Entry;
use shard::reply::errors::{DB_INDEX, NOT_INTEGER};
use shard::Args;
use std::time::Instant;

pub struct CoreHost<'a> {
    pub core: &'a Core,
    /// Unix ms when the script started: its commands see one clock.
    pub now: u64,
    /// The node of the port the client came in on (per-core cluster mode).
    pub port_node: Option<u16>,
    /// How far it may reach into other shards, and how far it tried.
    pub reach: super::cross::Reach,
    /// The caller's ACL user when restricted.
    pub user: Option<std::rc::Rc<crate::acl::user::User>>,
    /// The caller's CLIENT TRACKING identity: its writes are the
    /// client's (NOLOOP), and each read-only command remembers the
    /// script's declared keys for it, as Redis 7.0 does (the keys of the
    /// EVAL, not of the command).
    pub tracking: shard::tracking::Caller,
    /// The keys the script declared (KEYS).
    pub declared: &'a [&'a [u8]],
}

fn error_reply(msg: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(msg.len() + 3);
    super::context::error_line(msg, &mut out);
    out
}

impl CoreHost<'_> {
    /// Redis's `scriptVerifyACL`: refused and logged (context "lua").
    fn verify_acl(&self, user: &crate::acl::user::User, spec: &shard::CommandSpec, args: &Args) -> Result<(), String> {
        use crate::acl::selector::Denied;
        let Some(id) = crate::acl::commands::registry().id_of(spec) else { return Ok(()) };
        let Err(denied) = user.check(id, args) else { return Ok(()) };
        let (reason, object, text) = match denied {
            Denied::Command => ("command", spec.name.as_bytes(), "can't run this command or subcommand"),
            Denied::Key(i) => {
                ("key", args.get(i), "can't access at least one of the keys mentioned in the command arguments")
            }
            Denied::Channel(i) => ("channel", args.get(i), "can't publish to the channel mentioned in the command"),
        };
        let entry = crate::acl::log::Entry::now(reason, "lua", object.to_vec(), user.name.clone(), String::new());
        let max = self.core.config().acllog_max_len as usize;
        self.core.acl.log.borrow_mut().add(entry, max);
        Err(format!("The user executing the script {text}"))
    }

    /// Redis Cluster's rules for a script's keys.
    fn cluster_check(&self, spec: &shard::CommandSpec, args: &Args, call: &mut CallState) -> Result<(), String> {
        let view = self.core.cluster();
        if !view.enabled() {
            return Ok(());
        }
        let mut slot = None;
        for i in spec.key_indexes(args) {
            let s = key_slot(args.get(i));
            if slot.is_some_and(|first| first != s) {
                return Err("Script attempted to access a non local key in a cluster node".into());
            }
            slot = Some(s);
        }
        let Some(slot) = slot else { return Ok(()) };
        let local = match view.owner(slot) {
            Owner::Local { node, .. } => self.port_node.is_none_or(|p| p == node),
            Owner::Remote { .. } => false,
        };
        if !local {
            return Err("Script attempted to access a non local key in a cluster node".into());
        }
        if !call.allow_cross_slot {
            match call.slot {
                None => call.slot = Some(slot),
                Some(first) if first != slot => {
                    return Err("Script attempted to access keys that do not hash to the same slot".into())
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// A read-only command ran: the declared keys are remembered for a
    /// tracking caller on their owners (other shards only when the script
    /// holds every shard, where it may call into them).
    fn remember_keys(&self) {
        let who = self.tracking.id();
        for &key in self.declared {
            let owner = self.core.shard_of(key);
            if owner == self.core.index {
                self.core.shard.borrow_mut().remember_read(key, who);
            } else if self.reach.whole {
                let key = key.to_vec();
                call_blocking(self.core, owner, move |c| c.shard.borrow_mut().remember_read(&key, who));
            }
        }
    }

    /// PUBLISH / SPUBLISH: delivered without waiting for other cores (a
    /// script cannot), counted from what this core knows of theirs.
    fn publish(&self, spec: &shard::CommandSpec, args: &Args) -> Vec<u8> {
        use crate::pubsub::state::Kind;
        let kind = if spec.name == "spublish" { Kind::Shard } else { Kind::Channel };
        let Some(core) = self.core.me.upgrade() else { return error_reply("ERR shutting down") };
        let n = crate::pubsub::publish::publish_counted(&core, kind, args.get(1), args.get(2));
        format!(":{n}\r\n").into_bytes()
    }

    /// A key of this command the script did not declare, in a slot none of
    /// its declared keys is in: the script builds key names, so it may
    /// reach any shard (BullMQ's extendLocks reads, then writes, job locks
    /// named from its arguments). Only asked while it runs on one shard.
    fn reaches_beyond(&self, spec: &shard::CommandSpec, args: &Args) -> bool {
        spec.key_indexes(args).any(|i| {
            let key = args.get(i);
            !self.declared.contains(&key) && {
                let slot = key_slot(key);
                !self.declared.iter().any(|d| key_slot(d) == slot)
            }
        })
    }

    /// SELECT inside a script changes the script's database.
    fn select(&self, args: &Args, call: &mut CallState) -> Vec<u8> {
        let db = shard::args::parse_i64(args.get(1)).filter(|n| (i32::MIN as i64..=i32::MAX as i64).contains(n));
        let Some(db) = db else { return error_reply(NOT_INTEGER) };
        if self.core.cluster().enabled() && db != 0 {
            return error_reply("ERR SELECT is not allowed in cluster mode");
        }
        if db < 0 || db as usize >= self.core.config().databases {
            return error_reply(DB_INDEX);
        }
        call.db = db as usize;
        b"+OK\r\n".to_vec()
    }
}

impl Host for CoreHost<'_> {
    /// This core's other clients are served (BUSY, or SCRIPT KILL,
    /// SHUTDOWN NOSAVE...); a shutdown requested on any core ends the script.
    fn while_busy(&mut self) -> bool {
        self.core.serve_while_blocked();
        self.core.process.shutting_down()
    }

    /// The script's user (the caller's) against the command, its keys and
    /// channels, as ACL checks a client's command.
    fn acl_allows(&mut self, argv: &[Vec<u8>]) -> Option<bool> {
        let mut spec = self.core.commands.lookup(&argv[0])?;
        if !spec.subcommands.is_empty() && argv.len() > 1 {
            spec = spec.subcommand(&argv[1])?;
        }
        let Some(user) = &self.user else { return Some(true) };
        let Some(id) = crate::acl::commands::registry().id_of(spec) else { return Some(true) };
        let (buf, ranges) = super::context::flatten(argv);
        Some(user.check(id, &Args::new(&buf, &ranges)).is_ok())
    }

    /// A command the script called, counted here as Redis's scriptCall and
    /// call() count the script client's commands (slow log client "?:0").
    fn call(&mut self, argv: &[&[u8]], call: &mut CallState) -> Result<Vec<u8>, String> {
        let started = Instant::now();
        let mut spec = None;
        let result = self.checked_call(argv, call, &mut spec);
        let mut shard = self.core.shard.borrow_mut();
        let s = &mut *shard;
        match (&result, spec) {
            (Err(msg), _) if msg == super::cross::RERUN => {}
            (Err(msg), spec) => {
                let wire =
                    if msg.starts_with('-') { msg.as_bytes().to_vec() } else { [b"-ERR ", msg.as_bytes()].concat() };
                s.observe.rejected(spec, &wire);
            }
            (Ok(reply), Some(spec)) => {
                let end = Instant::now();
                let usec = end.duration_since(started).as_micros() as u64;
                if s.observe.ran(&s.config, spec, usec, reply, false, false) {
                    let (buf, ranges) = super::context::flatten(argv);
                    let args = Args::new(&buf, &ranges);
                    let redacted = crate::monitor::redacted_args(spec, &args);
                    let mut entry = Entry::new(args.len(), args.iter(), &redacted, usec, end);
                    entry.peer = "?:0".into();
                    s.observe.log_slow(&s.config, self.core.index, self.core.count, entry);
                }
            }
            (Ok(_), None) => {}
        }
        result
    }
}

impl CoreHost<'_> {
    fn checked_call(
        &mut self,
        argv: &[&[u8]],
        call: &mut CallState,
        resolved: &mut Option<&'static shard::CommandSpec>,
    ) -> Result<Vec<u8>, String> {
        if self.reach.wants_whole {
            return Err(super::cross::RERUN.into());
        }
        let (buf, ranges) = super::context::flatten(argv);
        let args = Args::new(&buf, &ranges);
        let Some(mut spec) = self.core.commands.lookup(argv[0]) else {
            return Err("Unknown Redis command called from script".into());
        };
        if !spec.subcommands.is_empty() && argv.len() > 1 {
            match spec.subcommand(argv[1]) {
                Some(sub) => spec = sub,
                None => return Err("Unknown Redis command called from script".into()),
            }
        }
        *resolved = Some(spec);
        if !spec.arity_ok(argv.len()) {
            return Err("Wrong number of args calling Redis command from script".into());
        }
        if spec.has_flag(flags::NOSCRIPT) {
            return Err("This Redis command is not allowed from script".into());
        }
        if let Some(user) = &self.user {
            self.verify_acl(user, spec, &args)?;
        }
        // PFCOUNT (it caches the cardinality) and PUBLISH may replicate:
        // Redis's CMD_MAY_REPLICATE, refused in read-only scripts as writes are.
        if call.read_only && (spec.has_flag(flags::WRITE) || matches!(spec.name, "pfcount" | "publish" | "spublish")) {
            return Err("Write commands are not allowed from read-only scripts.".into());
        }
        if call.deny_oom && !call.write_dirty && spec.has_flag(flags::DENYOOM) {
            return Err(format!("-{}", shard::reply::errors::OOM));
        }
        // Before it has written, a script that names keys beyond its
        // declared ones runs again holding every shard, even when this key
        // is here: its next one may not be, and after a write it could no
        // longer start again. Either way it is remembered as reaching out.
        if !self.reach.whole && self.core.count > 1 && self.reaches_beyond(spec, &args) {
            self.reach.reached_out = true;
            if !call.write_dirty {
                self.reach.wants_whole = true;
                return Err(super::cross::RERUN.into());
            }
        }
        if spec.has_flag(flags::WRITE) {
            call.write_dirty = true;
        }
        self.cluster_check(spec, &args, call)?;
        if spec.name == "select" {
            return Ok(self.select(&args, call));
        }
        if self.tracking.remembers() && spec.has_flag(flags::READONLY) {
            self.remember_keys();
        }
        // The commands themselves remember nothing (Redis's rule above).
        let caller = shard::tracking::Caller::new(self.tracking.id(), false);
        let local = match spec.route {
            Route::Local => true,
            // MSETNX: the proxy's only for its cross-shard form.
            Route::Keyed | Route::SplitKeys(_) | Route::Proxy => {
                spec.key_indexes(&args).all(|i| self.core.shard_of(args.get(i)) == self.core.index)
            }
            Route::AllShards(_) => self.core.count == 1,
        };
        if local && spec.handler.is_some() {
            let mut out = Vec::new();
            self.core.execute_scripted(caller, spec, call.db, call.resp3, self.now, args, &mut out);
            return Ok(out);
        }
        if matches!(spec.name, "publish" | "spublish") {
            return Ok(self.publish(spec, &args));
        }
        if spec.route == Route::Proxy && spec.handler.is_none() {
            return Ok(error_reply(&format!(
                "ERR command '{}' is not supported from scripts by corekv yet",
                spec.name.replace('|', " ")
            )));
        }
        let owners: Vec<usize> = match spec.route {
            Route::AllShards(_) => (0..self.core.count).collect(),
            _ => spec.key_indexes(&args).map(|i| self.core.shard_of(args.get(i))).collect(),
        };
        super::cross::remote_call(self.core, self.now, caller, &mut self.reach, spec, argv, &owners, call)
    }
}
