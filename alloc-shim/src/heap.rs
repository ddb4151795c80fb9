//! The shim's own Rust heap: the recorder's tables, the unwinder's caches,
//! the module list, the snapshot of the stacks and the profile's text.
//!
//! It goes straight to glibc (`__libc_malloc`), bypassing the hooks, so it
//! can never recurse into them or show up in the program's figures; under
//! the mimalloc backend, to mimalloc (`mi_malloc`) instead. There, glibc's
//! heap is otherwise untouched, and it must stay so: once the program has
//! a second thread, glibc's `fork` takes its arena locks, so a signal
//! handler that forks on a thread it interrupted inside glibc's `malloc`
//! for the recorder's tables would wait for that thread forever.
//! mimalloc's allocation paths take no lock. A block is freed by the
//! allocator it came from (blocks made before the backend was chosen are
//! glibc's), and `realloc` moves a glibc block to mimalloc.
//!
//! **Large blocks** ([`OWN_MAPPING_BYTES`] and up: the stack table's
//! chunks, hash indexes, the unwinder's table) are page mappings of their
//! own (`page_blocks`) on every thread, so the recorder's bulk is not in
//! the backend's heap, whose statistics the profile reports as the
//! program's (glibc's `mallinfo2`, mimalloc's committed bytes). The small
//! blocks left there are a few hundred KiB at most.
//!
//! **The writer's blocks** (its staging buffers, the copy of the stacks)
//! are page mappings of their own (`page_blocks`), which any thread may
//! free, whoever holds the writer: a profile is written from `fork` and
//! `_exit` handlers that may have interrupted the program inside glibc's
//! `malloc`, where glibc's heap must not be entered again, and by the
//! flusher, which runs on a thread glibc does not know of (`raw_thread`)
//! and must use neither glibc's heap nor mimalloc's (a block of theirs it
//! would free or move is left in place instead). Only when no
//! mapping can be had (a process at its limit of mappings) does a program
//! thread's write fall back to the allocator's heap, and the flusher to
//! the reserve.
//!
//! **Running out.** A Rust allocation that gets NULL ends in
//! `handle_alloc_error`, which aborts the process: the host would die for
//! the recorder's sake. The recorder's tables and buffers grow with
//! `try_reserve` and drop what they cannot store, but some of its
//! allocations cannot be made fallible: framehop's caches and module
//! parsing, the module list built from `dl_iterate_phdr`, small strings.
//! For those, when the allocator says no, the heap hands out memory from an
//! emergency reserve: a static buffer of [`RESERVE_BYTES`] in `.bss`
//! (costing nothing until touched), carved by a lock-free bump pointer,
//! at most [`RESERVE_MAX_REQUEST`] at a time. The first time that happens
//! the heap tells the recorder ([`recorder::stacks::mark_short_of_memory`]).
//! From then on it takes no new stack (each is counted as dropped, and the
//! profile says so), which stops the allocations that cannot be made
//! fallible, and grows no table, so that its fallible allocations leave
//! the reserve alone too. A request the allocator refuses that is larger than
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
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

use allocmux_format::Backend;
use allocmux_recorder as recorder;
use libmimalloc_sys::{mi_free, mi_malloc, mi_malloc_aligned, mi_realloc, mi_zalloc};

use crate::writer::WRITER;
use crate::{page_blocks, raw_thread};

unsafe extern "C" {
    fn __libc_malloc(size: usize) -> *mut c_void;
    fn __libc_calloc(n: usize, size: usize) -> *mut c_void;
    fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
    fn __libc_realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
    fn __libc_free(ptr: *mut c_void);
    fn mi_is_in_heap_region(p: *const c_void) -> bool;
}

/// Whether new blocks come from mimalloc (the mimalloc backend was chosen).
static ON_MIMALLOC: AtomicBool = AtomicBool::new(false);
/// Whether any block has come from mimalloc: until then, a free needs no
/// look-up to know its block is glibc's.
static USED_MIMALLOC: AtomicBool = AtomicBool::new(false);

/// Sets the allocator of the blocks to come from the process's backend:
/// mimalloc's own under mimalloc, glibc's otherwise. Blocks already handed
/// out stay valid: each is freed by the allocator that made it.
pub fn follow_backend(backend: Backend) {
    let mimalloc = backend == Backend::Mimalloc;
    if mimalloc {
        USED_MIMALLOC.store(true, Relaxed);
    }
    ON_MIMALLOC.store(mimalloc, Relaxed);
}

/// Whether `ptr` (not a reserve block) is mimalloc's.
fn is_mimallocs(ptr: *mut u8) -> bool {
    // SAFETY: a look-up in mimalloc's own segment map, for any address.
    USED_MIMALLOC.load(Relaxed) && unsafe { mi_is_in_heap_region(ptr.cast()) }
}

