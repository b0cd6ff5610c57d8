//! Compact byte strings for keys and short values: up to 22 bytes live inline
//! (no allocation), longer ones in one exact-size heap block. 24 bytes total.

use std::fmt;

const INLINE: usize = 22;

#[derive(Clone)]
pub struct CompactBytes(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, data: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl CompactBytes {
    pub fn new(bytes: &[u8]) -> Self {
        if bytes.len() <= INLINE {
            let mut data = [0u8; INLINE];
            data[..bytes.len()].copy_from_slice(bytes);
            CompactBytes(Repr::Inline { len: bytes.len() as u8, data })
        } else {
            CompactBytes(Repr::Heap(bytes.into()))
        }
    }

    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, data } => &data[..*len as usize],
            Repr::Heap(b) => b,
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes owned beyond the 24-byte handle (for memory accounting).
    pub fn heap_size(&self) -> usize {
        match &self.0 {
            Repr::Inline { .. } => 0,
            Repr::Heap(b) => b.len(),
        }
    }
}

impl std::ops::Deref for CompactBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for CompactBytes {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}
impl Eq for CompactBytes {}

impl fmt::Debug for CompactBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_heap_round_trip() {
        assert_eq!(std::mem::size_of::<CompactBytes>(), 24);
        for n in [0usize, 1, 21, 22, 23, 100] {
            let v: Vec<u8> = (0..n as u8).collect();
            let c = CompactBytes::new(&v);
            assert_eq!(c.as_slice(), &v[..]);
            assert_eq!(c.heap_size(), if n > 22 { n } else { 0 });
        }
    }
}
