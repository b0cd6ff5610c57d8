//! ZPOPMIN, ZPOPMAX, ZMPOP (and the "try once" step the blocking BZPOPMIN,
//! BZPOPMAX and BZMPOP are built on), ZRANDMEMBER, ZSCAN.

use super::{reply_elements, reply_pair, zset_mut, zset_read, WrongType};
use crate::args::{parse_i64, Args};
use crate::commands::Ctx;
use crate::glob::glob_match;
use crate::numbers::format_double;
use crate::reply::errors::*;
use crate::reply::Reply;
use crate::shard::Shard;
use crate::types::zset::ZSet;

/// How a pop reply is shaped (Redis's `emitkey` and `use_nested_array`).
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Shape {
    /// ZPOPMIN/ZPOPMAX: `[member, score, ...]`.
    Flat,
    /// ZPOPMIN/ZPOPMAX with a count in RESP3: `[[member, score], ...]`.
    Nested,
    /// BZPOPMIN/BZPOPMAX: `[key, member, score]`.
    KeyFlat,
    /// ZMPOP/BZMPOP: `[key, [[member, score], ...]]`.
    KeyNested,
}

/// Pops up to `count` elements from the low (or, with `max`, the high) end
/// of a non-empty set and writes the reply.
fn pop_from(z: &mut ZSet, key: &[u8], max: bool, count: usize, shape: Shape, r: &mut Reply) {
    let n = count.min(z.len());
    match shape {
        Shape::Flat => r.array(2 * n),
        Shape::Nested => r.array(n),
        Shape::KeyFlat => {
            r.array(2 * n + 1);
            r.bulk(key);
        }
        Shape::KeyNested => {
            r.array(2);
            r.bulk(key);
            r.array(n);
        }
    }
    let nested = matches!(shape, Shape::Nested | Shape::KeyNested);
    let start = if max { z.len() - 1 } else { 0 };
    let mut left = n;
    z.walk(start, max, &mut |score, member| {
        if left == 0 {
            return false;
        }
        if nested {
            r.array(2);
        }
        r.bulk(member);
        super::reply_score(r, score);
        left -= 1;
        true
    });
    let len = z.len();
    if max {
        z.remove_ranks(len - n, len);
    } else {
        z.remove_ranks(0, n);
    }
}

/// One non-blocking attempt to pop from `key`: pops and replies when it
/// holds a sorted set, replies WRONGTYPE for another type, and returns false
/// (nothing written) when the key does not exist. This is the step BZPOPMIN
/// (`Shape::KeyFlat`, count 1), BZPOPMAX and BZMPOP (`Shape::KeyNested`)
/// repeat over their keys when woken.
pub fn try_pop(s: &mut Shard, ctx: &mut Ctx, key: &[u8], max: bool, count: usize, shape: Shape) -> bool {
    let (db, now, r) = (ctx.db, ctx.now, &mut ctx.reply);
    match zset_mut(&mut s.dbs[db], key, now) {
        Ok(None) => return false,
        Err(WrongType) => {
            return {
                r.error(WRONGTYPE);
                true
            }
        }
        Ok(Some(z)) => pop_from(z, key, max, count, shape, r),
    }
    s.notify(crate::notify::ZSET, if max { "zpopmax" } else { "zpopmin" }, db, key);
    super::drop_if_empty(s, db, key, now);
    true
}

fn pop_generic(s: &mut Shard, ctx: &mut Ctx, args: Args, max: bool) {
    if args.len() > 3 {
        return ctx.reply.error(SYNTAX);
    }
    let count = match args.len() {
        3 => match parse_i64(args.get(2)).filter(|&n| n >= 0) {
            None => return ctx.reply.error("ERR value is out of range, must be positive"),
            Some(n) => Some(n as usize),
        },
        _ => None,
    };
    let key = args.get(1);
    let db = &mut s.dbs[ctx.db];
    match zset_mut(db, key, ctx.now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(None) => return ctx.reply.array(0),
        Ok(Some(_)) if count == Some(0) => return ctx.reply.array(0),
        Ok(Some(_)) => {}
    }
    let shape = if ctx.reply.resp3 && count.is_some() { Shape::Nested } else { Shape::Flat };
    try_pop(s, ctx, key, max, count.unwrap_or(1), shape);
}

pub fn zpopmin(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    pop_generic(s, ctx, args, false)
}

pub fn zpopmax(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    pop_generic(s, ctx, args, true)
}

/// Parsed `[B]ZMPOP [timeout] numkeys key... MIN|MAX [COUNT n]`.
#[derive(Clone, Debug)]
pub struct MPop {
    /// Index of the first key.
    pub first: usize,
    pub numkeys: usize,
    pub max: bool,
    pub count: usize,
}

