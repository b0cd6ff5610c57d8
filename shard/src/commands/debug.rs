//! DEBUG's table entry and the parts of it that read a shard's data: the
//! dataset digest (Redis's debug.c: xor of SHA-1s, so DEBUG DIGEST compares
//! with redis-server's for the same data), DEBUG OBJECT's line and DEBUG
//! POPULATE. The command itself runs in the proxy (proxy/src/commands/debug.rs),
//! which calls these on the keys' owners.

use super::prelude::*;
use crate::db::{Db, Entry, Ttl};
use crate::numbers::{format_double, DoubleBuf};
use crate::shard::Shard;
use crate::value::Value;
use sha1_smol::Sha1;

pub type Digest = [u8; 20];

/// Redis's xorDigest: the SHA-1 of `data` xored into `digest` (order-free).
fn xor_digest(digest: &mut Digest, data: &[u8]) {
    let hash = Sha1::from(data).digest().bytes();
    digest.iter_mut().zip(hash).for_each(|(d, h)| *d ^= h);
}

/// Redis's mixDigest: SHA-1(digest xor SHA-1(data)) (order matters).
fn mix_digest(digest: &mut Digest, data: &[u8]) {
    xor_digest(digest, data);
    *digest = Sha1::from(&digest[..]).digest().bytes();
}

/// Redis's object type numbers (OBJ_STRING...), mixed in first.
fn type_number(v: &Value) -> u32 {
    match v {
        Value::Int(_) | Value::Emb(_) | Value::Long(_) | Value::Raw(_) => 0,
        Value::List(_) => 1,
        Value::Set(_) => 2,
        Value::ZSet(_) => 3,
        Value::Hash(_) => 4,
        Value::Stream(_) => 6,
    }
}

/// Redis's xorObjectDigest: the value's type and contents (and whether it
/// has a TTL) mixed into `digest`.
pub fn mix_value(digest: &mut Digest, entry: &Entry) {
    let v = &entry.value;
    mix_digest(digest, &type_number(v).to_be_bytes());
    let mut scratch = itoa::Buffer::new();
    let mut score_buf: DoubleBuf = [0; 32];
    match v {
        Value::Int(_) | Value::Emb(_) | Value::Long(_) | Value::Raw(_) => {
            mix_digest(digest, v.string_bytes(&mut scratch).unwrap_or_default())
        }
        Value::List(l) => l.walk(0, false, |e| {
            mix_digest(digest, e.bytes(&mut scratch));
            true
        }),
        Value::Set(s) => s.iter().for_each(|e| xor_digest(digest, e.bytes(&mut scratch))),
        Value::ZSet(z) => z.for_each(|score, member| {
            let mut ele = [0u8; 20];
            mix_digest(&mut ele, member);
            mix_digest(&mut ele, format_g17(score, &mut score_buf));
            xor_digest(digest, &ele);
        }),
        Value::Hash(h) => {
            let mut scratch2 = itoa::Buffer::new();
            for (field, value) in h.iter() {
                let mut ele = [0u8; 20];
                mix_digest(&mut ele, field.bytes(&mut scratch));
                mix_digest(&mut ele, value.bytes(&mut scratch2));
                xor_digest(digest, &ele);
            }
        }
        Value::Stream(s) => {
            use crate::types::stream::StreamId;
            s.range(StreamId::MIN, StreamId::MAX, false, |id, node, e| {
                mix_digest(digest, format!("{}.{}", id.ms, id.seq).as_bytes());
                let mut scratch2 = itoa::Buffer::new();
                for (field, value) in node.fields(e) {
                    mix_digest(digest, field.bytes(&mut scratch));
                    mix_digest(digest, value.bytes(&mut scratch2));
                }
                true
            });
        }
    }
    if entry.expire_at().is_some() {
        xor_digest(digest, b"!!expire!!");
    }
}

/// `%.17g`, as Redis prints scores into the digest (integers included).
fn format_g17(score: f64, buf: &mut DoubleBuf) -> &[u8] {
    format_double(score, buf)
}

/// The entry for `key` as `dictFind` sees it: logically expired keys too
/// (DEBUG and MEMORY USAGE do not expire what they look at).
pub fn raw_entry<'a>(db: &'a Db, key: &[u8]) -> Option<&'a Entry> {
    db.table.find(db.table.hash(key), key)
}

/// DEBUG DIGEST-VALUE's digest of one key: zeros when it does not exist.
pub fn value_digest(db: &Db, key: &[u8]) -> Digest {
    let mut digest = [0u8; 20];
    if let Some(e) = raw_entry(db, key) {
        mix_value(&mut digest, e);
    }
    digest
}

/// This shard's part of DEBUG DIGEST: per database holding keys here, the
/// xor of the SHA-1s of its keys' digests (each the key mixed with its
/// value). The
/// databases' ids are mixed in by the caller once every shard's part is in,
/// as Redis's computeDatasetDigest does per non-empty database.
pub fn dataset_digests(shard: &Shard) -> Vec<(usize, Digest)> {
    let mut out = Vec::new();
    for (id, db) in shard.dbs.iter().enumerate() {
        if db.is_empty() {
            continue;
        }
        let mut all = [0u8; 20];
        for e in db.table.iter() {
            let mut digest = [0u8; 20];
            mix_digest(&mut digest, &e.key);
            mix_value(&mut digest, e);
            // Redis xors each key's digest in with xorDigest (its SHA-1).
            xor_digest(&mut all, &digest);
        }
        out.push((id, all));
    }
    out
}

