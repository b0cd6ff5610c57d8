//! SLOWLOG GET | LEN | RESET | HELP (Redis's slowlog.c) over every core's
//! log: GET merges them newest first, LEN counts them, RESET clears them.
//! The merged log holds at most `slowlog-max-len` entries, as Redis's one.

use super::reply::{help, reply};
use crate::coordinator::dispatch::call_all;
use crate::session::Connection;
use shard::args::parse_i64;
use shard::observe::slowlog::Entry;
use shard::Args;

pub fn slowlog_help(conn: &mut Connection) {
    help(
        conn,
        &[
            "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GET [<count>]",
            "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
            "    Entries are made of:",
            "    id, timestamp, time in microseconds, arguments array, client IP and port,",
            "    client name",
            "LEN",
            "    Return the length of the slowlog.",
            "RESET",
            "    Reset the slowlog.",
            "HELP",
            "    Prints this help.",
        ],
    );
}

/// Redis's addReplySubcommandSyntaxError.
pub fn syntax_error(conn: &mut Connection, args: &Args) {
    let sub = String::from_utf8_lossy(&args.get(1)[..args.get(1).len().min(128)]).into_owned();
    let cmd = String::from_utf8_lossy(args.get(0)).to_uppercase();
    conn.error(&format!("ERR unknown subcommand or wrong number of arguments for '{sub}'. Try {cmd} HELP."));
}

/// Every core's entries, newest first, at most `slowlog-max-len`.
async fn merged(conn: &Connection, limit: Option<usize>) -> Vec<Entry> {
    let max = conn.core.config().slowlog_max_len.min(usize::MAX as u64) as usize;
    let limit = limit.unwrap_or(max).min(max);
    let parts = call_all(&conn.core, move |core| {
        core.shard.borrow().observe.slowlog.entries.iter().take(limit).cloned().collect::<Vec<Entry>>()
    })
    .await;
    let mut all: Vec<Entry> = parts.into_iter().flatten().flatten().collect();
    all.sort_by(|a, b| b.at.cmp(&a.at).then(b.id.cmp(&a.id)));
    all.truncate(limit);
    all
}

pub async fn get(conn: &mut Connection, args: Args<'_>) {
    if args.len() > 3 {
        return syntax_error(conn, &args);
    }
    let count = match args.len() {
        3 => match parse_i64(args.get(2)) {
            Some(-1) => None,
            Some(n) if n >= 0 => Some(n as usize),
            _ => return conn.error("ERR count should be greater than or equal to -1"),
        },
        _ => Some(10),
    };
    let entries = merged(conn, count).await;
    reply(conn, |r| {
        r.array(entries.len());
        for e in &entries {
            r.array(6);
            r.int(e.id as i64);
            r.int(e.time);
            r.int(e.duration as i64);
            r.array(e.args.len());
            for a in &e.args {
                r.bulk(a);
            }
            r.bulk(e.peer.as_bytes());
            r.bulk(&e.name);
        }
    });
}

pub async fn len(conn: &mut Connection) {
    let max = conn.core.config().slowlog_max_len;
    let counts = call_all(&conn.core, |core| core.shard.borrow().observe.slowlog.entries.len() as u64).await;
    let total: u64 = counts.into_iter().flatten().sum();
    reply(conn, |r| r.int(total.min(max) as i64));
}

pub async fn reset(conn: &mut Connection) {
    call_all(&conn.core, |core| core.shard.borrow_mut().observe.slowlog.reset()).await;
    reply(conn, |r| r.ok());
}
