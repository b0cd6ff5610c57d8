//! One node of a stream: Redis's listpack of stream entries, byte for byte
//! (t_stream.c), so node sizes, approximate trimming and the RDB form are
//! Redis's own.
//!
//! ```text
//! master: count | deleted | num-fields | field_1 .. field_N | 0
//! entry:  flags | ms-diff | seq-diff | [num-fields | field_1] value_1 .. | lp-count
//! ```
//! An entry whose fields equal the master's (flag SAMEFIELDS) stores values
//! only; a deleted entry keeps its bytes and sets flag DELETED.

use super::StreamId;
use crate::types::pack::Item;

pub const FLAG_DELETED: i64 = 1;
pub const FLAG_SAMEFIELDS: i64 = 2;

const HEADER: usize = 6;
const EOF: u8 = 0xff;

/// Appends one element (an int, or a string that Redis would store as an
/// int when canonical) before the terminator and updates the header.
fn encode_int(out: &mut Vec<u8>, v: i64) {
    if (0..=127).contains(&v) {
        out.push(v as u8);
    } else if (-4096..=4095).contains(&v) {
        let u = (v as u64) & 0x1fff;
        out.extend_from_slice(&[0xc0 | (u >> 8) as u8, u as u8]);
    } else if (-32768..=32767).contains(&v) {
        out.push(0xf1);
        out.extend_from_slice(&(v as i16).to_le_bytes());
    } else if (-8_388_608..=8_388_607).contains(&v) {
        out.push(0xf2);
        out.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
    } else if (i32::MIN as i64..=i32::MAX as i64).contains(&v) {
        out.push(0xf3);
        out.extend_from_slice(&(v as i32).to_le_bytes());
    } else {
        out.push(0xf4);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn encode_str(out: &mut Vec<u8>, s: &[u8]) {
    let len = s.len();
    if len < 64 {
        out.push(0x80 | len as u8);
    } else if len < 4096 {
        out.extend_from_slice(&[0xe0 | (len >> 8) as u8, len as u8]);
    } else {
        out.push(0xf0);
        out.extend_from_slice(&(len as u32).to_le_bytes());
    }
    out.extend_from_slice(s);
}

fn encode_backlen(out: &mut Vec<u8>, l: usize) {
    let l = l as u64;
    if l <= 127 {
        out.push(l as u8);
    } else if l < 16383 {
        out.extend_from_slice(&[(l >> 7) as u8, (l & 127) as u8 | 128]);
    } else if l < 2_097_151 {
        out.extend_from_slice(&[(l >> 14) as u8, ((l >> 7) & 127) as u8 | 128, (l & 127) as u8 | 128]);
    } else if l < 268_435_455 {
        out.extend_from_slice(&[
            (l >> 21) as u8,
            ((l >> 14) & 127) as u8 | 128,
            ((l >> 7) & 127) as u8 | 128,
            (l & 127) as u8 | 128,
        ]);
    } else {
        out.extend_from_slice(&[
            (l >> 28) as u8,
            ((l >> 21) & 127) as u8 | 128,
            ((l >> 14) & 127) as u8 | 128,
            ((l >> 7) & 127) as u8 | 128,
            (l & 127) as u8 | 128,
        ]);
    }
}

/// One whole listpack entry (encoding, data, back-length) for `item`.
fn entry_bytes(out: &mut Vec<u8>, item: Item) {
    let start = out.len();
    match item {
        Item::Int(n) => encode_int(out, n),
        Item::Str(s) => match crate::args::parse_i64(s) {
            Some(n) if s.len() <= 20 => encode_int(out, n),
            _ => encode_str(out, s),
        },
    }
    let len = out.len() - start;
    encode_backlen(out, len);
}

/// An integer's whole entry (encoding, data, back-length) without a heap
/// buffer: `(bytes, length)`.
fn int_entry(v: i64) -> ([u8; 16], usize) {
    let mut out = [0u8; 16];
    let n = if (0..=127).contains(&v) {
        out[0] = v as u8;
        1
    } else if (-4096..=4095).contains(&v) {
        let u = (v as u64) & 0x1fff;
        out[0] = 0xc0 | (u >> 8) as u8;
        out[1] = u as u8;
        2
    } else if (-32768..=32767).contains(&v) {
        out[0] = 0xf1;
        out[1..3].copy_from_slice(&(v as i16).to_le_bytes());
        3
    } else if (-8_388_608..=8_388_607).contains(&v) {
        out[0] = 0xf2;
        out[1..4].copy_from_slice(&(v as i32).to_le_bytes()[..3]);
        4
    } else if (i32::MIN as i64..=i32::MAX as i64).contains(&v) {
        out[0] = 0xf3;
        out[1..5].copy_from_slice(&(v as i32).to_le_bytes());
        5
    } else {
        out[0] = 0xf4;
        out[1..9].copy_from_slice(&v.to_le_bytes());
        9
    };
    // Integer entries are at most 9 bytes: a one-byte back-length.
    out[n] = n as u8;
    (out, n + 1)
}

/// Length of the encoding + data of the entry at `p`.
fn entry_len(lp: &[u8], p: usize) -> usize {
    let b = lp[p];
    let le32 = || u32::from_le_bytes([lp[p + 1], lp[p + 2], lp[p + 3], lp[p + 4]]) as usize;
    match b {
        0x00..=0x7f => 1,
        0x80..=0xbf => 1 + (b & 0x3f) as usize,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 2 + (((b as usize & 0xf) << 8) | lp[p + 1] as usize),
        0xf0 => 5 + le32(),
        0xf1 => 3,
        0xf2 => 4,
        0xf3 => 5,
        _ => 9,
    }
}

fn backlen_size(l: usize) -> usize {
    match l {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2_097_150 => 3,
        2_097_151..=268_435_454 => 4,
        _ => 5,
    }
}

fn sign_extend(v: u64, bits: u32) -> i64 {
    let shift = 64 - bits;
    ((v << shift) as i64) >> shift
}

/// The element at `p`.
pub fn get(lp: &[u8], p: usize) -> Item<'_> {
    let b = lp[p];
    let le = |n: usize| lp[p + 1..p + 1 + n].iter().rev().fold(0u64, |acc, &x| acc << 8 | x as u64);
    match b {
        0x00..=0x7f => Item::Int(b as i64),
        0x80..=0xbf => Item::Str(&lp[p + 1..p + 1 + (b & 0x3f) as usize]),
        0xc0..=0xdf => Item::Int(sign_extend(((b as u64 & 0x1f) << 8) | lp[p + 1] as u64, 13)),
        0xe0..=0xef => {
            let len = ((b as usize & 0xf) << 8) | lp[p + 1] as usize;
            Item::Str(&lp[p + 2..p + 2 + len])
        }
        0xf0 => Item::Str(&lp[p + 5..p + 5 + le(4) as usize]),
        0xf1 => Item::Int(sign_extend(le(2), 16)),
        0xf2 => Item::Int(sign_extend(le(3), 24)),
        0xf3 => Item::Int(sign_extend(le(4), 32)),
        _ => Item::Int(le(8) as i64),
    }
}

/// The element at `p` as an integer (Redis's `lpGetInteger`).
pub fn get_int(lp: &[u8], p: usize) -> i64 {
    match get(lp, p) {
        Item::Int(n) => n,
        Item::Str(s) => crate::args::parse_i64(s).unwrap_or(0),
    }
}

/// The element after the one at `p`; `None` at the end.
pub fn next(lp: &[u8], p: usize) -> Option<usize> {
    let len = entry_len(lp, p);
    let n = p + len + backlen_size(len);
    (lp[n] != EOF).then_some(n)
}

/// The element before the one at `p` (`p` may be the terminator's
/// position); `None` at the start.
pub fn prev(lp: &[u8], p: usize) -> Option<usize> {
    if p <= HEADER {
        return None;
    }
    let mut val = 0usize;
    let mut shift = 0;
    let mut q = p - 1;
    loop {
        let b = lp[q];
        val |= ((b & 127) as usize) << shift;
        if b & 128 == 0 {
            break;
        }
        shift += 7;
        q -= 1;
    }
    Some(p - backlen_size(val) - val)
}

/// A stream node: its listpack.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub lp: Vec<u8>,
}

