//! SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, SSUBSCRIBE,
//! SUNSUBSCRIBE, PUBLISH, SPUBLISH and PUBSUB, with Redis 7.0's replies
//! (`pubsub.c`), plus the RESP2 subscribed-context rules (`server.c`'s
//! processCommand and pingCommand). The fan-out itself is `crate::pubsub`.

use crate::coordinator::dispatch::call_all;
use crate::pubsub::fanout::publish_here;
use crate::pubsub::publish::{announce, retract, tell};
use crate::pubsub::state::Kind;
use crate::push;
use crate::session::{Connection, Deferred};
use shard::{Args, CommandSpec};

/// Whether the command is one of this family's.
pub fn is_pubsub(spec: &CommandSpec) -> bool {
    matches!(
        spec.name,
        "subscribe"
            | "unsubscribe"
            | "psubscribe"
            | "punsubscribe"
            | "ssubscribe"
            | "sunsubscribe"
            | "publish"
            | "spublish"
    ) || spec.name.starts_with("pubsub")
}

/// Runs what needs no other core; the rest comes back as `Deferred`.
pub fn run_now(conn: &mut Connection, spec: &'static CommandSpec, args: Args) -> Option<Deferred> {
    match spec.name {
        "publish" => publish(conn, spec, Kind::Channel, &args),
        "spublish" => publish(conn, spec, Kind::Shard, &args),
        "subscribe" => return subscribe_now(conn, spec, Kind::Channel, &args),
        "psubscribe" => return subscribe_now(conn, spec, Kind::Pattern, &args),
        "ssubscribe" => return subscribe_now(conn, spec, Kind::Shard, &args),
        "unsubscribe" => unsubscribe(conn, Kind::Channel, &args),
        "punsubscribe" => unsubscribe(conn, Kind::Pattern, &args),
        "sunsubscribe" => unsubscribe(conn, Kind::Shard, &args),
        "pubsub|help" => help(conn),
        _ if conn.core.count == 1 => pubsub_info(conn, spec, &args, &[local_report(&conn.core, spec, &args)]),
        _ => return Some(Deferred::Command(spec)),
    }
    None
}

/// What `run_now` deferred: a subscription the other cores must learn of
/// first, or PUBSUB over every core.
pub async fn run_deferred(conn: &mut Connection, spec: &'static CommandSpec, args: Args<'_>) {
    match spec.name {
        "subscribe" => subscribe(conn, Kind::Channel, &args).await,
        "psubscribe" => subscribe(conn, Kind::Pattern, &args).await,
        "ssubscribe" => subscribe(conn, Kind::Shard, &args).await,
        _ => {
            let words: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
            let reports = call_all(&conn.core, move |core| {
                let ranges: Vec<(u32, u32)> = ranges_of(&words);
                let flat: Vec<u8> = words.concat();
                let args = Args::new(&flat, &ranges);
                local_report(core, spec, &args)
            })
            .await;
            let reports: Vec<Report> = reports.into_iter().flatten().collect();
            pubsub_info(conn, spec, &args, &reports);
        }
    }
}

fn ranges_of(words: &[Vec<u8>]) -> Vec<(u32, u32)> {
    let mut at = 0u32;
    words
        .iter()
        .map(|w| {
            let r = (at, at + w.len() as u32);
            at = r.1;
            r
        })
        .collect()
}

/// RESP2 with subscriptions: only the subscribe family, PING, QUIT and
/// RESET run (Redis's error otherwise); PING answers as an array. True
/// when the command was answered here.
pub fn refused_in_context(conn: &mut Connection, spec: &CommandSpec, args: &Args) -> bool {
    match spec.name {
        "subscribe" | "unsubscribe" | "psubscribe" | "punsubscribe" | "ssubscribe" | "sunsubscribe" | "quit"
        | "reset" => false,
        "ping" => {
            if args.len() > 2 {
                conn.reject(&shard::commands::arity_error("ping"));
            } else {
                let arg = if args.len() == 2 { args.get(1) } else { b"" };
                conn.pipeline.local(|out| crate::pubsub::fanout::encode(out, &[b"pong", arg]));
            }
            true
        }
        name => {
            conn.reject(&format!(
                "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
            ));
            true
        }
    }
}

fn publish(conn: &mut Connection, spec: &'static CommandSpec, kind: Kind, args: &Args) {
    let (channel, message) = (args.get(1), args.get(2));
    let mut mine = Vec::new();
    let local = publish_here(&conn.core, kind, channel, message, conn.state.id, &mut mine);
    if !mine.is_empty() {
        conn.pipeline.local(|out| out.extend_from_slice(&mine));
    }
    let targets: Vec<usize> = conn.core.pubsub.borrow().targets(conn.core.index, kind, channel).collect();
    if targets.is_empty() {
        let resp3 = conn.state.resp3;
        conn.pipeline.local(|out| shard::Reply::new(out, resp3).int(local as i64));
    } else {
        let (db, resp3) = (conn.state.db, conn.state.resp3);
        conn.pipeline.sum_with_remote(local, &targets, spec, db, resp3, args);
    }
}

