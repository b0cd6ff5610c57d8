//! MIGRATE (Redis 7.0's migrateCommand): the keys are DUMPed on their
//! owners, sent to the target as pipelined AUTH / SELECT / RESTORE (or
//! RESTORE-ASKING in cluster modes), and, unless COPY, deleted on their
//! owners once the target acknowledged each. The router runs it inside a
//! coordinator unit holding its keys (even on one shard), so no write
//! slips in between the dump and the delete, as Redis blocks while it
//! migrates; other keys and connections go on meanwhile.

mod target;

pub use target::{cached, close_all, close_idle};

use super::gather::ShardKeys;
use super::reply::reply;
use crate::coordinator::dispatch::call;
use crate::session::Connection;
use shard::args::parse_i64;
use shard::propagate::put_command;
use shard::reply::errors::{NOT_INTEGER, SYNTAX};
use shard::Args;
use std::time::Duration;
use target::{Link, NoLink};

const LOST: &str = "ERR shard unavailable (server shutting down)";

/// A parsed MIGRATE.
struct Request {
    copy: bool,
    replace: bool,
    /// AUTH's password, or AUTH2's username and password.
    auth: Option<(Option<Vec<u8>>, Vec<u8>)>,
    db: i64,
    timeout: Duration,
    /// Argument positions of the keys.
    keys: std::ops::Range<usize>,
}

/// Options in Redis's order of checks: the options, then the timeout, then
/// the database.
fn parse(args: &Args) -> Result<Request, &'static str> {
    let (mut copy, mut replace, mut auth, mut keys) = (false, false, None, 3..4);
    let mut j = 6;
    while j < args.len() {
        let more = args.len() - 1 - j;
        if args.is(j, "copy") {
            copy = true;
        } else if args.is(j, "replace") {
            replace = true;
        } else if args.is(j, "auth") && more >= 1 {
            auth = Some((None, args.get(j + 1).to_vec()));
            j += 1;
        } else if args.is(j, "auth2") && more >= 2 {
            auth = Some((Some(args.get(j + 1).to_vec()), args.get(j + 2).to_vec()));
            j += 2;
        } else if args.is(j, "keys") {
            if !args.get(3).is_empty() {
                return Err("ERR When using MIGRATE KEYS option, the key argument must be set to the empty string");
            }
            keys = j + 1..args.len();
            break;
        } else {
            return Err(SYNTAX);
        }
        j += 1;
    }
    let timeout = parse_i64(args.get(5)).ok_or(NOT_INTEGER)?;
    let db = parse_i64(args.get(4)).ok_or(NOT_INTEGER)?;
    let timeout = if timeout <= 0 { 1000 } else { timeout as u64 };
    Ok(Request { copy, replace, auth, db, timeout: Duration::from_millis(timeout), keys })
}

/// One key to send: its position in the request, name, owner, remaining
/// TTL in ms (0: none) and DUMP payload.
struct Dumped {
    pos: usize,
    key: Vec<u8>,
    shard: usize,
    ttl: u64,
    payload: Vec<u8>,
}

/// Keys with their positions, grouped by owning shard.
fn by_shard(conn: &Connection, keys: impl Iterator<Item = (usize, Vec<u8>)>) -> Vec<ShardKeys> {
    let mut groups: Vec<ShardKeys> = Vec::new();
    for (pos, key) in keys {
        let shard = conn.core.shard_of(&key);
        match groups.iter_mut().find(|g| g.0 == shard) {
            Some(g) => g.1.push((pos, key)),
            None => groups.push((shard, vec![(pos, key)])),
        }
    }
    groups
}

