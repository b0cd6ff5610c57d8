//! Consumer group commands: XGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM.
//! XCLAIM and XAUTOCLAIM propagate as Redis does: one idempotent `XCLAIM
//! ... FORCE JUSTID LASTID` per pending entry they touched.

use super::{
    arg_i64, log_parts, parse_id, parse_interval, parse_start, parse_strict, reply_entry, reply_id, stream_mut,
    subcommand_error, WrongType,
};
use crate::args::Args;
use crate::commands::Ctx;
use crate::db::Ttl;
use crate::notify;
use crate::reply::errors::*;
use crate::shard::Shard;
use crate::types::stream::group::{Group, Nack, INVALID_ENTRIES_READ};
use crate::types::stream::{Stream, StreamId};
use crate::value::Value;
use std::sync::Arc;

pub fn help_lines(r: &mut crate::reply::Reply, cmd: &str, lines: &[&str]) {
    r.array(lines.len() + 3);
    r.simple(&format!("{cmd} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"));
    for l in lines {
        r.simple(l);
    }
    r.simple("HELP");
    r.simple("    Prints this help.");
}

pub fn xgroup_help(_s: &mut Shard, ctx: &mut Ctx, _args: Args) {
    help_lines(
        &mut ctx.reply,
        "XGROUP",
        &[
            "CREATE <key> <groupname> <id|$> [option]",
            "    Create a new consumer group. Options are:",
            "    * MKSTREAM",
            "      Create the empty stream if it does not exist.",
            "    * ENTRIESREAD entries_read",
            "      Set the group's entries_read counter (internal use).",
            "CREATECONSUMER <key> <groupname> <consumer>",
            "    Create a new consumer in the specified group.",
            "DELCONSUMER <key> <groupname> <consumer>",
            "    Remove the specified consumer.",
            "DESTROY <key> <groupname>",
            "    Remove the specified group.",
            "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
            "    Set the current group ID and entries_read counter.",
        ],
    );
}

/// An effect made of owned parts.
pub type Effect = Vec<Vec<u8>>;

/// `XCLAIM key group consumer 0 id TIME t RETRYCOUNT n FORCE JUSTID LASTID
/// last` (streamPropagateXCLAIM).
pub fn xclaim_effect(key: &[u8], group: &[u8], g: &Group, id: StreamId, nack: &Nack) -> Effect {
    vec![
        b"XCLAIM".to_vec(),
        key.to_vec(),
        group.to_vec(),
        nack.consumer.as_deref().unwrap_or_default().to_vec(),
        b"0".to_vec(),
        id.to_bytes(),
        b"TIME".to_vec(),
        nack.delivery_time.to_string().into_bytes(),
        b"RETRYCOUNT".to_vec(),
        nack.delivery_count.to_string().into_bytes(),
        b"FORCE".to_vec(),
        b"JUSTID".to_vec(),
        b"LASTID".to_vec(),
        g.last_id.to_bytes(),
    ]
}

/// `XGROUP SETID key group last ENTRIESREAD n` (streamPropagateGroupID).
pub fn setid_effect(key: &[u8], group: &[u8], g: &Group) -> Effect {
    vec![
        b"XGROUP".to_vec(),
        b"SETID".to_vec(),
        key.to_vec(),
        group.to_vec(),
        g.last_id.to_bytes(),
        b"ENTRIESREAD".to_vec(),
        g.entries_read.to_string().into_bytes(),
    ]
}

pub fn log_all(s: &mut Shard, db: usize, effects: &[Effect]) {
    for e in effects {
        log_parts(s, db, e);
    }
}