/// The shim's own blocks in glibc's heap, as `mallinfo2` counts them:
/// chunk bytes in its arenas, and in chunks it mapped on its own. The
/// profile's glibc statistics leave them out, so they are the program's
/// (see [`glibc_blocks`]).
static GLIBC_ARENA_BYTES: AtomicUsize = AtomicUsize::new(0);
static GLIBC_MMAPPED_BYTES: AtomicUsize = AtomicUsize::new(0);

/// The shim's own blocks in glibc's heap: chunk bytes in the arenas, and
/// in glibc's own mappings.
pub fn glibc_blocks() -> (u64, u64) {
    (
        GLIBC_ARENA_BYTES.load(Relaxed) as u64,
        GLIBC_MMAPPED_BYTES.load(Relaxed) as u64,
    )
}

/// Counts a glibc block of the shim's in (`made`) or out.
///
/// # Safety
/// `ptr` is a live glibc block.
unsafe fn count_glibc(ptr: *mut u8, made: bool) {
    // SAFETY: the caller's live glibc block.
    let (bytes, mapped) = unsafe { crate::backend::glibc_chunk(ptr.cast()) };
    let counter = if mapped {
        &GLIBC_MMAPPED_BYTES
    } else {
        &GLIBC_ARENA_BYTES
    };
    if made {
        counter.fetch_add(bytes, Relaxed);
    } else {
        counter.fetch_sub(bytes, Relaxed);
    }
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

/// From this size up, a block is a page mapping of its own (the stack
/// table's chunks, the hash indexes, the profile's text), so the recorder's
/// bulk stays out of the backend's heap and so out of the allocator
/// statistics the profile reports as the program's; smaller blocks are
/// few and small next to it.
pub const OWN_MAPPING_BYTES: usize = 64 * 1024;

/// Memory from glibc or mimalloc (see the module docs), or failing that
/// from the reserve (telling the stack recorder it is short).
fn allocate(layout: Layout) -> *mut u8 {
    let raw = raw_thread::is_current();
    if raw || WRITER.is_held_here() || layout.size() >= OWN_MAPPING_BYTES {
        let p = page_blocks::allocate(layout);
        if !p.is_null() {
            return p;
        }
        if raw {
            return from_reserve(layout);
        }
        // No mapping to be had (a process at its limit of mappings): the
        // allocator's heap, where the writer found room before these.
    }
    // SAFETY: plain forwards; both allocators honour size and (through
    // their aligned calls) alignment.
    let p: *mut u8 = unsafe {
        match (ON_MIMALLOC.load(Relaxed), layout.align() <= MALLOC_ALIGN) {
            (true, true) => mi_malloc(layout.size()).cast(),
            (true, false) => mi_malloc_aligned(layout.size(), layout.align()).cast(),
            (false, true) => __libc_malloc(layout.size()).cast(),
            (false, false) => __libc_memalign(layout.align(), layout.size()).cast(),
        }
    };
    if !p.is_null() {
        if !ON_MIMALLOC.load(Relaxed) {
            // SAFETY: a glibc block, just made.
            unsafe { count_glibc(p, true) };
        }
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

// SAFETY: blocks come from glibc, mimalloc or page mappings, which honour
// size and alignment (the page blocks up to 64, refusing more), or from
// the reserve, whose `take` does; each is handed out once, and only the
// allocators' are ever freed (each by its own) or resized in place.
unsafe impl GlobalAlloc for OwnHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        allocate(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // glibc's `calloc` and mimalloc's `mi_zalloc` skip clearing memory
        // fresh from the kernel, which the default (`alloc`, then zero
        // every byte) would dirty: the unwinder's 256 KiB table of learned
        // steps would cost its whole size in every process from the start.
        if layout.size() >= OWN_MAPPING_BYTES {
            // A fresh mapping reads as zeros, untouched.
            let p = page_blocks::allocate(layout);
            if !p.is_null() {
                return p;
            }
        }
        if layout.align() <= MALLOC_ALIGN && !raw_thread::is_current() && !WRITER.is_held_here() {
            // SAFETY: plain forwards, as in `allocate`; freed by `dealloc`,
            // which tells mimalloc's blocks from glibc's.
            let p: *mut u8 = unsafe {
                if ON_MIMALLOC.load(Relaxed) {
                    mi_zalloc(layout.size()).cast()
                } else {
                    let p: *mut u8 = __libc_calloc(1, layout.size()).cast();
                    if !p.is_null() {
                        count_glibc(p, true);
                    }
                    p
                }
            };
            if !p.is_null() {
                return p;
            }
        }
        let p = allocate(layout);
        if !p.is_null() {
            // SAFETY: `p` holds `layout.size()` bytes, just allocated.
            unsafe { core::ptr::write_bytes(p, 0, layout.size()) };
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _: Layout) {
        if RESERVE.holds(ptr) {
            return; // never reused (see the module docs)
        }
        if page_blocks::holds(ptr) {
            // SAFETY: `ptr` is a live page block, from `alloc`.
            unsafe { page_blocks::free(ptr) }
        } else if raw_thread::is_current() {
            // A glibc or mimalloc block freed on the thread glibc does not
            // know of, where glibc's `free` would take no lock and
            // mimalloc's would find no heap in its TLS: left where it is.
            // (Only a buffer a program thread made before the flusher
            // grew it, or a writer buffer made when no mapping could be
            // had: a few, once.)
        } else if is_mimallocs(ptr) {
            // SAFETY: `ptr` is a live block of mimalloc's, from `alloc`.
            unsafe { mi_free(ptr.cast()) }
        } else {
            // SAFETY: `ptr` came from glibc through `alloc` or `realloc`,
            // and is freed once.
            unsafe {
                count_glibc(ptr, false);
                __libc_free(ptr.cast())
            }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size`, rounded up to
        // `layout.align()`, does not overflow `isize`.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if page_blocks::holds(ptr) {
            // SAFETY: a live page block; on failure it stays valid.
            let p = unsafe { page_blocks::resize(ptr, new_size) };
            if !p.is_null() {
                return p;
            }
        } else if !RESERVE.holds(ptr)
            && layout.align() <= MALLOC_ALIGN
            && !raw_thread::is_current()
            && new_size < OWN_MAPPING_BYTES
        {
            let p = if is_mimallocs(ptr) {
                // SAFETY: a live mimalloc block, of an alignment
                // `mi_realloc` keeps.
                unsafe { mi_realloc(ptr.cast(), new_size) }
            } else if !ON_MIMALLOC.load(Relaxed) {
                // SAFETY: `ptr` came from glibc's `malloc` (alignment
                // within what it guarantees, so not from `memalign`); it
                // is counted out, and whichever block glibc returns (the
                // same grown, a new one, or on failure the old one still
                // valid) counted in again.
                unsafe {
                    count_glibc(ptr, false);
                    let p: *mut u8 = __libc_realloc(ptr.cast(), new_size).cast();
                    count_glibc(if p.is_null() { ptr } else { p }, true);
                    p.cast()
                }
            } else {
                // A glibc block under mimalloc: moved, below.
                core::ptr::null_mut()
            };
            if !p.is_null() {
                return p.cast();
            }
        }
        // A reserve block, a large alignment, a block grown to a page
        // block's size, a glibc block to move to
        // mimalloc or (on the raw flusher thread) to a page block, or the
        // allocator out of memory (the old block is then
        // still valid): a new block, the bytes copied, the old one freed
        // (a no-op for a reserve block).
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

    /// Under mimalloc, new blocks are mimalloc's and a glibc block made
    /// before is freed by glibc, or moved to mimalloc by `realloc`; under
    /// glibc again, mimalloc's blocks still go back to mimalloc. A block
    /// grown to [`OWN_MAPPING_BYTES`] becomes a page mapping. (The
    /// switch is safe at any time, with other tests allocating: each block
    /// is freed by its own allocator.)
    #[test]
    fn blocks_follow_the_backend_and_go_back_where_they_came_from() {
        let heap = OwnHeap;
        let small = Layout::from_size_align(40, 8).unwrap();
        let wide = Layout::from_size_align(40, 64).unwrap();
        // SAFETY: each block is used within its size and freed once, with
        // its layout.
        unsafe {
            follow_backend(Backend::System);
            let from_glibc = heap.alloc(small);
            let other_glibc = heap.alloc(small);
            assert!(!mi_is_in_heap_region(from_glibc.cast()));
            from_glibc.write_bytes(0x33, 40);

            follow_backend(Backend::Mimalloc);
            let a = heap.alloc(small);
            let b = heap.alloc(wide);
            assert!(mi_is_in_heap_region(a.cast()) && mi_is_in_heap_region(b.cast()));
            assert_eq!(b as usize % 64, 0);
            let moved = heap.realloc(from_glibc, small, 4000);
            assert!(mi_is_in_heap_region(moved.cast()));
            assert!((0..40).all(|i| *moved.add(i) == 0x33));
            // Grown past OWN_MAPPING_BYTES: a page mapping of its own.
            let grown = heap.realloc(a, small, 100_000);
            assert!(page_blocks::holds(grown) && !mi_is_in_heap_region(grown.cast()));
            heap.dealloc(other_glibc, small);

            follow_backend(Backend::Jemalloc);
            let c = heap.alloc(small);
            assert!(!mi_is_in_heap_region(c.cast()));
            heap.dealloc(c, small);
            heap.dealloc(grown, Layout::from_size_align(100_000, 8).unwrap());
            heap.dealloc(moved, Layout::from_size_align(4000, 8).unwrap());
            heap.dealloc(b, wide);
            follow_backend(Backend::System);
        }
    }

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
