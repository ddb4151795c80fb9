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
    type Sampled = JemallocAligned;
    type Aligned = JemallocAligned;

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

/// jemalloc for sampled allocations in sample mode: every block aligned to
/// `SAMPLED_BLOCK_BYTES` (a page), which the `free` hook, learning no
/// block sizes under jemalloc, tells by its address (see
/// `allocmux_recorder::stacks::enter_sampled`). jemalloc's extended calls
/// give every form its aligned equivalent (`calloc` with `MALLOCX_ZERO`,
/// `realloc` with `rallocx`). A small sampled block takes a page-sized
/// slab region, as jemalloc's own sampler serves one; a large one loses
/// jemalloc's random offset within its first page (its cache-oblivious
/// placement). The blocks are jemalloc's, freed by its `free`.
#[derive(Debug, Clone, Copy)]
pub struct JemallocAligned;

/// The alignment of [`JemallocAligned`]'s blocks.
const SAMPLED_ALIGN: usize = allocmux_recorder::stacks::SAMPLED_BLOCK_BYTES;

impl JemallocAligned {
    /// `mallocx` of at least one byte aligned to `align` (at least
    /// [`SAMPLED_ALIGN`]), with `errno` set as `malloc` sets it: `mallocx`
    /// leaves it alone.
    #[inline(always)]
    fn allocx(size: usize, align: usize, zero: bool) -> *mut c_void {
        let flags = tikv_jemalloc_sys::MALLOCX_ALIGN(align.max(SAMPLED_ALIGN))
            | if zero {
                tikv_jemalloc_sys::MALLOCX_ZERO
            } else {
                0
            };
        // SAFETY: a non-zero size, a power-of-two alignment.
        enomem_if_null(unsafe { tikv_jemalloc_sys::mallocx(size.max(1), flags) })
    }
}

// SAFETY: forwards to jemalloc, as `Jemalloc` does; only the alignment of
// the blocks differs.
unsafe impl Backend for JemallocAligned {
    const OWN_COUNTERS: bool = true;
    type Sampled = Self;
    type Aligned = Self;

    fn own_byte_counters() -> Option<[*mut u64; 2]> {
        Jemalloc::own_byte_counters()
    }
    #[inline(always)]
    unsafe fn malloc(size: usize) -> *mut c_void {
        Self::allocx(size, SAMPLED_ALIGN, false)
    }
    #[inline(always)]
    unsafe fn calloc(count: usize, size: usize) -> *mut c_void {
        // The product does not overflow (the trait's contract).
        Self::allocx(count * size, SAMPLED_ALIGN, true)
    }
    #[inline(always)]
    unsafe fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
        let flags = tikv_jemalloc_sys::MALLOCX_ALIGN(SAMPLED_ALIGN);
        // SAFETY: a live jemalloc block and a non-zero size (the trait's
        // contract); a failure leaves the block in place, as `realloc`.
        enomem_if_null(unsafe { tikv_jemalloc_sys::rallocx(ptr, size, flags) })
    }
    #[inline(always)]
    unsafe fn free(ptr: *mut c_void) {
        // SAFETY: forwarded.
        unsafe { Jemalloc::free(ptr) }
    }
    #[inline(always)]
    unsafe fn aligned(align: usize, size: usize) -> *mut c_void {
        Self::allocx(size, align, false)
    }
    #[inline(always)]
    unsafe fn memalign(align: usize, size: usize) -> *mut c_void {
        // SAFETY: the helper normalises the alignment first.
        unsafe { memalign_via_aligned::<Self>(align, size) }
    }
    #[inline(always)]
    unsafe fn valloc(size: usize) -> *mut c_void {
        // SAFETY: forwarded: whole pages.
        unsafe { Jemalloc::valloc(size) }
    }
    #[inline(always)]
    unsafe fn pvalloc(size: usize) -> *mut c_void {
        // SAFETY: the helper rounds to pages.
        unsafe { pvalloc_via_aligned::<Self>(size) }
    }
    #[inline(always)]
    unsafe fn usable(ptr: *mut c_void) -> usize {
        // SAFETY: forwarded.
        unsafe { Jemalloc::usable(ptr) }
    }
}