pub fn xgroup(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let sub = args.get(1);
    let create = sub.eq_ignore_ascii_case(b"create");
    let setid = sub.eq_ignore_ascii_case(b"setid");
    let mut mkstream = false;
    let mut entries_read = INVALID_ENTRIES_READ;
    let argc = args.len();
    let mut i = 5;
    while i < argc {
        if create && args.is(i, "mkstream") {
            mkstream = true;
            i += 1;
        } else if (create || setid) && args.is(i, "entriesread") && i + 1 < argc {
            match arg_i64(args.get(i + 1)) {
                Err(e) => return ctx.reply.error(e),
                Ok(n) if n < 0 && n != INVALID_ENTRIES_READ => {
                    return ctx.reply.error("ERR value for ENTRIESREAD must be positive or -1")
                }
                Ok(n) => entries_read = n,
            }
            i += 2;
        } else {
            return ctx.reply.error(&subcommand_error(&args));
        }
    }
    let (db, key, name) = (ctx.db, args.get(2), args.get(3));
    let exists = match stream_mut(&mut s.dbs[db], key, ctx.now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(st) => st.is_some(),
    };
    if !mkstream {
        if !exists {
            return ctx.reply.error(
                "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.",
            );
        }
        let has_group =
            matches!(stream_mut(&mut s.dbs[db], key, ctx.now), Ok(Some(st)) if st.groups.contains_key(name));
        let needs_group =
            setid || sub.eq_ignore_ascii_case(b"createconsumer") || sub.eq_ignore_ascii_case(b"delconsumer");
        if !has_group && needs_group {
            return ctx.reply.error(&format!(
                "NOGROUP No such consumer group '{}' for key name '{}'",
                String::from_utf8_lossy(name),
                String::from_utf8_lossy(key)
            ));
        }
    }
    let now = ctx.now;
    let verbatim = |s: &mut Shard| {
        let parts: Vec<Vec<u8>> = args.iter().map(<[u8]>::to_vec).collect();
        log_parts(s, db, &parts);
    };
    if create && (5..=8).contains(&argc) {
        let id = if args.get(4) == b"$" {
            match stream_mut(&mut s.dbs[db], key, now) {
                Ok(Some(st)) => st.last_id,
                _ => StreamId::MIN,
            }
        } else {
            match parse_strict(args.get(4)) {
                Ok(id) => id,
                Err(e) => return ctx.reply.error(e),
            }
        };
        if !exists {
            s.dbs[db].set(key, Value::Stream(Box::default()), Ttl::Clear, now);
        }
        let Ok(Some(st)) = stream_mut(&mut s.dbs[db], key, now) else { return };
        if st.groups.contains_key(name) {
            return ctx.reply.error("BUSYGROUP Consumer Group name already exists");
        }
        st.groups.insert(name.into(), Group::new(id, entries_read));
        ctx.reply.ok();
        s.notify(notify::STREAM, "xgroup-create", db, key);
        // A stream MKSTREAM made goes out as the XGROUP that made it.
        verbatim(s);
    } else if setid && (argc == 5 || argc == 7) {
        let Ok(Some(st)) = stream_mut(&mut s.dbs[db], key, now) else { return };
        let id = if args.get(4) == b"$" {
            st.last_id
        } else {
            match parse_id(args.get(4), 0, false, false) {
                Ok((id, _)) => id,
                Err(e) => return ctx.reply.error(e),
            }
        };
        let Some(g) = st.groups.get_mut(name) else { return };
        g.last_id = id;
        g.entries_read = entries_read;
        ctx.reply.ok();
        s.notify(notify::STREAM, "xgroup-setid", db, key);
        verbatim(s);
    } else if sub.eq_ignore_ascii_case(b"destroy") && argc == 4 {
        let Ok(Some(st)) = stream_mut(&mut s.dbs[db], key, now) else { return };
        if st.groups.remove(name).is_some() {
            ctx.reply.int(1);
            s.notify(notify::STREAM, "xgroup-destroy", db, key);
            verbatim(s);
        } else {
            ctx.reply.int(0);
        }
    } else if sub.eq_ignore_ascii_case(b"createconsumer") && argc == 5 {
        let Ok(Some(st)) = stream_mut(&mut s.dbs[db], key, now) else { return };
        let Some(g) = st.groups.get_mut(name) else { return };
        let created = g.create_consumer(args.get(4), now);
        ctx.reply.int(created as i64);
        if created {
            s.notify(notify::STREAM, "xgroup-createconsumer", db, key);
            verbatim(s);
        }
    } else if sub.eq_ignore_ascii_case(b"delconsumer") && argc == 5 {
        let Ok(Some(st)) = stream_mut(&mut s.dbs[db], key, now) else { return };
        let Some(g) = st.groups.get_mut(name) else { return };
        match g.delete_consumer(args.get(4)) {
            Some(pending) => {
                ctx.reply.int(pending as i64);
                s.notify(notify::STREAM, "xgroup-delconsumer", db, key);
                verbatim(s);
            }
            None => ctx.reply.int(0),
        }
    } else {
        ctx.reply.error(&subcommand_error(&args));
    }
}

