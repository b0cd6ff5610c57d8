//! Connection commands: AUTH, HELLO, SELECT, QUIT, RESET, CLIENT.

use super::acl;
use super::reply::{help, reply};
use crate::coordinator::dispatch::call_all;
use crate::session::Connection;
use shard::args::parse_i64;
use shard::reply::errors::*;
use shard::{Args, CommandSpec};
use std::time::Instant;

const REDIS_VERSION: &str = "7.0.15";

pub fn auth(conn: &mut Connection, args: Args) {
    if args.len() > 3 {
        return conn.error(SYNTAX);
    }
    let (user, password) = if args.len() == 2 { (&b"default"[..], args.get(1)) } else { (args.get(1), args.get(2)) };
    if args.len() == 2 && conn.core.acl.users().default_user().nopass {
        return conn.error(
            "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
        );
    }
    if acl::authenticate(conn, user, password, args.get(0)) {
        reply(conn, |r| r.ok());
    } else {
        conn.error(acl::WRONGPASS);
    }
}

/// Client names: printable ASCII without spaces, as Redis requires.
fn valid_name(name: &[u8]) -> bool {
    name.iter().all(|&c| (b'!'..=b'~').contains(&c))
}

fn set_name(conn: &mut Connection, name: &[u8]) -> bool {
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

pub fn hello(conn: &mut Connection, args: Args) {
    let mut version = None;
    let mut next = 1;
    if args.len() >= 2 {
        match parse_i64(args.get(1)) {
            None => return conn.error("ERR Protocol version is not an integer or out of range"),
            Some(v) if !(2..=3).contains(&v) => return conn.error("NOPROTO unsupported protocol version"),
            Some(v) => version = Some(v),
        }
        next = 2;
    }
    let (mut credentials, mut name) = (None, None);
    let mut j = next;
    while j < args.len() {
        let more = args.len() - 1 - j;
        if args.is(j, "auth") && more >= 2 {
            credentials = Some((args.get(j + 1), args.get(j + 2)));
            j += 2;
        } else if args.is(j, "setname") && more >= 1 {
            name = Some(args.get(j + 1));
            j += 1;
        } else {
            let opt = String::from_utf8_lossy(args.get(j)).into_owned();
            return conn.error(&format!("ERR Syntax error in HELLO option '{opt}'"));
        }
        j += 1;
    }
    if let Some((user, password)) = credentials {
        if !acl::authenticate(conn, user, password, args.get(0)) {
            return conn.error(acl::WRONGPASS);
        }
    }
    if !conn.state.authenticated && acl::auth_required(conn) {
        return conn.error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
    }
    if let Some(name) = name {
        if !set_name(conn, name) {
            return;
        }
    }
    if let Some(v) = version {
        conn.state.resp3 = v == 3;
        if let Some(q) = &conn.state.push {
            q.resp3.set(v == 3);
        }
    }
    let id = conn.state.id;
    let mode = if conn.core.cluster().enabled() { "cluster" } else { "standalone" };
    reply(conn, |r| {
        r.map(7);
        r.bulk(b"server");
        r.bulk(b"redis");
        r.bulk(b"version");
        r.bulk(REDIS_VERSION.as_bytes());
        r.bulk(b"proto");
        r.int(if r.resp3 { 3 } else { 2 });
        r.bulk(b"id");
        r.int(id as i64);
        r.bulk(b"mode");
        r.bulk(mode.as_bytes());
        r.bulk(b"role");
        r.bulk(b"master");
        r.bulk(b"modules");
        r.array(0);
    });
}

pub fn select(conn: &mut Connection, args: Args) {
    let Some(db) = parse_i64(args.get(1)).filter(|n| (i32::MIN as i64..=i32::MAX as i64).contains(n)) else {
        return conn.error(NOT_INTEGER);
    };
    if conn.core.cluster().enabled() && db != 0 {
        return conn.error("ERR SELECT is not allowed in cluster mode");
    }
    if db < 0 || db as usize >= conn.core.config().databases {
        return conn.error(DB_INDEX);
    }
    conn.state.db = db as usize;
    reply(conn, |r| r.ok());
}

pub fn quit(conn: &mut Connection) {
    reply(conn, |r| r.ok());
    conn.state.close = true;
}

pub fn reset(conn: &mut Connection) {
    conn.state.db = 0;
    conn.state.multi = None;
    conn.state.resp3 = false;
    acl::reset_user(conn);
    let key = conn.state.registry_key;
    if let Some(c) = conn.core.clients.borrow_mut().list.get_mut(key) {
        c.name.clear();
    }
    reply(conn, |r| r.simple("RESET"));
}

const CLIENT_HELP: &[&str] = &[
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
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
    "    * ID <client-id>",
    "      Kill connections by client id.",
    "    * MAXAGE <maxage>",
    "      Kill connections older than the specified age.",
    "LIST [options ...]",
    "    Return information about client connections. Options:",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Return clients of specified type.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "SETINFO <option> <value>",
    "    Set client meta attr. Options are:",
    "    * LIB-NAME: the client lib name.",
    "    * LIB-VER: the client lib version.",
    "HELP",
    "    Prints this help.",
];

pub fn client(conn: &mut Connection, spec: &CommandSpec, args: Args) {
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
        "client|setinfo" => {
            let value = args.get(3);
            let key = conn.state.registry_key;
            let field = if args.is(2, "lib-name") {
                "lib-name"
            } else if args.is(2, "lib-ver") {
                "lib-ver"
            } else {
                let opt = String::from_utf8_lossy(args.get(2)).into_owned();
                return conn.error(&format!("ERR Unrecognized option '{opt}'"));
            };
            if !valid_name(value) {
                return conn.error(&format!("ERR {field} cannot contain spaces, newlines or special characters."));
            }
            if let Some(c) = conn.core.clients.borrow_mut().list.get_mut(key) {
                if field == "lib-name" {
                    c.lib_name = value.to_vec();
                } else {
                    c.lib_ver = value.to_vec();
                }
            }
            reply(conn, |r| r.ok())
        }
        "client|info" => {
            let line = conn.core.clients.borrow().list.get(conn.state.registry_key).map(|c| c.line(Instant::now()));
            let text = format!("{}\n", line.unwrap_or_default());
            reply(conn, |r| r.verbatim(text.as_bytes()))
        }
        _ => help(conn, CLIENT_HELP),
    }
}

