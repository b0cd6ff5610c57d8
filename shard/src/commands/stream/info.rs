//! XINFO STREAM [FULL [COUNT n]], GROUPS, CONSUMERS.

use super::{reply_entry, reply_id, reply_range, stream_read, subcommand_error, WrongType};
use crate::args::Args;
use crate::commands::Ctx;
use crate::reply::errors::*;
use crate::reply::Reply;
use crate::shard::Shard;
use crate::types::stream::group::INVALID_ENTRIES_READ;
use crate::types::stream::{Stream, StreamId};

pub fn xinfo_help(_s: &mut Shard, ctx: &mut Ctx, _args: Args) {
    super::group::help_lines(
        &mut ctx.reply,
        "XINFO",
        &[
            "CONSUMERS <key> <groupname>",
            "    Show consumers of <groupname>.",
            "GROUPS <key>",
            "    Show the stream consumer groups.",
            "STREAM <key> [FULL [COUNT <count>]",
            "    Show information about the stream.",
        ],
    );
}

fn lag(r: &mut Reply, s: &Stream, g: &crate::types::stream::group::Group) {
    match s.lag(g) {
        Some(n) => r.int(n),
        None => r.null(),
    }
}

fn entries_read(r: &mut Reply, n: i64) {
    if n != INVALID_ENTRIES_READ {
        r.int(n)
    } else {
        r.null()
    }
}

pub fn xinfo(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let sub = args.get(1);
    let (key, now) = (args.get(2), ctx.now);
    let st = match stream_read(s, ctx.db, key, now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(None) => return ctx.reply.error(NO_SUCH_KEY),
        Ok(Some(st)) => st,
    };
    let r = &mut ctx.reply;
    if sub.eq_ignore_ascii_case(b"consumers") && args.len() == 4 {
        let Some(g) = st.groups.get(args.get(3)) else {
            return r.error(&format!(
                "NOGROUP No such consumer group '{}' for key name '{}'",
                String::from_utf8_lossy(args.get(3)),
                String::from_utf8_lossy(key)
            ));
        };
        r.array(g.consumers.len());
        for c in g.consumers.values() {
            r.map(3);
            r.bulk(b"name");
            r.bulk(&c.name);
            r.bulk(b"pending");
            r.int(c.pel.len() as i64);
            r.bulk(b"idle");
            r.int((now as i64 - c.seen_time as i64).max(0));
        }
    } else if sub.eq_ignore_ascii_case(b"groups") && args.len() == 3 {
        r.array(st.groups.len());
        for (name, g) in &st.groups {
            r.map(6);
            r.bulk(b"name");
            r.bulk(name);
            r.bulk(b"consumers");
            r.int(g.consumers.len() as i64);
            r.bulk(b"pending");
            r.int(g.pel.len() as i64);
            r.bulk(b"last-delivered-id");
            reply_id(r, g.last_id);
            r.bulk(b"entries-read");
            entries_read(r, g.entries_read);
            r.bulk(b"lag");
            lag(r, st, g);
        }
    } else if sub.eq_ignore_ascii_case(b"stream") {
        stream_info(r, st, &args);
    } else {
        r.error(&subcommand_error(&args));
    }
}

fn stream_info(r: &mut Reply, s: &Stream, args: &Args) {
    let opts = args.len() - 3;
    let mut full = false;
    let mut count: i64 = 10;
    if opts != 0 {
        if (opts != 1 && opts != 3) || !args.is(3, "full") || (opts == 3 && !args.is(4, "count")) {
            return r.error(&subcommand_error(args));
        }
        full = true;
        if opts == 3 {
            match crate::args::parse_i64(args.get(5)) {
                Some(n) => count = if n < 0 { 10 } else { n },
                None => return r.error(NOT_INTEGER),
            }
        }
    }
    r.map(if full { 9 } else { 10 });
    r.bulk(b"length");
    r.int(s.length as i64);
    r.bulk(b"radix-tree-keys");
    r.int(s.nodes.len() as i64);
    r.bulk(b"radix-tree-nodes");
    r.int(s.rax_nodes() as i64);
    r.bulk(b"last-generated-id");
    reply_id(r, s.last_id);
    r.bulk(b"max-deleted-entry-id");
    reply_id(r, s.max_deleted_id);
    r.bulk(b"entries-added");
    r.int(s.entries_added as i64);
    r.bulk(b"recorded-first-entry-id");
    reply_id(r, s.first_id);
    if !full {
        r.bulk(b"groups");
        r.int(s.groups.len() as i64);
        for (label, rev) in [(&b"first-entry"[..], false), (&b"last-entry"[..], true)] {
            r.bulk(label);
            let mut done = false;
            s.range(StreamId::MIN, StreamId::MAX, rev, |id, node, e| {
                reply_entry(r, id, &node.fields(e));
                done = true;
                false
            });
            if !done {
                r.null();
            }
        }
        return;
    }
    let count = count as usize;
    r.bulk(b"entries");
    reply_range(r, s, StreamId::MIN, StreamId::MAX, count, false);
    r.bulk(b"groups");
    r.array(s.groups.len());
    for (name, g) in &s.groups {
        r.map(7);
        r.bulk(b"name");
        r.bulk(name);
        r.bulk(b"last-delivered-id");
        reply_id(r, g.last_id);
        r.bulk(b"entries-read");
        entries_read(r, g.entries_read);
        r.bulk(b"lag");
        lag(r, s, g);
        r.bulk(b"pel-count");
        r.int(g.pel.len() as i64);
        r.bulk(b"pending");
        let shown = if count == 0 { g.pel.len() } else { g.pel.len().min(count) };
        r.array(shown);
        for (id, nack) in g.pel.iter().take(shown) {
            r.array(4);
            reply_id(r, *id);
            r.bulk(nack.consumer.as_deref().unwrap_or_default());
            r.int(nack.delivery_time as i64);
            r.int(nack.delivery_count as i64);
        }
        r.bulk(b"consumers");
        r.array(g.consumers.len());
        for c in g.consumers.values() {
            r.map(4);
            r.bulk(b"name");
            r.bulk(&c.name);
            r.bulk(b"seen-time");
            r.int(c.seen_time as i64);
            r.bulk(b"pel-count");
            r.int(c.pel.len() as i64);
            r.bulk(b"pending");
            let shown = if count == 0 { c.pel.len() } else { c.pel.len().min(count) };
            r.array(shown);
            for id in c.pel.iter().take(shown) {
                let nack = &g.pel[id];
                r.array(3);
                reply_id(r, *id);
                r.int(nack.delivery_time as i64);
                r.int(nack.delivery_count as i64);
            }
        }
    }
}
