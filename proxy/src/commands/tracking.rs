//! Client-side caching commands: CLIENT TRACKING, CACHING, GETREDIR,
//! TRACKINGINFO (Redis 7.0's networking.c clientCommand and tracking.c).
//! A client's mode lives in its registry entry (`clients::Tracking`), where
//! invalidations arriving from any shard read it; the identity each command
//! runs with (`Caller`) travels with it to the keys' owners.

use super::reply::reply;
use crate::clients::Tracking;
use crate::coordinator::dispatch::{call, call_all};
use crate::push::queue::core_of;
use crate::session::Connection;
use shard::args::parse_i64;
use shard::reply::errors::{NOT_INTEGER, SYNTAX};
use shard::tracking::Caller;
use shard::Args;

fn mode(conn: &Connection) -> Option<Tracking> {
    conn.core.clients.borrow().list.get(conn.state.registry_key).and_then(|c| c.tracking.as_deref().cloned())
}

fn set_mode(conn: &mut Connection, mode: Option<Tracking>) {
    conn.state.tracking = mode.is_some();
    if mode.is_none() {
        conn.pipeline.caller = Caller::default();
    }
    if let Some(c) = conn.core.clients.borrow_mut().list.get_mut(conn.state.registry_key) {
        c.tracking = mode.map(Box::new);
    }
}

/// Before a tracking client's command runs: the identity it runs with
/// (its reads remembered unless BCAST, or OPTIN/OPTOUT and CLIENT CACHING
/// say otherwise).
pub fn before_command(conn: &mut Connection) {
    let clients = conn.core.clients.borrow();
    let Some(t) = clients.list.get(conn.state.registry_key).and_then(|c| c.tracking.as_ref()) else {
        drop(clients);
        conn.pipeline.caller = Caller::default();
        return;
    };
    // OPTIN reads only after CACHING yes; OPTOUT all but after CACHING no.
    let remember = !t.bcast && (!t.optin || t.caching) && (!t.optout || !t.caching);
    drop(clients);
    conn.pipeline.caller = Caller::new(conn.state.id, remember);
}

/// After a tracking client's command, refused or run: CLIENT CACHING is
/// spent unless the client is in MULTI or the command was CLIENT's (Redis's
/// resetClient), so it lasts for the next command or transaction (EXEC
/// also spends it, `end_transaction`).
pub fn after_command(conn: &mut Connection) {
    let client_command = conn.tally.spec.is_some_and(|s| s.name.starts_with("client|"));
    if conn.state.multi.is_none() && !client_command {
        end_transaction(conn);
    }
}

/// EXEC done: CLIENT CACHING given before MULTI is spent.
pub fn end_transaction(conn: &mut Connection) {
    if let Some(t) =
        conn.core.clients.borrow_mut().list.get_mut(conn.state.registry_key).and_then(|c| c.tracking.as_mut())
    {
        t.caching = false;
    }
}

/// Whether client `id` is connected (on whichever core, as Redis's
/// lookupClientByID); if so, this client redirects to it from now and
/// hears when it closes.
async fn redirect_to(conn: &Connection, id: i64) -> bool {
    if id <= 0 {
        return false;
    }
    let (id, tracker) = (id as u64, conn.state.id);
    call(&conn.core, core_of(id, conn.core.count), move |core| crate::tracking::watch(core, id, tracker))
        .await
        .unwrap_or(false)
}

/// This client no longer redirects to `redirect` (another target, or
/// tracking off).
async fn stop_redirecting(conn: &Connection, redirect: u64) {
    let tracker = conn.state.id;
    call(&conn.core, core_of(redirect, conn.core.count), move |core| crate::tracking::unwatch(core, redirect, tracker))
        .await;
    crate::tracking::forget_gone(&conn.core, redirect);
}