/// SUBSCRIBE and friends at once when no name is new to this core (no
/// other core needs telling); else deferred.
fn subscribe_now(conn: &mut Connection, spec: &'static CommandSpec, kind: Kind, args: &Args) -> Option<Deferred> {
    if kind == Kind::Shard && conn.state.in_exec {
        conn.error("ERR SSUBSCRIBE isn't allowed for a DENY BLOCKING client");
        return None;
    }
    if conn.core.count > 1 {
        let subs = conn.core.pubsub.borrow();
        if args.iter().skip(1).any(|name| !subs.local[kind as usize].contains_key(name)) {
            return Some(Deferred::Command(spec));
        }
    }
    // Every name is known on this core: the others only count them.
    let (_, more) = register(conn, kind, args);
    sync_state(conn);
    tell(&conn.core, kind, more, 1);
    None
}

async fn subscribe(conn: &mut Connection, kind: Kind, args: &Args<'_>) {
    let (first, more) = register(conn, kind, args);
    sync_state(conn);
    announce(&conn.core, kind, first, more).await;
}

/// Subscribes the connection to every name of `args` and writes Redis's
/// replies; returns the names it subscribed to anew: those new on this
/// core, and the others.
fn register(conn: &mut Connection, kind: Kind, args: &Args) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let (core, state) = (&conn.core, &mut conn.state);
    let queue = push::attach(core, &mut state.push, state.id, state.registry_key, state.resp3);
    queue.subscribed.set(true);
    let (mut first, mut more) = (Vec::new(), Vec::new());
    let head: &[u8] = match kind {
        Kind::Channel => b"subscribe",
        Kind::Pattern => b"psubscribe",
        Kind::Shard => b"ssubscribe",
    };
    let resp3 = state.resp3;
    for name in args.iter().skip(1) {
        if !state.subscriptions.has(kind, name) {
            state.subscriptions.names[kind as usize].push(name.to_vec());
            if core.pubsub.borrow_mut().add(kind, name, &queue) {
                first.push(name.to_vec());
            } else {
                more.push(name.to_vec());
            }
        }
        let count = if kind == Kind::Shard { state.subscriptions.shard_count() } else { state.subscriptions.count() };
        conn.pipeline.push_local(|out| notice(out, resp3, head, Some(name), count));
    }
    (first, more)
}

fn unsubscribe(conn: &mut Connection, kind: Kind, args: &Args) {
    let head: &[u8] = match kind {
        Kind::Channel => b"unsubscribe",
        Kind::Pattern => b"punsubscribe",
        Kind::Shard => b"sunsubscribe",
    };
    let names: Vec<Vec<u8>> = if args.len() > 1 {
        args.iter().skip(1).map(|a| a.to_vec()).collect()
    } else {
        conn.state.subscriptions.names[kind as usize].clone()
    };
    let resp3 = conn.state.resp3;
    if names.is_empty() {
        let count = count_of(conn, kind);
        conn.pipeline.push_local(|out| notice(out, resp3, head, None, count));
    }
    let mut gone = Vec::new();
    for name in &names {
        if remove(conn, kind, name) {
            gone.push(name.clone());
        }
        let count = count_of(conn, kind);
        conn.pipeline.push_local(|out| notice(out, resp3, head, Some(name), count));
    }
    retract(&conn.core, kind, gone);
    sync_state(conn);
}

/// CLIENT LIST's sub= psub= ssub= and flags=P; the pubsub class of the
/// output buffer limit.
fn sync_state(conn: &Connection) {
    let counts = conn.state.subscriptions.names.each_ref().map(|n| n.len());
    if let Some(q) = &conn.state.push {
        q.subscribed.set(counts.iter().any(|&n| n > 0));
    }
    if let Some(c) = conn.core.clients.borrow_mut().list.get_mut(conn.state.registry_key) {
        c.subscriptions = counts;
    }
}

fn count_of(conn: &Connection, kind: Kind) -> usize {
    match kind {
        Kind::Shard => conn.state.subscriptions.shard_count(),
        _ => conn.state.subscriptions.count(),
    }
}

/// Drops one subscription of the connection; true when it had it.
fn remove(conn: &mut Connection, kind: Kind, name: &[u8]) -> bool {
    let list = &mut conn.state.subscriptions.names[kind as usize];
    let Some(at) = list.iter().position(|n| n == name) else { return false };
    list.remove(at);
    conn.core.pubsub.borrow_mut().remove(kind, name, conn.state.id);
    true
}

/// Every subscription dropped without replies (RESET, a closed
/// connection), the other cores told.
pub fn unsubscribe_all(conn: &mut Connection) {
    for kind in Kind::ALL {
        let names = std::mem::take(&mut conn.state.subscriptions.names[kind as usize]);
        if names.is_empty() {
            continue;
        }
        {
            let mut subs = conn.core.pubsub.borrow_mut();
            for name in &names {
                subs.remove(kind, name, conn.state.id);
            }
        }
        retract(&conn.core, kind, names);
    }
    sync_state(conn);
}

