//! A ring of provided buffers (IORING_REGISTER_PBUF_RING): the kernel picks
//! a free buffer for each multishot receive completion, so no connection
//! holds a read buffer while it is idle. A buffer goes back to the ring as
//! soon as its bytes have been copied out.

use io_uring::types::BufRingEntry;
use io_uring::IoUring;
use std::sync::atomic::{AtomicU16, Ordering};

pub struct BufRing {
    /// The ring's entries (page aligned, mmap'd), shared with the kernel.
    entries: *mut BufRingEntry,
    entries_len: usize,
    /// The buffers, `count * size` bytes.
    data: Vec<u8>,
    count: u16,
    size: u32,
    group: u16,
    /// Our copy of the tail; published to the kernel after each return.
    tail: u16,
    /// Buffers the kernel has handed out that are not back yet.
    pub lent: u32,
}

impl BufRing {
    /// Registers `count` (a power of two) buffers of `size` bytes as group
    /// `group` of `ring`, all given to the kernel.
    pub fn register(ring: &IoUring, group: u16, count: u16, size: u32) -> std::io::Result<BufRing> {
        assert!(count.is_power_of_two());
        let entries_len = count as usize * std::mem::size_of::<BufRingEntry>();
        // SAFETY: an anonymous private mapping, checked below.
        let entries = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                entries_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_ANONYMOUS | libc::MAP_PRIVATE,
                -1,
                0,
            )
        };
        if entries == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let mut bufs = BufRing {
            entries: entries.cast(),
            entries_len,
            data: vec![0u8; count as usize * size as usize],
            count,
            size,
            group,
            tail: 0,
            lent: 0,
        };
        // SAFETY: the mapping and the buffers live until `self` is dropped,
        // after the group is unregistered (or the io_uring closed).
        unsafe { ring.submitter().register_buf_ring_with_flags(entries as u64, count, group, 0)? };
        for bid in 0..count {
            bufs.push(bid);
        }
        bufs.publish();
        Ok(bufs)
    }

    pub fn group(&self) -> u16 {
        self.group
    }

    pub fn count(&self) -> u16 {
        self.count
    }

    /// The first `len` bytes of buffer `bid`.
    pub fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        let start = bid as usize * self.size as usize;
        &self.data[start..start + len.min(self.size as usize)]
    }

    /// Gives buffer `bid` back to the kernel.
    pub fn recycle(&mut self, bid: u16) {
        self.push(bid);
        self.publish();
        self.lent = self.lent.saturating_sub(1);
    }

    fn push(&mut self, bid: u16) {
        let slot = (self.tail & (self.count - 1)) as usize;
        // SAFETY: `slot` < count, inside the mapping.
        let entry = unsafe { &mut *self.entries.add(slot) };
        entry.set_addr(self.data.as_ptr() as u64 + bid as u64 * self.size as u64);
        entry.set_len(self.size);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: the tail field of the first entry, which the kernel reads.
        unsafe {
            let tail = BufRingEntry::tail(self.entries) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }

    /// Unregisters the group; call before the ring itself goes away.
    pub fn unregister(&self, ring: &IoUring) {
        let _ = ring.submitter().unregister_buf_ring(self.group);
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `register`.
        unsafe { libc::munmap(self.entries.cast(), self.entries_len) };
    }
}
