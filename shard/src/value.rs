//! Values stored in the keyspace. Strings keep Redis's three encodings so
//! `OBJECT ENCODING` answers as Redis does and `INCR` works on a native i64.
//! The aggregate types of later issues become further variants here.

use crate::args::parse_i64;
use crate::bytes::CompactBytes;
use crate::types::hash::Hash;
use crate::types::list::List;
use crate::types::set::Set;
use crate::types::stream::Stream;
use crate::types::zset::ZSet;

/// Longest string Redis stores as `embstr`.
const EMBSTR_MAX: usize = 44;

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A string that is a canonical i64 (`OBJECT ENCODING` "int").
    Int(i64),
    /// A short immutable string ("embstr").
    Emb(CompactBytes),
    /// A long string as SET stores it ("raw" to `OBJECT ENCODING`): one
    /// exact-size heap block, 25–30 bytes per key less than `Raw`'s box and
    /// vector. It becomes `Raw` when modified in place.
    Long(Box<[u8]>),
    /// A string that was modified in place ("raw"). Boxed so a `Value`
    /// stays 24 bytes (the niche of `CompactBytes` holds the tag).
    Raw(Box<Vec<u8>>),
    ZSet(Box<ZSet>),
    Hash(Box<Hash>),
    Set(Box<Set>),
    List(Box<List>),
    Stream(Box<Stream>),
}

impl Value {
    /// The encoding Redis's `tryObjectEncoding` would pick (SET, SETNX,
    /// GETSET, APPEND on a new key).
    pub fn from_bytes_encoded(bytes: &[u8]) -> Value {
        if bytes.len() <= 20 {
            if let Some(n) = parse_i64(bytes) {
                return Value::Int(n);
            }
        }
        Value::from_bytes(bytes)
    }

    /// A plain string object as Redis creates one from a command argument
    /// (MSET stores arguments without trying the integer encoding).
    pub fn from_bytes(bytes: &[u8]) -> Value {
        if bytes.len() <= EMBSTR_MAX {
            Value::Emb(CompactBytes::new(bytes))
        } else {
            Value::Long(bytes.into())
        }
    }