pub fn xack(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let (db, key) = (ctx.db, args.get(1));
    let g = match stream_mut(&mut s.dbs[db], key, ctx.now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(None) => return ctx.reply.int(0),
        Ok(Some(st)) => match st.groups.get_mut(args.get(2)) {
            None => return ctx.reply.int(0),
            Some(g) => g,
        },
    };
    let mut ids = Vec::with_capacity(args.len() - 3);
    for i in 3..args.len() {
        match parse_strict(args.get(i)) {
            Ok(id) => ids.push(id),
            Err(e) => return ctx.reply.error(e),
        }
    }
    let acked = ids.iter().filter(|id| g.ack(**id)).count();
    ctx.reply.int(acked as i64);
    if acked > 0 {
        let parts: Vec<Vec<u8>> = args.iter().map(<[u8]>::to_vec).collect();
        log_parts(s, db, &parts);
    }
}

fn nogroup(key: &[u8], group: &[u8]) -> String {
    format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    )
}

pub fn xpending(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let argc = args.len();
    let justinfo = argc == 3;
    if argc != 3 && !(6..=9).contains(&argc) {
        return ctx.reply.error(SYNTAX);
    }
    let mut minidle: i64 = 0;
    let (mut start, mut end, mut count) = (StreamId::MIN, StreamId::MAX, 0i64);
    let mut consumer: Option<&[u8]> = None;
    if argc >= 6 {
        let mut at = 3;
        if args.is(3, "idle") {
            match arg_i64(args.get(4)) {
                Ok(n) => minidle = n,
                Err(e) => return ctx.reply.error(e),
            }
            if argc < 8 {
                return ctx.reply.error(SYNTAX);
            }
            at += 2;
        }
        count = match arg_i64(args.get(at + 2)) {
            Ok(n) => n.max(0),
            Err(e) => return ctx.reply.error(e),
        };
        start = match parse_start(args.get(at)) {
            Ok(id) => id,
            Err(e) => return ctx.reply.error(e),
        };
        end = match super::parse_end(args.get(at + 1)) {
            Ok(id) => id,
            Err(e) => return ctx.reply.error(e),
        };
        if at + 3 < argc {
            consumer = Some(args.get(at + 3));
        }
    }
    let (key, name, now) = (args.get(1), args.get(2), ctx.now);
    let g = match super::stream_read(s, ctx.db, key, now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(st) => match st.and_then(|st| st.groups.get(name)) {
            None => return ctx.reply.error(&nogroup(key, name)),
            Some(g) => g,
        },
    };
    let r = &mut ctx.reply;
    if justinfo {
        r.array(4);
        r.int(g.pel.len() as i64);
        match (g.pel.keys().next(), g.pel.keys().next_back()) {
            (Some(first), Some(last)) => {
                reply_id(r, *first);
                reply_id(r, *last);
                let with: Vec<_> = g.consumers.values().filter(|c| !c.pel.is_empty()).collect();
                r.array(with.len());
                for c in with {
                    r.array(2);
                    r.bulk(&c.name);
                    r.bulk_int(c.pel.len() as i64);
                }
            }
            _ => {
                r.null();
                r.null();
                r.null_array();
            }
        }
        return;
    }
    let ids: Vec<StreamId> = match consumer {
        Some(c) => match g.consumers.get(c) {
            None => return r.array(0),
            Some(c) => c.pel.range(start..=end.max(start)).copied().collect(),
        },
        None => g.pel.range(start..=end.max(start)).map(|(k, _)| *k).collect(),
    };
    let mut body = Vec::new();
    let mut n = 0;
    {
        let mut out = crate::reply::Reply::new(&mut body, r.resp3);
        for id in ids {
            if count == 0 || id > end {
                break;
            }
            let Some(nack) = g.pel.get(&id) else { continue };
            let idle = now as i64 - nack.delivery_time as i64;
            if minidle != 0 && idle < minidle {
                continue;
            }
            n += 1;
            count -= 1;
            out.array(4);
            reply_id(&mut out, id);
            out.bulk(nack.consumer.as_deref().unwrap_or_default());
            out.int(idle.max(0));
            out.int(nack.delivery_count as i64);
        }
    }
    r.array(n);
    r.raw(&body);
}

/// Makes `name` a consumer of `g` if needed (XCLAIM, XAUTOCLAIM,
/// XREADGROUP), refreshing its seen time; true when it was created (the
/// caller raises `xgroup-createconsumer`, as streamCreateConsumer does).
pub fn consumer_of(g: &mut Group, name: &[u8], now: u64) -> (Arc<[u8]>, bool) {
    let created = g.create_consumer(name, now);
    let c = g.consumers.get_mut(name).expect("consumer");
    c.seen_time = now;
    (c.name.clone(), created)
}

