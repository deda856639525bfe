//! The receive buffers every connection of a ring shares: one provided-buffer ring
//! (`IORING_REGISTER_PBUF_RING`, Linux 5.19) that the connections' multishot receives take
//! their buffers from.
//!
//! The kernel picks the next buffer of the ring for each receive it completes and names it in
//! the completion (its buffer id). From then on the buffer is the ring's owner's (`Ring` in
//! `uring.rs`): its bytes stay put until [`Pool::give_back`] returns it to the kernel, which
//! the connection does once `read` has copied them out. A connection between packets holds no
//! buffer at all, so an idle connection costs no receive memory; the pool's size is fixed
//! (see [`BUFFERS`]).
//!
//! Owns: the ring's entries, the buffers' memory and the tail the kernel reads. Must never give
//! a buffer back twice or while its bytes are still wanted, and never free memory the kernel
//! may still write to: the caller unregisters the pool (or leaks it, if operations outlived the
//! ring) before it is dropped.

use std::alloc::{self, Layout};
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::IoUring;
use io_uring::types::BufRingEntry;

/// Buffers in the pool (a power of two, as the kernel wants; at most 32,768). The kernel takes
/// one buffer per completed receive however few bytes it carries, and the loop reads 16
/// connections per iteration: with 1,000 connections each holding a packet, about 1,000 are
/// lent at once. 4,096 leaves room for that and for the per-connection limit
/// (`HELD_LIMIT` in `uring.rs`), and bounds the pool to 4 MiB, what the per-connection
/// buffers it replaces cost at 1,000 connections. Beyond it a connection waits for a buffer
/// (its receive re-armed as buffers come back), it loses nothing.
pub(super) const BUFFERS: u16 = 4096;
/// Bytes per buffer. A player's packets are small; a larger read spans several buffers and is
/// put together by the connection's reader as any partial packet is.
pub(super) const BUFFER_SIZE: u32 = 1024;
/// The buffer group the pool is registered as (one pool per ring).
pub(super) const GROUP: u16 = 0;
/// The ring of entries must start on a page.
const PAGE: usize = 4096;

/// A provided-buffer ring registered with one io_uring.
pub(super) struct Pool {
    /// `count` entries the kernel reads buffers from, page-aligned; the first entry's
    /// reserved field is the ring's tail.
    entries: NonNull<BufRingEntry>,
    /// `count * size` bytes: buffer `bid` is `size` bytes at `bid * size`.
    memory: NonNull<u8>,
    count: u16,
    size: u32,
    /// Our copy of the tail: entries before it are the kernel's.
    tail: u16,
    /// Buffers a completion handed over and not given back yet.
    lent: usize,
}

impl Pool {
    /// Registers a pool of `count` buffers of `size` bytes with `uring` and hands all of them
    /// to the kernel. The error is the kernel's refusal (EINVAL before Linux 5.19).
    pub(super) fn register(uring: &IoUring, count: u16, size: u32) -> io::Result<Pool> {
        assert!(count.is_power_of_two() && count <= 1 << 15 && size > 0);
        let pool = Pool::allocate(count, size);
        // SAFETY: the entries are `count` page-aligned, zeroed `BufRingEntry`s that stay
        // valid and unmoved until the pool is dropped, which the ring's owner does only after
        // unregistering it or when the ring is gone (the module's rule); on an error here the
        // kernel kept nothing.
        unsafe {
            uring
                .submitter()
                .register_buf_ring(pool.entries.as_ptr() as u64, count, GROUP)?;
        }
        let mut pool = pool;
        for bid in 0..count {
            pool.offer(bid);
        }
        pool.publish();
        Ok(pool)
    }