/// DUMPs the keys that exist on their owners, in request order (missing
/// and expired keys left out, as Redis's lookupKeyRead).
async fn dump_keys(conn: &Connection, req: &Request, args: &Args<'_>) -> Option<Vec<Dumped>> {
    let db = conn.state.db;
    let mut out = Vec::new();
    for (shard, keys) in by_shard(conn, req.keys.clone().map(|i| (i, args.get(i).to_vec()))) {
        let found = call(&conn.core, shard, move |core| {
            let mut s = core.shard.borrow_mut();
            let now = shard::unix_ms();
            let opts = shard::rdb::SaveOptions { compress: s.config.rdbcompression };
            let mut found = Vec::with_capacity(keys.len());
            for (pos, key) in keys {
                let dumped = s.dbs[db].get(&key, now).map(|e| {
                    // Alive, so its expiry is after `now`: at least 1 ms left.
                    let ttl = e.expire_at().map_or(0, |at| at.saturating_sub(now).max(1));
                    (ttl, shard::rdb::dump_payload_with(&e.value, &opts))
                });
                match dumped {
                    Some((ttl, payload)) => {
                        s.stats.keyspace_hits += 1;
                        found.push(Dumped { pos, key, shard, ttl, payload });
                    }
                    None => s.stats.keyspace_misses += 1,
                }
            }
            found
        })
        .await?;
        out.extend(found);
    }
    out.sort_by_key(|d| d.pos);
    Some(out)
}

/// What one attempt at the target came to.
enum Sent {
    /// The target's replies: for each key, whether it took it; the first
    /// error it replied (AUTH's, SELECT's or a RESTORE's).
    Replied { taken: Vec<bool>, error: Option<Vec<u8>>, link: Option<Box<Link>> },
    /// Nothing was processed as far as we know: worth one more try on a
    /// fresh connection unless it timed out.
    Failed { writing: bool, timed_out: bool },
}

/// The RESTOREs of every key, pipelined (built once for both tries; each
/// payload is freed as it is copied in, so the values are held once).
fn restores(req: &Request, keys: &mut [Dumped], asking: bool) -> Vec<u8> {
    let name: &[u8] = if asking { b"RESTORE-ASKING" } else { b"RESTORE" };
    let mut body = Vec::with_capacity(keys.iter().map(|k| k.key.len() + k.payload.len() + 64).sum());
    for k in keys {
        let (ttl, payload) = (k.ttl.to_string(), std::mem::take(&mut k.payload));
        let mut parts: Vec<&[u8]> = vec![name, &k.key, ttl.as_bytes(), &payload];
        if req.replace {
            parts.push(b"REPLACE");
        }
        put_command(&mut body, &parts);
    }
    body
}

/// Sends AUTH, SELECT when the link's database differs, and the `count`
/// RESTOREs of `body`, pipelined; reads the replies (Redis's
/// migrateCommand body).
async fn send(mut link: Link, req: &Request, body: &[u8], count: usize) -> Sent {
    let mut cmd = Vec::new();
    if let Some((user, pass)) = &req.auth {
        match user {
            Some(u) => put_command(&mut cmd, &[b"AUTH", u, pass]),
            None => put_command(&mut cmd, &[b"AUTH", pass]),
        }
    }
    let select = link.last_db != req.db;
    if select {
        put_command(&mut cmd, &[b"SELECT", req.db.to_string().as_bytes()]);
    }
    for part in [&cmd[..], body] {
        if let Err(e) = link.write(part, req.timeout).await {
            return Sent::Failed { writing: true, timed_out: e.timed_out };
        }
    }
    let mut head_error = None;
    for _ in [req.auth.is_some(), select].iter().filter(|&&sent| sent) {
        match link.read_line(req.timeout).await {
            Ok(line) if line.first() == Some(&b'-') => head_error = head_error.or(Some(line)),
            Ok(_) => {}
            Err(e) => return Sent::Failed { writing: false, timed_out: e.timed_out },
        }
    }
    let (mut taken, mut error) = (Vec::with_capacity(count), None);
    for j in 0..count {
        let line = match link.read_line(req.timeout).await {
            Ok(line) => line,
            // Nothing read yet: as if nothing was processed (Redis's j == 0).
            Err(e) if j == 0 && error.is_none() => return Sent::Failed { writing: false, timed_out: e.timed_out },
            Err(_) => {
                let error = error.or(Some(Vec::new()));
                return Sent::Replied { taken, error, link: None };
            }
        };
        let failed = head_error.clone().or((line.first() == Some(&b'-')).then_some(line));
        match failed {
            Some(e) => {
                error = error.or(Some(e));
                taken.push(false);
            }
            None => taken.push(true),
        }
    }
    link.last_db = if error.is_none() { req.db } else { -1 };
    Sent::Replied { taken, error, link: Some(Box::new(link)) }
}