pub fn xclaim(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let (db, key, name, now) = (ctx.db, args.get(1), args.get(2), ctx.now);
    let st = match stream_mut(&mut s.dbs[db], key, now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(Some(st)) if st.groups.contains_key(name) => st,
        Ok(_) => return ctx.reply.error(&nogroup(key, name)),
    };
    let minidle = match crate::args::parse_i64(args.get(4)) {
        Some(n) => n.max(0),
        None => return ctx.reply.error("ERR Invalid min-idle-time argument for XCLAIM"),
    };
    let mut ids = Vec::new();
    let mut j = 5;
    while j < args.len() {
        match parse_strict(args.get(j)) {
            Ok(id) => ids.push(id),
            Err(_) => break,
        }
        j += 1;
    }
    let (mut force, mut justid) = (false, false);
    let mut retrycount: i64 = -1;
    let mut deliverytime: i64 = -1;
    let mut last_id = StreamId::MIN;
    while j < args.len() {
        let more = args.len() - 1 - j;
        let opt = args.get(j);
        let int = |j: usize, what: &str| {
            crate::args::parse_i64(args.get(j)).ok_or_else(|| format!("ERR Invalid {what} option argument for XCLAIM"))
        };
        if opt.eq_ignore_ascii_case(b"force") {
            force = true;
        } else if opt.eq_ignore_ascii_case(b"justid") {
            justid = true;
        } else if opt.eq_ignore_ascii_case(b"idle") && more > 0 {
            j += 1;
            match int(j, "IDLE") {
                Ok(n) => deliverytime = (now as i64).wrapping_sub(n),
                Err(e) => return ctx.reply.error(&e),
            }
        } else if opt.eq_ignore_ascii_case(b"time") && more > 0 {
            j += 1;
            match int(j, "TIME") {
                Ok(n) => deliverytime = n,
                Err(e) => return ctx.reply.error(&e),
            }
        } else if opt.eq_ignore_ascii_case(b"retrycount") && more > 0 {
            j += 1;
            match int(j, "RETRYCOUNT") {
                Ok(n) => retrycount = n,
                Err(e) => return ctx.reply.error(&e),
            }
        } else if opt.eq_ignore_ascii_case(b"lastid") && more > 0 {
            j += 1;
            match parse_strict(args.get(j)) {
                Ok(id) => last_id = id,
                Err(e) => return ctx.reply.error(e),
            }
        } else {
            return ctx.reply.error(&format!("ERR Unrecognized XCLAIM option '{}'", String::from_utf8_lossy(opt)));
        }
        j += 1;
    }
    let mut effects: Vec<super::group::Effect> = Vec::new();
    let mut propagate_last_id = false;
    let created;
    {
        let exists: Vec<bool> = ids.iter().map(|id| st.exists(*id)).collect();
        let Stream { groups, .. } = &mut *st;
        let g = groups.get_mut(name).expect("group");
        if last_id > g.last_id {
            g.last_id = last_id;
            propagate_last_id = true;
        }
        let deliverytime = if deliverytime < 0 || deliverytime > now as i64 { now } else { deliverytime as u64 };
        let mut claimed: Vec<StreamId> = Vec::new();
        let mut consumer: Option<(Arc<[u8]>, bool)> = None;
        for (id, exists) in ids.iter().zip(exists) {
            let id = *id;
            if !exists {
                if let Some(nack) = g.pel.get(&id) {
                    effects.push(xclaim_effect(key, name, g, id, nack));
                    propagate_last_id = false;
                    g.ack(id);
                }
                continue;
            }
            if force && !g.pel.contains_key(&id) {
                g.pel.insert(id, Nack { delivery_time: now, delivery_count: 1, consumer: None });
            }
            let Some(nack) = g.pel.get(&id) else { continue };
            if nack.consumer.is_some() && minidle != 0 {
                let idle = now as i64 - nack.delivery_time as i64;
                if idle < minidle {
                    continue;
                }
            }
            let c = consumer.get_or_insert_with(|| consumer_of(g, args.get(3), now)).0.clone();
            g.assign(id, &c, now, false);
            let nack = g.pel.get_mut(&id).expect("nack");
            nack.delivery_time = deliverytime;
            if retrycount >= 0 {
                nack.delivery_count = retrycount as u64;
            } else if !justid {
                nack.delivery_count += 1;
            }
            claimed.push(id);
            let nack = g.pel.get(&id).expect("nack");
            effects.push(xclaim_effect(key, name, g, id, nack));
            propagate_last_id = false;
        }
        if propagate_last_id {
            effects.push(setid_effect(key, name, g));
        }
        reply_claimed(&mut ctx.reply, st, &claimed, justid);
        created = consumer.is_some_and(|(_, created)| created);
    }
    if created {
        s.notify(notify::STREAM, "xgroup-createconsumer", db, key);
    }
    log_all(s, db, &effects);
}

