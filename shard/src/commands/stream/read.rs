//! XREAD and XREADGROUP on the keys' owner: parsing, the checks and `$`
//! resolution (`check`), and serving one key (`serve`) at once or for a
//! blocked client. The proxy splits the keys over their shards and joins
//! the replies (proxy/src/commands/stream.rs).

use super::group::{consumer_of, log_all, setid_effect, xclaim_effect, Effect};
use super::{parse_strict, reply_entry, reply_id, stream_mut, WrongType};
use crate::args::Args;
use crate::reply::errors::*;
use crate::reply::Reply;
use crate::shard::Shard;
use crate::types::stream::group::INVALID_ENTRIES_READ;
use crate::types::stream::StreamId;

/// `XREAD_BLOCKED_DEFAULT_COUNT`: a blocked read without COUNT.
pub const BLOCKED_DEFAULT_COUNT: u64 = 1000;

#[derive(Clone, Debug, Default)]
pub struct XRead {
    /// BLOCK's milliseconds (0: for ever).
    pub block: Option<u64>,
    /// 0: no limit.
    pub count: u64,
    /// GROUP's group and consumer (XREADGROUP).
    pub group: Option<(Vec<u8>, Vec<u8>)>,
    pub noack: bool,
    pub keys: Vec<Vec<u8>>,
    pub ids: Vec<Vec<u8>>,
}

/// The reply pieces of the keys served, by key index.
pub type Pieces = Vec<(usize, Vec<u8>)>;

/// The index of the first key that failed, and its error.
pub type KeyError = (usize, String);

/// Where a key's read starts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum From {
    /// Entries after this ID (XREAD, `$` resolved; XREADGROUP's history).
    After(StreamId),
    /// `>`: the group's new entries.
    New,
}

/// Parses XREAD/XREADGROUP's options (xreadCommand).
pub fn parse(args: &Args, xreadgroup: bool) -> Result<XRead, String> {
    let mut x = XRead::default();
    let argc = args.len();
    let mut streams_at = 0;
    let mut i = 1;
    while i < argc {
        let more = argc - i - 1;
        if args.is(i, "block") && more > 0 {
            i += 1;
            let ms = crate::args::parse_i64(args.get(i))
                .ok_or_else(|| "ERR timeout is not an integer or out of range".to_string())?;
            if ms < 0 {
                return Err("ERR timeout is negative".into());
            }
            x.block = Some(ms as u64);
        } else if args.is(i, "count") && more > 0 {
            i += 1;
            x.count = crate::args::parse_i64(args.get(i)).ok_or_else(|| NOT_INTEGER.to_string())?.max(0) as u64;
        } else if args.is(i, "streams") && more > 0 {
            streams_at = i + 1;
            let n = argc - streams_at;
            if !n.is_multiple_of(2) {
                return Err(
                    "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.".into(),
                );
            }
            let n = n / 2;
            x.keys = (streams_at..streams_at + n).map(|j| args.get(j).to_vec()).collect();
            x.ids = (streams_at + n..argc).map(|j| args.get(j).to_vec()).collect();
            break;
        } else if args.is(i, "group") && more >= 2 {
            if !xreadgroup {
                return Err("ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.".into());
            }
            x.group = Some((args.get(i + 1).to_vec(), args.get(i + 2).to_vec()));
            i += 2;
        } else if args.is(i, "noack") {
            if !xreadgroup {
                return Err("ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.".into());
            }
            x.noack = true;
        } else {
            return Err(SYNTAX.into());
        }
        i += 1;
    }
    if streams_at == 0 {
        return Err(SYNTAX.into());
    }
    if xreadgroup && x.group.is_none() {
        return Err("ERR Missing GROUP option for XREADGROUP".into());
    }
    Ok(x)
}

