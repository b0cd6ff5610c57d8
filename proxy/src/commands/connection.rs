//! Connection commands: AUTH, HELLO, SELECT, QUIT, RESET (CLIENT is
//! client.rs).

use super::acl;
use super::client::set_name;
use super::reply::reply;
use crate::session::Connection;
use shard::args::parse_i64;
use shard::reply::errors::*;
use shard::Args;

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
        } else if v == 3 {
            // Any RESP3 client can be another's CLIENT TRACKING REDIRECT
            // target: Redis pushes invalidations to it, subscribed or not.
            let (id, key) = (conn.state.id, conn.state.registry_key);
            crate::push::attach(&conn.core, &mut conn.state.push, id, key, true);
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

/// RESET (Redis's clearClientConnectionState): what a new connection has,
/// except CLIENT NO-EVICT, which Redis 7.0 keeps. A pending CLIENT REPLY
/// SKIP still drops this reply, as there.
pub fn reset(conn: &mut Connection) {
    conn.state.reply.off = false;
    conn.state.reply.skip_next = false;
    conn.pipeline.set_silent(conn.state.reply.silent());
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