    fn allocate(count: u16, size: u32) -> Pool {
        let entries = Pool::entries_layout(count);
        let memory = Pool::memory_layout(count, size);
        // SAFETY: both layouts have a non-zero size (count and size are positive).
        let (entries_ptr, memory_ptr) =
            unsafe { (alloc::alloc_zeroed(entries), alloc::alloc(memory)) };
        let Some(entries_ptr) = NonNull::new(entries_ptr.cast::<BufRingEntry>()) else {
            alloc::handle_alloc_error(entries)
        };
        let Some(memory_ptr) = NonNull::new(memory_ptr) else {
            alloc::handle_alloc_error(memory)
        };
        Pool {
            entries: entries_ptr,
            memory: memory_ptr,
            count,
            size,
            tail: 0,
            lent: 0,
        }
    }

    fn entries_layout(count: u16) -> Layout {
        Layout::from_size_align(usize::from(count) * size_of::<BufRingEntry>(), PAGE)
            .expect("a page-aligned layout")
    }

    fn memory_layout(count: u16, size: u32) -> Layout {
        Layout::array::<u8>(usize::from(count) * size as usize).expect("a buffer layout")
    }

    /// Buffers the connections hold (handed over by a completion, not given back).
    pub(super) fn lent(&self) -> usize {
        self.lent
    }

    /// How many buffers the pool has.
    pub(super) fn count(&self) -> usize {
        usize::from(self.count)
    }

    /// Buffer `bid` was handed over by a completion: the connection holds it now.
    pub(super) fn lend(&mut self, bid: u16) {
        debug_assert!(bid < self.count && self.lent < self.count());
        self.lent += 1;
    }

    /// The first `len` bytes of buffer `bid`, which a completion handed over.
    pub(super) fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        assert!(bid < self.count && len <= self.size as usize);
        // SAFETY: buffer `bid` lies inside `memory`; it was handed over by a completion that
        // said the kernel wrote `len` bytes into it, and the kernel does not touch it again
        // before it is given back.
        unsafe {
            std::slice::from_raw_parts(
                self.memory
                    .as_ptr()
                    .add(usize::from(bid) * self.size as usize),
                len,
            )
        }
    }

    /// Returns buffer `bid`, whose bytes were copied out, to the kernel.
    pub(super) fn give_back(&mut self, bid: u16) {
        debug_assert!(self.lent > 0);
        self.lent -= 1;
        self.offer(bid);
        self.publish();
    }

    /// Writes buffer `bid` into the entry at the tail and advances our tail (the kernel sees
    /// it at the next [`Pool::publish`]).
    fn offer(&mut self, bid: u16) {
        let slot = usize::from(self.tail & (self.count - 1));
        // SAFETY: `slot` < `count`; the entry at our tail is not the kernel's (it reads only
        // entries before the published tail), and the setters leave the first entry's
        // reserved field, the tail, alone.
        let entry = unsafe { &mut *self.entries.as_ptr().add(slot) };
        // SAFETY: buffer `bid` lies inside `memory` (`bid` < `count`).
        let addr = unsafe {
            self.memory
                .as_ptr()
                .add(usize::from(bid) * self.size as usize)
        };
        entry.set_addr(addr as u64);
        entry.set_len(self.size);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Tells the kernel about the entries written up to our tail.
    fn publish(&self) {
        // SAFETY: the tail field lies inside the first entry, which lives as long as the pool.
        // It is a u16 the kernel only reads, and it is 2-aligned (offset 14 in a 16-byte,
        // page-aligned entry), as `AtomicU16` needs.
        let tail =
            unsafe { AtomicU16::from_ptr(BufRingEntry::tail(self.entries.as_ptr()).cast_mut()) };
        // Release: the kernel must see the entries before the tail that covers them.
        tail.store(self.tail, Ordering::Release);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: allocated in `allocate` with these layouts; the kernel no longer uses them
        // (the module's rule: unregistered, or the ring is gone, before the pool is dropped).
        unsafe {
            alloc::dealloc(
                self.entries.as_ptr().cast(),
                Pool::entries_layout(self.count),
            );
            alloc::dealloc(
                self.memory.as_ptr(),
                Pool::memory_layout(self.count, self.size),
            );
        }
    }
}
