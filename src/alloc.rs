//! The global allocator: mimalloc, counting the bytes each thread has
//! allocated (usable sizes, as Redis's zmalloc counts them). A per-thread
//! counter costs one thread-local add per allocation and no shared memory;
//! INFO adds up every shard's counter. A block freed on another thread than
//! the one that allocated it moves bytes between counters, so only the sum
//! is meaningful.

use mimalloc::MiMalloc;
use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;

pub struct CountingAlloc;

thread_local! {
    static ALLOCATED: Cell<i64> = const { Cell::new(0) };
}

#[inline]
fn account(delta: i64) {
    // try_with: the counter may already be gone while the thread exits.
    let _ = ALLOCATED.try_with(|c| c.set(c.get() + delta));
}

#[inline]
fn usable(ptr: *mut u8) -> i64 {
    // SAFETY: `ptr` is a live block from mimalloc.
    unsafe { libmimalloc_sys::mi_usable_size(ptr.cast()) as i64 }
}

// SAFETY: every call forwards to MiMalloc, which upholds GlobalAlloc's
// contract; the accounting only reads the blocks' sizes.
unsafe impl GlobalAlloc for CountingAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = MiMalloc.alloc(layout);
        if !p.is_null() {
            account(usable(p));
        }
        p
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = MiMalloc.alloc_zeroed(layout);
        if !p.is_null() {
            account(usable(p));
        }
        p
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        account(-usable(ptr));
        MiMalloc.dealloc(ptr, layout)
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let before = usable(ptr);
        let p = MiMalloc.realloc(ptr, layout, new_size);
        if !p.is_null() {
            account(usable(p) - before);
        }
        p
    }
}

/// Bytes allocated (net) by the calling thread.
pub fn thread_allocated() -> i64 {
    ALLOCATED.with(Cell::get)
}
