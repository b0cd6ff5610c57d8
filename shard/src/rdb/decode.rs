//! Reading RDB values (`rdbLoadObject`): every value type, in the current
//! and the older encodings, into the encoding Redis would give it under
//! the configured thresholds (`Limits`).

pub use super::input::{Input, Result};
use super::{intset, kind, listpack, ziplist, zipmap, Limits, RdbError};
use crate::numbers::parse_double;
use crate::types::hash::Hash;
use crate::types::list::List;
use crate::types::pack::{Enc, Item, Pack};
use crate::types::segmap::SegMap;
use crate::types::set::{self, Set};
use crate::types::zset::{cmp_key, ZSet};
use crate::value::Value;
use std::borrow::Cow;
use std::collections::HashSet;

/// A decoded element in canonical form (canonical integers as `Int`).
fn canonical(item: Item) -> Item {
    match item {
        Item::Str(s) => Item::arg(s),
        int => int,
    }
}

pub fn type_error(at: usize, t: u8) -> RdbError {
    let what = match t {
        kind::MODULE | kind::MODULE_2 => "module values are not supported".to_string(),
        _ => "Unknown RDB object type".to_string(),
    };
    RdbError::new(at, format!("{what} (RDB type {t})"))
}

/// Whether `t` is a value type this reader can decode.
pub fn is_value_type(t: u8) -> bool {
    matches!(t, 0..=5 | 9..=19 | 21)
}

/// Reads a value of RDB type `t`; `None` for an empty aggregate, which
/// Redis skips when loading a file and refuses in RESTORE.
pub fn read_value(input: &mut Input, t: u8, limits: &Limits) -> Result<Option<Value>> {
    let start = input.pos;
    let value = match t {
        kind::STRING => Some(Value::from_bytes_encoded(&input.string()?)),
        kind::LIST => read_linked_list(input, limits)?,
        kind::LIST_QUICKLIST | kind::LIST_QUICKLIST_2 => read_quicklist(input, t, limits)?,
        kind::LIST_ZIPLIST => {
            let blob = input.string()?;
            let items = ziplist::parse(&blob).map_err(|e| RdbError::new(start, format!("List {e}")))?;
            list_from(items.into_iter(), limits)
        }
        kind::SET => read_set(input, limits)?,
        kind::SET_INTSET => {
            let blob = input.string()?;
            let ints = intset::decode(&blob).map_err(|e| RdbError::new(start, e))?;
            let set = if ints.len() > limits.set_max_intset_entries {
                set::from_items(ints.iter().map(Item::Int), limits.set_max_intset_entries)
            } else {
                Set::Ints(ints)
            };
            Some(Value::Set(Box::new(set)))
        }
        kind::ZSET | kind::ZSET_2 => read_zset(input, t == kind::ZSET_2, limits)?,
        kind::ZSET_ZIPLIST | kind::ZSET_LISTPACK => {
            let blob = input.string()?;
            let items = if t == kind::ZSET_LISTPACK { listpack::parse(&blob) } else { ziplist::parse(&blob) };
            let items = items.map_err(|e| RdbError::new(start, format!("Zset {e}")))?;
            packed_zset(&items, limits).map_err(|e| RdbError::new(start, e))?
        }
        kind::HASH => read_hash(input, limits)?,
        kind::HASH_ZIPMAP => {
            let blob = input.string()?;
            let pairs = zipmap::parse(&blob).map_err(|e| RdbError::new(start, e))?;
            let long = pairs.iter().any(|(f, v)| f.len().max(v.len()) > limits.hash.max_value);
            let items = pairs.iter().flat_map(|(f, v)| [Item::Str(f), Item::Str(v)]).collect::<Vec<_>>();
            packed_hash(&items, long, limits).map_err(|_| RdbError::new(start, "Hash zipmap with dup elements"))?
        }
        kind::HASH_ZIPLIST | kind::HASH_LISTPACK => {
            let blob = input.string()?;
            let items = if t == kind::HASH_LISTPACK { listpack::parse(&blob) } else { ziplist::parse(&blob) };
            let items = items.map_err(|e| RdbError::new(start, format!("Hash {e}")))?;
            packed_hash(&items, false, limits).map_err(|e| RdbError::new(start, e))?
        }
        kind::STREAM_LISTPACKS | kind::STREAM_LISTPACKS_2 | super::stream::STREAM_LISTPACKS_3 => {
            Some(Value::Stream(Box::new(super::stream::read(input, t)?)))
        }
        _ => return Err(type_error(start.saturating_sub(1), t)),
    };
    Ok(value)
}

