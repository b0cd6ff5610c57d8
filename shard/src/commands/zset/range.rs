//! Ranges: by rank, by score (`(1.5`, `-inf`, `+inf`) and by member (`[a`,
//! `(a`, `-`, `+`). ZRANGE and its older forms, ZRANGESTORE, ZCOUNT,
//! ZLEXCOUNT, ZREMRANGEBY*. Every range becomes a run of ranks found in
//! O(log n), then a walk over just that run.

use super::{drop_if_empty, reply_elements, reply_pair, zset_mut, zset_read, WrongType};
use crate::args::{parse_i64, Args};
use crate::commands::Ctx;
use crate::numbers::parse_range_double;
use crate::reply::errors::*;
use crate::reply::Reply;
use crate::shard::Shard;
use crate::types::zset::{Limits, ZSet};

pub const NOT_FLOAT_RANGE: &str = "ERR min or max is not a float";
pub const NOT_LEX_RANGE: &str = "ERR min or max not valid string range item";

/// `min`/`max` of a score range; `(` makes a bound exclusive.
#[derive(Clone, Copy, Debug)]
pub struct ScoreRange {
    min: f64,
    minex: bool,
    max: f64,
    maxex: bool,
}

fn score_bound(arg: &[u8]) -> Option<(f64, bool)> {
    match arg.split_first() {
        Some((b'(', rest)) => Some((parse_range_double(rest)?, true)),
        _ => Some((parse_range_double(arg)?, false)),
    }
}

impl ScoreRange {
    pub fn parse(min: &[u8], max: &[u8]) -> Option<ScoreRange> {
        let (min, minex) = score_bound(min)?;
        let (max, maxex) = score_bound(max)?;
        Some(ScoreRange { min, minex, max, maxex })
    }

    fn gte_min(&self, v: f64) -> bool {
        if self.minex {
            v > self.min
        } else {
            v >= self.min
        }
    }

    fn lte_max(&self, v: f64) -> bool {
        if self.maxex {
            v < self.max
        } else {
            v <= self.max
        }
    }

    /// The ranks `lo..hi` of the elements in range.
    pub fn ranks(&self, z: &ZSet) -> (usize, usize) {
        let lo = z.count_before(&|s, _| !self.gte_min(s));
        let hi = z.count_before(&|s, _| self.lte_max(s));
        (lo, hi.max(lo))
    }
}

#[derive(Clone, Debug)]
enum LexBound {
    /// `-`
    Min,
    /// `+`
    Max,
    /// `[member`
    In(Vec<u8>),
    /// `(member`
    Ex(Vec<u8>),
}

impl LexBound {
    fn parse(arg: &[u8]) -> Option<LexBound> {
        // Redis reads `+`/`-` as C strings: a NUL may follow.
        let alone = |rest: &[u8]| rest.first().is_none_or(|&b| b == 0);
        match arg.split_first()? {
            (b'+', rest) if alone(rest) => Some(LexBound::Max),
            (b'-', rest) if alone(rest) => Some(LexBound::Min),
            (b'[', rest) => Some(LexBound::In(rest.to_vec())),
            (b'(', rest) => Some(LexBound::Ex(rest.to_vec())),
            _ => None,
        }
    }
}

/// `min`/`max` of a lexicographic range.
#[derive(Clone, Debug)]
pub struct LexRange {
    min: LexBound,
    max: LexBound,
}

impl LexRange {
    pub fn parse(min: &[u8], max: &[u8]) -> Option<LexRange> {
        Some(LexRange { min: LexBound::parse(min)?, max: LexBound::parse(max)? })
    }

    fn gte_min(&self, m: &[u8]) -> bool {
        match &self.min {
            LexBound::Min => true,
            LexBound::Max => false,
            LexBound::In(b) => m >= b.as_slice(),
            LexBound::Ex(b) => m > b.as_slice(),
        }
    }

    fn lte_max(&self, m: &[u8]) -> bool {
        match &self.max {
            LexBound::Min => false,
            LexBound::Max => true,
            LexBound::In(b) => m <= b.as_slice(),
            LexBound::Ex(b) => m < b.as_slice(),
        }
    }

    /// The ranks `lo..hi` of the elements in range. Redis defines member
    /// ranges for sets whose scores are all equal; for others it still
    /// answers deterministically from a listpack, which is mimicked.
    pub fn ranks(&self, z: &ZSet) -> (usize, usize) {
        if let ZSet::Pack(_) = z {
            let Some(lo) = self.pack_start(z, false) else {
                return (0, 0);
            };
            return (lo, lo + self.pack_run(z, lo, false, usize::MAX));
        }
        let lo = z.count_before(&|_, m| !self.gte_min(m));
        let hi = z.count_before(&|_, m| self.lte_max(m));
        (lo, hi.max(lo))
    }

