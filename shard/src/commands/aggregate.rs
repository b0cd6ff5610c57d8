//! What the commands of the aggregate types share: typed key lookup, the
//! HSCAN/SSCAN cursor and options, the counts of the random-element commands, and a cheap
//! random source that does not hold the shard borrowed.

use super::Ctx;
use crate::args::{parse_i64, Args};
use crate::glob::glob_match;
use crate::reply::errors::*;
use crate::shard::Shard;
use crate::value::Value;

/// The value at `key` as one aggregate type (`of` picks it out of a
/// `Value`): `Ok(None)` when missing, `Err` once WRONGTYPE is replied.
/// With `read`, counts a keyspace hit or miss, as Redis's lookupKeyRead.
pub(crate) fn lookup<'a, T: ?Sized>(
    s: &'a mut Shard,
    ctx: &mut Ctx,
    key: &[u8],
    read: bool,
    of: impl FnOnce(&mut Value) -> Option<&mut T>,
) -> Result<Option<&'a mut T>, ()> {
    if read {
        s.notify_miss(ctx.db, key, ctx.now);
    }
    let Shard { dbs, stats, .. } = s;
    let found = dbs[ctx.db].get(key, ctx.now);
    if read {
        match found {
            Some(_) => stats.keyspace_hits += 1,
            None => stats.keyspace_misses += 1,
        }
    }
    match found.map(|e| of(&mut e.value)) {
        None => Ok(None),
        Some(Some(v)) => Ok(Some(v)),
        Some(None) => {
            ctx.reply.error(WRONGTYPE);
            Err(())
        }
    }
}

/// Redis's `parseScanCursorOrReply` (strtoul): optional sign, decimal
/// digits, wrapping negatives; an empty string is cursor 0.
pub fn parse_cursor(s: &[u8]) -> Option<u64> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() {
        // strtoul converts nothing: fine only when there was nothing at all.
        return s.is_empty().then_some(0);
    }
    let mut n: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    Some(if neg { n.wrapping_neg() } else { n })
}

/// MATCH and COUNT of an element scan.
pub struct ScanOpts<'a> {
    pub pattern: Option<&'a [u8]>,
    pub count: usize,
}

impl ScanOpts<'_> {
    pub fn matches(&self, s: &[u8]) -> bool {
        self.pattern.is_none_or(|p| glob_match(p, s, false))
    }
}

/// Parses `[MATCH pattern] [COUNT n]` from argument `from`; on error the
/// reply is already written.
pub fn parse_scan_opts<'a>(ctx: &mut Ctx, args: &Args<'a>, from: usize) -> Option<ScanOpts<'a>> {
    let mut opts = ScanOpts { pattern: None, count: 10 };
    let mut i = from;
    while i < args.len() {
        let has_value = i + 1 < args.len();
        if args.is(i, "count") && has_value {
            match parse_i64(args.get(i + 1)) {
                None => {
                    ctx.reply.error(NOT_INTEGER);
                    return None;
                }
                Some(n) if n < 1 => {
                    ctx.reply.error(SYNTAX);
                    return None;
                }
                Some(n) => opts.count = n.min(1 << 20) as usize,
            }
        } else if args.is(i, "match") && has_value {
            let p = args.get(i + 1);
            opts.pattern = (p != b"*").then_some(p);
        } else {
            ctx.reply.error(SYNTAX);
            return None;
        }
        i += 2;
    }
    Some(opts)
}

/// The reply of a scan over a missing key.
pub fn empty_scan(ctx: &mut Ctx) {
    ctx.reply.array(2);
    ctx.reply.bulk(b"0");
    ctx.reply.array(0);
}

/// A count of SRANDMEMBER/HRANDFIELD: Redis accepts -LONG_MAX..=LONG_MAX.
pub fn parse_random_count(ctx: &mut Ctx, arg: &[u8]) -> Option<i64> {
    match parse_i64(arg) {
        None => ctx.reply.error(NOT_INTEGER),
        Some(i64::MIN) => ctx
            .reply
            .error("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807"),
        Some(n) => return Some(n),
    }
    None
}

/// Most elements a negative count (repeats allowed) may ask for. Redis
/// tries to build any such reply and dies of memory exhaustion; a shard
/// that did would take the whole process with it.
pub const MAX_REPEATS: u64 = 1 << 26;

/// xorshift64 seeded from the shard, so handlers can draw numbers while
/// the shard's databases are borrowed.
pub fn rng(s: &mut Shard) -> impl FnMut() -> u64 {
    let mut x = s.random() | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// Moves `n` uniformly chosen elements to the front (Fisher-Yates prefix).
pub fn partial_shuffle<T>(v: &mut [T], n: usize, rnd: &mut impl FnMut() -> u64) {
    for i in 0..n.min(v.len()) {
        let j = i + (rnd() % (v.len() - i) as u64) as usize;
        v.swap(i, j);
    }
}

/// `n` distinct random elements of a collection of `size` (n < size): a
/// shuffled prefix of all of them when n is a large part of the whole,
/// otherwise random draws until `n` distinct ones came up.
pub fn distinct_random<T: Copy + Eq + std::hash::Hash>(
    size: usize,
    n: usize,
    mut draw: impl FnMut(&mut dyn FnMut() -> u64) -> Option<T>,
    all: impl FnOnce() -> Vec<T>,
    rnd: &mut impl FnMut() -> u64,
) -> Vec<T> {
    if n.saturating_mul(3) > size {
        let mut all = all();
        partial_shuffle(&mut all, n, rnd);
        all.truncate(n);
        return all;
    }
    let mut seen = std::collections::HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        match draw(rnd) {
            Some(x) if seen.insert(x) => out.push(x),
            Some(_) => {}
            None => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_parse_like_strtoul() {
        assert_eq!(parse_cursor(b"0"), Some(0));
        assert_eq!(parse_cursor(b""), Some(0));
        assert_eq!(parse_cursor(b"+7"), Some(7));
        assert_eq!(parse_cursor(b"-1"), Some(u64::MAX));
        assert_eq!(parse_cursor(b"18446744073709551615"), Some(u64::MAX));
        for bad in [&b"18446744073709551616"[..], b"-", b"+", b" 1", b"1 ", b"0x1", b"abc"] {
            assert_eq!(parse_cursor(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