/// The checks of keys `which` in order (type, group, ID), `$` resolved:
/// the first failing key's index and error otherwise.
pub fn check(s: &mut Shard, db: usize, now: u64, x: &XRead, which: &[usize]) -> Result<Vec<From>, KeyError> {
    let mut out = Vec::with_capacity(which.len());
    for &i in which {
        let key = &x.keys[i];
        let st = match stream_mut(&mut s.dbs[db], key, now) {
            Err(WrongType) => return Err((i, WRONGTYPE.into())),
            Ok(st) => st,
        };
        if let Some((group, _)) = &x.group {
            if st.as_ref().and_then(|st| st.groups.get(group.as_slice())).is_none() {
                return Err((
                    i,
                    format!(
                        "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                        String::from_utf8_lossy(key),
                        String::from_utf8_lossy(group)
                    ),
                ));
            }
        }
        let id = x.ids[i].as_slice();
        let from = if id == b"$" {
            if x.group.is_some() {
                return Err((i, "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.".into()));
            }
            From::After(st.map(|st| st.last_id).unwrap_or_default())
        } else if id == b">" {
            if x.group.is_none() {
                return Err((
                    i,
                    "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option."
                        .into(),
                ));
            }
            From::New
        } else {
            match parse_strict(id) {
                Ok(id) => From::After(id),
                Err(e) => return Err((i, e.into())),
            }
        };
        out.push(from);
    }
    Ok(out)
}

/// Serves `key` from `from` (xreadCommand's synchronous part, or
/// serveClientsBlockedOnStreamKey when `blocked`): the reply piece for this
/// key (`[key, entries]`, or `key entries` in a RESP3 map) or `None` when
/// there is nothing to send. Group reads log their effects.
#[allow(clippy::too_many_arguments)]
pub fn serve(
    s: &mut Shard,
    db: usize,
    now: u64,
    resp3: bool,
    x: &XRead,
    key: &[u8],
    from: From,
    blocked: bool,
) -> Option<Vec<u8>> {
    let mut effects: Vec<Effect> = Vec::new();
    let mut piece = Vec::new();
    let created;
    let count = if blocked && x.count == 0 { BLOCKED_DEFAULT_COUNT } else { x.count } as usize;
    {
        let st = match stream_mut(&mut s.dbs[db], key, now) {
            Ok(Some(st)) => st,
            _ => return None,
        };
        let mut r = Reply::new(&mut piece, resp3);
        let start_piece = |r: &mut Reply| {
            if !r.resp3 {
                r.array(2);
            }
            r.bulk(key);
        };
        let Some((gname, cname)) = &x.group else {
            let From::After(gt) = from else { return None };
            let top = if blocked { st.last_id } else { st.last_valid_id() };
            if (st.length == 0 && !blocked) || top <= gt {
                return None;
            }
            start_piece(&mut r);
            super::reply_range(&mut r, st, gt.incr()?, StreamId::MAX, count, false);
            return Some(piece);
        };
        let Some(g) = st.groups.get(gname.as_slice()) else {
            if blocked {
                r.error("NOGROUP the consumer group this client was blocked on no longer exists");
                return Some(piece);
            }
            return None;
        };
        let (gt, history) = match from {
            From::After(id) if !blocked => (id, true),
            _ => {
                let top = if blocked { st.last_id } else { st.last_valid_id() };
                if (!blocked && st.length == 0) || top <= g.last_id {
                    return None;
                }
                (g.last_id, false)
            }
        };
        start_piece(&mut r);
        let g = st.groups.get_mut(gname.as_slice()).expect("group");
        let consumer;
        (consumer, created) = consumer_of(g, cname, now);
        if created && x.noack {
            effects.push(vec![
                b"XGROUP".to_vec(),
                b"CREATECONSUMER".to_vec(),
                key.to_vec(),
                gname.clone(),
                cname.clone(),
            ]);
        }
        let start = gt.incr().unwrap_or(StreamId::MAX);
        if history {
            let ids: Vec<StreamId> = g.consumers[&consumer]
                .pel
                .range(start..)
                .take(if count == 0 { usize::MAX } else { count })
                .copied()
                .collect();
            r.array(ids.len());
            let live: Vec<bool> = ids.iter().map(|id| st.exists(*id)).collect();
            for (id, live) in ids.iter().zip(live) {
                if live {
                    let fields = st.get(*id).unwrap_or_default();
                    reply_entry(&mut r, *id, &fields);
                    if let Some(n) = st.groups.get_mut(gname.as_slice()).and_then(|g| g.pel.get_mut(id)) {
                        n.delivery_time = now;
                        n.delivery_count += 1;
                    }
                } else {
                    r.array(2);
                    reply_id(&mut r, *id);
                    r.null_array();
                }
            }
        } else {
            // The entries to deliver, then the group's bookkeeping per entry.
            let mut ids = Vec::new();
            let mut body = Vec::new();
            {
                let mut inner = Reply::new(&mut body, resp3);
                st.range(start, StreamId::MAX, false, |id, node, e| {
                    reply_entry(&mut inner, id, &node.fields(e));
                    ids.push(id);
                    count == 0 || ids.len() < count
                });
            }
            r.array(ids.len());
            r.raw(&body);
            let mut advanced = false;
            for id in ids {
                let tombstones = st.range_has_tombstones(Some(id), None);
                let estimate = st.estimate_distance(id);
                let added = st.entries_added;
                let g = st.groups.get_mut(gname.as_slice()).expect("group");
                if id > g.last_id {
                    if g.entries_read != INVALID_ENTRIES_READ && !tombstones {
                        g.entries_read += 1;
                    } else if added != 0 {
                        g.entries_read = estimate.map_or(INVALID_ENTRIES_READ, |n| n as i64);
                    }
                    g.last_id = id;
                    advanced = true;
                }
                if !x.noack {
                    // A new pending entry, or one delivered again after
                    // XGROUP SETID: this consumer's, delivered now, once.
                    g.assign(id, &consumer, now, true);
                    let nack = &g.pel[&id];
                    effects.push(xclaim_effect(key, gname, g, id, nack));
                }
            }
            if x.noack && advanced {
                let g = &st.groups[gname.as_slice()];
                effects.push(setid_effect(key, gname, g));
            }
        }
    }
    if created {
        s.notify(crate::notify::STREAM, "xgroup-createconsumer", db, key);
    }
    log_all(s, db, &effects);
    Some(piece)
}

