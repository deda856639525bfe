//! A global allocator that counts live heap bytes and their peak since the last reset: the
//! memory an operation needed, whatever the system allocator keeps cached. Shared by the save
//! bench and `examples/mutate_files.rs` (each includes this file by path and declares the
//! `#[global_allocator]` itself, so a bench that counts differently is not affected).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Install with `#[global_allocator] static ALLOCATOR: PeakHeap = PeakHeap;`.
pub struct PeakHeap;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: defers every call to `System`, only counting on the side.
unsafe impl GlobalAlloc for PeakHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: our caller keeps `GlobalAlloc::alloc`'s contract for `layout` (a non-zero
        // size), which is all `System.alloc` asks.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: our caller passes a block this allocator returned for `layout`, and every
        // such block came from `System.alloc` with that same layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

/// Live heap bytes now.
pub fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Starts a new peak at what is live now; returns that (the baseline).
pub fn reset_peak() -> usize {
    let live = live();
    PEAK.store(live, Ordering::Relaxed);
    live
}

/// The peak of live bytes since the last [`reset_peak`].
pub fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}
