//! Bitmap commands: SETBIT GETBIT BITCOUNT BITPOS BITOP BITFIELD BITFIELD_RO.
//! Bitmaps are plain strings; bit 0 is the most significant bit of byte 0.
//! A write makes the string "raw" and zero-pads it, as Redis's
//! lookupStringForBitCommand does. BITOP over keys of several shards runs in
//! proxy/src/commands/bitmap.rs with [`BitOp`], [`bitop_fold`] and
//! [`store_bitop`].

use super::prelude::*;
use super::Ctx;
use crate::args::{parse_i64, Args};
use crate::db::{Db, Ttl};
use crate::reply::errors::*;
use crate::shard::Shard;
use crate::value::Value;

const BIT_OFFSET: &str = "ERR bit offset is not an integer or out of range";
const BIT_VALUE: &str = "ERR bit is not an integer or out of range";
const BIT_TYPE: &str =
    "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";
pub const BITOP_NOT_KEYS: &str = "ERR BITOP NOT must be called with a single source key.";

/// Redis's getBitOffsetFromArgument: a bit offset whose byte lies below
/// proto-max-bulk-len. With `hash_bits`, "#N" means N fields of that width
/// (multiplied with C's wrap-around, as Redis does).
fn bit_offset(arg: &[u8], hash_bits: Option<u32>, max_bulk: u64) -> Option<u64> {
    let (digits, unit) = match (arg.split_first(), hash_bits) {
        (Some((b'#', rest)), Some(bits)) => (rest, bits as i64),
        _ => (arg, 1),
    };
    let n = parse_i64(digits)?.wrapping_mul(unit);
    (n >= 0 && ((n >> 3) as u64) < max_bulk).then_some(n as u64)
}

/// Runs `f` on the string at `key` made mutable and zero-padded to `len`
/// bytes, creating it when missing; WRONGTYPE for other types. `f` is told
/// whether the string was created or grown (Redis's lookupStringForBitCommand
/// `dirty`: a change even when no bit does).
fn with_bits<R>(
    db: &mut Db,
    key: &[u8],
    len: usize,
    now: u64,
    f: impl FnOnce(&mut Vec<u8>, bool) -> R,
) -> Result<R, &'static str> {
    let (raw, created) = match db.get(key, now) {
        Some(e) if !e.value.is_string() => return Err(WRONGTYPE),
        Some(e) => (e.value.make_raw(), false),
        None => (db.set(key, Value::Raw(Box::new(vec![0; len])), Ttl::Clear, now).value.make_raw(), true),
    };
    let raw = raw.ok_or(WRONGTYPE)?;
    let grown = raw.len() < len;
    if grown {
        crate::value::grow_zeroed(raw, len);
    }
    Ok(f(raw, created || grown))
}

/// Redis counts a bit write's changes in `rdb_changes_since_last_save`
/// (none when every bit kept its value or it failed, several for a
/// BITFIELD's several writes) where `execute` counted the command once.
fn count_changes(s: &mut Shard, changes: u64) {
    s.dirty = s.dirty.saturating_sub(1) + changes;
}

#[inline]
fn byte_at(bytes: &[u8], i: u64) -> u8 {
    usize::try_from(i).ok().and_then(|i| bytes.get(i)).copied().unwrap_or(0)
}

pub fn setbit(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let changed = setbit_changed(s, ctx, args);
    count_changes(s, changed as u64);
}

/// SETBIT: whether it changed the string (a bit, or its length).
fn setbit_changed(s: &mut Shard, ctx: &mut Ctx, args: Args) -> bool {
    let Some(offset) = bit_offset(args.get(2), None, s.config.proto_max_bulk_len) else {
        ctx.reply.error(BIT_OFFSET);
        return false;
    };
    let on = match parse_i64(args.get(3)) {
        Some(v @ (0 | 1)) => v as u8,
        _ => {
            ctx.reply.error(BIT_VALUE);
            return false;
        }
    };
    let shift = 7 - (offset & 7) as u8;
    let byte = (offset >> 3) as usize;
    let old = with_bits(&mut s.dbs[ctx.db], args.get(1), byte + 1, ctx.now, |bits, resized| {
        let b = bits.get_mut(byte)?;
        let old = (*b >> shift) & 1;
        *b = (*b & !(1 << shift)) | (on << shift);
        Some((old, resized || old != on))
    });
    match old {
        Ok(old) => {
            let (old, changed) = old.unwrap_or((0, true));
            ctx.reply.int(old as i64);
            if changed {
                s.notify(crate::notify::STRING, "setbit", ctx.db, args.get(1));
            }
            changed
        }
        Err(e) => {
            ctx.reply.error(e);
            false
        }
    }
}