/// jemalloc's `fork` handlers, kept by the shim instead of glibc.
///
/// The embedded jemalloc initialises from its own constructor in every
/// process, whichever backend is chosen, and registers `pthread_atfork`
/// handlers that take all of its locks around every `fork`: a program on
/// the system or mimalloc backend would pay for them, and hang in them when
/// a signal handler forks. The shim is linked with
/// `--wrap=pthread_atfork`, so jemalloc's registration comes here and is
/// kept; the shim's own `fork` handlers run jemalloc's only when jemalloc
/// is the backend and another thread may hold one of its locks (see
/// `lifecycle::backend_locks`).
pub mod fork {
    use core::ffi::{c_int, c_void};
    use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    type Handler = Option<unsafe extern "C" fn()>;

    unsafe extern "C" {
        fn _rjem_je_jemalloc_prefork();
        fn __register_atfork(
            prepare: Handler,
            parent: Handler,
            child: Handler,
            dso_handle: *mut c_void,
        ) -> c_int;
        static __dso_handle: u8;
    }

    /// jemalloc's prepare, parent and child handlers (0: none registered).
    static HANDLERS: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];

    // `__wrap_pthread_atfork`, what every `pthread_atfork` call in the
    // shim library resolves to (`--wrap`, see build.rs), as a hidden
    // symbol: a `#[no_mangle]` function would be exported next to the
    // malloc family.
    #[cfg(target_arch = "x86_64")]
    core::arch::global_asm!(
        ".globl __wrap_pthread_atfork",
        ".hidden __wrap_pthread_atfork",
        ".type __wrap_pthread_atfork, @function",
        "__wrap_pthread_atfork:",
        "jmp {f}",
        f = sym wrap_pthread_atfork,
    );
    #[cfg(target_arch = "aarch64")]
    core::arch::global_asm!(
        ".globl __wrap_pthread_atfork",
        ".hidden __wrap_pthread_atfork",
        ".type __wrap_pthread_atfork, %function",
        "__wrap_pthread_atfork:",
        "b {f}",
        f = sym wrap_pthread_atfork,
    );

    /// jemalloc's handlers are kept; any other registration is made as
    /// `pthread_atfork` would make it, for this library.
    ///
    /// # Safety
    /// As `pthread_atfork`.
    unsafe extern "C" fn wrap_pthread_atfork(
        prepare: Handler,
        parent: Handler,
        child: Handler,
    ) -> c_int {
        let jemalloc = _rjem_je_jemalloc_prefork as unsafe extern "C" fn();
        if prepare.map(|f| f as usize) == Some(jemalloc as usize) {
            for (slot, f) in HANDLERS.iter().zip([prepare, parent, child]) {
                slot.store(f.map_or(0, |f| f as usize), Relaxed);
            }
            return 0;
        }
        // SAFETY: what glibc's `pthread_atfork` does (libc_nonshared.a),
        // with this library's DSO handle so that unloading it unregisters.
        unsafe {
            __register_atfork(
                prepare,
                parent,
                child,
                &raw const __dso_handle as *mut c_void,
            )
        }
    }

    fn run(which: usize) {
        let f = HANDLERS[which].load(Relaxed);
        if f != 0 {
            // SAFETY: stored from a handler jemalloc registered.
            let f: unsafe extern "C" fn() = unsafe { core::mem::transmute(f) };
            // SAFETY: jemalloc's own handler, at its place in `fork`.
            unsafe { f() };
        }
    }

    /// From the shim's prepare handler: jemalloc's prepare handler.
    pub fn prepare() {
        run(0);
    }

    /// From the shim's parent handler.
    pub fn parent() {
        run(1);
    }

    /// From the shim's child handler.
    pub fn child() {
        run(2);
    }
}
