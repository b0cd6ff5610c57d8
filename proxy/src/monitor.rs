//! MONITOR's feed (Redis's replicationFeedMonitors): one status line per
//! command, `+<sec>.<usec> [<db> <peer>] "arg" ...`, sent to every MONITOR
//! client from the core where the command executes, so each shard's
//! commands reach a monitor in that shard's execution order (pushes from
//! one core to one client keep their order). The connection's core formats
//! the line when it routes the command; it rides with the command to the
//! keys' owner. Every core keeps the list of monitors; with none, a command
//! costs one emptiness check.

use crate::core::Core;
use crate::push::deliver::deliver;
use shard::commands::flags::ADMIN;
use shard::config::repr_into;
use shard::{Args, CommandSpec};
use std::fmt::Write;
use std::rc::Rc;

/// Where a fed command came from.
pub enum Origin<'a> {
    /// A client's address (`ip:port`).
    Peer(&'a str),
    /// A command a script ran.
    Lua,
}

/// Redis hides administrative commands.
pub fn shown(spec: &CommandSpec) -> bool {
    !spec.has_flag(ADMIN)
}

/// The monitor line of a command, or `None` when Redis hides it. AUTH's
/// and HELLO AUTH's credentials are redacted as Redis 7.0 does.
pub fn line(spec: &CommandSpec, db: usize, origin: Origin, args: &Args) -> Option<Vec<u8>> {
    if !shown(spec) {
        return None;
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let mut out = String::with_capacity(64);
    let _ = write!(out, "+{}.{:06} ", now.as_secs(), now.subsec_micros());
    match origin {
        Origin::Peer(peer) => {
            let _ = write!(out, "[{db} {peer}] ");
        }
        Origin::Lua => {
            let _ = write!(out, "[{db} lua] ");
        }
    }
    let redacted = redacted_args(spec, args);
    for (i, arg) in args.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        if redacted.contains(&i) {
            out.push_str("\"(redacted)\"");
        } else {
            repr_into(&mut out, arg);
        }
    }
    out.push_str("\r\n");
    Some(out.into_bytes())
}

/// Argument positions Redis replaces with "(redacted)" in MONITOR and the
/// slow log (redactClientCommandArgument's callers).
pub fn redacted_args(spec: &CommandSpec, args: &Args) -> Vec<usize> {
    match spec.name {
        "acl|setuser" => (2..args.len()).collect(),
        "config|set" => (2..args.len())
            .step_by(2)
            .filter(|&i| ["masteruser", "masterauth", "requirepass"].iter().any(|n| args.is(i, n)))
            .map(|i| i + 1)
            .filter(|&i| i < args.len())
            .collect(),
        "auth" if args.len() <= 3 => (1..args.len()).collect(),
        "hello" => {
            let mut j = 2;
            while j < args.len() {
                if args.is(j, "auth") && args.len() - 1 - j >= 2 {
                    return vec![j + 1, j + 2];
                }
                j += 1;
            }
            Vec::new()
        }
        "migrate" => {
            // AUTH's password, AUTH2's user and password, as migrateCommand
            // parses them (it stops at KEYS or at a syntax error).
            let (mut out, mut j) = (Vec::new(), 6);
            while j < args.len()
                && (args.is(j, "copy") || args.is(j, "replace") || args.is(j, "auth") || args.is(j, "auth2"))
            {
                let more = args.len() - 1 - j;
                if args.is(j, "auth") && more >= 1 {
                    out.push(j + 1);
                    j += 1;
                } else if args.is(j, "auth2") && more >= 2 {
                    out.extend([j + 1, j + 2]);
                    j += 2;
                } else if args.is(j, "auth") || args.is(j, "auth2") {
                    break;
                }
                j += 1;
            }
            out
        }
        _ => Vec::new(),
    }
}

impl Core {
    /// True while some client anywhere is in MONITOR mode.
    #[inline]
    pub fn monitored(&self) -> bool {
        !self.monitors.borrow().is_empty()
    }

    /// Sends a formatted line to every monitor.
    pub fn feed_monitors(&self, line: &[u8]) {
        let Some(me) = self.me.upgrade() else { return };
        let monitors = self.monitors.borrow().clone();
        for id in monitors {
            deliver(&me, id, line);
        }
    }
}

/// Feeds a command a script ran on this core (`[db lua]`).
pub fn feed_script_command(core: &Rc<Core>, spec: &CommandSpec, db: usize, args: &Args) {
    if let Some(line) = line(spec, db, Origin::Lua, args) {
        core.feed_monitors(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repr_quotes_as_redis() {
        let mut s = String::new();
        repr_into(&mut s, b"a\"b\\c\r\n\t\x07\x08\x01\xff ok");
        assert_eq!(s, "\"a\\\"b\\\\c\\r\\n\\t\\a\\b\\x01\\xff ok\"");
    }
}
