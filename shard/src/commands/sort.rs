//! SORT and SORT_RO (Redis's sort.c): lists, sets and sorted sets sorted by
//! their elements or by BY patterns, GET patterns, LIMIT, ALPHA, STORE.
//! The pieces are public so that the proxy can run a SORT whose patterns
//! name keys on other shards (proxy/src/commands/sort.rs): it collects the
//! elements on the source's owner, reads the pattern keys from their
//! owners, and sorts with the same code.

use super::prelude::*;
use super::zset::WrongType;
use super::Ctx;
use crate::args::{parse_i64, Args};
use crate::config::ClusterMode;
use crate::db::{Db, Ttl};
use crate::numbers::sort_score;
use crate::reply::errors::*;
use crate::reply::Reply;
use crate::shard::Shard;
use crate::types::list::{Fill, List};
use crate::value::Value;
use std::cmp::Ordering;

/// A SORT's options.
pub struct Opts<'a> {
    pub desc: bool,
    pub alpha: bool,
    pub limit_start: i64,
    pub limit_count: i64,
    pub store: Option<&'a [u8]>,
    pub by: Option<&'a [u8]>,
    /// BY a pattern without '*': the elements keep their order.
    pub dontsort: bool,
    pub gets: Vec<&'a [u8]>,
}

/// Parses SORT's options (`cluster`: BY and GET patterns are refused).
pub fn parse<'a>(args: &Args<'a>, readonly: bool, cluster: bool) -> Result<Opts<'a>, &'static str> {
    let mut o = Opts {
        desc: false,
        alpha: false,
        limit_start: 0,
        limit_count: -1,
        store: None,
        by: None,
        dontsort: false,
        gets: Vec::new(),
    };
    let mut j = 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        if args.is(j, "asc") {
            o.desc = false;
        } else if args.is(j, "desc") {
            o.desc = true;
        } else if args.is(j, "alpha") {
            o.alpha = true;
        } else if args.is(j, "limit") && left >= 2 {
            o.limit_start = parse_i64(args.get(j + 1)).ok_or(NOT_INTEGER)?;
            o.limit_count = parse_i64(args.get(j + 2)).ok_or(NOT_INTEGER)?;
            j += 2;
        } else if !readonly && args.is(j, "store") && left >= 1 {
            o.store = Some(args.get(j + 1));
            j += 1;
        } else if args.is(j, "by") && left >= 1 {
            let by = args.get(j + 1);
            o.by = Some(by);
            if !by.contains(&b'*') {
                o.dontsort = true;
            } else if cluster {
                return Err("ERR BY option of SORT denied in Cluster mode.");
            }
            j += 1;
        } else if args.is(j, "get") && left >= 1 {
            if cluster {
                return Err("ERR GET option of SORT denied in Cluster mode.");
            }
            o.gets.push(args.get(j + 1));
            j += 1;
        } else {
            return Err(SYNTAX);
        }
        j += 1;
    }
    Ok(o)
}

/// Whether a pattern reads keys (`#` is the element itself; a pattern
/// without '*' names nothing).
pub fn reads_keys(pattern: &[u8]) -> bool {
    pattern != b"#" && pattern.contains(&b'*')
}

impl Opts<'_> {
    /// Whether running this SORT reads keys named by its patterns.
    pub fn reads_other_keys(&self) -> bool {
        self.by.is_some_and(reads_keys) || self.gets.iter().any(|g| reads_keys(g))
    }

    /// What collecting the elements needs to know.
    pub fn shape(&self) -> Shape {
        Shape {
            desc: self.desc,
            dontsort: self.dontsort,
            store: self.store.is_some(),
            scripted: false,
            limit_start: self.limit_start,
            limit_count: self.limit_count,
        }
    }
}

/// The options that decide which elements are collected.
#[derive(Clone, Copy)]
pub struct Shape {
    pub desc: bool,
    pub dontsort: bool,
    pub store: bool,
    /// Run by a script (Redis's CLIENT_SCRIPT), whose output must not
    /// depend on a set's order either.
    pub scripted: bool,
    pub limit_start: i64,
    pub limit_count: i64,
}

/// The elements to sort and the output range [start, end] over them.
pub struct Collected {
    pub elems: Vec<Vec<u8>>,
    pub start: i64,
    pub end: i64,
    /// A set stored, or sorted by a script, BY a constant is sorted ALPHA
    /// instead (Redis makes the result deterministic for replicas and
    /// scripts).
    pub set_sorted_alpha: bool,
}