pub fn getbit(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let Some(offset) = bit_offset(args.get(2), None, s.config.proto_max_bulk_len) else {
        return ctx.reply.error(BIT_OFFSET);
    };
    let Some(e) = s.dbs[ctx.db].get(args.get(1), ctx.now) else {
        return ctx.reply.int(0);
    };
    let mut scratch = itoa::Buffer::new();
    match e.value.string_bytes(&mut scratch).filter(|_| e.value.is_string()) {
        Some(bytes) => ctx.reply.int(((byte_at(bytes, offset >> 3) >> (7 - (offset & 7))) & 1) as i64),
        None => ctx.reply.error(WRONGTYPE),
    }
}

/// Redis's clamping of a BITCOUNT/BITPOS range over `total` units (bytes
/// or bits); `None` when it is empty.
fn clamp(mut start: i64, mut end: i64, total: i64) -> Option<(u64, u64)> {
    if start < 0 {
        start += total;
    }
    if end < 0 {
        end += total;
    }
    let start = start.max(0);
    let end = end.max(0).min(total - 1);
    (start <= end).then_some((start as u64, end as u64))
}

/// The bit range of a clamped range in bytes or bits.
fn bit_range((start, end): (u64, u64), in_bits: bool) -> (u64, u64) {
    if in_bits {
        (start, end)
    } else {
        (start * 8, end * 8 + 7)
    }
}

/// BIT or BYTE (case-insensitive); `None` for anything else.
fn unit(arg: &[u8]) -> Option<bool> {
    if arg.eq_ignore_ascii_case(b"bit") {
        Some(true)
    } else if arg.eq_ignore_ascii_case(b"byte") {
        Some(false)
    } else {
        None
    }
}

/// Masks keeping the bits of `first..=last` in their edge bytes.
fn edge_masks(first: u64, last: u64) -> (u8, u8) {
    (0xff >> (first & 7), !(0x7f_u8 >> (last & 7)))
}

fn popcount(bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(8);
    let mut n: u64 = (&mut words).map(|w| u64::from_ne_bytes(w.try_into().unwrap_or([0; 8])).count_ones() as u64).sum();
    n += words.remainder().iter().map(|b| b.count_ones() as u64).sum::<u64>();
    n
}

/// Set bits between bit `first` and bit `last`, both inside `bytes`.
fn count_bits(bytes: &[u8], first: u64, last: u64) -> u64 {
    let Some(span) = bytes.get((first / 8) as usize..=(last / 8) as usize) else {
        return 0;
    };
    let (head, tail) = edge_masks(first, last);
    let (&f, &l) = (span.first().unwrap_or(&0), span.last().unwrap_or(&0));
    let outside = if span.len() == 1 {
        (f & !(head & tail)).count_ones()
    } else {
        (f & !head).count_ones() + (l & !tail).count_ones()
    };
    popcount(span) - outside as u64
}

pub fn bitcount(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    // Redis 7.0 looks the key up before reading the range.
    let Some(e) = s.dbs[ctx.db].get(args.get(1), ctx.now) else {
        return ctx.reply.int(0);
    };
    let mut scratch = itoa::Buffer::new();
    let Some(bytes) = e.value.string_bytes(&mut scratch).filter(|_| e.value.is_string()) else {
        return ctx.reply.error(WRONGTYPE);
    };
    let len = bytes.len() as i64;
    let range = match args.len() {
        2 => clamp(0, -1, len).map(|r| bit_range(r, false)),
        4 | 5 => {
            let (Some(start), Some(end)) = (parse_i64(args.get(2)), parse_i64(args.get(3))) else {
                return ctx.reply.error(NOT_INTEGER);
            };
            if start < 0 && end < 0 && start > end {
                return ctx.reply.int(0);
            }
            let in_bits = match args.len() {
                5 => match unit(args.get(4)) {
                    Some(b) => b,
                    None => return ctx.reply.error(SYNTAX),
                },
                _ => false,
            };
            clamp(start, end, if in_bits { len * 8 } else { len }).map(|r| bit_range(r, in_bits))
        }
        _ => return ctx.reply.error(SYNTAX),
    };
    ctx.reply.int(range.map_or(0, |(first, last)| count_bits(bytes, first, last)) as i64);
}