/// The entries an XCLAIM or XAUTOCLAIM took: their IDs (JUSTID) or the
/// entries themselves (an empty field list for one deleted meanwhile).
fn reply_claimed(r: &mut crate::reply::Reply, st: &Stream, claimed: &[StreamId], justid: bool) {
    r.array(claimed.len());
    for &id in claimed {
        if justid {
            reply_id(r, id);
        } else {
            let fields = st.get(id).unwrap_or_default();
            reply_entry(r, id, &fields);
        }
    }
}

pub fn xautoclaim(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let (db, key, name, now) = (ctx.db, args.get(1), args.get(2), ctx.now);
    let minidle = match crate::args::parse_i64(args.get(4)) {
        Some(n) => n.max(0),
        None => return ctx.reply.error("ERR Invalid min-idle-time argument for XAUTOCLAIM"),
    };
    let start = match parse_interval(args.get(5), 0) {
        Ok((id, false)) => id,
        Ok((id, true)) => match id.incr() {
            Some(id) => id,
            None => return ctx.reply.error("ERR invalid start ID for the interval"),
        },
        Err(e) => return ctx.reply.error(e),
    };
    let mut count: i64 = 100;
    let mut justid = false;
    let mut j = 6;
    while j < args.len() {
        let more = args.len() - 1 - j;
        if args.is(j, "count") && more > 0 {
            let max = i64::MAX / 16;
            match crate::args::parse_i64(args.get(j + 1)) {
                Some(n) if (1..=max).contains(&n) => count = n,
                _ => return ctx.reply.error("ERR COUNT must be > 0"),
            }
            j += 1;
        } else if args.is(j, "justid") {
            justid = true;
        } else {
            return ctx.reply.error(SYNTAX);
        }
        j += 1;
    }
    let st = match stream_mut(&mut s.dbs[db], key, now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(Some(st)) if st.groups.contains_key(name) => st,
        Ok(_) => return ctx.reply.error(&nogroup(key, name)),
    };
    let mut attempts = count * 10;
    let mut effects = Vec::new();
    let mut claimed = Vec::new();
    let mut deleted = Vec::new();
    let pending: Vec<StreamId> = st.groups[name].pel.range(start..).map(|(k, _)| *k).collect();
    let exists: Vec<bool> = pending.iter().map(|id| st.exists(*id)).collect();
    let g = st.groups.get_mut(name).expect("group");
    let mut consumer: Option<(Arc<[u8]>, bool)> = None;
    let mut at = 0;
    while attempts > 0 && count > 0 && at < pending.len() {
        attempts -= 1;
        let id = pending[at];
        let live = exists[at];
        at += 1;
        if !live {
            if let Some(nack) = g.pel.get(&id) {
                effects.push(xclaim_effect(key, name, g, id, nack));
            }
            g.ack(id);
            deleted.push(id);
            count -= 1;
            continue;
        }
        let Some(nack) = g.pel.get(&id) else { continue };
        if minidle != 0 && (now as i64 - nack.delivery_time as i64) < minidle {
            continue;
        }
        let c = consumer.get_or_insert_with(|| consumer_of(g, args.get(3), now)).0.clone();
        g.assign(id, &c, now, false);
        let nack = g.pel.get_mut(&id).expect("nack");
        nack.delivery_time = now;
        if !justid {
            nack.delivery_count += 1;
        }
        claimed.push(id);
        count -= 1;
        let nack = g.pel.get(&id).expect("nack");
        effects.push(xclaim_effect(key, name, g, id, nack));
    }
    let next = pending.get(at).copied().unwrap_or(StreamId::MIN);
    let r = &mut ctx.reply;
    r.array(3);
    reply_id(r, next);
    reply_claimed(r, st, &claimed, justid);
    r.array(deleted.len());
    for id in deleted {
        reply_id(r, id);
    }
    if consumer.is_some_and(|(_, created)| created) {
        s.notify(notify::STREAM, "xgroup-createconsumer", db, key);
    }
    log_all(s, db, &effects);
}