/// The whole read on one shard holding every key (or a part of the keys:
/// `which`): the pieces of the keys served, in order, or the first error.
pub fn run(s: &mut Shard, db: usize, now: u64, resp3: bool, x: &XRead, which: &[usize]) -> Result<Pieces, KeyError> {
    let froms = check(s, db, now, x, which)?;
    Ok(serve_resolved(s, db, now, resp3, x, which, &froms))
}

/// Serves keys `which` from their resolved starts.
pub fn serve_resolved(
    s: &mut Shard,
    db: usize,
    now: u64,
    resp3: bool,
    x: &XRead,
    which: &[usize],
    froms: &[From],
) -> Vec<(usize, Vec<u8>)> {
    let mut out = Vec::new();
    for (&i, &from) in which.iter().zip(froms) {
        if let Some(piece) = serve(s, db, now, resp3, x, &x.keys[i], from, false) {
            out.push((i, piece));
        }
    }
    out
}

/// The reply of a read from its pieces: an array (RESP2) or a map (RESP3)
/// of the keys served; a null array when none was.
pub fn join(resp3: bool, pieces: &[(usize, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut r = Reply::new(&mut out, resp3);
    if pieces.is_empty() {
        r.null_array();
        return out;
    }
    if resp3 {
        r.map(pieces.len());
    } else {
        r.array(pieces.len());
    }
    for (_, p) in pieces {
        out.extend_from_slice(p);
    }
    out
}

/// XREAD/XREADGROUP run as one command on one shard holding every key
/// (scripts, which gather other shards' keys first): never blocks.
pub fn xread_command(s: &mut Shard, ctx: &mut crate::commands::Ctx, args: Args) {
    let x = match parse(&args, args.get(0).eq_ignore_ascii_case(b"xreadgroup")) {
        Ok(x) => x,
        Err(e) => return ctx.reply.error(&e),
    };
    if x.block.is_some() {
        return ctx.reply.error(&format!(
            "ERR {} command is not allowed with BLOCK option from scripts",
            String::from_utf8_lossy(args.get(0))
        ));
    }
    let which: Vec<usize> = (0..x.keys.len()).collect();
    match run(s, ctx.db, ctx.now, ctx.reply.resp3, &x, &which) {
        Err((_, e)) => ctx.reply.error(&e),
        Ok(pieces) => {
            let bytes = join(ctx.reply.resp3, &pieces);
            ctx.reply.raw(&bytes);
        }
    }
}