/// The first bit equal to `bit` between bit `first` and bit `last`.
fn find_bit(bytes: &[u8], first: u64, last: u64, bit: bool) -> Option<u64> {
    let base = first / 8;
    let span = bytes.get(base as usize..=(last / 8) as usize)?;
    let (head, tail) = edge_masks(first, last);
    let skip = if bit { 0 } else { u64::MAX };
    // Whole words of the bytes between the edges go by eight at a time.
    let inner = span.get(1..span.len().saturating_sub(1)).unwrap_or_default();
    let words = inner.chunks_exact(8).take_while(|w| u64::from_ne_bytes((*w).try_into().unwrap_or([0; 8])) == skip);
    let skipped = words.count() * 8;
    let candidates = span.iter().enumerate().take(1).chain(span.iter().enumerate().skip(1 + skipped));
    for (i, &raw) in candidates {
        let mut b = if bit { raw } else { !raw };
        if i == 0 {
            b &= head;
        }
        if i == span.len() - 1 {
            b &= tail;
        }
        if b != 0 {
            return Some((base + i as u64) * 8 + b.leading_zeros() as u64);
        }
    }
    None
}

pub fn bitpos(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let bit = match parse_i64(args.get(2)) {
        Some(b @ (0 | 1)) => b == 1,
        Some(_) => return ctx.reply.error("ERR The bit argument must be 1 or 0."),
        None => return ctx.reply.error(NOT_INTEGER),
    };
    // A missing key is an endless run of zeroes.
    let Some(e) = s.dbs[ctx.db].get(args.get(1), ctx.now) else {
        return ctx.reply.int(if bit { -1 } else { 0 });
    };
    let mut scratch = itoa::Buffer::new();
    let Some(bytes) = e.value.string_bytes(&mut scratch).filter(|_| e.value.is_string()) else {
        return ctx.reply.error(WRONGTYPE);
    };
    let len = bytes.len() as i64;
    let (range, end_given) = match args.len() {
        3 => (clamp(0, -1, len).map(|r| bit_range(r, false)), false),
        4..=6 => {
            let Some(start) = parse_i64(args.get(3)) else {
                return ctx.reply.error(NOT_INTEGER);
            };
            let in_bits = match args.len() {
                6 => match unit(args.get(5)) {
                    Some(b) => b,
                    None => return ctx.reply.error(SYNTAX),
                },
                _ => false,
            };
            let end = match args.len() {
                4 => -1,
                _ => match parse_i64(args.get(4)) {
                    Some(end) => end,
                    None => return ctx.reply.error(NOT_INTEGER),
                },
            };
            let total = if in_bits { len * 8 } else { len };
            (clamp(start, end, total).map(|r| bit_range(r, in_bits)), args.len() > 4)
        }
        _ => return ctx.reply.error(SYNTAX),
    };
    let Some((first, last)) = range else {
        return ctx.reply.int(-1);
    };
    let pos = match find_bit(bytes, first, last, bit) {
        Some(p) => p as i64,
        // Without an explicit end, the string continues with zeroes.
        None if !bit && !end_given => (last / 8 + 1) as i64 * 8,
        None => -1,
    };
    ctx.reply.int(pos);
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum BitOp {
    And,
    Or,
    Xor,
    Not,
}

impl BitOp {
    pub fn parse(name: &[u8]) -> Option<BitOp> {
        [(b"and" as &[u8], BitOp::And), (b"or", BitOp::Or), (b"xor", BitOp::Xor), (b"not", BitOp::Not)]
            .into_iter()
            .find(|(n, _)| name.eq_ignore_ascii_case(n))
            .map(|(_, op)| op)
    }
}

/// Folds source number `index` into the BITOP result `acc`; missing keys
/// are empty sources, and shorter sources are zero-padded.
pub fn bitop_fold(op: BitOp, acc: &mut Vec<u8>, src: &[u8], index: usize) {
    if index == 0 {
        acc.clear();
        acc.extend_from_slice(src);
        if op == BitOp::Not {
            acc.iter_mut().for_each(|b| *b = !*b);
        }
        return;
    }
    if acc.len() < src.len() {
        acc.resize(src.len(), 0);
    }
    let pairs = acc.iter_mut().zip(src);
    match op {
        BitOp::And => {
            pairs.for_each(|(a, s)| *a &= s);
            acc.iter_mut().skip(src.len()).for_each(|a| *a = 0);
        }
        BitOp::Or => pairs.for_each(|(a, s)| *a |= s),
        BitOp::Xor => pairs.for_each(|(a, s)| *a ^= s),
        BitOp::Not => {}
    }
}

/// Stores a BITOP result (`set`; an empty one deletes the destination,
/// `del`, as in Redis); returns its length.
pub fn store_bitop(s: &mut Shard, db: usize, key: &[u8], result: Vec<u8>, now: u64) -> i64 {
    let len = result.len() as i64;
    if len == 0 {
        if s.dbs[db].remove(key, now).is_some() {
            s.notify(crate::notify::GENERIC, "del", db, key);
        }
    } else {
        s.dbs[db].set(key, Value::Raw(Box::new(result)), Ttl::Clear, now);
        s.notify(crate::notify::STRING, "set", db, key);
    }
    len
}

/// A BITOP source read for another core: its bytes, `None` when missing.
pub fn read_operand(db: &mut Db, key: &[u8], now: u64) -> Result<Option<Vec<u8>>, &'static str> {
    let Some(e) = db.get(key, now) else {
        return Ok(None);
    };
    let mut scratch = itoa::Buffer::new();
    match e.value.string_bytes(&mut scratch).filter(|_| e.value.is_string()) {
        Some(b) => Ok(Some(b.to_vec())),
        None => Err(WRONGTYPE),
    }
}

