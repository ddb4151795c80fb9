//! glibc's allocator, through its `__libc_*` entry points (no `dlsym`, which
//! can allocate, and no lookup of `malloc`, which would find the shim).

use core::ffi::c_void;

use super::Backend;

// The `next` backend falls back on the same entry points.
unsafe extern "C" {
    pub(super) fn __libc_malloc(size: usize) -> *mut c_void;
    pub(super) fn __libc_calloc(count: usize, size: usize) -> *mut c_void;
    pub(super) fn __libc_realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
    pub(super) fn __libc_free(ptr: *mut c_void);
    pub(super) fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
    fn __libc_valloc(size: usize) -> *mut c_void;
    fn __libc_pvalloc(size: usize) -> *mut c_void;
}

/// glibc malloc.
#[derive(Debug, Clone, Copy)]
pub struct System;

// SAFETY: forwards to glibc's own allocator.
unsafe impl Backend for System {
    type Sampled = Self;
    type Aligned = super::PageAligned<Self>;
    const CHEAP_USABLE: bool = true;

    #[inline(always)]
    unsafe fn malloc(size: usize) -> *mut c_void {
        // SAFETY: plain forward.
        unsafe { __libc_malloc(size) }
    }
    #[inline(always)]
    unsafe fn calloc(count: usize, size: usize) -> *mut c_void {
        // SAFETY: plain forward.
        unsafe { __libc_calloc(count, size) }
    }
    #[inline(always)]
    unsafe fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
        // SAFETY: the caller passes a glibc block.
        unsafe { __libc_realloc(ptr, size) }
    }
    #[inline(always)]
    unsafe fn free(ptr: *mut c_void) {
        // SAFETY: the caller passes a glibc block.
        unsafe { __libc_free(ptr) }
    }
    #[inline(always)]
    unsafe fn aligned(align: usize, size: usize) -> *mut c_void {
        // SAFETY: plain forward.
        unsafe { __libc_memalign(align, size) }
    }
    #[inline(always)]
    unsafe fn memalign(align: usize, size: usize) -> *mut c_void {
        // SAFETY: glibc applies its own memalign rules.
        unsafe { __libc_memalign(align, size) }
    }
    #[inline(always)]
    unsafe fn valloc(size: usize) -> *mut c_void {
        // SAFETY: plain forward.
        unsafe { __libc_valloc(size) }
    }
    #[inline(always)]
    unsafe fn pvalloc(size: usize) -> *mut c_void {
        // SAFETY: plain forward.
        unsafe { __libc_pvalloc(size) }
    }
    #[inline(always)]
    unsafe fn usable(ptr: *mut c_void) -> usize {
        // glibc exports no `__libc_malloc_usable_size`, and `malloc_usable_size`
        // resolves to the shim, so read the chunk header as glibc's `musable`
        // does: the size word before the block, low three bits flags, the
        // IS_MMAPPED bit (2) telling whether the next chunk's header is
        // usable space too. This layout has been stable since glibc 2.0.
        // SAFETY: `ptr` is a live glibc block, so its header word precedes it.
        let word = unsafe { *(ptr as *const usize).sub(1) };
        // The chunk size less 8, or less 16 if mmapped, computed without a
        // branch or a `setcc`.
        (word & !7) - 8 - ((word & 2) << 2)
    }
}

/// A glibc block's chunk: its size as `mallinfo2` counts it (header
/// included), and whether glibc mapped it on its own (counted in
/// `hblkhd`, not the arenas). Read from the chunk header, as
/// [`System`]'s `usable` does.
///
/// # Safety
/// `ptr` is a live glibc block.
pub unsafe fn chunk(ptr: *mut c_void) -> (usize, bool) {
    // SAFETY: the caller's live glibc block, whose header word precedes it.
    let word = unsafe { *(ptr as *const usize).sub(1) };
    (word & !7, word & 2 != 0)
}