    /// Overwrites a string in place with `bytes` when the result is what
    /// `from_bytes_encoded(bytes)` would build ("raw", the same length):
    /// no allocation and no free. False when it cannot.
    pub fn overwrite(&mut self, bytes: &[u8]) -> bool {
        match self {
            Value::Long(b) if b.len() == bytes.len() && bytes.len() > EMBSTR_MAX => {
                b.copy_from_slice(bytes);
                true
            }
            _ => false,
        }
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Int(_) | Value::Emb(_) | Value::Long(_) | Value::Raw(_) => "string",
            Value::ZSet(_) => "zset",
            Value::Hash(_) => "hash",
            Value::Set(_) => "set",
            Value::List(_) => "list",
            Value::Stream(_) => "stream",
        }
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            Value::Int(_) => "int",
            Value::Emb(_) => "embstr",
            Value::Long(_) | Value::Raw(_) => "raw",
            Value::ZSet(z) => z.encoding(),
            Value::Hash(h) => h.encoding(),
            Value::Set(s) => s.encoding(),
            // Redis 7.0 keeps every list as a quicklist.
            Value::List(_) => "quicklist",
            Value::Stream(_) => "stream",
        }
    }

    pub fn is_string(&self) -> bool {
        matches!(self, Value::Int(_) | Value::Emb(_) | Value::Long(_) | Value::Raw(_))
    }

    /// The string's bytes; integers are formatted into `scratch`.
    pub fn string_bytes<'a>(&'a self, scratch: &'a mut itoa::Buffer) -> Option<&'a [u8]> {
        match self {
            Value::Int(n) => Some(scratch.format(*n).as_bytes()),
            Value::Emb(b) => Some(b.as_slice()),
            Value::Long(b) => Some(b),
            Value::Raw(v) => Some(v.as_slice()),
            Value::Hash(_) | Value::Set(_) | Value::List(_) | Value::ZSet(_) | Value::Stream(_) => None,
        }
    }

    /// Length of the string form.
    pub fn string_len(&self) -> Option<usize> {
        let mut scratch = itoa::Buffer::new();
        self.string_bytes(&mut scratch).map(<[u8]>::len)
    }

    /// Heap bytes owned by the value (for memory accounting).
    pub fn heap_size(&self) -> usize {
        match self {
            Value::Int(_) => 0,
            Value::Emb(b) => b.heap_size(),
            Value::Long(b) => b.len(),
            Value::Raw(v) => v.capacity() + std::mem::size_of::<Vec<u8>>(),
            Value::ZSet(z) => z.heap_size(),
            Value::Hash(h) => h.heap_size(),
            Value::Set(s) => s.heap_size(),
            Value::List(l) => l.heap_size() + std::mem::size_of::<List>(),
            Value::Stream(s) => s.heap_size(),
        }
    }

    /// Redis's lazyfreeGetFreeEffort: about how many allocations freeing
    /// the value takes (Redis frees it in the background above 64).
    pub fn free_effort(&self) -> usize {
        match self {
            Value::List(l) => l.node_count(),
            Value::Set(s) if s.encoding() == "hashtable" => s.len(),
            Value::ZSet(z) if z.encoding() == "skiplist" => z.len(),
            Value::Hash(h) if h.encoding() == "hashtable" => h.len(),
            // Its nodes, and every group costed as the first one's PEL.
            Value::Stream(s) => {
                s.nodes.len() + s.groups.values().next().map_or(0, |first| s.groups.len() * (1 + first.pel.len()))
            }
            _ => 1,
        }
    }

    /// Converts a string to the mutable "raw" form for APPEND/SETRANGE.
    pub fn make_raw(&mut self) -> Option<&mut Vec<u8>> {
        let bytes = match self {
            Value::Raw(v) => return Some(v),
            Value::Int(n) => itoa::Buffer::new().format(*n).as_bytes().to_vec(),
            Value::Emb(b) => b.as_slice().to_vec(),
            Value::Long(b) => b.to_vec(),
            Value::Hash(_) | Value::Set(_) | Value::List(_) | Value::ZSet(_) | Value::Stream(_) => return None,
        };
        *self = Value::Raw(Box::new(bytes));
        match self {
            Value::Raw(v) => Some(v),
            _ => None,
        }
    }
}

/// Grows a string to `len` bytes, the new ones zero (SETRANGE, SETBIT).
/// A big jump from a small string takes zeroed memory from the allocator,
/// which hands fresh OS pages over untouched: SETRANGE at offset 512 MB
/// writes nothing (Redis's sdsgrowzero writes every zero). Growing a big
/// string at least doubles its capacity without writing the slack, so a
/// value built in steps copies each byte O(1) times.
pub fn grow_zeroed(raw: &mut Vec<u8>, len: usize) {
    if len <= raw.len() {
        return;
    }
    if len > raw.capacity() && len >= 1 << 20 {
        if raw.len() < len / 8 {
            let mut fresh = vec![0u8; len];
            fresh[..raw.len()].copy_from_slice(raw);
            *raw = fresh;
            return;
        }
        let mut fresh = Vec::with_capacity(len.max(raw.capacity().saturating_mul(2)));
        fresh.extend_from_slice(raw);
        *raw = fresh;
    }
    raw.resize(len, 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_match_redis() {
        assert_eq!(Value::from_bytes_encoded(b"123").encoding(), "int");
        assert_eq!(Value::from_bytes_encoded(b"0123").encoding(), "embstr");
        assert_eq!(Value::from_bytes_encoded(&[b'a'; 44]).encoding(), "embstr");
        assert_eq!(Value::from_bytes_encoded(&[b'a'; 45]).encoding(), "raw");
        assert_eq!(Value::from_bytes(b"123").encoding(), "embstr");
        let mut long = Value::from_bytes(&[b'a'; 100]);
        assert!(matches!(long, Value::Long(_)));
        long.make_raw().unwrap().push(b'b');
        assert_eq!(long.encoding(), "raw");
        assert_eq!(long.string_len(), Some(101));
    }
}