/// Steps over a value of RDB type `t` without decoding it.
pub fn skip_value(input: &mut Input, t: u8) -> Result<()> {
    let count = |input: &mut Input| input.len();
    match t {
        kind::STRING
        | kind::LIST_ZIPLIST
        | kind::SET_INTSET
        | kind::ZSET_ZIPLIST
        | kind::ZSET_LISTPACK
        | kind::HASH_ZIPMAP
        | kind::HASH_ZIPLIST
        | kind::HASH_LISTPACK => input.skip_string(),
        kind::LIST | kind::SET | kind::LIST_QUICKLIST => {
            for _ in 0..count(input)? {
                input.skip_string()?;
            }
            Ok(())
        }
        kind::LIST_QUICKLIST_2 => {
            for _ in 0..count(input)? {
                input.len()?;
                input.skip_string()?;
            }
            Ok(())
        }
        kind::HASH => {
            for _ in 0..count(input)? {
                input.skip_string()?;
                input.skip_string()?;
            }
            Ok(())
        }
        kind::ZSET | kind::ZSET_2 => {
            for _ in 0..count(input)? {
                input.skip_string()?;
                if t == kind::ZSET_2 {
                    input.bytes(8)?;
                } else {
                    input.ascii_double()?;
                }
            }
            Ok(())
        }
        kind::STREAM_LISTPACKS | kind::STREAM_LISTPACKS_2 | super::stream::STREAM_LISTPACKS_3 => {
            super::stream::skip(input, t)
        }
        _ => Err(type_error(input.pos.saturating_sub(1), t)),
    }
}

fn list_from<'b>(items: impl Iterator<Item = Item<'b>>, limits: &Limits) -> Option<Value> {
    let mut list = List::with_depth(limits.list_depth);
    let mut scratch = itoa::Buffer::new();
    for item in items {
        list.push_back(item.bytes(&mut scratch), limits.list_fill);
    }
    (!list.is_empty()).then(|| Value::List(Box::new(list)))
}

fn read_linked_list(input: &mut Input, limits: &Limits) -> Result<Option<Value>> {
    let mut list = List::with_depth(limits.list_depth);
    for _ in 0..input.len()? {
        list.push_back(&input.string()?, limits.list_fill);
    }
    Ok((!list.is_empty()).then(|| Value::List(Box::new(list))))
}

fn read_quicklist(input: &mut Input, t: u8, limits: &Limits) -> Result<Option<Value>> {
    let mut list = List::with_depth(limits.list_depth);
    let mut scratch = itoa::Buffer::new();
    for _ in 0..input.len()? {
        let at = input.pos;
        let container = if t == kind::LIST_QUICKLIST_2 { input.len()? } else { 2 };
        if container != 1 && container != 2 {
            return Err(RdbError::new(at, "Quicklist integrity check failed"));
        }
        let at = input.pos;
        let data = input.string()?;
        if data.is_empty() {
            return Err(RdbError::new(at, "Quicklist node is empty"));
        }
        if container == 1 {
            list.push_back(&data, limits.list_fill);
            continue;
        }
        let items = if t == kind::LIST_QUICKLIST_2 { listpack::parse(&data) } else { ziplist::parse(&data) };
        for item in items.map_err(|e| RdbError::new(at, e))? {
            list.push_back(item.bytes(&mut scratch), limits.list_fill);
        }
    }
    Ok((!list.is_empty()).then(|| Value::List(Box::new(list))))
}

fn read_set(input: &mut Input, limits: &Limits) -> Result<Option<Value>> {
    let len = input.len()?;
    let max = limits.set_max_intset_entries;
    let mut set = Set::new_intset();
    for _ in 0..len {
        let at = input.pos;
        let member = input.string()?;
        if !set.add(&member, max) {
            return Err(RdbError::new(at, "Duplicate set members detected"));
        }
    }
    Ok((!set.is_empty()).then(|| Value::Set(Box::new(set))))
}

