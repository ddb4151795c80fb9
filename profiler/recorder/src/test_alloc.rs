//! The global allocator of this crate's unit tests: the system's, which
//! also notes, per thread, the largest single allocation made while a test
//! watches (see [`largest_allocation`]), so the recorder's tables can be
//! held to their bound on one step, and can fail every allocation of a
//! thread (see [`without_memory`]), so what they do without memory can be
//! tested.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    static WATCHING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    static FAILING: Cell<bool> = const { Cell::new(false) };
}

/// Notes an allocation of `size` bytes; false if it must fail.
fn note(size: usize) -> bool {
    let _ = WATCHING.try_with(|w| {
        if w.get() {
            LARGEST.with(|m| m.set(m.get().max(size)));
        }
    });
    !FAILING.try_with(Cell::get).unwrap_or(false)
}

struct Watching;

// SAFETY: every call is forwarded to `System` with its own arguments.
unsafe impl GlobalAlloc for Watching {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !note(layout.size()) {
            return core::ptr::null_mut();
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !note(layout.size()) {
            return core::ptr::null_mut();
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !note(new_size) {
            return core::ptr::null_mut();
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static WATCHING_ALLOCATOR: Watching = Watching;

/// Runs `f`, returning its result and the size of the largest single
/// allocation (or reallocation) it made on this thread, 0 if none.
pub fn largest_allocation<R>(f: impl FnOnce() -> R) -> (R, usize) {
    LARGEST.set(0);
    WATCHING.set(true);
    let r = f();
    WATCHING.set(false);
    (r, LARGEST.get())
}

/// Runs `f` with every allocation on this thread failing (a null pointer,
/// as from an allocator out of memory). An allocation `f` makes that is
/// not fallible aborts the test binary: that is what the recorder must
/// not do.
pub fn without_memory<R>(f: impl FnOnce() -> R) -> R {
    FAILING.set(true);
    let r = f();
    FAILING.set(false);
    r
}
