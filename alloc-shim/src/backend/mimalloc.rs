//! mimalloc (libmimalloc-sys, built without overriding `malloc`).

use core::ffi::c_void;

use super::{Backend, memalign_via_aligned, page_size, pvalloc_via_aligned};

unsafe extern "C" {
    fn mi_calloc(count: usize, size: usize) -> *mut c_void;
    fn mi_usable_size(ptr: *const c_void) -> usize;
}

/// mimalloc.
#[derive(Debug)]
pub struct Mimalloc;

// SAFETY: forwards to mimalloc.
unsafe impl Backend for Mimalloc {
    const NAME: &'static str = "mimalloc";
    // mimalloc returns NULL for impossible sizes without setting errno.
    const SETS_ERRNO: bool = false;
    const FREE_KEEPS_ERRNO: bool = false;

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
    unsafe fn free(ptr: *mut c_void, _usable: usize) {
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
}
