//! mimalloc (libmimalloc-sys, built without overriding `malloc`).

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicU16, Ordering::Relaxed};

use super::Backend;
use crate::posix::{memalign_via_aligned, pvalloc_via_aligned};
use allocmux::recorder::process::page_size;

unsafe extern "C" {
    fn mi_calloc(count: usize, size: usize) -> *mut c_void;
    fn mi_usable_size(ptr: *const c_void) -> usize;
}

/// mimalloc.
#[derive(Debug, Clone, Copy)]
pub struct Mimalloc;

// SAFETY: forwards to mimalloc.
unsafe impl Backend for Mimalloc {
    #[inline(always)]
    fn size_before_malloc(requested: usize) -> Option<usize> {
        let size = SMALL_SIZES.get((requested + 7) >> 3)?.load(Relaxed);
        (size != 0).then_some(size as usize)
    }

    #[inline(always)]
    unsafe fn malloc(size: usize) -> *mut c_void {
        // SAFETY: plain forward.
        unsafe { libmimalloc_sys::mi_malloc(size) }
    }
    #[inline(always)]
    unsafe fn calloc(count: usize, size: usize) -> *mut c_void {
        // SAFETY: plain forward.
        unsafe { mi_calloc(count, size) }
    }
    #[inline(always)]
    unsafe fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
        // SAFETY: the caller passes a mimalloc block.
        unsafe { libmimalloc_sys::mi_realloc(ptr, size) }
    }
    #[inline(always)]
    unsafe fn free(ptr: *mut c_void) {
        // SAFETY: the caller passes a mimalloc block.
        unsafe { libmimalloc_sys::mi_free(ptr) }
    }
    #[inline(always)]
    unsafe fn aligned(align: usize, size: usize) -> *mut c_void {
        // SAFETY: `align` is a power of two.
        unsafe { libmimalloc_sys::mi_malloc_aligned(size, align) }
    }
    #[inline(always)]
    unsafe fn memalign(align: usize, size: usize) -> *mut c_void {
        // SAFETY: the helper normalises the alignment first.
        unsafe { memalign_via_aligned::<Self>(align, size) }
    }
    #[inline(always)]
    unsafe fn valloc(size: usize) -> *mut c_void {
        // SAFETY: the page size is a power of two.
        unsafe { Self::aligned(page_size(), size) }
    }
    #[inline(always)]
    unsafe fn pvalloc(size: usize) -> *mut c_void {
        // SAFETY: forwards to `aligned`.
        unsafe { pvalloc_via_aligned::<Self>(size) }
    }
    #[inline(always)]
    unsafe fn usable(ptr: *mut c_void) -> usize {
        // SAFETY: the caller passes a live mimalloc block.
        unsafe { mi_usable_size(ptr) }
    }
    #[inline(always)]
    unsafe fn allocated_size(ptr: *mut c_void, requested: usize, plain: bool) -> usize {
        match Self::size_before_malloc(requested) {
            Some(size) if plain => size,
            // SAFETY: the caller passes a live mimalloc block.
            _ => unsafe { mi_usable_size(ptr) },
        }
    }
}

/// Largest request whose fresh block's usable size is read from the table.
const SMALL_MAX: usize = 4096;

/// Usable size of a fresh `mi_malloc(n)` block for n up to [`SMALL_MAX`],
/// indexed by `(n + 7) / 8`: mimalloc rounds every request up to a whole
/// word and picks the size bin from that, so the word count decides the
/// block size. Filled at start-up from real allocations, so it is exact by
/// construction; zero means "look it up", so a table being filled (by one
/// or, racing, several first calls) is always safe to read. Relaxed atomic
/// loads are plain moves.
static SMALL_SIZES: [AtomicU16; SMALL_MAX / 8 + 1] =
    [const { AtomicU16::new(0) }; SMALL_MAX / 8 + 1];

unsafe extern "C" {
    fn mi_register_error(
        handler: Option<unsafe extern "C" fn(c_int, *mut c_void)>,
        arg: *mut c_void,
    );
}

/// mimalloc's error handler: it is called with ENOMEM (out of memory) or
/// EOVERFLOW (impossible size) for every failed allocation, right before
/// mimalloc returns NULL, so setting errno here gives glibc's behaviour.
unsafe extern "C" fn on_mimalloc_error(err: c_int, _arg: *mut c_void) {
    if err == libc::ENOMEM || err == libc::EOVERFLOW {
        crate::posix::set_errno(libc::ENOMEM);
    }
}

/// Prepares mimalloc for the shim: the errno handler and the small-size
/// table. Called once, when mimalloc is chosen, before any hook uses it.
pub fn init() {
    // SAFETY: registers a handler that only sets errno.
    unsafe { mi_register_error(Some(on_mimalloc_error), core::ptr::null_mut()) };
    init_size_table();
}

/// Fills the small-size table by allocating one block of each word count.
fn init_size_table() {
    for (words, slot) in SMALL_SIZES.iter().enumerate().skip(1) {
        // SAFETY: mimalloc's own block, freed at once.
        let size = unsafe {
            let p = libmimalloc_sys::mi_malloc(words * 8);
            if p.is_null() {
                continue;
            }
            let size = mi_usable_size(p);
            libmimalloc_sys::mi_free(p);
            size
        };
        slot.store(u16::try_from(size).unwrap_or(0), Relaxed);
    }
    // malloc(0): mimalloc hands out its smallest block.
    SMALL_SIZES[0].store(SMALL_SIZES[1].load(Relaxed), Relaxed);
}
