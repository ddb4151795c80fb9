//! The shim's own Rust heap: the recorder's tables, the unwinder's caches,
//! the module list, the snapshot of the stacks and the profile's text.
//!
//! It goes straight to glibc (`__libc_malloc`), bypassing the hooks, so it
//! can never recurse into them or show up in the program's figures.
//!
//! **Running out.** A Rust allocation that gets NULL ends in
//! `handle_alloc_error`, which aborts the process: the host would die for
//! the recorder's sake. The recorder's tables and buffers grow with
//! `try_reserve` and drop what they cannot store, but some of its
//! allocations cannot be made fallible: framehop's caches and module
//! parsing, the module list built from `dl_iterate_phdr`, small strings.
//! For those, when glibc says no, the heap hands out memory from an
//! emergency reserve: a static buffer of [`RESERVE_BYTES`] in `.bss`
//! (costing nothing until touched), carved by a lock-free bump pointer,
//! at most [`RESERVE_MAX_REQUEST`] at a time. The first time that happens
//! the heap tells the recorder ([`recorder::stacks::mark_short_of_memory`]).
//! From then on it takes no new stack (each is counted as dropped, and the
//! profile says so), which stops the allocations that cannot be made
//! fallible, and grows no table, so that its fallible allocations leave
//! the reserve alone too. A request glibc refuses that is larger than
//! [`RESERVE_MAX_REQUEST`] gets NULL: the recorder's large steps are all
//! fallible, and one of them must not empty the reserve.
//!
//! Reserve memory is never reused: a free of it is recognised by its
//! address and ignored, and a `realloc` of it allocates anew and copies,
//! leaving the old part where it is. So the reserve is a one-way budget,
//! which keeps it simple and lock-free, and every block it hands out stays
//! valid for as long as anyone holds it.
//!
//! When the reserve too is used up, the allocation gets NULL and the
//! process aborts: there is no way to go on without the memory. That takes
//! a quarter of a megabyte of allocations that cannot fail soft, made
//! after memory ran out and no new stack is taken any more: what is left
//! of them is the writer's few small strings, and whatever a capture under
//! way when memory ran out still needs (a module list, a rule cache).

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use allocmux::recorder;

unsafe extern "C" {
    fn __libc_malloc(size: usize) -> *mut c_void;
    fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
    fn __libc_realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
    fn __libc_free(ptr: *mut c_void);
}

/// The emergency reserve's size.
pub const RESERVE_BYTES: usize = 256 * 1024;
/// The largest request the reserve serves.
pub const RESERVE_MAX_REQUEST: usize = RESERVE_BYTES / 4;

/// The largest alignment glibc's `malloc` guarantees (and the reserve's
/// smallest).
const MALLOC_ALIGN: usize = 16;

/// The reserve: zero-initialised, so it lives in `.bss`.
#[repr(C, align(4096))]
struct Reserve(UnsafeCell<[u8; RESERVE_BYTES]>);

// SAFETY: the bytes are only reached through pointers handed out by
// `Reserve::take`, each range to one caller, never twice.
unsafe impl Sync for Reserve {}

static RESERVE: Reserve = Reserve(UnsafeCell::new([0; RESERVE_BYTES]));
/// Bytes of the reserve handed out so far (with alignment padding).
static RESERVE_USED: AtomicUsize = AtomicUsize::new(0);

impl Reserve {
    fn base(&self) -> usize {
        self.0.get() as usize
    }

    /// Whether `ptr` was handed out by the reserve.
    fn holds(&self, ptr: *mut u8) -> bool {
        (self.base()..self.base() + RESERVE_BYTES).contains(&(ptr as usize))
    }

    /// A block for `layout` from the reserve, or null if it has no room.
    fn take(&self, layout: Layout) -> *mut u8 {
        let align = layout.align().max(MALLOC_ALIGN);
        let base = self.base();
        let mut used = RESERVE_USED.load(Relaxed);
        loop {
            let Some(start) = (base + used).checked_next_multiple_of(align) else {
                return core::ptr::null_mut();
            };
            let start = start - base;
            let Some(end) = start.checked_add(layout.size().max(1)) else {
                return core::ptr::null_mut();
            };
            if end > RESERVE_BYTES {
                return core::ptr::null_mut();
            }
            match RESERVE_USED.compare_exchange_weak(used, end, Relaxed, Relaxed) {
                // The pointer is derived from the reserve's own, so it
                // keeps its provenance.
                Ok(_) => return self.0.get().cast::<u8>().wrapping_add(start),
                Err(now) => used = now,
            }
        }
    }
}

/// Bytes of the emergency reserve handed out so far.
#[cfg(test)]
fn reserve_used() -> usize {
    RESERVE_USED.load(Relaxed)
}