/// RESET: out of the subscribed state, back to RESP2.
pub fn reset(conn: &mut Connection) {
    unsubscribe_all(conn);
    if let Some(q) = &conn.state.push {
        q.resp3.set(false);
    }
}

/// A closed connection: its subscriptions and push queue go.
pub fn forget(conn: &mut Connection) {
    if conn.state.push.is_none() {
        return;
    }
    unsubscribe_all(conn);
    push::detach(&conn.core, conn.state.id);
    conn.state.push = None;
}

/// `*3 <head> <name or nil> :<count>` (a push in RESP3).
fn notice(out: &mut Vec<u8>, resp3: bool, head: &[u8], name: Option<&[u8]>, count: usize) {
    out.extend_from_slice(if resp3 { b">3\r\n" } else { b"*3\r\n" });
    bulk(out, head);
    match name {
        Some(name) => bulk(out, name),
        None if resp3 => out.extend_from_slice(b"_\r\n"),
        None => out.extend_from_slice(b"$-1\r\n"),
    }
    out.push(b':');
    out.extend_from_slice(itoa::Buffer::new().format(count).as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(itoa::Buffer::new().format(b.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

/// One core's part of a PUBSUB answer: names (CHANNELS, SHARDCHANNELS,
/// NUMPAT's patterns) or counts per argument (NUMSUB, SHARDNUMSUB).
pub enum Report {
    Names(Vec<Vec<u8>>),
    Counts(Vec<usize>),
}

fn local_report(core: &crate::core::Core, spec: &CommandSpec, args: &Args) -> Report {
    let subs = core.pubsub.borrow();
    let names = |kind: Kind, pattern: Option<&[u8]>| {
        Report::Names(
            subs.local[kind as usize]
                .keys()
                .filter(|n| pattern.is_none_or(|p| shard::glob::glob_match(p, n, false)))
                .cloned()
                .collect(),
        )
    };
    let counts = |kind: Kind| {
        Report::Counts(args.iter().skip(2).map(|c| subs.local[kind as usize].get(c).map_or(0, |l| l.len())).collect())
    };
    let pattern = (args.len() == 3).then(|| args.get(2));
    match spec.name {
        "pubsub|channels" => names(Kind::Channel, pattern),
        "pubsub|shardchannels" => names(Kind::Shard, pattern),
        "pubsub|numpat" => names(Kind::Pattern, None),
        "pubsub|numsub" => counts(Kind::Channel),
        _ => counts(Kind::Shard),
    }
}

/// PUBSUB's reply from every core's report: names are a set over cores.
fn pubsub_info(conn: &mut Connection, spec: &CommandSpec, args: &Args, reports: &[Report]) {
    let resp3 = conn.state.resp3;
    if matches!(spec.name, "pubsub|channels" | "pubsub|shardchannels") && args.len() > 3 {
        let msg = format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
            String::from_utf8_lossy(&args.get(1)[..args.get(1).len().min(128)])
        );
        return conn.error(&msg);
    }
    if spec.name == "pubsub|numpat" && args.len() != 2 {
        let msg = format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
            String::from_utf8_lossy(args.get(1))
        );
        return conn.error(&msg);
    }
    let mut names: Vec<&Vec<u8>> = Vec::new();
    let mut counts = vec![0usize; args.len().saturating_sub(2)];
    for r in reports {
        match r {
            Report::Names(n) => names.extend(n),
            Report::Counts(c) => counts.iter_mut().zip(c).for_each(|(t, n)| *t += n),
        }
    }
    names.sort();
    names.dedup();
    conn.pipeline.local(|out| {
        let mut reply = shard::Reply::new(out, resp3);
        match spec.name {
            "pubsub|numpat" => reply.int(names.len() as i64),
            "pubsub|channels" | "pubsub|shardchannels" => {
                reply.array(names.len());
                for n in names {
                    reply.bulk(n);
                }
            }
            _ => {
                reply.array(counts.len() * 2);
                for (i, n) in counts.iter().enumerate() {
                    reply.bulk(args.get(i + 2));
                    reply.int(*n as i64);
                }
            }
        }
    });
}

fn help(conn: &mut Connection) {
    const HELP: &[&str] = &[
        "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CHANNELS [<pattern>]",
        "    Return the currently active channels matching a <pattern> (default: '*').",
        "NUMPAT",
        "    Return number of subscriptions to patterns.",
        "NUMSUB [<channel> ...]",
        "    Return the number of subscribers for the specified channels, excluding",
        "    pattern subscriptions(default: no channels).",
        "SHARDCHANNELS [<pattern>]",
        "    Return the currently active shard level channels matching a <pattern> (default: '*').",
        "SHARDNUMSUB [<shardchannel> ...]",
        "    Return the number of subscribers for the specified shard level channel(s)",
        "HELP",
        "    Prints this help.",
    ];
    let resp3 = conn.state.resp3;
    conn.pipeline.local(|out| {
        let mut reply = shard::Reply::new(out, resp3);
        reply.array(HELP.len());
        for line in HELP {
            reply.simple(line);
        }
    });
}
