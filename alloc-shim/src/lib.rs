//! The allocmux preload shim: a complete malloc replacement for any
//! dynamically linked Linux program, which records every call and forwards
//! it to glibc, jemalloc or mimalloc (`ALLOCMUX_ALLOCATOR`).
//!
//! Layers, as in mimalloc: `exports` (the C names only, jumping through the
//! `hooks` table of the chosen backend), `posix` (the C semantics, once for
//! all backends), `backend` (forwarding), with the recording core from the
//! `allocmux` crate. Around them: `choice` (which backend, at the first
//! call), `config` (the environment), `lifecycle` and `exec` (start-up,
//! `fork`, `exec`, exit), `writer` (the process's record and the profile
//! written from it), `output` (the profile file), `flusher` (the periodic
//! timeline samples and profile rewrites), `threading` (whether the
//! program is single-threaded), `procfs`, `fd` and `fmt` (allocation-free
//! helpers), `tls` (the per-thread state).
//!
//! The README lists the environment variables; `docs/guarantees.md` says
//! what the shim promises inside other people's programs,
//! `docs/c-semantics.md` how each function behaves under every backend, and
//! `docs/architecture.md` how the modules fit together.

// The unit-test binary does not export the C symbols, so they look unused.
#![cfg_attr(test, allow(dead_code))]

mod backend;
mod choice;
mod config;
mod exec;
mod exports;
mod fd;
mod flusher;
mod fmt;
mod hooks;
mod lifecycle;
mod output;
mod posix;
mod procfs;
mod threading;
mod tls;
mod writer;

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
