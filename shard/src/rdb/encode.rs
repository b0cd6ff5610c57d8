//! Writing RDB: the file framing (header, aux fields, db selectors, EOF)
//! and every value in the encoding Redis 7.0 writes for its current
//! encoding (`rdbSaveObjectType`, `rdbSaveObject`).

use super::listpack::Writer;
use super::output::{write_len, write_long, write_lzf, write_string};
use super::{intset, kind, opcode, Access, SaveOptions, RDB_VERSION, REDIS_VER};
use crate::numbers::{format_double, DoubleBuf};
use crate::types::hash::Hash;
use crate::types::list::{List, MIN_COMPRESS_BYTES, MIN_COMPRESS_IMPROVE};
use crate::types::pack::{decode, Item, Pack};
use crate::types::set::Set;
use crate::types::zset::ZSet;
use crate::value::Value;

/// Quicklist node containers.
const PLAIN: u64 = 1;
const PACKED: u64 = 2;
/// `quicklist_packed_threshold`: elements this large get a node of their own.
const PLAIN_THRESHOLD: usize = 1 << 30;

fn write_item(out: &mut Vec<u8>, item: Item, opts: &SaveOptions) {
    match item {
        Item::Int(n) => write_long(out, n),
        Item::Str(s) => write_string(out, s, opts),
    }
}

fn write_aux(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    out.push(opcode::AUX);
    let opts = SaveOptions { compress: false };
    write_string(out, key, &opts);
    write_string(out, value, &opts);
}

/// "REDIS0010" and the aux fields, in order (Redis writes redis-ver,
/// redis-bits, ctime, used-mem, then aof-base).
pub fn write_header(out: &mut Vec<u8>, aux: &[(&str, &[u8])]) {
    out.extend_from_slice(format!("REDIS{RDB_VERSION:04}").as_bytes());
    for (key, value) in aux {
        write_aux(out, key.as_bytes(), value);
    }
}

/// The header Redis 7.0 writes (`rdbSaveInfoAuxFields`): the version it
/// claims, 64 bits, creation time (unix seconds), memory in use, and
/// whether the file is an AOF base.
pub fn write_standard_header(out: &mut Vec<u8>, ctime: u64, used_mem: u64, aof_base: bool) {
    let (ctime, used_mem) = (ctime.to_string(), used_mem.to_string());
    let base: &[u8] = if aof_base { b"1" } else { b"0" };
    write_header(
        out,
        &[
            ("redis-ver", REDIS_VER.as_bytes()),
            ("redis-bits", b"64"),
            ("ctime", ctime.as_bytes()),
            ("used-mem", used_mem.as_bytes()),
            ("aof-base", base),
        ],
    );
}

pub fn write_select_db(out: &mut Vec<u8>, db: usize) {
    out.push(opcode::SELECTDB);
    write_len(out, db as u64);
}

/// The size hint before a database's keys.
pub fn write_resize_db(out: &mut Vec<u8>, keys: u64, expires: u64) {
    out.push(opcode::RESIZEDB);
    write_len(out, keys);
    write_len(out, expires);
}

/// The EOF opcode; the caller appends the 8-byte little-endian CRC-64 of
/// everything before it, this byte included (or zeros with checksums off).
pub fn write_eof(out: &mut Vec<u8>) {
    out.push(opcode::EOF);
}

/// One key: its expiry, last access, type, key and value (`rdbSaveKeyValuePair`).
pub fn write_entry(
    out: &mut Vec<u8>,
    key: &[u8],
    value: &Value,
    expire_at_ms: Option<u64>,
    access: Access,
    opts: &SaveOptions,
) {
    if let Some(at) = expire_at_ms {
        out.push(opcode::EXPIRETIME_MS);
        out.extend_from_slice(&at.to_le_bytes());
    }
    match access {
        Access::None => {}
        Access::Idle(seconds) => {
            out.push(opcode::IDLE);
            write_len(out, seconds);
        }
        Access::Freq(counter) => out.extend_from_slice(&[opcode::FREQ, counter]),
    }
    out.push(value_type(value));
    write_string(out, key, opts);
    write_value_body(out, value, opts);
}

/// A value's type byte and body, as DUMP serializes it.
pub fn write_value(out: &mut Vec<u8>, value: &Value, opts: &SaveOptions) {
    out.push(value_type(value));
    write_value_body(out, value, opts);
}

/// The RDB type Redis 7.0 writes for the value's encoding.
fn value_type(value: &Value) -> u8 {
    match value {
        Value::Int(_) | Value::Emb(_) | Value::Long(_) | Value::Raw(_) => kind::STRING,
        Value::List(_) => kind::LIST_QUICKLIST_2,
        Value::Stream(_) => kind::STREAM_LISTPACKS_2,
        Value::Set(s) => match **s {
            Set::Ints(_) => kind::SET_INTSET,
            Set::Pack(_) | Set::Table(_) => kind::SET,
        },
        Value::ZSet(z) => match **z {
            ZSet::Pack(_) => kind::ZSET_LISTPACK,
            ZSet::Tree(_) => kind::ZSET_2,
        },
        Value::Hash(h) => match **h {
            Hash::Pack(_) => kind::HASH_LISTPACK,
            Hash::Table(_) => kind::HASH,
        },
    }
}