/// What an entry's header says.
#[derive(Clone, Copy, Debug)]
pub struct EntryRef {
    pub id: StreamId,
    pub flags: i64,
    /// Position of its flags element.
    pub at: usize,
    pub fields: usize,
    /// Position of its first field (or first value with SAMEFIELDS).
    pub body: usize,
    /// Position of the next entry's flags; `None` for the last.
    pub next: Option<usize>,
}

impl EntryRef {
    pub fn deleted(&self) -> bool {
        self.flags & FLAG_DELETED != 0
    }
}

impl Node {
    /// A node whose master entry takes `fields` (the first entry's).
    pub fn new<'a>(fields: impl ExactSizeIterator<Item = &'a [u8]>) -> Node {
        let mut node = Node { lp: Vec::with_capacity(64) };
        node.lp.extend_from_slice(&[0; HEADER]);
        node.lp.push(EOF);
        node.push(Item::Int(0));
        node.push(Item::Int(0));
        node.push(Item::Int(fields.len() as i64));
        for f in fields {
            node.push(Item::Str(f));
        }
        node.push(Item::Int(0));
        node
    }

    /// A node from a listpack read off disk (checked by the caller).
    pub fn from_lp(lp: Vec<u8>) -> Node {
        Node { lp }
    }

    pub fn bytes(&self) -> usize {
        self.lp.len()
    }

    fn set_header(&mut self, added: isize) {
        let total = self.lp.len() as u32;
        self.lp[..4].copy_from_slice(&total.to_le_bytes());
        let count = u16::from_le_bytes([self.lp[4], self.lp[5]]);
        if count != u16::MAX {
            let n = (count as isize + added).max(0) as usize;
            let n = if n >= u16::MAX as usize { u16::MAX } else { n as u16 };
            self.lp[4..6].copy_from_slice(&n.to_le_bytes());
        }
    }

    /// Appends one element at the end.
    pub fn push(&mut self, item: Item) {
        self.lp.pop();
        entry_bytes(&mut self.lp, item);
        self.lp.push(EOF);
        self.set_header(1);
    }

    /// Replaces the integer at `p` (its size may change).
    pub fn replace_int(&mut self, p: usize, v: i64) {
        let old = entry_len(&self.lp, p);
        let old = old + backlen_size(old);
        let (fresh, n) = int_entry(v);
        if n == old {
            // The common case (a count that keeps its width): no move.
            self.lp[p..p + n].copy_from_slice(&fresh[..n]);
        } else {
            self.lp.splice(p..p + old, fresh[..n].iter().copied());
            self.set_header(0);
        }
    }

    /// Valid entries.
    pub fn count(&self) -> i64 {
        get_int(&self.lp, HEADER)
    }

    /// Entries flagged deleted.
    pub fn deleted(&self) -> i64 {
        get_int(&self.lp, self.deleted_at())
    }

    fn deleted_at(&self) -> usize {
        next(&self.lp, HEADER).unwrap_or(HEADER)
    }

    /// (number of master fields, position of the first one, position of
    /// the first entry).
    pub fn master(&self) -> (usize, usize, Option<usize>) {
        let lp = &self.lp;
        let nf_at = next(lp, self.deleted_at()).unwrap_or(HEADER);
        let nf = get_int(lp, nf_at).max(0) as usize;
        let mut p = next(lp, nf_at).unwrap_or(nf_at);
        let first_field = p;
        for _ in 0..nf {
            p = next(lp, p).unwrap_or(p);
        }
        // `p` is the master's zero terminator.
        (nf, first_field, next(lp, p))
    }

    /// The master fields.
    pub fn master_fields(&self) -> Vec<Item<'_>> {
        let (nf, mut p, _) = self.master();
        let mut out = Vec::with_capacity(nf);
        for _ in 0..nf {
            out.push(get(&self.lp, p));
            p = next(&self.lp, p).unwrap_or(p);
        }
        out
    }

    /// The entry whose flags are at `p`.
    pub fn entry(&self, master: StreamId, master_fields: usize, p: usize) -> EntryRef {
        let lp = &self.lp;
        let flags = get_int(lp, p);
        let q = next(lp, p).expect("stream entry id");
        let ms = master.ms.wrapping_add(get_int(lp, q) as u64);
        let q = next(lp, q).expect("stream entry id");
        let seq = master.seq.wrapping_add(get_int(lp, q) as u64);
        let mut q = next(lp, q).expect("stream entry body");
        let fields = if flags & FLAG_SAMEFIELDS != 0 {
            master_fields
        } else {
            let n = get_int(lp, q).max(0) as usize;
            q = next(lp, q).expect("stream entry body");
            n
        };
        let body = q;
        let skip = if flags & FLAG_SAMEFIELDS != 0 { fields } else { fields * 2 };
        for _ in 0..skip {
            q = next(lp, q).expect("stream entry body");
        }
        // `q` is the lp-count.
        EntryRef { id: StreamId { ms, seq }, flags, at: p, fields, body, next: next(lp, q) }
    }

    /// The last entry, tombstones skipped or not, walking back from the
    /// end by each entry's lp-count.
    pub fn last(&self, master: StreamId, skip_tombstones: bool) -> Option<StreamId> {
        let lp = &self.lp;
        let (nf, _, _) = self.master();
        let mut count_at = prev(lp, lp.len() - 1)?;
        loop {
            let n = get_int(lp, count_at);
            if n == 0 {
                return None; // the master entry's terminator
            }
            let mut p = count_at;
            for _ in 0..n {
                p = prev(lp, p)?;
            }
            let e = self.entry(master, nf, p);
            if !skip_tombstones || !e.deleted() {
                return Some(e.id);
            }
            count_at = prev(lp, p)?;
        }
    }

    /// Visits entries from the first, deleted ones included, until `visit`
    /// says stop.
    pub fn walk(&self, master: StreamId, mut visit: impl FnMut(&EntryRef) -> bool) {
        let (nf, _, mut p) = self.master();
        while let Some(at) = p {
            let e = self.entry(master, nf, at);
            if !visit(&e) {
                return;
            }
            p = e.next;
        }
    }

    /// Every entry, deleted ones included, in order.
    pub fn entries(&self, master: StreamId) -> Vec<EntryRef> {
        let (nf, _, mut p) = self.master();
        let mut out = Vec::with_capacity(self.count().max(0) as usize);
        while let Some(at) = p {
            let e = self.entry(master, nf, at);
            p = e.next;
            out.push(e);
        }
        out
    }

    /// The field-value pairs of `e`.
    pub fn fields(&self, e: &EntryRef) -> Vec<(Item<'_>, Item<'_>)> {
        let lp = &self.lp;
        let mut out = Vec::with_capacity(e.fields);
        let mut p = e.body;
        if e.flags & FLAG_SAMEFIELDS != 0 {
            let (_, mut f, _) = self.master();
            for _ in 0..e.fields {
                out.push((get(lp, f), get(lp, p)));
                f = next(lp, f).unwrap_or(f);
                p = next(lp, p).unwrap_or(p);
            }
        } else {
            for _ in 0..e.fields {
                let field = get(lp, p);
                p = next(lp, p).unwrap_or(p);
                out.push((field, get(lp, p)));
                p = next(lp, p).unwrap_or(p);
            }
        }
        out
    }

    /// Appends an entry (Redis's streamAppendItem on a node that has room).
    pub fn append(&mut self, master: StreamId, id: StreamId, fields: &[(&[u8], &[u8])]) {
        let count = self.count();
        self.replace_int(HEADER, count + 1);
        let same = {
            let master_fields = self.master_fields();
            master_fields.len() == fields.len() && master_fields.iter().zip(fields).all(|(m, (f, _))| item_eq(*m, f))
        };
        let flags = if same { FLAG_SAMEFIELDS } else { 0 };
        self.push(Item::Int(flags));
        self.push(Item::Int(id.ms.wrapping_sub(master.ms) as i64));
        self.push(Item::Int(id.seq.wrapping_sub(master.seq) as i64));
        if !same {
            self.push(Item::Int(fields.len() as i64));
        }
        for (f, v) in fields {
            if !same {
                self.push(Item::Str(f));
            }
            self.push(Item::Str(v));
        }
        let mut lp_count = fields.len() as i64 + 3;
        if !same {
            lp_count += fields.len() as i64 + 1;
        }
        self.push(Item::Int(lp_count));
    }

    /// Flags the entry at `at` deleted and moves it from the valid count
    /// to the deleted one.
    pub fn mark_deleted(&mut self, at: usize) {
        let flags = get_int(&self.lp, at);
        self.replace_int(at, flags | FLAG_DELETED);
        self.add_counts(-1, 1);
    }

    pub fn add_counts(&mut self, valid: i64, deleted: i64) {
        let count = self.count();
        self.replace_int(HEADER, count + valid);
        let at = self.deleted_at();
        let d = get_int(&self.lp, at);
        self.replace_int(at, d + deleted);
    }
}

/// Whether a listpack element equals a string, as Redis compares them.
pub fn item_eq(item: Item, s: &[u8]) -> bool {
    match item {
        Item::Str(x) => x == s,
        Item::Int(n) => itoa::Buffer::new().format(n).as_bytes() == s,
    }
}
