//! CLIENT: ID, GETNAME, SETNAME, INFO, LIST, KILL, REPLY, NO-EVICT, PAUSE,
//! UNPAUSE, UNBLOCK, HELP (Redis 7.0's networking.c clientCommand; the
//! tracking subcommands are in tracking.rs). Every core lists and kills
//! its own connections; the server-wide views are gathered over the mesh.

use super::reply::{help, reply};
use crate::clients::{ClientInfo, UnblockHow};
use crate::coordinator::dispatch::{call, call_all};
use crate::core::Core;
use crate::pause::PauseKind;
use crate::push::queue::core_of;
use crate::replication::replica::keep_dataset;
use crate::session::Connection;
use shard::args::parse_i64;
use shard::reply::errors::*;
use shard::{Args, CommandSpec};
use std::rc::Rc;
use std::time::Instant;

/// Client names: printable ASCII without spaces, as Redis requires.
fn valid_name(name: &[u8]) -> bool {
    name.iter().all(|&c| (b'!'..=b'~').contains(&c))
}

/// CLIENT SETNAME and HELLO SETNAME; false when refused (answered).
pub fn set_name(conn: &mut Connection, name: &[u8]) -> bool {
    if !valid_name(name) {
        conn.error("ERR Client names cannot contain spaces, newlines or special characters.");
        return false;
    }
    let key = conn.state.registry_key;
    if let Some(c) = conn.core.clients.borrow_mut().list.get_mut(key) {
        c.name = name.to_vec();
    }
    true
}

const CLIENT_HELP: &[&str] = &[
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CACHING (YES|NO)",
    "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
    "GETREDIR",
    "    Return the client ID we are redirecting to when tracking is enabled.",
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "KILL <ip:port>",
    "    Kill connection made from <ip:port>.",
    "KILL <option> <value> [<option> <value> [...]]",
    "    Kill connections. Options are:",
    "    * ADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made from the specified address",
    "    * LADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made to specified local address",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Kill connections by type.",
    "    * USER <username>",
    "      Kill connections authenticated by <username>.",
    "    * SKIPME (YES|NO)",
    "      Skip killing current connection (default: yes).",
    "LIST [options ...]",
    "    Return information about client connections. Options:",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Return clients of specified type.",
    "UNPAUSE",
    "    Stop the current client pause, resuming traffic.",
    "PAUSE <timeout> [WRITE|ALL]",
    "    Suspend all, or just write, clients for <timeout> milliseconds.",
    "REPLY (ON|OFF|SKIP)",
    "    Control the replies sent to the current connection.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "UNBLOCK <clientid> [TIMEOUT|ERROR]",
    "    Unblock the specified blocked client.",
    "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
    "         [OPTIN] [OPTOUT] [NOLOOP]",
    "    Control server assisted client side caching.",
    "TRACKINGINFO",
    "    Report tracking status for the current connection.",
    "NO-EVICT (ON|OFF)",
    "    Protect current client connection from eviction.",
    "HELP",
    "    Prints this help.",
];

/// The subcommands that need no other core.
pub fn run_now(conn: &mut Connection, spec: &CommandSpec, args: Args) {
    match spec.name {
        "client|id" => {
            let id = conn.state.id as i64;
            reply(conn, |r| r.int(id))
        }
        "client|getname" => {
            let name = conn.core.clients.borrow().list.get(conn.state.registry_key).map(|c| c.name.clone());
            reply(conn, |r| match name {
                Some(n) if !n.is_empty() => r.bulk(&n),
                _ => r.null(),
            })
        }
        "client|setname" => {
            if set_name(conn, args.get(2)) {
                reply(conn, |r| r.ok())
            }
        }
        "client|info" => {
            let line = own_line(conn, &args);
            reply(conn, |r| r.verbatim(format!("{line}\n").as_bytes()))
        }
        "client|reply" => reply_mode(conn, &args),
        "client|no-evict" => {
            let on = match args.get(2).to_ascii_lowercase().as_slice() {
                b"on" => true,
                b"off" => false,
                _ => return conn.error(SYNTAX),
            };
            if let Some(c) = conn.core.clients.borrow_mut().list.get_mut(conn.state.registry_key) {
                c.no_evict = on;
            }
            reply(conn, |r| r.ok())
        }
        _ => help(conn, CLIENT_HELP),
    }
}

