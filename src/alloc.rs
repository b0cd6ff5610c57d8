//! The global allocator: mimalloc, counting the bytes each thread has
//! allocated (usable sizes, as Redis's zmalloc counts them) in
//! `shard::memory`'s per-thread slots: one thread-local read and one
//! uncontended store per allocation. Every core reads the process total
//! from there (maxmemory, INFO). A block freed on another thread than the
//! one that allocated it moves bytes between slots, so only the sum is
//! exact.

use mimalloc::MiMalloc;
use shard::memory::account;
use std::alloc::{GlobalAlloc, Layout};

pub struct CountingAlloc;

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
    shard::memory::thread_used()
}

/// mimalloc's `purge_delay` (its option 15 in v3): how long freed pages stay
/// mapped for reuse before they go back to the OS. Its 10 ms default
/// (arenas: ×10) made a busy shard fault fresh pages in for every big
/// request (the kernel clearing each one: most of SETRANGE's time in 1 MB
/// steps); 1 s keeps them for reuse while traffic runs, as jemalloc's decay
/// does for Redis. An idle server returns them on the cron (`return_freed_memory`).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Allocator settings and the cron's hook, before the executors start.
pub fn init(disable_thp: bool) {
    // Redis's `disable-thp yes` (its default): no transparent huge pages
    // for this process. A fault on a fresh 2 MB page clears all of it, so
    // growing a big string (SETRANGE/SETBIT/APPEND in steps) spent most of
    // its time in the kernel's clear_page: 2 s vs Redis's 0.26 s for 512 MB
    // in 128 KB SETBIT steps.
    if disable_thp {
        // SAFETY: prctl with plain integer arguments.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    }
    // SAFETY: sets a global option; mimalloc reads it when it purges.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 1000) };
    shard::memory::set_return_hook(return_freed_memory);
    shard::memory::set_allocator(shard::memory::Allocator {
        // SAFETY: a pure size-class lookup.
        good_size: |n| unsafe { libmimalloc_sys::mi_good_size(n) },
        thread_stats: || {
            // SAFETY: the callback appends to the String passed as `arg`.
            stats_text(|out, arg| unsafe { libmimalloc_sys::mi_thread_stats_print_out(out, arg) })
        },
        process_stats: || {
            // SAFETY: as above.
            stats_text(|out, arg| unsafe { libmimalloc_sys::mi_stats_print_out(out, arg) })
        },
        committed,
    });
}

/// mimalloc's statistics printer into a String (MEMORY MALLOC-STATS).
fn stats_text(print: impl FnOnce(libmimalloc_sys::mi_output_fun, *mut std::ffi::c_void)) -> String {
    unsafe extern "C" fn append(msg: *const std::ffi::c_char, arg: *mut std::ffi::c_void) {
        // SAFETY: `arg` is the String below and `msg` a NUL-terminated
        // string, both live for the call.
        unsafe {
            let text = &mut *(arg as *mut String);
            text.push_str(&std::ffi::CStr::from_ptr(msg).to_string_lossy());
        }
    }
    let mut text = String::new();
    print(Some(append), &mut text as *mut String as *mut std::ffi::c_void);
    text
}

/// Bytes mimalloc has committed from the OS now.
fn committed() -> u64 {
    let mut v = [0usize; 8];
    let [elapsed, user, sys, rss, peak_rss, commit, peak_commit, faults] = &mut v;
    // SAFETY: mi_process_info writes the counters it is given.
    unsafe { libmimalloc_sys::mi_process_info(elapsed, user, sys, rss, peak_rss, commit, peak_commit, faults) };
    v[5] as u64
}

/// Returns the calling thread's free pages to the OS now (mimalloc purges
/// lazily, on a later allocation or free of the same thread: an idle core
/// would keep them). Must run on each thread that owns pages.
pub fn return_freed_memory() {
    // SAFETY: plain call into mimalloc for the calling thread's heap.
    unsafe { libmimalloc_sys::mi_collect(true) }
}
