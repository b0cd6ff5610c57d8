//! MONITOR: the command, and each routed command's line (`monitor.rs`
//! formats and feeds it). RESET, QUIT and a closed connection end it.

use super::reply::reply;
use crate::coordinator::dispatch::call_all;
use crate::monitor::{line, Origin};
use crate::session::Connection;
use shard::{Args, CommandSpec};

fn is_monitor(conn: &Connection) -> bool {
    conn.core.clients.borrow().list.get(conn.state.registry_key).is_some_and(|c| c.monitor || c.replica)
}

fn set_flag(conn: &Connection, on: bool) {
    if let Some(c) = conn.core.clients.borrow_mut().list.get_mut(conn.state.registry_key) {
        c.monitor = on;
    }
}

pub async fn monitor(conn: &mut Connection) {
    if conn.state.in_exec {
        // Redis's CLIENT_DENY_BLOCKING (inside a transaction).
        return conn.error("ERR MONITOR isn't allowed for DENY BLOCKING client");
    }
    // Already a monitor (or a replica): ignored, no reply, as Redis.
    if is_monitor(conn) {
        return;
    }
    let (id, key, resp3) = (conn.state.id, conn.state.registry_key, conn.state.resp3);
    crate::push::attach(&conn.core, &mut conn.state.push, id, key, resp3);
    set_flag(conn, true);
    let id = conn.state.id;
    call_all(&conn.core, move |core| core.monitors.borrow_mut().push(id)).await;
    reply(conn, |r| r.ok());
}

/// Leaves MONITOR mode (RESET, QUIT, the connection closing).
pub async fn stop(conn: &mut Connection) {
    if !conn.core.clients.borrow().list.get(conn.state.registry_key).is_some_and(|c| c.monitor) {
        return;
    }
    set_flag(conn, false);
    let id = conn.state.id;
    call_all(&conn.core, move |core| core.monitors.borrow_mut().retain(|&m| m != id)).await;
}

/// While some client monitors: the line of a command about to be routed
/// to a shard, for the pipeline to carry to where it executes. Scripts are
/// fed now, before the commands they run (Redis's evalCommand); the
/// proxy's own commands after they ran (`finish`: SELECT shows the new
/// database, as Redis feeds after `call`); EXEC once its commands ran.
pub fn prepare(conn: &mut Connection, spec: &CommandSpec, args: &Args) {
    if super::scripting::is_script(spec) {
        if let Some(line) = peer_line(conn, spec, args) {
            conn.core.feed_monitors(&line);
        }
    } else if spec.route != shard::Route::Proxy {
        conn.pipeline.monitor_line = peer_line(conn, spec, args);
    }
}

fn peer_line(conn: &Connection, spec: &CommandSpec, args: &Args) -> Option<Box<[u8]>> {
    let peer = conn.core.clients.borrow().list.get(conn.state.registry_key).map(|c| c.addr.to_string())?;
    line(spec, conn.state.db, Origin::Peer(&peer), args).map(Vec::into_boxed_slice)
}

/// The proxy runs the command itself: fed once it ran.
fn fed_after(spec: &CommandSpec) -> bool {
    spec.route == shard::Route::Proxy && spec.name != "exec" && !super::scripting::is_script(spec)
}

/// After routing: the proxy's own command's line (unless it was deferred:
/// `after_deferred`), or a line no shard took (the command waits for
/// earlier replies), is fed from here.
pub fn finish(conn: &mut Connection, spec: &CommandSpec, args: &Args, deferred: bool) {
    let line = match fed_after(spec) {
        true if deferred => None,
        true => peer_line(conn, spec, args),
        false => conn.pipeline.monitor_line.take(),
    };
    if let Some(line) = line {
        conn.core.feed_monitors(&line);
    }
}

/// A deferred proxy command ran (RESET of a monitor no longer sees itself).
pub fn after_deferred(conn: &mut Connection, spec: &CommandSpec, args: &Args) {
    if fed_after(spec) {
        if let Some(line) = peer_line(conn, spec, args) {
            conn.core.feed_monitors(&line);
        }
    }
}

/// EXEC's own line, after its commands'.
pub fn exec_done(conn: &mut Connection, args: &Args) {
    let spec = conn.core.commands.lookup(b"exec");
    if let Some(line) = spec.and_then(|spec| peer_line(conn, spec, args)) {
        conn.core.feed_monitors(&line);
    }
}
