//! A counting global allocator: the heap bytes currently allocated, while counting is on.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

/// The system allocator, counting the bytes live while [`start`] is in force.
///
/// Off by default so that the throughput rows pay one relaxed load per call, not a contended
/// atomic add.
pub struct Counting;

static ON: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicIsize = AtomicIsize::new(0);

/// Starts counting from zero.
pub fn start() {
    LIVE.store(0, Ordering::SeqCst);
    ON.store(true, Ordering::SeqCst);
}

/// The bytes allocated minus the bytes freed since [`start`] (frees of blocks allocated before
/// it count too, so measure a window in which the pre-existing heap is left alone).
pub fn live() -> isize {
    LIVE.load(Ordering::SeqCst)
}

/// Stops counting.
pub fn stop() {
    ON.store(false, Ordering::SeqCst);
}

fn add(n: usize) {
    if ON.load(Ordering::Relaxed) {
        LIVE.fetch_add(n as isize, Ordering::Relaxed);
    }
}

fn sub(n: usize) {
    if ON.load(Ordering::Relaxed) {
        LIVE.fetch_sub(n as isize, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to `System` unchanged; the counting touches only atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        add(layout.size());
        // SAFETY: the caller upholds `alloc`'s contract, which `System` needs.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        sub(layout.size());
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        add(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        sub(layout.size());
        add(new_size);
        // SAFETY: `ptr` came from `System` with `layout`; the caller upholds the rest.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
