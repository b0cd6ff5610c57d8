//! PSYNC, SYNC, REPLCONF, WAIT, ROLE, REPLICAOF/SLAVEOF, FAILOVER (the
//! machinery is in crate::replication).

use super::reply::reply;
use crate::replication::handoff::SyncRequest;
use crate::replication::{failover, info, replica, role, wait};
use crate::session::Connection;
use shard::reply::errors::SYNTAX;
use shard::Args;

const NOT_INT: &str = "ERR value is not an integer or out of range";

/// PSYNC replid offset / SYNC: the connection becomes the replica's link
/// once this batch's replies are out (conn.rs hands its socket over).
/// `PSYNC replid offset FAILOVER` (a primary handing over) waits for the
/// earlier replies: `psync_failover`.
pub fn sync(conn: &mut Connection, args: Args) {
    if conn.state.multi.is_some() {
        return conn.error("ERR Replica can't interact with the keyspace");
    }
    if conn.core.pause.in_failover() {
        return conn.error("NOMASTERLINK Can't SYNC while failing over");
    }
    let request = if args.is(0, "psync") {
        let replid = String::from_utf8_lossy(args.get(1)).into_owned();
        let offset = std::str::from_utf8(args.get(2)).ok().and_then(|s| s.parse::<i64>().ok()).unwrap_or(-1);
        SyncRequest::Psync { replid, offset }
    } else {
        SyncRequest::Sync
    };
    conn.state.sync = Some(request);
}

/// Whether this PSYNC asks this process to take over (Redis's syncCommand).
pub fn is_failover_request(args: &Args) -> bool {
    args.is(0, "psync") && args.len() > 3 && args.is(3, "failover")
}

/// PSYNC replid offset FAILOVER: promoted when `replid` is the history it
/// follows, then the primary's resync as any PSYNC.
pub async fn psync_failover(conn: &mut Connection, args: Args<'_>) {
    if conn.state.multi.is_some() {
        return conn.error("ERR Replica can't interact with the keyspace");
    }
    let replid = String::from_utf8_lossy(args.get(1)).into_owned();
    let client = format!("id={}", conn.state.id);
    if let Err(e) = role::failover_request(&conn.core, replid, client).await {
        return conn.error(e);
    }
    sync(conn, args)
}

/// REPLCONF option value ...: what a replica announces before PSYNC.
pub fn replconf(conn: &mut Connection, args: Args) {
    if args.len().is_multiple_of(2) {
        return conn.error(SYNTAX);
    }
    let mut i = 1;
    while i < args.len() {
        let value = String::from_utf8_lossy(args.get(i + 1)).into_owned();
        let hello = &mut conn.state.repl_hello;
        if args.is(i, "listening-port") {
            match value.parse::<u16>() {
                Ok(port) => hello.listening_port = port,
                Err(_) => return conn.error(NOT_INT),
            }
        } else if args.is(i, "ip-address") {
            hello.ip = Some(value);
        } else if args.is(i, "capa") {
            hello.capa_eof |= value.eq_ignore_ascii_case("eof");
            hello.capa_psync2 |= value.eq_ignore_ascii_case("psync2");
        } else if args.is(i, "ack") || args.is(i, "getack") {
            // Only meaningful on a link; a plain client gets no reply.
            return;
        } else if !(args.is(i, "rdb-only") || args.is(i, "rdb-filter-only")) {
            let option = String::from_utf8_lossy(args.get(i));
            return conn.error(&format!("ERR Unrecognized REPLCONF option: {option}"));
        }
        i += 2;
    }
    reply(conn, |r| r.ok())
}

/// WAIT numreplicas timeout.
pub async fn wait_command(conn: &mut Connection, args: Args<'_>) {
    if replica::is_replica(&conn.core) {
        return conn.error("ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is configured to be writable (which is not the default) writes to replicas are just local and are not propagated.");
    }
    let number = |i: usize| std::str::from_utf8(args.get(i)).ok().and_then(|s| s.parse::<i64>().ok());
    let Some(wanted) = number(1) else { return conn.error(NOT_INT) };
    let timeout = match number(2) {
        None => return conn.error("ERR timeout is not an integer or out of range"),
        Some(t) if t < 0 => return conn.error("ERR timeout is negative"),
        Some(t) => t as u64,
    };
    let acked = wait::wait(&conn.core, wanted.max(0) as u64, timeout).await;
    reply(conn, |r| r.int(acked as i64))
}

