//! jemalloc (tikv-jemalloc-sys, linked statically with the `_rjem_` prefix,
//! so it never clashes with the program's own symbols).

use core::ffi::c_void;

use super::{Backend, pvalloc_via_aligned};

unsafe extern "C" {
    #[link_name = "_rjem_memalign"]
    fn je_memalign(align: usize, size: usize) -> *mut c_void;
    #[link_name = "_rjem_valloc"]
    fn je_valloc(size: usize) -> *mut c_void;
}

/// jemalloc.
#[derive(Debug)]
pub struct Jemalloc;

// SAFETY: forwards to jemalloc.
unsafe impl Backend for Jemalloc {
    const NAME: &'static str = "jemalloc";
    const SETS_ERRNO: bool = true;
    // jemalloc's slow paths (purging, unmapping) may fail with errno set.
    const FREE_KEEPS_ERRNO: bool = false;

    #[inline(always)]
    unsafe fn malloc(size: usize) -> *mut c_void {
        // SAFETY: plain forward.
        unsafe { tikv_jemalloc_sys::malloc(size) }
    }
    #[inline(always)]
    unsafe fn calloc(count: usize, size: usize) -> *mut c_void {
        // SAFETY: plain forward.
        unsafe { tikv_jemalloc_sys::calloc(count, size) }
    }
    #[inline(always)]
    unsafe fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
        // SAFETY: the caller passes a jemalloc block.
        unsafe { tikv_jemalloc_sys::realloc(ptr, size) }
    }
    #[inline(always)]
    unsafe fn free(ptr: *mut c_void, usable: usize) {
        // Sized deallocation: the usable size was looked up anyway for the
        // counters, so jemalloc need not look it up a second time. A usable
        // size is always a size class, as sdallocx requires.
        // SAFETY: `usable` is this block's usable size.
        unsafe { tikv_jemalloc_sys::sdallocx(ptr, usable, 0) }
    }
    #[inline(always)]
    unsafe fn aligned(align: usize, size: usize) -> *mut c_void {
        // SAFETY: `align` is a power of two.
        unsafe { tikv_jemalloc_sys::aligned_alloc(align, size) }
    }
    #[inline(always)]
    unsafe fn memalign(align: usize, size: usize) -> *mut c_void {
        if align <= usize::MAX / 2 + 1 && align.is_power_of_two() && align >= 16 {
            // SAFETY: a power-of-two alignment, as jemalloc requires.
            unsafe { je_memalign(align, size) }
        } else {
            // SAFETY: the helper normalises the alignment first.
            unsafe { super::memalign_via_aligned::<Self>(align, size) }
        }
    }
    #[inline(always)]
    unsafe fn valloc(size: usize) -> *mut c_void {
        // SAFETY: plain forward.
        unsafe { je_valloc(size) }
    }
    #[inline(always)]
    unsafe fn pvalloc(size: usize) -> *mut c_void {
        // jemalloc has no pvalloc (bare Debian libjemalloc crashes on
        // free(pvalloc(n)) for that reason): build it from aligned_alloc.
        // SAFETY: forwards to `aligned`.
        unsafe { pvalloc_via_aligned::<Self>(size) }
    }
    #[inline(always)]
    unsafe fn usable(ptr: *mut c_void) -> usize {
        // SAFETY: the caller passes a live jemalloc block.
        unsafe { tikv_jemalloc_sys::malloc_usable_size(ptr) }
    }
}