/// DEBUG DIGEST from every shard's parts: databases in order, each one that
/// holds keys anywhere mixed in by its id, then its keys' digests xored.
pub fn combine_digests(parts: &[Vec<(usize, Digest)>]) -> Digest {
    let mut ids: Vec<usize> = parts.iter().flatten().map(|(id, _)| *id).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut fin = [0u8; 20];
    for id in ids {
        mix_digest(&mut fin, &(id as u32).to_be_bytes());
        for (_, d) in parts.iter().flatten().filter(|(i, _)| *i == id) {
            fin.iter_mut().zip(d).for_each(|(f, x)| *f ^= x);
        }
    }
    fin
}

pub fn hex(digest: &Digest) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Redis's LRU clock: seconds, 24 bits (LRU_CLOCK_MAX).
const LRU_CLOCK_MAX: u64 = (1 << 24) - 1;

/// DEBUG OBJECT's status line for `key` (Redis's format, with corekv's
/// figures: the value's address, its RDB length, the LRU clock), or `None`
/// when the key is not there.
pub fn object_line(shard: &Shard, db: usize, key: &[u8], now: u64) -> Option<String> {
    let e = raw_entry(&shard.dbs[db], key)?;
    let v = &e.value;
    // Redis shares the integer objects 0..9999 (refcount INT_MAX).
    let refcount = match v {
        Value::Int(n) if (0..10000).contains(n) => i32::MAX,
        _ => 1,
    };
    // rdbSavedObjectLen: the payload without its type byte and the DUMP
    // footer (version and CRC).
    let serialized = crate::rdb::dump_payload(v).len().saturating_sub(11);
    let lru = e.access() as u64 & LRU_CLOCK_MAX;
    // estimateObjectIdleTime, with the clock's wrap.
    let clock = (now / 1000) & LRU_CLOCK_MAX;
    let idle = if clock >= lru { clock - lru } else { clock + (LRU_CLOCK_MAX - lru) };
    let mut extra = String::new();
    if let Value::List(l) = v {
        let nodes = l.node_count();
        let size: usize = (0..nodes).filter_map(|n| l.with_node(n, |p| p.bytes())).sum();
        extra = format!(
            " ql_nodes:{nodes} ql_avg_node:{:.2} ql_listpack_max:{} ql_compressed:{} ql_uncompressed_size:{size}",
            l.len() as f64 / nodes.max(1) as f64,
            shard.config.list_max_listpack_size,
            u8::from(l.depth() != 0),
        );
    }
    Some(format!(
        "Value at:{:p} refcount:{refcount} encoding:{} serializedlength:{serialized} lru:{lru} lru_seconds_idle:{idle}{extra}",
        v as *const Value,
        v.encoding(),
    ))
}

/// DEBUG POPULATE count [prefix] [size] on this shard: the keys
/// `prefix:0..count` this shard owns (`owns`) that do not exist yet, each
/// "value:N" (cut or zero-padded to `size` when given), as Redis creates
/// them (not propagated, not notified).
pub fn populate(
    shard: &mut Shard,
    db: usize,
    count: u64,
    prefix: &[u8],
    size: Option<usize>,
    now: u64,
    owns: impl Fn(&[u8]) -> bool,
) {
    let mut key = Vec::with_capacity(prefix.len() + 21);
    let mut value = Vec::new();
    for j in 0..count {
        key.clear();
        key.extend_from_slice(prefix);
        key.push(b':');
        key.extend_from_slice(itoa::Buffer::new().format(j).as_bytes());
        if !owns(&key) || shard.dbs[db].contains(&key, now) {
            continue;
        }
        value.clear();
        value.extend_from_slice(b"value:");
        value.extend_from_slice(itoa::Buffer::new().format(j).as_bytes());
        let v = match size {
            Some(n) => {
                value.resize(n, 0);
                Value::from_bytes(&value)
            }
            None => Value::from_bytes(&value),
        };
        shard.dbs[db].set(&key, v, Ttl::Clear, now);
    }
}

/// Runs with the proxy (every subcommand needs the connection, the
/// configuration or several shards).
pub static COMMANDS: &[CommandSpec] =
    &[cmd!("debug", -2, ADMIN | NOSCRIPT | LOADING | STALE | PROTECTED, NOKEYS, Proxy, None)];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_digest_is_zeros() {
        assert_eq!(hex(&combine_digests(&[])), "0".repeat(40));
    }

    #[test]
    fn string_digest_matches_redis() {
        // redis-server 7.0: SET a 1 ; DEBUG DIGEST-VALUE a / DEBUG DIGEST.
        let mut db = Db::default();
        db.set(b"a", Value::from_bytes_encoded(b"1"), Ttl::Clear, 0);
        let e = raw_entry(&db, b"a").unwrap();
        let mut v = [0u8; 20];
        mix_value(&mut v, e);
        assert_eq!(hex(&v), hex(&value_digest(&db, b"a")));
        assert_eq!(hex(&value_digest(&db, b"nope")), "0".repeat(40));
    }
}
