//! Cache-line prefetch hints: a no-op where the target has none.

/// Cache lines of `bytes` asked for, up to the first two (a reply's header
/// and the start of its copy need no more to start).
#[inline]
pub fn lines(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = bytes.as_ptr();
        // SAFETY: a prefetch is a hint; it never faults, whatever the address.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p.cast());
            if bytes.len() > 64 {
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64).cast());
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}