/// Every client line on every core, optionally only some ids.
pub async fn client_list(conn: &mut Connection, args: Args<'_>) {
    let mut ids: Option<Vec<u64>> = None;
    let mut j = 2;
    while j < args.len() {
        if args.is(j, "type") && j + 1 < args.len() {
            let t = args.get(j + 1).to_ascii_lowercase();
            if !matches!(t.as_slice(), b"normal" | b"master" | b"replica" | b"slave" | b"pubsub") {
                let t = String::from_utf8_lossy(args.get(j + 1)).into_owned();
                return conn.error(&format!("ERR Unknown client type '{t}'"));
            }
            if t != b"normal" {
                ids = Some(Vec::new());
            }
            j += 2;
        } else if args.is(j, "id") && j + 1 < args.len() {
            let mut list = ids.take().unwrap_or_default();
            for a in args.iter().skip(j + 1) {
                match parse_i64(a).filter(|&n| n > 0) {
                    Some(n) => list.push(n as u64),
                    None => return conn.error("ERR Invalid client ID"),
                }
            }
            ids = Some(list);
            j = args.len();
        } else {
            return conn.error(SYNTAX);
        }
    }
    let lines = call_all(&conn.core, move |core| {
        let now = Instant::now();
        core.clients.borrow().list.iter().map(|(_, c)| (c.id, c.line(now))).collect::<Vec<_>>()
    })
    .await;
    let mut all: Vec<(u64, String)> = lines.into_iter().flatten().flatten().collect();
    all.sort_by_key(|(id, _)| *id);
    let mut text = String::new();
    for (id, line) in all {
        if ids.as_ref().is_none_or(|ids| ids.contains(&id)) {
            text.push_str(&line);
            text.push('\n');
        }
    }
    reply(conn, |r| r.verbatim(text.as_bytes()));
}

#[derive(Clone, Default)]
struct KillFilter {
    id: Option<u64>,
    addr: Option<String>,
    laddr: Option<String>,
    skip_id: Option<u64>,
    maxage: Option<u64>,
    /// TYPE normal (false) or replica (true).
    replica: Option<bool>,
    /// TYPE master or pubsub: matches nobody.
    nobody: bool,
    user: Option<Vec<u8>>,
}

pub async fn client_kill(conn: &mut Connection, args: Args<'_>) {
    let old_style = args.len() == 3;
    let mut f = KillFilter { skip_id: Some(conn.state.id), ..Default::default() };
    if old_style {
        f.addr = Some(String::from_utf8_lossy(args.get(2)).into_owned());
        f.skip_id = None;
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
            } else if args.is(j, "addr") {
                f.addr = Some(text);
            } else if args.is(j, "laddr") {
                f.laddr = Some(text);
            } else if args.is(j, "type") {
                match text.to_ascii_lowercase().as_str() {
                    "normal" => f.replica = Some(false),
                    "replica" | "slave" => f.replica = Some(true),
                    "master" | "pubsub" => f.nobody = true,
                    _ => return conn.error(&format!("ERR Unknown client type '{text}'")),
                }
            } else if args.is(j, "user") {
                if conn.core.acl.users().get(value).is_none() {
                    return conn.error(&format!("ERR No such user '{text}'"));
                }
                f.user = Some(value.to_vec());
            } else if args.is(j, "skipme") {
                match text.to_ascii_lowercase().as_str() {
                    "yes" => f.skip_id = Some(conn.state.id),
                    "no" => f.skip_id = None,
                    _ => return conn.error(SYNTAX),
                }
            } else if args.is(j, "maxage") {
                match parse_i64(value).filter(|&n| n >= 0) {
                    Some(n) => f.maxage = Some(n as u64),
                    None => return conn.error(NOT_INTEGER),
                }
            } else {
                return conn.error(SYNTAX);
            }
            j += 2;
        }
    }
    let filter = f.clone();
    let killed: u64 = call_all(&conn.core, move |core| {
        if filter.nobody {
            return 0u64;
        }
        let now = Instant::now();
        let clients = core.clients.borrow();
        let mut n = 0;
        for (key, c) in clients.list.iter() {
            let matches = filter.id.is_none_or(|id| id == c.id)
                && filter.addr.as_ref().is_none_or(|a| *a == c.addr.to_string())
                && filter.laddr.as_ref().is_none_or(|a| *a == c.laddr.to_string())
                && filter.maxage.is_none_or(|age| now.duration_since(c.created).as_secs() >= age)
                && filter.skip_id != Some(c.id)
                && filter.replica.is_none_or(|r| r == c.replica)
                && filter.user.as_ref().is_none_or(|u| *u == c.user);
            if matches {
                clients.kill(key);
                n += 1;
            }
        }
        n
    })
    .await
    .into_iter()
    .flatten()
    .sum();
    if old_style {
        if killed == 0 {
            return conn.error("ERR No such client");
        }
        return reply(conn, |r| r.ok());
    }
    reply(conn, |r| r.int(killed as i64));
}
