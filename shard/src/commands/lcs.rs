//! LCS (longest common subsequence of two strings, Redis 7.0's
//! t_string.c), SUBSTR (GETRANGE's old name) and MOVE (a key to another
//! database of the same shard: a key's shard depends on its name only).
//! LCS over two shards: proxy/src/commands/lcs.rs reads both strings and
//! calls [`lcs_reply`].

use super::prelude::*;
use super::zset::WrongType;
use super::Ctx;
use crate::args::{parse_i64, Args};
use crate::config::ClusterMode;
use crate::db::Ttl;
use crate::reply::errors::*;
use crate::reply::Reply;
use crate::shard::Shard;

pub const NOT_STRINGS: &str = "ERR The specified keys must contain string values";

/// Replies to LCS over `a` and `b` with the options from argument 3 on.
pub fn lcs_reply(a: &[u8], b: &[u8], args: &Args, max_bulk: u64, r: &mut Reply) {
    let (mut getlen, mut getidx, mut withmatchlen, mut minmatchlen) = (false, false, false, 0u64);
    let mut j = 3;
    while j < args.len() {
        let more = j + 1 < args.len();
        if args.is(j, "idx") {
            getidx = true;
        } else if args.is(j, "len") {
            getlen = true;
        } else if args.is(j, "withmatchlen") {
            withmatchlen = true;
        } else if args.is(j, "minmatchlen") && more {
            match parse_i64(args.get(j + 1)) {
                Some(n) => minmatchlen = n.max(0) as u64,
                None => return r.error(NOT_INTEGER),
            }
            j += 1;
        } else {
            return r.error(SYNTAX);
        }
        j += 1;
    }
    if getlen && getidx {
        return r.error("ERR If you want both the length and indexes, please just use IDX.");
    }
    if a.len() >= u32::MAX as usize - 1 || b.len() >= u32::MAX as usize - 1 {
        return r.error("ERR String too long for LCS");
    }
    let (alen, blen) = (a.len(), b.len());
    let cells = (alen as u64 + 1) * (blen as u64 + 1);
    if cells * 4 > max_bulk {
        return r.error("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len");
    }
    let mut lcs = vec![0u32; cells as usize];
    let at = |i: usize, j: usize| j + i * (blen + 1);
    for i in 1..=alen {
        for j in 1..=blen {
            lcs[at(i, j)] =
                if a[i - 1] == b[j - 1] { lcs[at(i - 1, j - 1)] + 1 } else { lcs[at(i - 1, j)].max(lcs[at(i, j - 1)]) };
        }
    }
    let total = lcs[at(alen, blen)];
    if getlen {
        return r.int(total as i64);
    }
    let mut result = vec![0u8; total as usize];
    let mut idx = total as usize;
    let mut ranges: Vec<[u64; 5]> = Vec::new();
    // `alen` as a start means "no range open".
    let (mut a_start, mut a_end, mut b_start, mut b_end) = (alen, 0, 0, 0);
    let (mut i, mut j) = (alen, blen);
    while i > 0 && j > 0 {
        let mut emit = false;
        if a[i - 1] == b[j - 1] {
            result[idx - 1] = a[i - 1];
            if a_start == alen {
                (a_start, a_end, b_start, b_end) = (i - 1, i - 1, j - 1, j - 1);
            } else if a_start == i && b_start == j {
                a_start -= 1;
                b_start -= 1;
            } else {
                emit = true;
            }
            if a_start == 0 || b_start == 0 {
                emit = true;
            }
            idx -= 1;
            i -= 1;
            j -= 1;
        } else {
            if lcs[at(i - 1, j)] > lcs[at(i, j - 1)] {
                i -= 1;
            } else {
                j -= 1;
            }
            if a_start != alen {
                emit = true;
            }
        }
        let match_len = (a_end as u64).wrapping_sub(a_start as u64).wrapping_add(1) & 0xffff_ffff;
        if emit {
            if minmatchlen == 0 || match_len >= minmatchlen {
                ranges.push([a_start as u64, a_end as u64, b_start as u64, b_end as u64, match_len]);
            }
            a_start = alen;
        }
    }
    if !getidx {
        return r.bulk(&result);
    }
    r.map(2);
    r.bulk(b"matches");
    r.array(ranges.len());
    for [a0, a1, b0, b1, len] in ranges {
        r.array(2 + withmatchlen as usize);
        r.array(2);
        r.int(a0 as i64);
        r.int(a1 as i64);
        r.array(2);
        r.int(b0 as i64);
        r.int(b1 as i64);
        if withmatchlen {
            r.int(len as i64);
        }
    }
    r.bulk(b"len");
    r.int(total as i64);
}

/// The string at `key` for LCS: empty when missing, `Err` for another type.
pub fn lcs_input(s: &mut Shard, db: usize, key: &[u8], now: u64) -> Result<Vec<u8>, WrongType> {
    let Shard { dbs, stats, .. } = s;
    match dbs[db].get(key, now) {
        None => {
            stats.keyspace_misses += 1;
            Ok(Vec::new())
        }
        Some(e) => {
            stats.keyspace_hits += 1;
            e.value.string_bytes(&mut itoa::Buffer::new()).map(<[u8]>::to_vec).ok_or(WrongType)
        }
    }
}

pub fn lcs(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let a = lcs_input(s, ctx.db, args.get(1), ctx.now);
    let b = lcs_input(s, ctx.db, args.get(2), ctx.now);
    match (a, b) {
        (Ok(a), Ok(b)) => lcs_reply(&a, &b, &args, s.config.proto_max_bulk_len, &mut ctx.reply),
        _ => ctx.reply.error(NOT_STRINGS),
    }
}

/// MOVE key db.
pub fn move_key(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    if s.config.cluster_mode != ClusterMode::No {
        return ctx.reply.error("ERR MOVE is not allowed in cluster mode");
    }
    let dest = match parse_i64(args.get(2)).filter(|n| i32::try_from(*n).is_ok()) {
        Some(n) => n,
        None => return ctx.reply.error(NOT_INTEGER),
    };
    if dest < 0 || dest as usize >= s.dbs.len() {
        return ctx.reply.error("ERR DB index is out of range");
    }
    let dest = dest as usize;
    if dest == ctx.db {
        return ctx.reply.error("ERR source and destination objects are the same");
    }
    let (key, now) = (args.get(1), ctx.now);
    if s.dbs[ctx.db].get(key, now).is_none() || s.dbs[dest].get(key, now).is_some() {
        return ctx.reply.int(0);
    }
    let Some(entry) = s.dbs[ctx.db].remove(key, now) else { return ctx.reply.int(0) };
    let ttl = entry.expire_at().map_or(Ttl::Clear, Ttl::At);
    s.dbs[dest].set(key, entry.value, ttl, now);
    ctx.reply.int(1);
}

/// SUBSTR key start end: GETRANGE.
pub fn substr(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    super::string::getrange(s, ctx, args)
}

pub static COMMANDS: &[CommandSpec] = &[
    cmd!("lcs", -3, READONLY, KEYS12, Keyed, Some(lcs)),
    cmd!("substr", 4, READONLY, KEY1, Keyed, Some(substr)),
    cmd!("move", 3, WRITE | FAST, KEY1, Keyed, Some(move_key)),
];
