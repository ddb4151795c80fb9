//! The allocmux preload shim: a complete malloc replacement for any
//! dynamically linked Linux program, which records every call and forwards
//! it to glibc, jemalloc or mimalloc (`ALLOCMUX_ALLOCATOR`).
//!
//! Layers, as in mimalloc: `exports` (the C names only, jumping through the
//! `hooks` table of the chosen backend), `posix` (the C semantics, once for
//! all backends), `backend` (forwarding), with the recording core from the
//! `allocmux` crate and the process life cycle in `runtime`.
//!
//! The README lists the environment variables; `docs/guarantees.md` says
//! what the shim promises inside other people's programs, and
//! `docs/c-semantics.md` how each function behaves under every backend.

// The unit-test binary does not export the C symbols, so they look unused.
#![cfg_attr(test, allow(dead_code))]

mod backend;
mod config;
mod exports;
mod hooks;
mod posix;
mod runtime;
mod tls;

/// The shim's own Rust heap (std's internals, should any allocate) goes
/// straight to glibc, bypassing the hooks, so it can never recurse into
/// them or show up in the program's figures.
struct OwnHeap;

unsafe extern "C" {
    fn __libc_malloc(size: usize) -> *mut core::ffi::c_void;
    fn __libc_memalign(align: usize, size: usize) -> *mut core::ffi::c_void;
    fn __libc_free(ptr: *mut core::ffi::c_void);
}

// SAFETY: glibc's allocator honours size and (via memalign) alignment.
unsafe impl core::alloc::GlobalAlloc for OwnHeap {
    unsafe fn alloc(&self, layout: core::alloc::Layout) -> *mut u8 {
        // SAFETY: plain forwards.
        unsafe {
            if layout.align() <= 16 {
                __libc_malloc(layout.size()).cast()
            } else {
                __libc_memalign(layout.align(), layout.size()).cast()
            }
        }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, _: core::alloc::Layout) {
        // SAFETY: `ptr` came from `alloc`.
        unsafe { __libc_free(ptr.cast()) }
    }
}

#[cfg(not(test))]
#[global_allocator]
static OWN_HEAP: OwnHeap = OwnHeap;

#[cfg(not(test))]
mod lifecycle {
    use core::ffi::{c_char, c_int};

    /// glibc calls `.init_array` functions with argc, argv and envp.
    extern "C" fn init(_argc: c_int, _argv: *const *const c_char, envp: *const *const c_char) {
        crate::runtime::init(envp);
    }

    extern "C" fn fini() {
        crate::runtime::finish();
    }

    #[used]
    #[unsafe(link_section = ".init_array")]
    static INIT: extern "C" fn(c_int, *const *const c_char, *const *const c_char) = init;

    #[used]
    #[unsafe(link_section = ".fini_array")]
    static FINI: extern "C" fn() = fini;
}