fn read_zset(input: &mut Input, binary: bool, limits: &Limits) -> Result<Option<Value>> {
    let len = input.len()?;
    let mut items: Vec<(f64, Cow<[u8]>)> = Vec::with_capacity(input.capacity(len));
    let mut seen = HashSet::with_capacity(input.capacity(len));
    let (mut max_len, mut total) = (0usize, 0usize);
    for _ in 0..len {
        let at = input.pos;
        let member = input.string()?;
        let score = if binary { f64::from_le_bytes(input.array()?) } else { input.ascii_double()? };
        if score.is_nan() {
            return Err(RdbError::new(at, "Zset with NAN score detected"));
        }
        if !seen.insert(member.clone()) {
            return Err(RdbError::new(at, "Duplicate zset fields detected"));
        }
        max_len = max_len.max(member.len());
        total += member.len();
        items.push((score, member));
    }
    if items.is_empty() {
        return Ok(None);
    }
    if total > listpack::MAX_SAFE {
        max_len = usize::MAX;
    }
    items.sort_by(|a, b| cmp_key(a.0, &a.1, b.0, &b.1));
    let n = items.len();
    let zset = ZSet::from_sorted(items.iter().map(|(s, m)| (*s, &m[..])), n, max_len, limits.zset);
    Ok(Some(Value::ZSet(Box::new(zset))))
}

/// A sorted set from a listpack or ziplist of member, score pairs: kept
/// packed unless it has more members than the limit (Redis does not look
/// at member lengths here).
fn packed_zset(items: &[Item], limits: &Limits) -> std::result::Result<Option<Value>, &'static str> {
    if items.len() % 2 == 1 {
        return Err("Zset listpack integrity check failed");
    }
    let mut seen = HashSet::with_capacity(items.len() / 2);
    let mut pairs = Vec::with_capacity(items.len() / 2);
    let mut scratch = itoa::Buffer::new();
    for pair in items.chunks_exact(2) {
        let member = pair[0].to_vec();
        let score = match pair[1] {
            Item::Int(n) => n as f64,
            Item::Str(s) => parse_double(s).ok_or("Zset listpack has an invalid score")?,
        };
        if !seen.insert(canonical(pair[0]).bytes(&mut scratch).to_vec()) {
            return Err("Zset listpack integrity check failed (duplicate member)");
        }
        pairs.push((score, member));
    }
    if pairs.is_empty() {
        return Ok(None);
    }
    pairs.sort_by(|a, b| cmp_key(a.0, &a.1, b.0, &b.1));
    let n = pairs.len();
    let zset = ZSet::from_sorted(pairs.iter().map(|(s, m)| (*s, &m[..])), n, 0, limits.zset);
    Ok(Some(Value::ZSet(Box::new(zset))))
}

fn read_hash(input: &mut Input, limits: &Limits) -> Result<Option<Value>> {
    let len = input.len()?;
    let mut hash = if len as u128 > limits.hash.max_entries as u128 {
        Hash::Table(Box::new(SegMap::new(true)))
    } else {
        Hash::default()
    };
    for _ in 0..len {
        let at = input.pos;
        let field = input.string()?;
        let value = input.string()?;
        if !hash.set(&field, &value, &limits.hash) {
            return Err(RdbError::new(at, "Duplicate hash fields detected"));
        }
    }
    Ok((!hash.is_empty()).then(|| Value::Hash(Box::new(hash))))
}

/// A hash from a listpack, ziplist or zipmap of field, value pairs: kept
/// packed unless it has more fields than the limit (or, for zipmaps, a
/// string longer than the limit: `long`).
fn packed_hash(items: &[Item], long: bool, limits: &Limits) -> std::result::Result<Option<Value>, &'static str> {
    if items.len() % 2 == 1 {
        return Err("Hash listpack integrity check failed");
    }
    let n = items.len() / 2;
    if n == 0 {
        return Ok(None);
    }
    let mut seen = HashSet::with_capacity(n);
    for field in items.iter().step_by(2) {
        if !seen.insert(canonical(*field)) {
            return Err("Hash listpack integrity check failed (duplicate field)");
        }
    }
    let hash = if n > limits.hash.max_entries || long {
        let mut table = SegMap::new(true);
        let mut scratch = (itoa::Buffer::new(), itoa::Buffer::new());
        for pair in items.chunks_exact(2) {
            table.insert(pair[0].bytes(&mut scratch.0), Some(pair[1].bytes(&mut scratch.1)));
        }
        Hash::Table(Box::new(table))
    } else {
        let mut pack = Pack::default();
        for item in items {
            pack.push(&Enc::of(canonical(*item)));
        }
        Hash::Pack(pack)
    };
    Ok(Some(Value::Hash(Box::new(hash))))
}