/// The caller's own line, its command's arguments counted (argv-mem=).
fn own_line(conn: &Connection, args: &Args) -> String {
    let mut clients = conn.core.clients.borrow_mut();
    let Some(c) = clients.list.get_mut(conn.state.registry_key) else { return String::new() };
    let argv_mem = std::mem::replace(&mut c.argv_mem, args.iter().map(<[u8]>::len).sum());
    // What the connection's last update left behind, as of now.
    (c.db, c.last_cmd, c.resp) = (conn.state.db, conn.last_cmd, if conn.state.resp3 { 3 } else { 2 });
    c.multi = conn.state.multi.as_ref().map_or((-1, 0), |q| q.size());
    let line = c.line(Instant::now());
    c.argv_mem = argv_mem;
    line
}

/// CLIENT REPLY ON|OFF|SKIP: only ON is answered; SKIP drops the next
/// command's reply (the router shifts it, `ReplyMode::command_done`).
fn reply_mode(conn: &mut Connection, args: &Args) {
    match args.get(2).to_ascii_lowercase().as_slice() {
        b"on" => {
            conn.state.reply = Default::default();
            conn.pipeline.set_silent(false);
            reply(conn, |r| r.ok())
        }
        b"off" => conn.state.reply.off = true,
        b"skip" => conn.state.reply.skip_next |= !conn.state.reply.off,
        _ => conn.error(SYNTAX),
    }
}

/// CLIENT LIST and KILL's TYPE: Redis's getClientType.
#[derive(Clone, Copy, PartialEq)]
enum ClientType {
    Normal,
    Replica,
    Pubsub,
    Master,
}

fn client_type(name: &[u8]) -> Option<ClientType> {
    match name.to_ascii_lowercase().as_slice() {
        b"normal" => Some(ClientType::Normal),
        b"slave" | b"replica" => Some(ClientType::Replica),
        b"pubsub" => Some(ClientType::Pubsub),
        b"master" => Some(ClientType::Master),
        _ => None,
    }
}

fn type_of(c: &ClientInfo) -> ClientType {
    if c.replica {
        ClientType::Replica
    } else if c.pubsub() {
        ClientType::Pubsub
    } else {
        ClientType::Normal
    }
}

/// Redis's addReplySubcommandSyntaxError (the subcommand as given).
fn wrong_arguments(conn: &mut Connection, args: &Args) {
    let sub = String::from_utf8_lossy(args.get(1)).into_owned();
    conn.error(&format!("ERR unknown subcommand or wrong number of arguments for '{sub}'. Try CLIENT HELP."));
}

fn unknown_type(conn: &mut Connection, name: &[u8]) {
    conn.error(&format!("ERR Unknown client type '{}'", String::from_utf8_lossy(name)));
}