/// BITOP with every key on this shard.
pub fn bitop(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let Some(op) = BitOp::parse(args.get(1)) else {
        return ctx.reply.error(SYNTAX);
    };
    if op == BitOp::Not && args.len() != 4 {
        return ctx.reply.error(BITOP_NOT_KEYS);
    }
    let db = &mut s.dbs[ctx.db];
    let mut acc = Vec::new();
    for (i, key) in args.iter().skip(3).enumerate() {
        let mut scratch = itoa::Buffer::new();
        match db.get(key, ctx.now) {
            None => bitop_fold(op, &mut acc, &[], i),
            Some(e) => match e.value.string_bytes(&mut scratch).filter(|_| e.value.is_string()) {
                Some(src) => bitop_fold(op, &mut acc, src, i),
                None => return ctx.reply.error(WRONGTYPE),
            },
        }
    }
    let len = store_bitop(s, ctx.db, args.get(2), acc, ctx.now);
    ctx.reply.int(len);
}

#[derive(Clone, Copy, PartialEq)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Clone, Copy, PartialEq)]
enum FieldOp {
    Get,
    Set,
    Incr,
}

struct Field {
    op: FieldOp,
    signed: bool,
    bits: u32,
    offset: u64,
    value: i64,
    overflow: Overflow,
}

/// "i1".."i64" or "u1".."u63" (the width read up to a NUL, like Redis).
fn field_type(arg: &[u8]) -> Option<(bool, u32)> {
    let (&sign, rest) = arg.split_first()?;
    let width = rest.split(|&b| b == 0).next().unwrap_or(rest);
    let bits = parse_i64(width)?;
    match sign {
        b'i' if (1..=64).contains(&bits) => Some((true, bits as u32)),
        b'u' if (1..=63).contains(&bits) => Some((false, bits as u32)),
        _ => None,
    }
}