/// Parses ZMPOP (`numkeys_at` 1) or BZMPOP (2) arguments.
pub fn parse_mpop(args: &Args, numkeys_at: usize) -> Result<MPop, &'static str> {
    const NUMKEYS: &str = "ERR numkeys should be greater than 0";
    let numkeys = parse_i64(args.get(numkeys_at)).filter(|&n| n >= 1).ok_or(NUMKEYS)? as u64;
    let where_at = (numkeys_at as u64 + 1).saturating_add(numkeys);
    if where_at >= args.len() as u64 {
        return Err(SYNTAX);
    }
    let where_at = where_at as usize;
    let max = if args.is(where_at, "min") {
        false
    } else if args.is(where_at, "max") {
        true
    } else {
        return Err(SYNTAX);
    };
    let mut count = None;
    let mut j = where_at + 1;
    while j < args.len() {
        if count.is_none() && args.is(j, "count") && j + 1 < args.len() {
            let n = parse_i64(args.get(j + 1)).filter(|&n| n >= 1);
            count = Some(n.ok_or("ERR count should be greater than 0")? as usize);
            j += 2;
        } else {
            return Err(SYNTAX);
        }
    }
    Ok(MPop { first: numkeys_at + 1, numkeys: numkeys as usize, max, count: count.unwrap_or(1) })
}

/// ZMPOP with every key on this shard.
pub fn zmpop(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let p = match parse_mpop(&args, 1) {
        Ok(p) => p,
        Err(e) => return ctx.reply.error(e),
    };
    for key in args.iter().skip(p.first).take(p.numkeys) {
        if try_pop(s, ctx, key, p.max, p.count, Shape::KeyNested) {
            return;
        }
    }
    ctx.reply.null_array();
}

/// A small xorshift stream seeded from the shard's generator.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

pub fn zrandmember(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let mut rng = Rng(s.random() | 1);
    let key = args.get(1);
    if args.len() == 2 {
        return match zset_read(s, ctx.db, key, ctx.now) {
            Err(WrongType) => ctx.reply.error(WRONGTYPE),
            Ok(None) => ctx.reply.null(),
            Ok(Some(z)) => match z.nth(rng.below(z.len())) {
                Some((_, member)) => ctx.reply.bulk(member),
                None => ctx.reply.null(),
            },
        };
    }
    let count = match parse_i64(args.get(2)) {
        None => return ctx.reply.error(NOT_INTEGER),
        Some(i64::MIN) => {
            return ctx
                .reply
                .error("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
        }
        Some(n) => n,
    };
    let withscores = args.len() == 4;
    if args.len() > 4 || (withscores && !args.is(3, "withscores")) {
        return ctx.reply.error(SYNTAX);
    }
    if withscores && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
        return ctx.reply.error("ERR value is out of range");
    }
    let z = match zset_read(s, ctx.db, key, ctx.now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(None) => return ctx.reply.array(0),
        Ok(Some(z)) => z,
    };
    let r = &mut ctx.reply;
    let n = count.unsigned_abs() as usize;
    let emit = |r: &mut Reply, score: f64, member: &[u8]| {
        if withscores {
            reply_pair(r, member, score)
        } else {
            r.bulk(member)
        }
    };
    if n == 0 {
        return r.array(0);
    }
    // Negative counts (and 1) may repeat elements, in random order.
    if count < 0 || n == 1 {
        reply_elements(r, n, withscores);
        for _ in 0..n {
            if let Some((score, member)) = z.nth(rng.below(z.len())) {
                emit(r, score, member);
            }
        }
        return;
    }
    let len = z.len();
    // The whole set, highest first, as Redis's reverse iteration gives it.
    if n >= len {
        reply_elements(r, len, withscores);
        z.walk(len - 1, true, &mut |score, member| {
            emit(r, score, member);
            true
        });
        return;
    }
    // `n` distinct ranks (Floyd's sampling), emitted in rank order.
    let mut picked = hashbrown::HashSet::with_capacity(n);
    for j in len - n..len {
        let t = rng.below(j + 1);
        if !picked.insert(t) {
            picked.insert(j);
        }
    }
    let mut ranks: Vec<usize> = picked.into_iter().collect();
    ranks.sort_unstable();
    reply_elements(r, n, withscores);
    for rank in ranks {
        if let Some((score, member)) = z.nth(rank) {
            emit(r, score, member);
        }
    }
}

