//! The exported C symbols: names only. Each picks the process's backend
//! (chosen once) and runs the function's body from `posix` under the
//! recorder.
//!
//! Under `cfg(test)` the symbols are not exported, so a unit-test binary
//! keeps glibc's malloc.

use core::ffi::{c_int, c_void};
use core::marker::PhantomData;

use allocmux::recorder::{Body, enter};

use crate::backend::{Jemalloc, Mimalloc, System};
use crate::posix::*;
use crate::runtime::{Choice, backend};
use crate::tls;

macro_rules! dispatch {
    ($body:ident ( $($arg:expr),* )) => {{
        let t = &tls::current().state;
        // SAFETY: the arguments are the program's, as for the C function;
        // `t` is this thread's own state.
        unsafe {
            match backend() {
                Choice::System => enter(t, $body::<System>($($arg,)* PhantomData)),
                Choice::Jemalloc => enter(t, $body::<Jemalloc>($($arg,)* PhantomData)),
                Choice::Mimalloc => enter(t, $body::<Mimalloc>($($arg,)* PhantomData)),
                Choice::Unrecorded => $body::<System>($($arg,)* PhantomData).run(&Unrecorded),
            }
        }
    }};
}

/// `malloc(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn malloc(size: usize) -> *mut c_void {
    dispatch!(Malloc(size))
}

/// `free(3)`.
///
/// # Safety
/// `ptr` is NULL or a live block from this allocator.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    dispatch!(Free(ptr))
}

/// `calloc(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
    dispatch!(Calloc(count, size))
}

/// `realloc(3)`.
///
/// # Safety
/// `ptr` is NULL or a live block from this allocator.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    dispatch!(Realloc(ptr, size))
}

/// `aligned_alloc(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn aligned_alloc(alignment: usize, size: usize) -> *mut c_void {
    dispatch!(AlignedAlloc(alignment, size))
}

/// `malloc_usable_size(3)`.
///
/// # Safety
/// `ptr` is NULL or a live block from this allocator.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> usize {
    dispatch!(UsableSize(ptr))
}

/// `memalign(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn memalign(alignment: usize, size: usize) -> *mut c_void {
    dispatch!(Memalign(alignment, size))
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
    dispatch!(PosixMemalign(out, alignment, size))
}

/// `pvalloc(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn pvalloc(size: usize) -> *mut c_void {
    dispatch!(Pvalloc(size))
}

/// `valloc(3)`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn valloc(size: usize) -> *mut c_void {
    dispatch!(Valloc(size))
}