/// Parses every BITFIELD operation before touching the key, as Redis does.
fn parse_fields(args: &Args, max_bulk: u64) -> Result<Vec<Field>, &'static str> {
    let mut fields = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        let op = if args.is(j, "get") && left >= 2 {
            FieldOp::Get
        } else if args.is(j, "set") && left >= 3 {
            FieldOp::Set
        } else if args.is(j, "incrby") && left >= 3 {
            FieldOp::Incr
        } else if args.is(j, "overflow") && left >= 1 {
            overflow = if args.is(j + 1, "wrap") {
                Overflow::Wrap
            } else if args.is(j + 1, "sat") {
                Overflow::Sat
            } else if args.is(j + 1, "fail") {
                Overflow::Fail
            } else {
                return Err("ERR Invalid OVERFLOW type specified");
            };
            j += 2;
            continue;
        } else {
            return Err(SYNTAX);
        };
        let (signed, bits) = field_type(args.get(j + 1)).ok_or(BIT_TYPE)?;
        let offset = bit_offset(args.get(j + 2), Some(bits), max_bulk).ok_or(BIT_OFFSET)?;
        let value = match op {
            FieldOp::Get => 0,
            _ => parse_i64(args.get(j + 3)).ok_or(NOT_INTEGER)?,
        };
        fields.push(Field { op, signed, bits, offset, value, overflow });
        j += if op == FieldOp::Get { 3 } else { 4 };
    }
    Ok(fields)
}

fn get_field(bytes: &[u8], offset: u64, bits: u32, signed: bool) -> i64 {
    let mut v = 0u64;
    for o in offset..offset + bits as u64 {
        v = (v << 1) | ((byte_at(bytes, o >> 3) >> (7 - (o & 7))) & 1) as u64;
    }
    if signed && bits < 64 && v >> (bits - 1) & 1 == 1 {
        v |= u64::MAX << bits;
    }
    v as i64
}

fn set_field(bytes: &mut [u8], offset: u64, bits: u32, value: u64) {
    for (j, o) in (offset..offset + bits as u64).enumerate() {
        let bit = ((value >> (bits as usize - 1 - j)) & 1) as u8;
        let shift = 7 - (o & 7);
        if let Some(b) = usize::try_from(o >> 3).ok().and_then(|i| bytes.get_mut(i)) {
            *b = (*b & !(1 << shift)) | (bit << shift);
        }
    }
}

/// The value a field of this type holds for `target`, applying the
/// overflow policy; `None` when FAIL refuses it.
fn fit(target: i128, signed: bool, bits: u32, overflow: Overflow) -> Option<i64> {
    let (min, max) =
        if signed { (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1) } else { (0, (1i128 << bits) - 1) };
    if (min..=max).contains(&target) {
        return Some(target as i64);
    }
    match overflow {
        Overflow::Fail => None,
        Overflow::Sat => Some(if target > max { max } else { min } as i64),
        Overflow::Wrap => {
            let low = target as u64 & (u64::MAX >> (64 - bits));
            let negative = signed && low >> (bits - 1) & 1 == 1;
            Some(if negative { low | (u64::MAX.checked_shl(bits).unwrap_or(0)) } else { low } as i64)
        }
    }
}

/// Runs one SET or INCRBY; the reply value and whether the field's value
/// changed, `None` for a refused overflow.
fn write_field(bytes: &mut [u8], f: &Field) -> Option<(i64, bool)> {
    let old = get_field(bytes, f.offset, f.bits, f.signed);
    // A SET value is a field value as C casts it: unsigned reads it as u64.
    let target = match (f.op, f.signed) {
        (FieldOp::Incr, _) => old as i128 + f.value as i128,
        (_, true) => f.value as i128,
        (_, false) => f.value as u64 as i128,
    };
    let new = fit(target, f.signed, f.bits, f.overflow)?;
    set_field(bytes, f.offset, f.bits, new as u64);
    Some((if f.op == FieldOp::Incr { new } else { old }, new != old))
}

