//! The exported C symbols: names only. Each jumps through the hook table
//! (`hooks`), which holds the chosen backend's functions; `_exit` writes the
//! exit profile first, since it skips the exit handlers.
//!
//! Under `cfg(test)` the symbols are not exported, so a unit-test binary
//! keeps glibc's malloc.

use core::ffi::{c_int, c_void};

use crate::hooks::table;

/// `malloc(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn malloc(size: usize) -> *mut c_void {
    // SAFETY: the hook has malloc's contract.
    unsafe { (table().malloc)(size) }
}

/// `free(3)`.
///
/// # Safety
/// `ptr` is NULL or a live block from this allocator.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    // SAFETY: forwarded contract.
    unsafe { (table().free)(ptr) }
}

/// `calloc(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
    // SAFETY: the hook has calloc's contract.
    unsafe { (table().calloc)(count, size) }
}

/// `realloc(3)`.
///
/// # Safety
/// `ptr` is NULL or a live block from this allocator.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { (table().realloc)(ptr, size) }
}

/// `aligned_alloc(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn aligned_alloc(alignment: usize, size: usize) -> *mut c_void {
    // SAFETY: the hook has aligned_alloc's contract.
    unsafe { (table().aligned_alloc)(alignment, size) }
}

/// `malloc_usable_size(3)`.
///
/// # Safety
/// `ptr` is NULL or a live block from this allocator.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> usize {
    // SAFETY: forwarded contract.
    unsafe { (table().malloc_usable_size)(ptr) }
}

/// `memalign(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn memalign(alignment: usize, size: usize) -> *mut c_void {
    // SAFETY: the hook has memalign's contract.
    unsafe { (table().memalign)(alignment, size) }
}

/// `posix_memalign(3)`.
///
/// # Safety
/// `out` is valid for a pointer write.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn posix_memalign(
    out: *mut *mut c_void,
    alignment: usize,
    size: usize,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { (table().posix_memalign)(out, alignment, size) }
}

/// `pvalloc(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn pvalloc(size: usize) -> *mut c_void {
    // SAFETY: the hook has pvalloc's contract.
    unsafe { (table().pvalloc)(size) }
}

/// `valloc(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn valloc(size: usize) -> *mut c_void {
    // SAFETY: the hook has valloc's contract.
    unsafe { (table().valloc)(size) }
}

/// `_exit(2)`: writes the exit profile (processes that leave this way, like
/// dash and forked children, run no exit handlers), then ends the process
/// as glibc's `_exit` does.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn _exit(status: c_int) -> ! {
    crate::runtime::before_exit();
    loop {
        // SAFETY: exit_group ends the process; it does not return.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}

/// `_Exit(3)`, the C name of `_exit`.
#[allow(non_snake_case)] // the C name
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn _Exit(status: c_int) -> ! {
    _exit(status)
}