    /// Redis's `sdscmplex` test for a range that is always empty.
    fn always_empty(&self) -> bool {
        use std::cmp::Ordering::*;
        let (cmp, ex) = match (&self.min, &self.max) {
            (LexBound::Min, LexBound::Min) | (LexBound::Max, LexBound::Max) => (Equal, true),
            (LexBound::Min, _) | (_, LexBound::Max) => (Less, false),
            (LexBound::Max, _) | (_, LexBound::Min) => (Greater, false),
            (LexBound::In(a) | LexBound::Ex(a), LexBound::In(b) | LexBound::Ex(b)) => {
                (a.cmp(b), matches!(self.min, LexBound::Ex(_)) || matches!(self.max, LexBound::Ex(_)))
            }
        };
        cmp == Greater || (cmp == Equal && ex)
    }

    /// Redis's zzlFirstInLexRange (or, `rev`, zzlLastInLexRange): the rank
    /// a listpack scan starts from.
    fn pack_start(&self, z: &ZSet, rev: bool) -> Option<usize> {
        let len = z.len();
        if self.always_empty() || !self.gte_min(z.nth(len.checked_sub(1)?)?.1) || !self.lte_max(z.nth(0)?.1) {
            return None;
        }
        let (mut rank, mut found) = (0, None);
        let start = if rev { len - 1 } else { 0 };
        z.walk(start, rev, &mut |_, m| {
            let (reached, inside) =
                if rev { (self.lte_max(m), self.gte_min(m)) } else { (self.gte_min(m), self.lte_max(m)) };
            if reached {
                found = inside.then_some(rank);
                return false;
            }
            rank += 1;
            true
        });
        found.map(|r| if rev { len - 1 - r } else { r })
    }

    /// How many elements from rank `start` on (downwards when `rev`) stay
    /// in range, at most `limit`.
    fn pack_run(&self, z: &ZSet, start: usize, rev: bool, limit: usize) -> usize {
        let mut n = 0;
        z.walk(start, rev, &mut |_, m| {
            let inside = if rev { self.gte_min(m) } else { self.lte_max(m) };
            n += (inside && n < limit) as usize;
            inside && n < limit
        });
        n
    }
}

#[derive(Clone, Debug)]
pub enum By {
    Rank(i64, i64),
    Score(ScoreRange),
    Lex(LexRange),
}

/// A parsed ZRANGE-family request.
#[derive(Clone, Debug)]
pub struct RangeArgs {
    pub by: By,
    pub rev: bool,
    pub withscores: bool,
    offset: i64,
    limit: i64,
}

#[derive(Clone, Copy, PartialEq)]
pub enum Kind {
    Rank,
    Score,
    Lex,
}

/// Redis's zrangeGenericCommand parsing: `src` is the index of the source
/// key; `kind` and `rev` are fixed by the older commands, free in ZRANGE.
pub fn parse_range(
    args: &Args,
    src: usize,
    store: bool,
    mut kind: Option<Kind>,
    mut rev: Option<bool>,
) -> Result<RangeArgs, &'static str> {
    let (mut withscores, mut offset, mut limit) = (false, 0, -1);
    let mut j = src + 3;
    while j < args.len() {
        if !store && args.is(j, "withscores") {
            withscores = true;
        } else if args.is(j, "limit") && j + 2 < args.len() {
            offset = parse_i64(args.get(j + 1)).ok_or(NOT_INTEGER)?;
            limit = parse_i64(args.get(j + 2)).ok_or(NOT_INTEGER)?;
            j += 2;
        } else if rev.is_none() && args.is(j, "rev") {
            rev = Some(true);
        } else if kind.is_none() && args.is(j, "bylex") {
            kind = Some(Kind::Lex);
        } else if kind.is_none() && args.is(j, "byscore") {
            kind = Some(Kind::Score);
        } else {
            return Err(SYNTAX);
        }
        j += 1;
    }
    let (kind, rev) = (kind.unwrap_or(Kind::Rank), rev.unwrap_or(false));
    if limit != -1 && kind == Kind::Rank {
        return Err("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX");
    }
    if withscores && kind == Kind::Lex {
        return Err("ERR syntax error, WITHSCORES not supported in combination with BYLEX");
    }
    // Reversed score and member ranges are given as max, min.
    let (a, b) = (args.get(src + 1), args.get(src + 2));
    let (min, max) = if rev && kind != Kind::Rank { (b, a) } else { (a, b) };
    let by = match kind {
        Kind::Rank => By::Rank(parse_i64(min).ok_or(NOT_INTEGER)?, parse_i64(max).ok_or(NOT_INTEGER)?),
        Kind::Score => By::Score(ScoreRange::parse(min, max).ok_or(NOT_FLOAT_RANGE)?),
        Kind::Lex => By::Lex(LexRange::parse(min, max).ok_or(NOT_LEX_RANGE)?),
    };
    Ok(RangeArgs { by, rev, withscores, offset, limit })
}

