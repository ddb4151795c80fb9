//! A backend's blocks aligned to `SAMPLED_BLOCK_BYTES` (a page), for the
//! sampled allocations of the sampled level (see
//! `allocmux_recorder::stacks::enter_sampled_level`), whose `free` tells a sampled
//! block by its address. Built on the backend's own aligned allocation;
//! jemalloc has a better one of its own (`JemallocAligned`, with
//! `rallocx`).

use core::ffi::c_void;
use core::marker::PhantomData;

use allocmux_recorder::stacks::SAMPLED_BLOCK_BYTES;

use super::Backend;
use crate::posix::{memalign_via_aligned, set_errno};

/// `B`'s blocks, each aligned to [`SAMPLED_BLOCK_BYTES`].
#[derive(Debug, Clone, Copy)]
pub struct PageAligned<B>(PhantomData<B>);

// SAFETY: every block comes from `B::aligned` and is freed by `B::free`,
// as `B`'s own are; failures set `errno` as `B::aligned`'s do.
unsafe impl<B: Backend> Backend for PageAligned<B> {
    const CHEAP_USABLE: bool = B::CHEAP_USABLE;
    const OWN_COUNTERS: bool = B::OWN_COUNTERS;
    type Sampled = Self;
    type Aligned = Self;

    fn own_byte_counters() -> Option<[*mut u64; 2]> {
        B::own_byte_counters()
    }
    #[inline(always)]
    unsafe fn malloc(size: usize) -> *mut c_void {
        // SAFETY: a power-of-two alignment.
        unsafe { B::aligned(SAMPLED_BLOCK_BYTES, size.max(1)) }
    }
    #[inline(always)]
    unsafe fn calloc(count: usize, size: usize) -> *mut c_void {
        // The product does not overflow (the trait's contract).
        let n = count * size;
        // SAFETY: a power-of-two alignment.
        let p = unsafe { B::aligned(SAMPLED_BLOCK_BYTES, n.max(1)) };
        if !p.is_null() {
            // SAFETY: a fresh block of at least `n` bytes.
            unsafe { core::ptr::write_bytes(p as *mut u8, 0, n) };
        }
        p
    }
    #[inline(always)]
    unsafe fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
        // No allocator resizes keeping an alignment but jemalloc (which
        // has its own): a new block, the contents copied, the old freed.
        // SAFETY: a power-of-two alignment.
        let p = unsafe { B::aligned(SAMPLED_BLOCK_BYTES, size) };
        if p.is_null() {
            // `realloc` leaves the old block to the program.
            set_errno(libc::ENOMEM);
            return p;
        }
        // SAFETY: `ptr` is a live block of `B` (the trait's contract), of
        // `usable` bytes; `p` has room for `size`.
        unsafe {
            let n = B::usable(ptr).min(size);
            core::ptr::copy_nonoverlapping(ptr as *const u8, p as *mut u8, n);
            B::free(ptr);
        }
        p
    }
    #[inline(always)]
    unsafe fn free(ptr: *mut c_void) {
        // SAFETY: forwarded.
        unsafe { B::free(ptr) }
    }
    #[inline(always)]
    unsafe fn aligned(align: usize, size: usize) -> *mut c_void {
        // SAFETY: the larger of two powers of two.
        unsafe { B::aligned(align.max(SAMPLED_BLOCK_BYTES), size) }
    }
    #[inline(always)]
    unsafe fn memalign(align: usize, size: usize) -> *mut c_void {
        // SAFETY: the helper normalises the alignment first.
        unsafe { memalign_via_aligned::<Self>(align, size) }
    }
    #[inline(always)]
    unsafe fn valloc(size: usize) -> *mut c_void {
        // SAFETY: forwarded: whole pages, page aligned.
        unsafe { B::valloc(size) }
    }
    #[inline(always)]
    unsafe fn pvalloc(size: usize) -> *mut c_void {
        // SAFETY: forwarded: whole pages, page aligned.
        unsafe { B::pvalloc(size) }
    }
    #[inline(always)]
    unsafe fn usable(ptr: *mut c_void) -> usize {
        // SAFETY: forwarded.
        unsafe { B::usable(ptr) }
    }
}