fn write_value_body(out: &mut Vec<u8>, value: &Value, opts: &SaveOptions) {
    match value {
        Value::Int(n) => write_long(out, *n),
        Value::Emb(b) => write_string(out, b.as_slice(), opts),
        Value::Long(b) => write_string(out, b, opts),
        Value::Raw(v) => write_string(out, v, opts),
        Value::List(l) => write_list(out, l, opts),
        Value::Stream(s) => super::stream::write(out, s, opts),
        Value::Set(s) => write_set(out, s, opts),
        Value::ZSet(z) => write_zset(out, z, opts),
        Value::Hash(h) => write_hash(out, h, opts),
    }
}

/// Redis's quicklist as rdbSaveObject writes it: one listpack per node, an
/// element of `PLAIN_THRESHOLD` bytes or more in a plain node of its own,
/// and a node Redis keeps compressed (past the list's compress depth from
/// both ends, at least 48 bytes, saving more than 8: quicklist.c's rule on
/// the listpack itself) as its LZF blob (rdbSaveLzfBlob), whatever
/// `rdbcompression` says. Nodes are encoded one at a time.
fn write_list(out: &mut Vec<u8>, list: &List, opts: &SaveOptions) {
    let total: usize = (0..list.node_count())
        .map(|n| if list.node_bytes(n) < PLAIN_THRESHOLD { 1 } else { list.with_node(n, output_nodes).unwrap_or(0) })
        .sum();
    write_len(out, total as u64);
    let depth = list.depth();
    let mut index = 0;
    let mut put = |out: &mut Vec<u8>, container: u64, data: &[u8]| {
        write_len(out, container);
        let compressed = depth > 0 && index >= depth && index + depth < total;
        index += 1;
        let lzf = compressed
            && data.len() >= MIN_COMPRESS_BYTES
            && write_lzf(out, data, data.len(), data.len() - MIN_COMPRESS_IMPROVE - 1);
        if !lzf {
            write_string(out, data, opts);
        }
    };
    for n in 0..list.node_count() {
        list.with_node(n, |pack| {
            let mut lp = Writer::new();
            for raw in pack.elems() {
                let item = decode(raw);
                if item.len() >= PLAIN_THRESHOLD {
                    if !lp.is_empty() {
                        put(out, PACKED, &std::mem::take(&mut lp).finish());
                    }
                    put(out, PLAIN, &item.to_vec());
                } else {
                    lp.push(item);
                }
            }
            if !lp.is_empty() {
                put(out, PACKED, &lp.finish());
            }
        });
    }
}

/// How many quicklist nodes one of our nodes is written as.
fn output_nodes(pack: &Pack) -> usize {
    let (mut nodes, mut open) = (0, false);
    for raw in pack.elems() {
        if decode(raw).len() >= PLAIN_THRESHOLD {
            nodes += 1 + open as usize;
            open = false;
        } else {
            open = true;
        }
    }
    nodes + open as usize
}

fn write_set(out: &mut Vec<u8>, set: &Set, opts: &SaveOptions) {
    if let Set::Ints(ints) = set {
        let mut blob = Vec::with_capacity(intset::encoded_len(ints));
        intset::encode(ints, &mut blob);
        return write_string(out, &blob, opts);
    }
    write_len(out, set.len() as u64);
    for member in set.iter() {
        write_item(out, member, opts);
    }
}

/// Redis's `double2ll`: the score as an exact integer in ±2^62.
fn double_as_long(d: f64) -> Option<i64> {
    let limit = (i64::MAX / 2) as f64;
    if !(-limit..=limit).contains(&d) {
        return None;
    }
    let n = d as i64;
    (n as f64 == d).then_some(n)
}

fn write_zset(out: &mut Vec<u8>, zset: &ZSet, opts: &SaveOptions) {
    match zset {
        ZSet::Pack(_) => {
            let mut lp = Writer::new();
            let mut buf: DoubleBuf = [0; 32];
            zset.for_each(|score, member| {
                lp.push_str(member);
                match double_as_long(score) {
                    Some(n) => lp.push_int(n),
                    None => lp.push_str(format_double(score, &mut buf)),
                }
            });
            write_string(out, &lp.finish(), opts);
        }
        ZSet::Tree(_) => {
            // Greatest first, as Redis walks its skiplist backwards.
            write_len(out, zset.len() as u64);
            if zset.is_empty() {
                return;
            }
            zset.walk(zset.len() - 1, true, &mut |score, member| {
                write_string(out, member, opts);
                out.extend_from_slice(&score.to_le_bytes());
                true
            });
        }
    }
}

fn write_hash(out: &mut Vec<u8>, hash: &Hash, opts: &SaveOptions) {
    match hash {
        Hash::Pack(_) => {
            let mut lp = Writer::new();
            for (field, value) in hash.iter() {
                lp.push(field);
                lp.push(value);
            }
            write_string(out, &lp.finish(), opts);
        }
        Hash::Table(_) => {
            write_len(out, hash.len() as u64);
            for (field, value) in hash.iter() {
                write_item(out, field, opts);
                write_item(out, value, opts);
            }
        }
    }
}