/// Cursors of the large encoding are scores, mapped to integers in order:
/// a scan resumes at the first element of the cursor's score, and a batch
/// never ends inside a run of equal scores. Elements present for the whole
/// scan are returned; removals never make it skip anything.
fn cursor_of(score: f64) -> u64 {
    let bits = score.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

/// Where a cursor resumes: `Some(score)` to start at, `None` past the end.
fn score_of(cursor: u64) -> Option<f64> {
    if cursor < cursor_of(f64::NEG_INFINITY) {
        return Some(f64::NEG_INFINITY);
    }
    if cursor > cursor_of(f64::INFINITY) {
        return None;
    }
    let bits = if cursor >> 63 == 1 { cursor & !(1 << 63) } else { !cursor };
    Some(f64::from_bits(bits))
}

/// Redis's `parseScanCursorOrReply`: C's strtoul over the argument, so a
/// sign is allowed ("-1" wraps to the largest cursor) and "" is 0.
fn parse_cursor(arg: &[u8]) -> Option<u64> {
    let text = arg.split(|&b| b == 0).next().unwrap_or(b"");
    let (neg, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    };
    if digits.is_empty() {
        return text.is_empty().then_some(0);
    }
    let mut v: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((d - b'0') as u64)?;
    }
    Some(if neg { v.wrapping_neg() } else { v })
}

pub fn zscan(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let Some(cursor) = parse_cursor(args.get(2)) else {
        return ctx.reply.error("ERR invalid cursor");
    };
    let z = match zset_read(s, ctx.db, args.get(1), ctx.now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(None) => {
            ctx.reply.array(2);
            ctx.reply.bulk(b"0");
            return ctx.reply.array(0);
        }
        Ok(Some(z)) => z,
    };
    let (mut count, mut pattern) = (10usize, None);
    let mut i = 3;
    while i < args.len() {
        if args.is(i, "count") && i + 1 < args.len() {
            match parse_i64(args.get(i + 1)) {
                None => return ctx.reply.error(NOT_INTEGER),
                Some(n) if n < 1 => return ctx.reply.error(SYNTAX),
                Some(n) => count = n as usize,
            }
        } else if args.is(i, "match") && i + 1 < args.len() {
            pattern = Some(args.get(i + 1)).filter(|p| *p != b"*");
        } else {
            return ctx.reply.error(SYNTAX);
        }
        i += 2;
    }
    let mut found: Vec<(f64, &[u8])> = Vec::new();
    let mut next = 0;
    let keep = |m: &[u8]| pattern.is_none_or(|p| glob_match(p, m, false));
    if let ZSet::Pack(_) = z {
        // Small sets come whole, as Redis returns a listpack.
        z.for_each(|score, member| {
            if keep(member) {
                found.push((score, member));
            }
        });
    } else if let Some(from) = score_of(if cursor == 0 { cursor_of(f64::NEG_INFINITY) } else { cursor }) {
        let start = z.count_before(&|score, _| score < from);
        let (mut seen, mut last) = (0usize, f64::NAN);
        z.walk(start, false, &mut |score, member| {
            if seen >= count && score != last {
                next = cursor_of(score);
                return false;
            }
            seen += 1;
            last = score;
            if keep(member) {
                found.push((score, member));
            }
            true
        });
    }
    let r = &mut ctx.reply;
    r.array(2);
    r.bulk(itoa::Buffer::new().format(next).as_bytes());
    r.array(2 * found.len());
    let mut buf = [0u8; 32];
    for (score, member) in found {
        r.bulk(member);
        r.bulk(format_double(score, &mut buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_cursors_keep_order_and_never_read_zero() {
        let scores = [f64::NEG_INFINITY, -1e300, -1.0, -0.0, 0.0, 1e-300, 2.5, f64::INFINITY];
        for w in scores.windows(2) {
            assert!(cursor_of(w[0]) < cursor_of(w[1]));
        }
        for s in scores {
            assert_ne!(cursor_of(s), 0);
            assert_eq!(score_of(cursor_of(s)).map(f64::to_bits), Some(s.to_bits()));
        }
        assert_eq!(score_of(1), Some(f64::NEG_INFINITY));
        assert_eq!(score_of(u64::MAX), None);
    }

    #[test]
    fn cursors_parse_like_strtoul() {
        assert_eq!(parse_cursor(b"-1"), Some(u64::MAX));
        assert_eq!(parse_cursor(b"+7"), Some(7));
        assert_eq!(parse_cursor(b""), Some(0));
        assert_eq!(parse_cursor(b"5\0x"), Some(5));
        assert_eq!(parse_cursor(b"18446744073709551615"), Some(u64::MAX));
        for bad in [&b"-"[..], b" 1", b"1 ", b"18446744073709551616", b"x"] {
            assert_eq!(parse_cursor(bad), None);
        }
    }
}
