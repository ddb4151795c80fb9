//! The allocators the shim forwards to, behind one small interface.
//!
//! Each backend forwards, and tells block sizes as cheaply as its allocator
//! can (see [`Backend`]); the C semantics (errno, overflow, alignment
//! rules, `realloc(p, 0)`) are applied once, above, in `posix`.

mod jemalloc;
mod mimalloc;
mod next;
mod system;

pub use jemalloc::Jemalloc;
pub use jemalloc::fork as jemalloc_fork;
pub use mimalloc::fork as mimalloc_fork;
pub use mimalloc::init as init_mimalloc;
pub use mimalloc::set_errno_on_failure as mimalloc_sets_errno;
pub use mimalloc::{Mimalloc, MimallocLookup};
pub use next::{Next, resolve as resolve_next};
pub use system::{System, chunk as glibc_chunk};

mod page_aligned;
pub use page_aligned::PageAligned;

use core::ffi::c_void;

/// The operations the POSIX layer needs from an allocator. (Which
/// allocator is named by [`allocmux_format::Backend`]; `hooks::install` maps it
/// to the type.)
///
/// Besides forwarding, a backend tells the bytes of the blocks it hands out
/// and takes back, as cheaply as it can: glibc by reading the chunk header,
/// mimalloc by a lookup (or, for fresh small blocks, a table), and jemalloc
/// through the per-thread byte counters it maintains anyway, read when a
/// snapshot is taken, so its calls pay for no size at all.
///
/// # Safety
/// Implementations must behave as the malloc family does: every pointer they
/// return is owned by them and accepted by their `free`. A failed allocation
/// sets `errno` to `ENOMEM` (mimalloc's does through the error handler the
/// shim registers), and `free` leaves `errno` alone (glibc guarantees it;
/// jemalloc and mimalloc change it only when one of their own `madvise` or
/// `munmap` calls fails, which on their own mappings happens only at the
/// kernel's map-count limit), so a hook can end in a tail jump to them.
pub unsafe trait Backend: Copy {
    /// Whether `usable` is cheap enough (a header read) to call inline
    /// after every small allocation, rather than out of line.
    const CHEAP_USABLE: bool = false;
    /// Whether the allocator counts bytes per thread itself
    /// ([`Backend::own_byte_counters`]), so the shim needs no sizes per call.
    const OWN_COUNTERS: bool = false;

    /// The backend that serves sampled allocations in sample mode (see
    /// `allocmux_recorder::stacks::enter_sampled`): itself, where the
    /// `free` hook learns each block's size; where it does not (with
    /// [`OWN_COUNTERS`](Backend::OWN_COUNTERS)), one whose blocks are
    /// aligned to `SAMPLED_BLOCK_BYTES`, for the `free` hook to tell by
    /// their address. Its blocks are this backend's, freed by its `free`.
    type Sampled: Backend;

    /// The backend that serves sampled allocations at the sampled level
    /// (see `allocmux_recorder::stacks::enter_sampled_level`), where every `free`
    /// tells them by their address: one whose blocks are aligned to
    /// `SAMPLED_BLOCK_BYTES` ([`PageAligned`], or jemalloc's own aligned
    /// calls). Its blocks are this backend's, freed by its `free`.
    type Aligned: Backend;

    /// `malloc(size)`.
    unsafe fn malloc(size: usize) -> *mut c_void;
    /// `calloc(count, size)`; the product is known not to overflow.
    unsafe fn calloc(count: usize, size: usize) -> *mut c_void;
    /// `realloc(ptr, size)` with `ptr` non-NULL and `size` non-zero.
    unsafe fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
    /// Frees a non-NULL block.
    unsafe fn free(ptr: *mut c_void);
    /// A block of `size` bytes aligned to `align`, a power of two.
    unsafe fn aligned(align: usize, size: usize) -> *mut c_void;
    /// `memalign` with glibc's rules (non-power-of-two alignments rounded up).
    unsafe fn memalign(align: usize, size: usize) -> *mut c_void;
    /// `valloc(size)`.
    unsafe fn valloc(size: usize) -> *mut c_void;
    /// `pvalloc(size)`.
    unsafe fn pvalloc(size: usize) -> *mut c_void;
    /// Usable size of a non-NULL live block (`malloc_usable_size`).
    unsafe fn usable(ptr: *mut c_void) -> usize;

    /// The allocator's own per-thread byte counters (allocated, freed) for
    /// the calling thread, if it keeps them. Then the shim reads those
    /// instead of looking up block sizes on every call.
    fn own_byte_counters() -> Option<[*mut u64; 2]> {
        None
    }

    /// The usable size a plain `malloc(requested)` will hand out, when it
    /// is known before the call (or irrelevant, with own byte counters):
    /// then the hook records first and jumps to the allocator as its last
    /// act, with no work after the call.
    #[inline(always)]
    fn size_before_malloc(_requested: usize) -> Option<usize> {
        if Self::OWN_COUNTERS { Some(0) } else { None }
    }

    /// [`size_before_malloc`](Backend::size_before_malloc) for a request
    /// known to be below `EXACT_TIMING_BYTES`, which may skip a test of the
    /// size.
    #[inline(always)]
    fn size_before_small_malloc(requested: usize) -> Option<usize> {
        Self::size_before_malloc(requested)
    }

    /// Usable size of the block `ptr` just handed out for `requested` bytes;
    /// `plain` is true for `malloc` and `calloc` (no alignment, no realloc).
    /// Only called for backends without byte counters of their own.
    ///
    /// # Safety
    /// `ptr` is a live block of this backend.
    #[inline(always)]
    unsafe fn allocated_size(ptr: *mut c_void, _requested: usize, _plain: bool) -> usize {
        // SAFETY: forwarded.
        unsafe { Self::usable(ptr) }
    }
}