/// CLIENT LIST [TYPE type | ID id...]: every core's lines, in id order;
/// with ID, in the order asked (repeats included), unknown ids left out.
pub async fn list(conn: &mut Connection, args: Args<'_>) {
    let mut only_type = None;
    let mut ids: Option<Vec<i64>> = None;
    if args.len() == 4 && args.is(2, "type") {
        match client_type(args.get(3)) {
            Some(t) => only_type = Some(t),
            None => return unknown_type(conn, args.get(3)),
        }
    } else if args.len() > 3 && args.is(2, "id") {
        let mut wanted = Vec::new();
        for a in args.iter().skip(3) {
            match parse_i64(a) {
                Some(n) => wanted.push(n),
                None => return conn.error("ERR Invalid client ID"),
            }
        }
        ids = Some(wanted);
    } else if args.len() != 2 {
        return conn.error(SYNTAX);
    }
    let me = own_line(conn, &args);
    let my_id = conn.state.id;
    let lines = call_all(&conn.core, move |core| {
        let now = Instant::now();
        let clients = core.clients.borrow();
        clients.list.iter().map(|(_, c)| (c.id, type_of(c), c.line(now))).collect::<Vec<_>>()
    })
    .await;
    let mut all: Vec<(u64, ClientType, String)> = lines.into_iter().flatten().flatten().collect();
    // The caller's line as of its own command (argv-mem=, cmd=).
    if let Some(own) = all.iter_mut().find(|(id, ..)| *id == my_id) {
        own.2 = me;
    }
    all.sort_by_key(|(id, ..)| *id);
    let mut text = String::new();
    let mut add = |line: &str| {
        text.push_str(line);
        text.push('\n');
    };
    match ids {
        Some(ids) => {
            for id in ids {
                if let Some((.., line)) = all.iter().find(|(c, ..)| *c as i64 == id) {
                    add(line);
                }
            }
        }
        None => all.iter().filter(|(_, t, _)| only_type.is_none_or(|want| want == *t)).for_each(|(.., l)| add(l)),
    }
    reply(conn, |r| r.verbatim(text.as_bytes()));
}

#[derive(Clone, Default)]
struct KillFilter {
    id: Option<u64>,
    addr: Option<String>,
    laddr: Option<String>,
    client_type: Option<ClientType>,
    user: Option<Vec<u8>>,
    /// SKIPME yes: the caller's id.
    skip: Option<u64>,
}

impl KillFilter {
    fn matches(&self, c: &ClientInfo) -> bool {
        self.addr.as_ref().is_none_or(|a| *a == c.addr.to_string())
            && self.laddr.as_ref().is_none_or(|a| *a == c.laddr.to_string())
            && self.client_type.is_none_or(|t| t == type_of(c))
            && self.id.is_none_or(|id| id == c.id)
            && self.user.as_ref().is_none_or(|u| *u == c.user)
            && self.skip != Some(c.id)
    }
}

/// CLIENT KILL addr (OK, or "No such client") or CLIENT KILL with
/// filters (the number killed). The caller itself, when it matches, is
/// closed after its reply.
pub async fn kill(conn: &mut Connection, args: Args<'_>) {
    let old_style = args.len() == 3;
    let mut f = KillFilter { skip: Some(conn.state.id), ..Default::default() };
    if old_style {
        f.addr = Some(String::from_utf8_lossy(args.get(2)).into_owned());
        f.skip = None;
    } else {
        let mut j = 2;
        while j < args.len() {
            if j + 1 >= args.len() {
                return conn.error(SYNTAX);
            }
            let value = args.get(j + 1);
            let text = String::from_utf8_lossy(value).into_owned();
            if args.is(j, "id") {
                match parse_i64(value).filter(|&n| n > 0) {
                    Some(n) => f.id = Some(n as u64),
                    None => return conn.error("ERR client-id should be greater than 0"),
                }
            } else if args.is(j, "type") {
                match client_type(value) {
                    Some(t) => f.client_type = Some(t),
                    None => return unknown_type(conn, value),
                }
            } else if args.is(j, "addr") {
                f.addr = Some(text);
            } else if args.is(j, "laddr") {
                f.laddr = Some(text);
            } else if args.is(j, "user") {
                if conn.core.acl.users().get(value).is_none() {
                    return conn.error(&format!("ERR No such user '{text}'"));
                }
                f.user = Some(value.to_vec());
            } else if args.is(j, "skipme") {
                match text.to_ascii_lowercase().as_str() {
                    "yes" => f.skip = Some(conn.state.id),
                    "no" => f.skip = None,
                    _ => return conn.error(SYNTAX),
                }
            } else {
                return conn.error(SYNTAX);
            }
            j += 2;
        }
    }
    let me = conn.state.id;
    let counts = call_all(&conn.core, move |core| {
        let clients = core.clients.borrow();
        let (mut killed, mut me_too) = (0u64, false);
        for (key, c) in clients.list.iter().filter(|(_, c)| f.matches(c)) {
            killed += 1;
            match c.id == me {
                true => me_too = true,
                false => clients.kill(key),
            }
        }
        if killed > 0 {
            // Connections held by a pause see they were killed.
            core.pause.wake_all();
        }
        (killed, me_too)
    })
    .await;
    let killed: u64 = counts.iter().flatten().map(|c| c.0).sum();
    if old_style {
        if killed == 0 {
            conn.error("ERR No such client");
        } else {
            reply(conn, |r| r.ok());
        }
    } else {
        reply(conn, |r| r.int(killed as i64));
    }
    if counts.iter().flatten().any(|c| c.1) {
        conn.state.close = true;
    }
}