/// ROLE.
pub async fn role(conn: &mut Connection) {
    let as_replica = crate::coordinator::dispatch::call(&conn.core, 0, |c| replica::role_reply(c)).await.flatten();
    if let Some((host, port, state, offset)) = as_replica {
        return reply(conn, |r| {
            r.array(5);
            r.bulk(b"slave");
            r.bulk(host.as_bytes());
            r.int(port as i64);
            r.bulk(state.as_bytes());
            r.int(offset);
        });
    }
    let role = info::primary_role(&conn.core).await;
    reply(conn, |r| {
        r.array(3);
        r.bulk(b"master");
        r.int(role.offset as i64);
        r.array(role.replicas.len());
        for (ip, port, ack) in &role.replicas {
            r.array(3);
            r.bulk(ip.as_bytes());
            r.bulk(port.to_string().as_bytes());
            r.bulk(ack.to_string().as_bytes());
        }
    })
}

/// REPLICAOF host port | NO ONE (and SLAVEOF).
pub async fn replicaof(conn: &mut Connection, args: Args<'_>) {
    if conn.cluster {
        return conn.error("ERR REPLICAOF not allowed in cluster mode.");
    }
    let target = if args.is(1, "no") && args.is(2, "one") {
        None
    } else {
        let port = std::str::from_utf8(args.get(2)).ok().and_then(|s| s.parse::<i64>().ok());
        match port {
            Some(p) if (0..=65535).contains(&p) => Some((String::from_utf8_lossy(args.get(1)).into_owned(), p as u16)),
            Some(_) => return conn.error("ERR Invalid master port"),
            None => return conn.error(NOT_INT),
        }
    };
    match role::replicaof(&conn.core, target).await {
        Ok(status) => reply(conn, |r| r.simple(status)),
        Err(e) => conn.error(&e),
    }
}

/// FAILOVER [TO host port [FORCE]] [ABORT] [TIMEOUT milliseconds], parsed
/// as Redis's failoverCommand (each option once, errors in its order).
pub async fn failover(conn: &mut Connection, args: Args<'_>) {
    if conn.cluster {
        return conn.error("ERR FAILOVER not allowed in cluster mode. Use CLUSTER FAILOVER command instead.");
    }
    if args.len() == 2 && args.is(1, "abort") {
        return match failover::abort(&conn.core, "Failover manually aborted").await {
            true => reply(conn, |r| r.ok()),
            false => conn.error("ERR No failover in progress."),
        };
    }
    let number = |i: usize| std::str::from_utf8(args.get(i)).ok().and_then(|s| s.parse::<i64>().ok());
    let mut request = failover::Request { target: None, timeout_ms: 0, force: false };
    let mut j = 1;
    while j < args.len() {
        if args.is(j, "timeout") && j + 1 < args.len() && request.timeout_ms == 0 {
            let Some(ms) = number(j + 1) else { return conn.error(NOT_INT) };
            if ms <= 0 {
                return conn.error("ERR FAILOVER timeout must be greater than 0");
            }
            request.timeout_ms = ms as u64;
            j += 2;
        } else if args.is(j, "to") && j + 2 < args.len() && request.target.is_none() {
            let Some(port) = number(j + 2) else { return conn.error(NOT_INT) };
            request.target = Some((String::from_utf8_lossy(args.get(j + 1)).into_owned(), port));
            j += 3;
        } else if args.is(j, "force") && !request.force {
            request.force = true;
            j += 1;
        } else {
            return conn.error(SYNTAX);
        }
    }
    match failover::start(&conn.core, request).await {
        Ok(()) => reply(conn, |r| r.ok()),
        Err(e) => conn.error(e),
    }
}