/// The source's elements, as sortCommandGeneric collects them; `Err`: the
/// key holds another type.
pub fn collect(value: Option<&Value>, sh: Shape) -> Result<Collected, WrongType> {
    let set_sorted_alpha = sh.dontsort && (sh.store || sh.scripted) && matches!(value, Some(Value::Set(_)));
    let dontsort = sh.dontsort && !set_sorted_alpha;
    let len = match value {
        None => 0,
        Some(Value::List(l)) => l.len(),
        Some(Value::Set(s)) => s.len(),
        Some(Value::ZSet(z)) => z.len(),
        Some(_) => return Err(WrongType),
    } as i64;
    let mut start = sh.limit_start.max(0).min(len);
    let count = sh.limit_count.max(-1).min(len);
    let mut end = if count < 0 { len - 1 } else { start + count - 1 };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    if end >= len {
        end = len - 1;
    }
    let ranged = dontsort && (start != 0 || end != len - 1) && !matches!(value, Some(Value::Set(_)));
    let take = if ranged { (end - start + 1).max(0) as usize } else { len as usize };
    let mut elems = Vec::with_capacity(take);
    match value {
        Some(Value::List(l)) if dontsort && end >= start => {
            let from = if sh.desc { l.len() - 1 - start as usize } else { start as usize };
            l.walk(from, sh.desc, |i| {
                elems.push(i.to_vec());
                elems.len() < take
            });
            end -= start;
            start = 0;
        }
        Some(Value::List(_)) if dontsort => {}
        Some(Value::List(l)) => l.walk(0, false, |i| {
            elems.push(i.to_vec());
            true
        }),
        Some(Value::Set(s)) => elems.extend(s.iter().map(|i| i.to_vec())),
        Some(Value::ZSet(z)) if dontsort => {
            let first = if sh.desc { (len - 1 - start.max(0)).max(0) as usize } else { start.max(0) as usize };
            if take > 0 {
                z.walk(first, sh.desc, &mut |_, m| {
                    elems.push(m.to_vec());
                    elems.len() < take
                });
            }
            end -= start;
            start = 0;
        }
        Some(Value::ZSet(z)) => z.for_each(|_, m| elems.push(m.to_vec())),
        _ => {}
    }
    Ok(Collected { elems, start, end, set_sorted_alpha })
}

/// The key (and hash field) a pattern names for one element, Redis's
/// lookupKeyByPattern; `None` for `#` or a pattern without '*'.
pub fn pattern_key(pattern: &[u8], elem: &[u8]) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    if pattern == b"#" {
        return None;
    }
    let star = pattern.iter().position(|&c| c == b'*')?;
    let arrow = pattern[star + 1..].windows(2).position(|w| w == b"->").map(|p| star + 1 + p);
    let (key_end, field) = match arrow {
        Some(a) if a + 2 < pattern.len() => (a, Some(pattern[a + 2..].to_vec())),
        _ => (pattern.len(), None),
    };
    let mut key = Vec::with_capacity(key_end + elem.len());
    key.extend_from_slice(&pattern[..star]);
    key.extend_from_slice(elem);
    key.extend_from_slice(&pattern[star + 1..key_end]);
    Some((key, field))
}

/// The string at `key`, or the hash field at `key` (`None`: missing or of
/// another type).
pub fn value_at(db: &mut Db, key: &[u8], field: Option<&[u8]>, now: u64) -> Option<Vec<u8>> {
    let e = db.get(key, now)?;
    match (field, &e.value) {
        (Some(f), Value::Hash(h)) => h.get(f).map(|i| i.to_vec()),
        (Some(_), _) => None,
        (None, v) => v.string_bytes(&mut itoa::Buffer::new()).map(<[u8]>::to_vec),
    }
}

/// One element being sorted.
struct Sortable {
    elem: Vec<u8>,
    score: f64,
    by: Option<Vec<u8>>,
}

/// What a SORT outputs: one row per element, or per element and GET
/// pattern (`None`: a GET found nothing).
pub type Rows = Vec<Option<Vec<u8>>>;

/// Reads a pattern for an element (`#` included).
pub type Lookup<'a> = dyn FnMut(&[u8], &[u8]) -> Option<Vec<u8>> + 'a;

/// Sorts the collected elements and applies LIMIT and GET. `lookup` reads
/// a pattern for an element (`#` included).
pub fn finish(o: &Opts, c: Collected, lookup: &mut Lookup) -> Result<Rows, &'static str> {
    let (dontsort, alpha, by) = match c.set_sorted_alpha {
        true => (false, true, None),
        false => (o.dontsort, o.alpha, o.by),
    };
    let mut items: Vec<Sortable> = c.elems.into_iter().map(|elem| Sortable { elem, score: 0.0, by: None }).collect();
    let mut conversion_error = false;
    if !dontsort {
        for it in &mut items {
            let by_value = match by {
                Some(pattern) => match lookup(pattern, &it.elem) {
                    Some(v) => Some(v),
                    None => continue,
                },
                None => None,
            };
            if alpha {
                it.by = by_value;
            } else {
                let (score, ok) = sort_score(by_value.as_deref().unwrap_or(&it.elem));
                it.score = score;
                conversion_error |= !ok;
            }
        }
        let bypattern = by.is_some();
        items.sort_by(|a, b| {
            let cmp = if !alpha {
                if a.score > b.score {
                    Ordering::Greater
                } else if a.score < b.score {
                    Ordering::Less
                } else {
                    a.elem.cmp(&b.elem)
                }
            } else if bypattern {
                match (&a.by, &b.by) {
                    (None, None) => Ordering::Equal,
                    (None, Some(_)) => Ordering::Less,
                    (Some(_), None) => Ordering::Greater,
                    (Some(x), Some(y)) => collate(x, y),
                }
            } else {
                collate(&a.elem, &b.elem)
            };
            if o.desc {
                cmp.reverse()
            } else {
                cmp
            }
        });
    }
    if conversion_error {
        return Err("ERR One or more scores can't be converted into double");
    }
    let mut rows = Vec::new();
    if c.end >= c.start {
        for it in &items[c.start as usize..=c.end as usize] {
            if o.gets.is_empty() {
                rows.push(Some(it.elem.clone()));
            }
            for pattern in &o.gets {
                rows.push(lookup(pattern, &it.elem));
            }
        }
    }
    Ok(rows)
}