/// Deletes the keys the target took, on their owners (`del` events, DEL
/// effects for the AOF and replicas, tracking invalidations).
async fn delete_taken(conn: &Connection, keys: Vec<(usize, Vec<u8>)>) {
    let db = conn.state.db;
    let mut groups: Vec<(usize, Vec<Vec<u8>>)> = Vec::new();
    for (shard, key) in keys {
        match groups.iter_mut().find(|g| g.0 == shard) {
            Some(g) => g.1.push(key),
            None => groups.push((shard, vec![key])),
        }
    }
    for (shard, keys) in groups {
        call(&conn.core, shard, move |core| {
            let mut s = core.shard.borrow_mut();
            let now = shard::unix_ms();
            for key in &keys {
                if s.dbs[db].remove(key, now).is_some() {
                    s.notify(shard::notify::GENERIC, "del", db, key);
                    s.log_effect(db, &[b"DEL", key]);
                    if let Some(t) = &mut s.tracking {
                        t.invalidate(key, 0);
                    }
                }
            }
            let tracked = s.tracking.as_ref().is_some_and(|t| t.pending());
            drop(s);
            if tracked {
                core.send_invalidations();
            }
        })
        .await;
    }
}

pub async fn migrate(conn: &mut Connection, args: Args<'_>) {
    let req = match parse(&args) {
        Ok(r) => r,
        Err(e) => return conn.error(e),
    };
    let Some(mut keys) = dump_keys(conn, &req, &args).await else {
        return conn.error(LOST);
    };
    if keys.is_empty() {
        return reply(conn, |r| r.simple("NOKEY"));
    }
    let (host, port) = (args.get(1), args.get(2));
    let name = [host, b":", port].concat();
    let body = restores(&req, &mut keys, conn.core.cluster().enabled());
    let mut may_retry = true;
    let (taken, error, link) = loop {
        let sent = match target::take(&name, host, port, req.timeout).await {
            Ok(link) => send(link, &req, &body, keys.len()).await,
            Err(NoLink::NoAddress) => return conn.error("IOERR error or timeout connecting to the client"),
            Err(NoLink::Failed(e)) => Sent::Failed { writing: true, timed_out: e.timed_out },
        };
        match sent {
            Sent::Replied { taken, error, link } => break (taken, error, link),
            // The link was dropped (closed); a cached one the target had
            // closed gets one more try on a fresh connection.
            Sent::Failed { timed_out, .. } if may_retry && !timed_out => may_retry = false,
            Sent::Failed { writing, .. } => {
                let what = if writing { "writing" } else { "reading" };
                return conn.error(&format!("IOERR error or timeout {what} to target instance"));
            }
        }
    };
    if let Some(link) = link {
        target::give_back(name, *link);
    }
    if !req.copy {
        let acked = keys.iter().zip(&taken).filter(|(_, t)| **t).map(|(k, _)| (k.shard, k.key.clone())).collect();
        delete_taken(conn, acked).await;
    }
    match error {
        None => reply(conn, |r| r.ok()),
        // A socket error after some replies: what was taken is deleted.
        Some(e) if e.is_empty() => conn.error("IOERR error or timeout reading to target instance"),
        Some(e) => {
            let text = String::from_utf8_lossy(&e[1..]).replace(['\r', '\n'], " ");
            conn.error(&format!("ERR Target instance replied with error: {text}"))
        }
    }
}