/// Normalizes Redis rank arguments (negative from the end) into `lo..=hi`.
pub fn rank_span(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 { (start + len).max(0) } else { start };
    let end = if end < 0 { end + len } else { end };
    if start > end || start >= len {
        return None;
    }
    Some((start as usize, end.min(len - 1) as usize))
}

/// The elements a request selects: walk `count` of them from rank `start`,
/// downwards when `rev`.
#[derive(Clone, Copy)]
struct Selection {
    start: usize,
    count: usize,
    rev: bool,
}

fn select(z: &ZSet, a: &RangeArgs) -> Selection {
    let empty = Selection { start: 0, count: 0, rev: false };
    let len = z.len();
    let (lo, hi) = match &a.by {
        By::Rank(start, end) => {
            let Some((lo, hi)) = rank_span(*start, *end, len) else {
                return empty;
            };
            let start = if a.rev { len - 1 - lo } else { lo };
            return Selection { start, count: hi - lo + 1, rev: a.rev };
        }
        By::Score(range) => range.ranks(z),
        By::Lex(range) if matches!(z, ZSet::Pack(_)) => return pack_lex_select(z, range, a),
        By::Lex(range) => range.ranks(z),
    };
    if a.offset < 0 || (a.offset > 0 && a.offset as u64 >= len as u64) {
        return empty;
    }
    let offset = a.offset as usize;
    let available = (hi - lo).saturating_sub(offset);
    let count = if a.limit < 0 { available } else { available.min(a.limit as usize) };
    if count == 0 {
        return empty;
    }
    let start = if a.rev { hi - 1 - offset } else { lo + offset };
    Selection { start, count, rev: a.rev }
}

/// A member range on a listpack, stepped through as Redis does: from the
/// first (last, for REV) element in range, skip `offset`, then take
/// elements while they stay in range.
fn pack_lex_select(z: &ZSet, range: &LexRange, a: &RangeArgs) -> Selection {
    let empty = Selection { start: 0, count: 0, rev: false };
    let len = z.len();
    if a.offset < 0 || (a.offset > 0 && a.offset as u64 >= len as u64) {
        return empty;
    }
    let Some(first) = range.pack_start(z, a.rev) else {
        return empty;
    };
    let offset = a.offset as usize;
    let start = if a.rev { first.checked_sub(offset) } else { Some(first + offset).filter(|&s| s < len) };
    let Some(start) = start else {
        return empty;
    };
    let limit = if a.limit < 0 { usize::MAX } else { a.limit as usize };
    Selection { start, count: range.pack_run(z, start, a.rev, limit), rev: a.rev }
}

fn walk_selection<'a>(z: &'a ZSet, sel: Selection, mut f: impl FnMut(f64, &'a [u8])) {
    let mut left = sel.count;
    if left == 0 {
        return;
    }
    z.walk(sel.start, sel.rev, &mut |score, member| {
        f(score, member);
        left -= 1;
        left > 0
    });
}

/// Replies with the selected elements (and scores).
pub fn reply_range(z: &ZSet, a: &RangeArgs, r: &mut Reply) {
    let sel = select(z, a);
    reply_elements(r, sel.count, a.withscores);
    walk_selection(z, sel, |score, member| if a.withscores { reply_pair(r, member, score) } else { r.bulk(member) });
}

/// The selected elements as a new set (ZRANGESTORE), encoded by size.
pub fn range_set(z: &ZSet, a: &RangeArgs, limits: Limits) -> ZSet {
    let sel = select(z, a);
    let mut items: Vec<(f64, &[u8])> = Vec::with_capacity(sel.count);
    walk_selection(z, sel, |score, member| items.push((score, member)));
    if sel.rev {
        items.reverse();
    }
    let max_len = items.iter().map(|(_, m)| m.len()).max().unwrap_or(0);
    ZSet::from_sorted(items.iter().copied(), items.len(), max_len, limits)
}