/// strcoll in the C locale: bytes up to the first NUL.
fn collate(a: &[u8], b: &[u8]) -> Ordering {
    let cut = |s: &[u8]| s.iter().position(|&c| c == 0).map_or(s.len(), |n| n);
    a[..cut(a)].cmp(&b[..cut(b)])
}

/// The output of a SORT without STORE.
pub fn reply_rows(r: &mut Reply, rows: &Rows) {
    r.array(rows.len());
    for row in rows {
        match row {
            Some(v) => r.bulk(v),
            None => r.null(),
        }
    }
}

/// Saves the rows as a list at `key` (missing GETs as empty strings), or
/// deletes the key when there are none; replies with their count.
pub fn store_rows(db: &mut Db, key: &[u8], rows: &Rows, fill: i64, now: u64, r: &mut Reply) {
    if rows.is_empty() {
        db.remove(key, now);
    } else {
        let mut list = List::new();
        for row in rows {
            list.push_back(row.as_deref().unwrap_or(b""), Fill(fill));
        }
        db.set(key, Value::List(Box::new(list)), Ttl::Clear, now);
    }
    r.int(rows.len() as i64);
}

fn sort_generic(s: &mut Shard, ctx: &mut Ctx, args: Args, readonly: bool) {
    let cluster = s.config.cluster_mode != ClusterMode::No;
    let o = match parse(&args, readonly, cluster) {
        Ok(o) => o,
        Err(e) => return ctx.reply.error(e),
    };
    let (now, fill) = (ctx.now, s.config.list_max_listpack_size);
    let Shard { dbs, stats, .. } = s;
    let db = &mut dbs[ctx.db];
    let source = db.get(args.get(1), now);
    match source {
        Some(_) => stats.keyspace_hits += 1,
        None => stats.keyspace_misses += 1,
    }
    let shape = Shape { scripted: s.scripted, ..o.shape() };
    let collected = match collect(source.map(|e| &e.value), shape) {
        Ok(c) => c,
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
    };
    let rows = finish(&o, collected, &mut |pattern, elem| match pattern {
        b"#" => Some(elem.to_vec()),
        _ => pattern_key(pattern, elem).and_then(|(key, field)| value_at(db, &key, field.as_deref(), now)),
    });
    match (rows, o.store) {
        (Err(e), _) => ctx.reply.error(e),
        (Ok(rows), None) => reply_rows(&mut ctx.reply, &rows),
        (Ok(rows), Some(key)) => {
            store_rows(db, key, &rows, fill, now, &mut ctx.reply);
            s.log_key_state(ctx.db, key, now);
        }
    }
}

pub fn sort(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    sort_generic(s, ctx, args, false)
}

pub fn sort_ro(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    sort_generic(s, ctx, args, true)
}

/// SORT and SORT_RO. The proxy routes them (patterns may name keys on any
/// shard); with every key on one shard they run here.
pub static COMMANDS: &[CommandSpec] = &[
    cmd!("sort", -2, WRITE | DENYOOM, KEY1, Proxy, Some(sort)).with_store_key(StoreKey::Sort),
    cmd!("sort_ro", -2, READONLY, KEY1, Proxy, Some(sort_ro)),
];

#[cfg(test)]
mod tests {
    use super::pattern_key;

    #[test]
    fn patterns_name_keys_and_fields() {
        let k = |p: &str, e: &str| pattern_key(p.as_bytes(), e.as_bytes());
        assert_eq!(k("w_*", "3"), Some((b"w_3".to_vec(), None)));
        assert_eq!(k("h_*->f", "3"), Some((b"h_3".to_vec(), Some(b"f".to_vec()))));
        assert_eq!(k("h_*x->", "3"), Some((b"h_3x->".to_vec(), None)));
        assert_eq!(k("#", "3"), None);
        assert_eq!(k("nostar", "3"), None);
    }
}
