//! jemalloc (tikv-jemalloc-sys, linked statically with the `_rjem_` prefix,
//! so it never clashes with the program's own symbols).

use core::ffi::c_void;

use super::Backend;
use crate::posix::{memalign_via_aligned, pvalloc_via_aligned};

unsafe extern "C" {
    #[link_name = "_rjem_memalign"]
    fn je_memalign(align: usize, size: usize) -> *mut c_void;
    #[link_name = "_rjem_valloc"]
    fn je_valloc(size: usize) -> *mut c_void;
}

/// jemalloc.
#[derive(Debug, Clone, Copy)]
pub struct Jemalloc;

/// A pointer to one of jemalloc's counters for the calling thread
/// (`thread.allocatedp`, `thread.deallocatedp`): jemalloc adds the usable
/// size of every block it hands out or takes back to them on its fast path.
fn counter(name: &core::ffi::CStr) -> Option<*mut u64> {
    let mut p: *mut u64 = core::ptr::null_mut();
    let mut len = core::mem::size_of::<*mut u64>();
    // SAFETY: a read-only, lock-free jemalloc control that returns a pointer
    // into the calling thread's jemalloc state; it does not allocate.
    let ok = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr(),
            (&mut p as *mut *mut u64).cast(),
            &mut len,
            core::ptr::null_mut(),
            0,
        )
    } == 0;
    (ok && !p.is_null()).then_some(p)
}

/// jemalloc's `memalign` and `valloc` fail without setting `errno` when the
/// size plus the alignment's padding overflows (`memalign(4096, -4096)`,
/// `valloc(-1)`), where glibc (and the backend contract) set `ENOMEM`. Only
/// the failure path pays for it.
#[inline(always)]
fn enomem_if_null(p: *mut c_void) -> *mut c_void {
    if p.is_null() {
        crate::posix::set_errno(libc::ENOMEM);
    }
    p
}

// SAFETY: forwards to jemalloc.
unsafe impl Backend for Jemalloc {
    const OWN_COUNTERS: bool = true;

    fn own_byte_counters() -> Option<[*mut u64; 2]> {
        Some([
            counter(c"thread.allocatedp")?,
            counter(c"thread.deallocatedp")?,
        ])
    }

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
    unsafe fn free(ptr: *mut c_void) {
        // SAFETY: the caller passes a jemalloc block.
        unsafe { tikv_jemalloc_sys::free(ptr) }
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
            enomem_if_null(unsafe { je_memalign(align, size) })
        } else {
            // SAFETY: the helper normalises the alignment first.
            unsafe { memalign_via_aligned::<Self>(align, size) }
        }
    }
    #[inline(always)]
    unsafe fn valloc(size: usize) -> *mut c_void {
        // SAFETY: plain forward.
        enomem_if_null(unsafe { je_valloc(size) })
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