/// CLIENT TRACKING on|off [REDIRECT id] [BCAST] [PREFIX p]... [OPTIN]
/// [OPTOUT] [NOLOOP], with Redis's checks in Redis's order.
pub async fn tracking(conn: &mut Connection, args: Args<'_>) {
    let (mut redirect, mut bcast, mut optin, mut optout, mut noloop) = (0i64, false, false, false, false);
    let mut prefixes: Vec<Vec<u8>> = Vec::new();
    let mut j = 3;
    while j < args.len() {
        let more = args.len() - 1 - j;
        if args.is(j, "redirect") && more > 0 {
            j += 1;
            if redirect != 0 {
                return conn.error("ERR A client can only redirect to a single other client");
            }
            let Some(id) = parse_i64(args.get(j)) else { return conn.error(NOT_INTEGER) };
            redirect = id;
            if !redirect_to(conn, id).await {
                return conn.error("ERR The client ID you want redirect to does not exist");
            }
        } else if args.is(j, "bcast") {
            bcast = true;
        } else if args.is(j, "optin") {
            optin = true;
        } else if args.is(j, "optout") {
            optout = true;
        } else if args.is(j, "noloop") {
            noloop = true;
        } else if args.is(j, "prefix") && more > 0 {
            j += 1;
            prefixes.push(args.get(j).to_vec());
        } else {
            return conn.error(SYNTAX);
        }
        j += 1;
    }
    let current = mode(conn);
    if args.is(2, "on") {
        if !bcast && !prefixes.is_empty() {
            return conn.error("ERR PREFIX option requires BCAST mode to be enabled");
        }
        if current.as_ref().is_some_and(|t| t.bcast != bcast) {
            return conn.error("ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.");
        }
        if bcast && (optin || optout) {
            return conn.error("ERR OPTIN and OPTOUT are not compatible with BCAST");
        }
        if optin && optout {
            return conn.error("ERR You can't specify both OPTIN mode and OPTOUT mode");
        }
        if current.as_ref().is_some_and(|t| (optin && t.optout) || (optout && t.optin)) {
            return conn.error("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.");
        }
        let existing = current.as_ref().map(|t| t.prefixes.clone()).unwrap_or_default();
        if bcast {
            if let Some(msg) = prefix_collision(&existing, &prefixes) {
                return conn.error(&msg);
            }
            if prefixes.is_empty() {
                prefixes.push(Vec::new());
            }
        }
        let mut all = existing;
        for p in &prefixes {
            if !all.contains(p) {
                all.push(p.clone());
            }
        }
        all.sort();
        // Every shard's table exists from now (FLUSHALL's announcement,
        // BCAST's prefixes).
        let (id, added) = (conn.state.id, if bcast { prefixes } else { Vec::new() });
        call_all(&conn.core, move |core| {
            let mut shard = core.shard.borrow_mut();
            let table = shard.tracking_table();
            table.add_prefixes(id, &added);
        })
        .await;
        let (id, key, resp3) = (conn.state.id, conn.state.registry_key, conn.state.resp3);
        crate::push::attach(&conn.core, &mut conn.state.push, id, key, resp3);
        let caching = current.as_ref().is_some_and(|t| t.caching);
        let old_redirect = current.as_ref().map_or(0, |t| t.redirect);
        set_mode(
            conn,
            Some(Tracking {
                redirect: redirect as u64,
                bcast,
                optin,
                optout,
                noloop,
                caching,
                broken_redirect: false,
                prefixes: if bcast { all } else { Vec::new() },
            }),
        );
        if old_redirect != 0 && old_redirect != redirect as u64 {
            stop_redirecting(conn, old_redirect).await;
        }
    } else if args.is(2, "off") {
        disable(conn).await;
    } else {
        return conn.error(SYNTAX);
    }
    reply(conn, |r| r.ok());
}

/// Redis's checkPrefixCollisionsOrReply: no new prefix may be a prefix of
/// an existing one or of another new one, nor the other way round.
fn prefix_collision(existing: &[Vec<u8>], new: &[Vec<u8>]) -> Option<String> {
    let overlap = |a: &[u8], b: &[u8]| {
        let n = a.len().min(b.len());
        a[..n] == b[..n]
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for (i, p) in new.iter().enumerate() {
        if let Some(old) = existing.iter().find(|old| overlap(old, p)) {
            return Some(format!(
                "ERR Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.",
                text(p),
                text(old)
            ));
        }
        if let Some(other) = new[i + 1..].iter().find(|q| overlap(p, q)) {
            return Some(format!(
                "ERR Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.",
                text(p),
                text(other)
            ));
        }
    }
    None
}

/// Tracking off (CLIENT TRACKING off, RESET, a closed connection): its
/// BCAST prefixes leave every shard. Keys it read stay in the tables until
/// they change; their invalidations find it off and are dropped.
pub async fn disable(conn: &mut Connection) {
    let Some(current) = mode(conn) else { return };
    set_mode(conn, None);
    if current.redirect != 0 {
        stop_redirecting(conn, current.redirect).await;
    }
    if current.bcast {
        let id = conn.state.id;
        call_all(&conn.core, move |core| {
            if let Some(t) = core.shard.borrow_mut().tracking.as_mut() {
                t.remove_client(id);
            }
        })
        .await;
    }
}

pub fn caching(conn: &mut Connection, args: Args) {
    let Some(mut t) = mode(conn) else {
        return conn.error(
            "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled",
        );
    };
    if args.is(2, "yes") {
        if !t.optin {
            return conn.error("ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.");
        }
    } else if args.is(2, "no") {
        if !t.optout {
            return conn.error("ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.");
        }
    } else {
        return conn.error(SYNTAX);
    }
    t.caching = true;
    set_mode(conn, Some(t));
    reply(conn, |r| r.ok());
}

pub fn getredir(conn: &mut Connection) {
    let redirect = mode(conn).map_or(-1, |t| t.redirect as i64);
    reply(conn, |r| r.int(redirect));
}

pub fn trackinginfo(conn: &mut Connection) {
    let t = mode(conn);
    let mut flags: Vec<&str> = vec![if t.is_some() { "on" } else { "off" }];
    if let Some(t) = &t {
        let optional = [
            (t.bcast, "bcast"),
            (t.optin, "optin"),
            (t.optin && t.caching, "caching-yes"),
            (t.optout, "optout"),
            (t.optout && t.caching, "caching-no"),
            (t.noloop, "noloop"),
            (t.broken_redirect, "broken_redirect"),
        ];
        flags.extend(optional.iter().filter(|(on, _)| *on).map(|(_, name)| *name));
    }
    reply(conn, |r| {
        r.map(3);
        r.bulk(b"flags");
        r.set(flags.len());
        for f in &flags {
            r.bulk(f.as_bytes());
        }
        r.bulk(b"redirect");
        r.int(t.as_ref().map_or(-1, |t| t.redirect as i64));
        r.bulk(b"prefixes");
        let prefixes = t.map(|t| t.prefixes).unwrap_or_default();
        r.array(prefixes.len());
        for p in &prefixes {
            r.bulk(p);
        }
    });
}
