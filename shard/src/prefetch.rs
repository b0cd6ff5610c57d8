//! Cache-line prefetch hints: no-ops where the target has none. A hint
//! never faults, whatever the address.

/// The cache line holding `p` asked for.
#[inline]
pub fn at(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it reads nothing and never faults.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The lines holding the first and the last byte of `len` bytes at `p`.
#[inline]
pub fn span(p: *const u8, len: usize) {
    at(p);
    if len > 1 {
        at(p.wrapping_add(len - 1));
    }
}

/// A value's first two lines: a reply's header and the start of its copy
/// need no more to start.
#[inline]
pub fn bytes(b: &[u8]) {
    span(b.as_ptr(), b.len().min(128));
}

/// The line(s) holding `value`.
#[inline]
pub fn line<T>(value: &T) {
    span((value as *const T).cast(), std::mem::size_of::<T>());
}