/// Memory from glibc, or failing that from the reserve (telling the stack
/// recorder it is short).
fn allocate(layout: Layout) -> *mut u8 {
    // SAFETY: plain forwards; glibc's allocator honours size and (via
    // memalign) alignment.
    let p: *mut u8 = unsafe {
        if layout.align() <= MALLOC_ALIGN {
            __libc_malloc(layout.size()).cast()
        } else {
            __libc_memalign(layout.align(), layout.size()).cast()
        }
    };
    if !p.is_null() {
        return p;
    }
    from_reserve(layout)
}

#[cold]
fn from_reserve(layout: Layout) -> *mut u8 {
    if layout.size() > RESERVE_MAX_REQUEST {
        return core::ptr::null_mut();
    }
    let p = RESERVE.take(layout);
    if !p.is_null() {
        recorder::stacks::mark_short_of_memory();
    }
    p
}

/// The shim's global allocator (see the module docs).
pub struct OwnHeap;

// SAFETY: blocks come from glibc, which honours size and alignment, or
// from the reserve, whose `take` does; each is handed out once, and only
// glibc's are ever freed or resized in place.
unsafe impl GlobalAlloc for OwnHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        allocate(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _: Layout) {
        if RESERVE.holds(ptr) {
            return; // never reused (see the module docs)
        }
        // SAFETY: `ptr` came from glibc through `alloc` or `realloc`.
        unsafe { __libc_free(ptr.cast()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size`, rounded up to
        // `layout.align()`, does not overflow `isize`.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if !RESERVE.holds(ptr) && layout.align() <= MALLOC_ALIGN {
            // SAFETY: `ptr` came from glibc's `malloc` (alignment within
            // what it guarantees, so not from `memalign`).
            let p = unsafe { __libc_realloc(ptr.cast(), new_size) };
            if !p.is_null() {
                return p.cast();
            }
        }
        // A reserve block, a large alignment, or glibc out of memory (the
        // old block is then still valid): a new block, the bytes copied,
        // the old one freed (a no-op for a reserve block).
        let new = allocate(new_layout);
        if !new.is_null() {
            // SAFETY: both blocks are valid for the smaller size and are
            // distinct allocations.
            unsafe {
                core::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reserve hands out aligned, disjoint blocks until it is full,
    /// recognises them, and refuses what does not fit; `realloc` of one of
    /// its blocks copies it into a new block and leaves the reserve alone,
    /// and `dealloc` of one is a no-op. (One test: there is one reserve.)
    #[test]
    fn the_reserve_hands_out_aligned_blocks_once() {
        let heap = OwnHeap;
        let layout = Layout::from_size_align(32, 8).unwrap();
        let p = RESERVE.take(layout);
        assert!(!p.is_null() && RESERVE.holds(p));
        // SAFETY: `p` is a 32-byte block of the reserve; the new block is
        // glibc's, freed below.
        unsafe {
            core::ptr::write_bytes(p, 0x5a, 32);
            let q = heap.realloc(p, layout, 64);
            assert!(!q.is_null() && !RESERVE.holds(q));
            assert!((0..32).all(|i| *q.add(i) == 0x5a));
            assert!((0..32).all(|i| *p.add(i) == 0x5a), "the old part stays");
            heap.dealloc(p, layout);
            heap.dealloc(q, Layout::from_size_align(64, 8).unwrap());
        }

        let used = reserve_used();
        let a = RESERVE.take(Layout::from_size_align(24, 8).unwrap());
        let b = RESERVE.take(Layout::from_size_align(100, 64).unwrap());
        let c = RESERVE.take(Layout::from_size_align(1, 1).unwrap());
        for (p, align) in [(a, 16), (b, 64), (c, 16)] {
            assert!(!p.is_null() && RESERVE.holds(p));
            assert_eq!(p as usize % align, 0);
        }
        assert!(b as usize >= a as usize + 24 && c as usize >= b as usize + 100);
        assert!(reserve_used() > used + 24 + 100);
        let x = Box::into_raw(Box::new(7u64));
        assert!(!RESERVE.holds(x.cast()));
        // SAFETY: from the Box above.
        drop(unsafe { Box::from_raw(x) });
        // Requests larger than the limit are not served from it.
        assert!(
            from_reserve(Layout::from_size_align(RESERVE_MAX_REQUEST + 1, 8).unwrap()).is_null()
        );
        assert!(!recorder::stacks::is_short_of_memory());
        let d = from_reserve(Layout::from_size_align(RESERVE_MAX_REQUEST, 8).unwrap());
        assert!(RESERVE.holds(d) && recorder::stacks::is_short_of_memory());
        // Too large for what is left; then it fills up to the last byte.
        let rest = RESERVE_BYTES - reserve_used();
        assert!(
            RESERVE
                .take(Layout::from_size_align(rest + 1, 1).unwrap())
                .is_null()
        );
        let last = RESERVE.take(Layout::from_size_align(rest, 1).unwrap());
        assert!(!last.is_null() && RESERVE.holds(last));
        assert_eq!(reserve_used(), RESERVE_BYTES);
        assert!(
            RESERVE
                .take(Layout::from_size_align(1, 1).unwrap())
                .is_null()
        );
    }
}