/// CLIENT PAUSE timeout [WRITE|ALL], on every core: commands it holds wait
/// (they are not refused) until CLIENT UNPAUSE or the time runs out.
pub async fn pause(conn: &mut Connection, args: Args<'_>) {
    if args.len() > 4 {
        return wrong_arguments(conn, &args);
    }
    let mut kind = PauseKind::All;
    if args.len() == 4 {
        kind = match args.get(3).to_ascii_lowercase().as_slice() {
            b"write" => PauseKind::Write,
            b"all" => PauseKind::All,
            _ => return conn.error("ERR CLIENT PAUSE mode must be WRITE or ALL"),
        };
    }
    let Some(ms) = parse_i64(args.get(2)) else {
        return conn.error("ERR timeout is not an integer or out of range");
    };
    if ms < 0 {
        return conn.error("ERR timeout is negative");
    }
    let now = shard::unix_ms();
    let end = if ms > 0 { now.saturating_add(ms as u64) } else { 0 };
    call_all(&conn.core, move |core| {
        core.pause.set(kind, end, shard::unix_ms());
        keep_dataset(core);
    })
    .await;
    reply(conn, |r| r.ok());
}

/// CLIENT UNPAUSE, on every core.
pub async fn unpause(conn: &mut Connection) {
    call_all(&conn.core, |core| {
        core.pause.lift();
        keep_dataset(core);
    })
    .await;
    reply(conn, |r| r.ok());
}

/// The cron's part: a pause that ran out is lifted.
pub fn pause_cron(core: &Core) {
    if core.pause.client_ran_out(shard::unix_ms()) {
        core.pause.lift();
        keep_dataset(core);
    }
}

/// CLIENT UNBLOCK id [TIMEOUT|ERROR]: a client blocked in a pop, on any
/// core, answered as on a timeout or with an UNBLOCKED error. 1 if it was.
pub async fn unblock(conn: &mut Connection, args: Args<'_>) {
    if args.len() > 4 {
        return wrong_arguments(conn, &args);
    }
    let mut how = UnblockHow::Timeout;
    if args.len() == 4 {
        how = match args.get(3).to_ascii_lowercase().as_slice() {
            b"timeout" => UnblockHow::Timeout,
            b"error" => UnblockHow::Error,
            _ => return conn.error("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"),
        };
    }
    let Some(id) = parse_i64(args.get(2)) else {
        return conn.error(NOT_INTEGER);
    };
    let done = if id <= 0 {
        false
    } else {
        let id = id as u64;
        call(&conn.core, core_of(id, conn.core.count), move |core: &Rc<Core>| {
            let clients = core.clients.borrow();
            let door = clients.list.iter().find(|(_, c)| c.id == id).and_then(|(_, c)| c.unblock.clone());
            door.filter(|d| d.how.get().is_none()).map(|d| d.signal(how)).is_some()
        })
        .await
        .unwrap_or(false)
    };
    reply(conn, |r| r.int(done as i64));
}