/// BITFIELD and BITFIELD_RO; the number of writes that changed the string.
fn bitfield_generic(s: &mut Shard, ctx: &mut Ctx, args: Args, read_only: bool) -> u64 {
    let fields = match parse_fields(&args, s.config.proto_max_bulk_len) {
        Ok(f) => f,
        Err(e) => {
            ctx.reply.error(e);
            return 0;
        }
    };
    let db = &mut s.dbs[ctx.db];
    let key = args.get(1);
    let highest = fields.iter().filter(|f| f.op != FieldOp::Get).map(|f| f.offset + f.bits as u64 - 1).max();
    let Some(highest) = highest else {
        let mut scratch = itoa::Buffer::new();
        let bytes = match db.get(key, ctx.now) {
            None => &[][..],
            Some(e) => match e.value.string_bytes(&mut scratch).filter(|_| e.value.is_string()) {
                Some(b) => b,
                None => {
                    ctx.reply.error(WRONGTYPE);
                    return 0;
                }
            },
        };
        ctx.reply.array(fields.len());
        for f in &fields {
            ctx.reply.int(get_field(bytes, f.offset, f.bits, f.signed));
        }
        return 0;
    };
    if read_only {
        ctx.reply.error("ERR BITFIELD_RO only supports the GET subcommand");
        return 0;
    }
    let reply = &mut ctx.reply;
    let mut changes = 0;
    let done = with_bits(db, key, (highest >> 3) as usize + 1, ctx.now, |bytes, resized| {
        reply.array(fields.len());
        for f in &fields {
            match f.op {
                FieldOp::Get => reply.int(get_field(bytes, f.offset, f.bits, f.signed)),
                _ => match write_field(bytes, f) {
                    Some((v, changed)) => {
                        changes += (resized || changed) as u64;
                        reply.int(v)
                    }
                    None => reply.null(),
                },
            }
        }
    });
    match done {
        Err(e) => {
            ctx.reply.error(e);
            0
        }
        Ok(()) => {
            if changes > 0 {
                s.notify(crate::notify::STRING, "setbit", ctx.db, key);
            }
            changes
        }
    }
}

pub fn bitfield(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let changes = bitfield_generic(s, ctx, args, false);
    count_changes(s, changes);
}

pub fn bitfield_ro(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    bitfield_generic(s, ctx, args, true);
}

/// The bitmap commands (BITOP over several shards runs in the proxy).
pub static COMMANDS: &[CommandSpec] = &[
    cmd!("setbit", 4, WRITE | DENYOOM, KEY1, Keyed, Some(setbit)),
    cmd!("getbit", 3, READONLY | FAST, KEY1, Keyed, Some(getbit)),
    cmd!("bitcount", -2, READONLY, KEY1, Keyed, Some(bitcount)),
    cmd!("bitpos", -3, READONLY, KEY1, Keyed, Some(bitpos)),
    cmd!("bitop", -4, WRITE | DENYOOM, (2, -1, 1), Keyed, Some(bitop)),
    cmd!("bitfield", -2, WRITE | DENYOOM, KEY1, Keyed, Some(bitfield)),
    cmd!("bitfield_ro", -2, READONLY | FAST, KEY1, Keyed, Some(bitfield_ro)),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_policies() {
        assert_eq!(fit(300, false, 8, Overflow::Wrap), Some(44));
        assert_eq!(fit(300, false, 8, Overflow::Sat), Some(255));
        assert_eq!(fit(300, false, 8, Overflow::Fail), None);
        assert_eq!(fit(-1, false, 8, Overflow::Sat), Some(0));
        assert_eq!(fit(128, true, 8, Overflow::Wrap), Some(-128));
        assert_eq!(fit(-129, true, 8, Overflow::Sat), Some(-128));
        assert_eq!(fit(i64::MAX as i128 + 1, true, 64, Overflow::Wrap), Some(i64::MIN));
        assert_eq!(fit(u64::MAX as i128, false, 8, Overflow::Sat), Some(255));
    }

    #[test]
    fn fields_roundtrip() {
        let mut b = vec![0u8; 16];
        set_field(&mut b, 7, 5, 23);
        assert_eq!(&b[..2], &[0b0000_0001, 0b0111_0000]);
        assert_eq!(get_field(&b, 7, 5, false), 23);
        assert_eq!(get_field(&b, 7, 5, true), -9);
        set_field(&mut b, 3, 64, u64::MAX - 1);
        assert_eq!(get_field(&b, 3, 64, true), -2);
    }

    #[test]
    fn ranges() {
        assert_eq!(count_bits(b"\xff\xff", 3, 12), 10);
        assert_eq!(count_bits(b"\xff", 2, 2), 1);
        assert_eq!(find_bit(b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01", 0, 87, true), Some(87));
        assert_eq!(find_bit(b"\xff\xff", 0, 15, false), None);
        assert_eq!(find_bit(b"\xf0", 2, 6, false), Some(4));
        assert_eq!(bit_offset(b"#2", Some(8), 512 << 20), Some(16));
        assert_eq!(bit_offset(b"#2", None, 512 << 20), None);
        assert_eq!(bit_offset(b"4294967295", None, 512 << 20), Some(4294967295));
        assert_eq!(bit_offset(b"4294967296", None, 512 << 20), None);
    }
}
