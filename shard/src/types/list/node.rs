//! One list node: packed elements, or the same bytes LZF-compressed (Redis's
//! quicklist node compression, `list-compress-depth`). A compressed node is
//! read by decompressing it into a buffer of this core's small pool, so an
//! access costs no allocation once the pool is warm.

use crate::rdb::lzf;
use crate::types::pack::Pack;
use std::cell::RefCell;

/// quicklist.c's MIN_COMPRESS_BYTES: smaller nodes are never compressed.
pub const MIN_COMPRESS_BYTES: usize = 48;
/// quicklist.c's MIN_COMPRESS_IMPROVE: compression must save more than this.
pub const MIN_COMPRESS_IMPROVE: usize = 8;

/// Buffers kept for reuse, and the largest one kept (a node of the largest
/// byte-limited fill is 64 KiB).
const POOL_BUFFERS: usize = 4;
const POOL_MAX_CAPACITY: usize = 128 << 10;

thread_local! {
    static POOL: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

fn take_buf() -> Vec<u8> {
    POOL.with(|p| p.borrow_mut().pop()).unwrap_or_default()
}

fn give_buf(mut buf: Vec<u8>) {
    if buf.capacity() > POOL_MAX_CAPACITY {
        return;
    }
    buf.clear();
    POOL.with(|p| {
        let mut pool = p.borrow_mut();
        if pool.len() < POOL_BUFFERS {
            pool.push(buf);
        }
    });
}

#[derive(Clone)]
pub(super) enum Node {
    Raw(Pack),
    Lzf(Lzf),
}

#[derive(Clone)]
pub(super) struct Lzf {
    data: Box<[u8]>,
    count: u32,
    raw_len: u32,
}

impl Lzf {
    /// The node's packed bytes in `buf` (cleared first).
    fn unpack_into(&self, buf: &mut Vec<u8>) {
        if lzf::decompress_into(&self.data, self.raw_len as usize, buf).is_err() {
            // Our own compressor's output always decompresses.
            debug_assert!(false, "list node does not decompress");
            buf.clear();
        }
    }

    fn unpack(&self, buf: Vec<u8>) -> Pack {
        let mut buf = buf;
        self.unpack_into(&mut buf);
        Pack::from_parts(buf, self.count as usize)
    }
}

/// `pack` compressed as Redis would compress the node (at least 48 bytes,
/// saving more than 8), or `None`.
fn compress(pack: &Pack) -> Option<Lzf> {
    let raw = pack.as_bytes();
    if raw.len() < MIN_COMPRESS_BYTES || raw.len() > u32::MAX as usize {
        return None;
    }
    let mut out = take_buf();
    let done = lzf::compress(raw, raw.len(), &mut out) && out.len() + MIN_COMPRESS_IMPROVE < raw.len();
    let lzf = done.then(|| Lzf { data: out.as_slice().into(), count: pack.count() as u32, raw_len: raw.len() as u32 });
    give_buf(out);
    lzf
}

impl Node {
    pub fn count(&self) -> usize {
        match self {
            Node::Raw(p) => p.count(),
            Node::Lzf(z) => z.count as usize,
        }
    }

    /// Bytes of the packed (uncompressed) form.
    pub fn raw_len(&self) -> usize {
        match self {
            Node::Raw(p) => p.bytes(),
            Node::Lzf(z) => z.raw_len as usize,
        }
    }

    pub fn heap_size(&self) -> usize {
        match self {
            Node::Raw(p) => p.heap_size(),
            Node::Lzf(z) => z.data.len(),
        }
    }

    pub fn is_compressed(&self) -> bool {
        matches!(self, Node::Lzf(_))
    }

    /// Runs `f` on the node's packed form (a pooled buffer if compressed).
    pub fn with_pack<R>(&self, f: impl FnOnce(&Pack) -> R) -> R {
        match self {
            Node::Raw(p) => f(p),
            Node::Lzf(z) => {
                let pack = z.unpack(take_buf());
                let r = f(&pack);
                give_buf(pack.into_buf());
                r
            }
        }
    }

    /// Compresses the node if Redis would (no change when it would not).
    pub fn compress(&mut self) {
        if let Node::Raw(p) = self {
            if let Some(z) = compress(p) {
                *self = Node::Lzf(z);
            }
        }
    }

    /// The node's packed form, decompressed in place if needed.
    pub fn raw_mut(&mut self) -> &mut Pack {
        match self {
            Node::Raw(p) => p,
            Node::Lzf(z) => {
                *self = Node::Raw(z.unpack(Vec::with_capacity(z.raw_len as usize)));
                self.raw_mut()
            }
        }
    }

    /// Changes a compressed node: decompressed into a pooled buffer,
    /// edited, compressed again (left packed if it no longer compresses).
    pub fn edit_compressed(&mut self, f: impl FnOnce(&mut Pack)) {
        let Node::Lzf(z) = self else {
            return f(self.raw_mut());
        };
        let mut pack = z.unpack(take_buf());
        f(&mut pack);
        match compress(&pack) {
            Some(z) => {
                *self = Node::Lzf(z);
                give_buf(pack.into_buf());
            }
            None => {
                let mut buf = pack.as_bytes().to_vec();
                buf.shrink_to_fit();
                *self = Node::Raw(Pack::from_parts(buf, pack.count()));
                give_buf(pack.into_buf());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::pack::Enc;

    fn pack_of(items: &[&[u8]]) -> Pack {
        let mut p = Pack::default();
        for i in items {
            p.push(&Enc::new(i));
        }
        p
    }

    #[test]
    fn compresses_only_as_redis_would() {
        // Under 48 bytes: never.
        let mut small = Node::Raw(pack_of(&[b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]));
        small.compress();
        assert!(!small.is_compressed());
        // Repetitive and large enough: compressed, and reads back the same.
        let long = vec![b'x'; 200];
        let p = pack_of(&[&long, b"tail", &long]);
        let mut big = Node::Raw(p.clone());
        big.compress();
        assert!(big.is_compressed());
        assert!(big.heap_size() < 40);
        assert_eq!((big.count(), big.raw_len()), (3, p.bytes()));
        big.with_pack(|q| assert_eq!(q.as_bytes(), p.as_bytes()));
        // Noise does not save 8 bytes: left packed.
        let noise: Vec<u8> = (0..120u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        let mut n = Node::Raw(pack_of(&[&noise]));
        n.compress();
        assert!(!n.is_compressed());
    }

    #[test]
    fn edits_of_a_compressed_node_recompress_it() {
        let long = vec![b'y'; 300];
        let mut node = Node::Raw(pack_of(&[&long, &long]));
        node.compress();
        node.edit_compressed(|p| p.push(&Enc::new(b"more")));
        assert!(node.is_compressed());
        assert_eq!(node.count(), 3);
        // An edit that makes it incompressible leaves it packed.
        let mut x = 0x9e3779b97f4a7c15u64;
        let noise: Vec<u8> = (0..2000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        node.edit_compressed(|p| {
            let all = p.bytes();
            p.remove(0, 3);
            assert!(all > 0);
            p.push(&Enc::new(&noise));
        });
        assert!(!node.is_compressed());
        assert_eq!(node.count(), 1);
        let raw = node.raw_mut();
        assert_eq!(raw.count(), 1);
    }
}