fn range_generic(s: &mut Shard, ctx: &mut Ctx, args: Args, kind: Option<Kind>, rev: Option<bool>) {
    let a = match parse_range(&args, 1, false, kind, rev) {
        Ok(a) => a,
        Err(e) => return ctx.reply.error(e),
    };
    match zset_read(s, ctx.db, args.get(1), ctx.now) {
        Err(WrongType) => ctx.reply.error(WRONGTYPE),
        Ok(None) => ctx.reply.array(0),
        Ok(Some(z)) => reply_range(z, &a, &mut ctx.reply),
    }
}

pub fn zrange(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    range_generic(s, ctx, args, None, None)
}

pub fn zrevrange(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    range_generic(s, ctx, args, Some(Kind::Rank), Some(true))
}

pub fn zrangebyscore(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    range_generic(s, ctx, args, Some(Kind::Score), Some(false))
}

pub fn zrevrangebyscore(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    range_generic(s, ctx, args, Some(Kind::Score), Some(true))
}

pub fn zrangebylex(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    range_generic(s, ctx, args, Some(Kind::Lex), Some(false))
}

pub fn zrevrangebylex(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    range_generic(s, ctx, args, Some(Kind::Lex), Some(true))
}

/// ZRANGESTORE with both keys on this shard.
pub fn zrangestore(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let a = match parse_range(&args, 2, true, None, None) {
        Ok(a) => a,
        Err(e) => return ctx.reply.error(e),
    };
    let limits = super::limits(s);
    let result = match zset_read(s, ctx.db, args.get(2), ctx.now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(None) => ZSet::default(),
        Ok(Some(z)) => range_set(z, &a, limits),
    };
    super::store(s, ctx.db, args.get(1), result, ctx.now, &mut ctx.reply, "zrangestore");
}

fn count_generic(s: &mut Shard, ctx: &mut Ctx, args: Args, lex: bool) {
    let by = if lex {
        LexRange::parse(args.get(2), args.get(3)).map(By::Lex).ok_or(NOT_LEX_RANGE)
    } else {
        ScoreRange::parse(args.get(2), args.get(3)).map(By::Score).ok_or(NOT_FLOAT_RANGE)
    };
    let by = match by {
        Ok(by) => by,
        Err(e) => return ctx.reply.error(e),
    };
    match zset_read(s, ctx.db, args.get(1), ctx.now) {
        Err(WrongType) => ctx.reply.error(WRONGTYPE),
        Ok(None) => ctx.reply.int(0),
        Ok(Some(z)) => {
            let (lo, hi) = match &by {
                By::Lex(r) => r.ranks(z),
                By::Score(r) => r.ranks(z),
                By::Rank(..) => (0, 0),
            };
            ctx.reply.int((hi - lo) as i64)
        }
    }
}

pub fn zcount(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    count_generic(s, ctx, args, false)
}

pub fn zlexcount(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    count_generic(s, ctx, args, true)
}

fn remrange_generic(s: &mut Shard, ctx: &mut Ctx, args: Args, kind: Kind) {
    let (a, b) = (args.get(2), args.get(3));
    let by = match kind {
        Kind::Rank => match (parse_i64(a), parse_i64(b)) {
            (Some(start), Some(end)) => Ok(By::Rank(start, end)),
            _ => Err(NOT_INTEGER),
        },
        Kind::Score => ScoreRange::parse(a, b).map(By::Score).ok_or(NOT_FLOAT_RANGE),
        Kind::Lex => LexRange::parse(a, b).map(By::Lex).ok_or(NOT_LEX_RANGE),
    };
    let by = match by {
        Ok(by) => by,
        Err(e) => return ctx.reply.error(e),
    };
    let (key, db) = (args.get(1), &mut s.dbs[ctx.db]);
    let z = match zset_mut(db, key, ctx.now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(None) => return ctx.reply.int(0),
        Ok(Some(z)) => z,
    };
    let (lo, hi) = match &by {
        By::Rank(start, end) => rank_span(*start, *end, z.len()).map_or((0, 0), |(lo, hi)| (lo, hi + 1)),
        By::Score(r) => r.ranks(z),
        By::Lex(r) => r.ranks(z),
    };
    let removed = z.remove_ranks(lo, hi);
    if removed > 0 {
        let event = match kind {
            Kind::Rank => "zremrangebyrank",
            Kind::Score => "zremrangebyscore",
            Kind::Lex => "zremrangebylex",
        };
        s.notify(crate::notify::ZSET, event, ctx.db, key);
    }
    drop_if_empty(s, ctx.db, key, ctx.now);
    ctx.reply.int(removed as i64);
}

pub fn zremrangebyrank(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    remrange_generic(s, ctx, args, Kind::Rank)
}

pub fn zremrangebyscore(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    remrange_generic(s, ctx, args, Kind::Score)
}

pub fn zremrangebylex(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    remrange_generic(s, ctx, args, Kind::Lex)
}
