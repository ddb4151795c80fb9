//! The C semantics of each exported function, written once for every
//! backend and every recording scope: what glibc and POSIX promise about
//! `errno`, overflow, alignment, `free(NULL)` and `realloc(p, 0)`.
//!
//! Decisions where the backends differ (the shim makes them all act alike):
//! - a failed allocation sets `errno = ENOMEM` (mimalloc does not itself: an
//!   error handler registered with it does);
//! - `free` preserves `errno`: glibc guarantees it, and jemalloc and mimalloc
//!   change it only when one of their own `madvise`/`munmap` calls fails;
//! - `realloc(p, 0)` frees `p` and returns NULL, as glibc does (mimalloc
//!   would return a new block);
//! - `aligned_alloc` with an alignment that is zero or not a power of two
//!   fails with `EINVAL` (POSIX, C17 and glibc ≥ 2.38; glibc 2.36 treated it
//!   as `memalign`);
//! - `memalign` follows glibc: non-powers of two round up, at least 16;
//! - `malloc(1..8)` keeps each backend's own alignment (8 under jemalloc and
//!   mimalloc, 16 under glibc): valid for every object that fits, and
//!   forcing 16 would change the backend's size classes being measured.

use core::ffi::{c_int, c_void};
use core::marker::PhantomData;
use core::ptr;

use allocmux_format::Func;
use allocmux_recorder::stacks::StackBody;
use allocmux_recorder::{Body, Scope};

use allocmux_recorder::EXACT_TIMING_BYTES;

use crate::backend::Backend;
use crate::tls;

/// Sets the calling thread's `errno`.
#[inline]
pub fn set_errno(e: c_int) {
    // SAFETY: the cached address is this thread's errno.
    unsafe { *tls::current().errno() = e };
}

/// Records a fresh block, or the failure that produced none.
#[inline(always)]
unsafe fn handed_out<B: Backend, S: Scope>(
    s: &S,
    f: Func,
    p: *mut c_void,
    requested: usize,
    plain: bool,
) -> *mut c_void {
    if p.is_null() {
        s.fail(f);
    } else {
        // SAFETY: `p` is a live block of B.
        unsafe { record_block::<B, S>(s, f, p, requested, plain) };
    }
    p
}

/// Records a live block just handed out: its size where the backend has no
/// byte counters of its own, then the call (which may check the peak).
#[inline(always)]
unsafe fn record_block<B: Backend, S: Scope>(
    s: &S,
    f: Func,
    p: *mut c_void,
    requested: usize,
    plain: bool,
) {
    if sizes::<B, S>() {
        // SAFETY: `p` is a live block of B.
        s.allocated(unsafe { B::allocated_size(p, requested, plain) });
    }
    s.alloc(f, requested);
}

/// Whether a call must report block sizes: always for a backend without
/// byte counters of its own, and for one with them when the call is
/// recorded on the shared counters (a thread before its first allocation
/// or after its exit hook, whose allocator counters nobody reads). A
/// constant per hook: the per-thread fast path is unchanged.
#[inline(always)]
const fn sizes<B: Backend, S: Scope>() -> bool {
    S::RECORDS && (!B::OWN_COUNTERS || S::NEEDS_SIZES)
}

/// The usable size of a block about to be freed, when the shim must count
/// it (0 otherwise, which also makes the free timed as a small one).
#[inline(always)]
unsafe fn size_to_free<B: Backend, S: Scope>(p: *mut c_void) -> usize {
    if !sizes::<B, S>() {
        0
    } else {
        // SAFETY: `p` is a live block of B.
        unsafe { B::usable(p) }
    }
}

/// What every body tells the recorder the same way: the backend's own
/// byte counters, and whether the process records, which its first call
/// decides (`choice`).
macro_rules! shim_answers {
    () => {
        fn external_counters(&self) -> Option<[*mut u64; 2]> {
            B::own_byte_counters()
        }
        fn process_ready() -> bool {
            crate::choice::recorded()
        }
    };
}

/// Whether a plain allocation of `requested` bytes can be recorded before
/// the call (its size is known or irrelevant, and it is not a large block,
/// which is timed and peak-checked after the call): the hook then ends in a
/// tail jump to the allocator. Failures of such calls are not counted in
/// `failed_calls`: a small request fails only when memory is exhausted.
#[inline(always)]
fn recorded_first<B: Backend, S: Scope>(requested: usize) -> Option<usize> {
    if requested < EXACT_TIMING_BYTES && !(B::OWN_COUNTERS && S::NEEDS_SIZES) {
        B::size_before_malloc(requested)
    } else {
        None
    }
}

/// Makes a plain allocation (`malloc`, `calloc`) by `call`, once the scope
/// has recorded the request and needs nothing else of the call
/// ([`Scope::alloc_untimed`]: small, untimed, nothing due), recording the
/// block's size where the shim counts bytes. A backend that counts bytes
/// itself, or whose block size is known before the call, ends in a tail
/// jump to the allocator; where the size is read after the call, a cheap
/// read is inline and any other is `sized_after`, out of line (so the fast
/// path saves no registers for it).
#[inline(always)]
unsafe fn made_untimed<B: Backend, S: Scope>(
    s: &S,
    f: Func,
    requested: usize,
    call: impl FnOnce() -> *mut c_void,
    sized_after: impl FnOnce() -> *mut c_void,
) -> *mut c_void {
    if !sizes::<B, S>() {
        return call();
    }
    if let Some(usable) = B::size_before_small_malloc(requested) {
        s.allocated(usable);
        return call();
    }
    if !B::CHEAP_USABLE {
        return sized_after();
    }
    let p = call();
    if p.is_null() {
        s.fail_untimed(f);
    } else {
        // SAFETY: `p` is a live block of B, handed out for a plain request.
        s.allocated(unsafe { B::allocated_size(p, requested, true) });
    }
    p
}

/// `malloc(size)`.
#[derive(Clone, Copy)]
pub struct Malloc<B>(pub usize, pub PhantomData<B>);
impl<B: Backend> Body for Malloc<B> {
    type Out = *mut c_void;
    const FUNC: Func = Func::Malloc;
    #[inline(always)]
    unsafe fn run<S: Scope>(self, s: &S) -> *mut c_void {
        let n = self.0;
        s.alloc_untimed(
            Func::Malloc,
            n,
            // SAFETY: malloc has no preconditions.
            || unsafe {
                made_untimed::<B, S>(
                    s,
                    Func::Malloc,
                    n,
                    || B::malloc(n),
                    || untimed_sized_after::<B, S>(n, 1, Func::Malloc, *s),
                )
            },
            // SAFETY: as for malloc.
            || unsafe { malloc_usual::<B, S>(n, *s) },
        )
    }
    shim_answers!();
}

/// The rest of [`made_untimed`] where the block's size is read after the
/// call: `malloc(count)` for `Func::Malloc` (with `size` 1), else
/// `calloc(count, size)`. The request comes first, in the register the
/// hook received it in.
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only; extern "C" so it cannot unwind and the caller can tail-call it
unsafe extern "C" fn untimed_sized_after<B: Backend, S: Scope>(
    count: usize,
    size: usize,
    f: Func,
    s: S,
) -> *mut c_void {
    // SAFETY: the caller checked that the product does not overflow.
    let p = unsafe {
        // `f` is `Malloc` or `Calloc`, the two sized allocations.
        if f == Func::Malloc {
            B::malloc(count)
        } else {
            B::calloc(count, size)
        }
    };
    if p.is_null() {
        s.fail_untimed(f);
    } else {
        // SAFETY: `p` is a live block of B, handed out for a plain request.
        s.allocated(unsafe { B::allocated_size(p, count * size, true) });
    }
    p
}

/// `malloc` recorded the usual way (see [`Scope::alloc_untimed`]): timed,
/// large, or on a scope other than the thread's own fast one.
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only; extern "C" so it cannot unwind and the caller can tail-call it
unsafe extern "C" fn malloc_usual<B: Backend, S: Scope>(size: usize, s: S) -> *mut c_void {
    if let Some(usable) = recorded_first::<B, S>(size) {
        if sizes::<B, S>() {
            s.allocated(usable);
        }
        s.alloc(Func::Malloc, size);
        // SAFETY: malloc has no preconditions.
        return s.time(size, move || unsafe { B::malloc(size) });
    }
    if B::CHEAP_USABLE && size < EXACT_TIMING_BYTES {
        // The size is a header read after the call.
        s.alloc(Func::Malloc, size);
        // SAFETY: malloc has no preconditions.
        let p = s.time(size, move || unsafe { B::malloc(size) });
        if p.is_null() {
            s.fail(Func::Malloc);
        } else {
            // SAFETY: `p` is a live block of B.
            s.allocated(unsafe { B::usable(p) });
        }
        return p;
    }
    // SAFETY: as for malloc.
    unsafe { malloc_recorded_after::<B, S>(size, s) }
}

/// `malloc` whose block is recorded after the call (large, or a size only
/// known then); out of line so that the fast path keeps no registers.
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only; extern "C" so it cannot unwind and the caller can tail-call it
unsafe extern "C" fn malloc_recorded_after<B: Backend, S: Scope>(size: usize, s: S) -> *mut c_void {
    // SAFETY: malloc has no preconditions.
    let p = s.time(size, move || unsafe { B::malloc(size) });
    // SAFETY: `p` came from B.
    unsafe { handed_out::<B, S>(&s, Func::Malloc, p, size, true) }
}

/// `free(ptr)`.
#[derive(Clone, Copy)]
pub struct Free<B>(pub *mut c_void, pub PhantomData<B>);
impl<B: Backend> Body for Free<B> {
    type Out = ();
    const FUNC: Func = Func::Free;
    #[inline(always)]
    unsafe fn run<S: Scope>(self, s: &S) {
        s.call(Func::Free);
        let p = self.0;
        if S::RECORDS && p.is_null() {
            // free(NULL) does nothing (C17 7.22.3.3): counted apart from
            // the frees of blocks. A scope that records nothing (a timing
            // run) leaves it to the backend, as preloading the allocator
            // alone would.
            s.null_free();
            return;
        }
        if !sizes::<B, S>() {
            // Nothing to look up: the block goes straight to the backend
            // (NULL too, when nothing is recorded), as the hook's only act.
            // SAFETY: the program passes NULL or a live block of B.
            return s.time(0, move || unsafe { B::free(p) });
        }
        // SAFETY: the program passes a live block, which B made (not NULL:
        // a scope that needs sizes records, so NULL returned above).
        let usable = unsafe { size_to_free::<B, S>(p) };
        // Recorded before the call, so the free is the hook's last act.
        if sizes::<B, S>() {
            s.freed(usable);
        }
        // SAFETY: `p` is the program's live, non-NULL block of B.
        s.release(p as usize, usable, move || unsafe { B::free(p) });
    }
    shim_answers!();
}

/// `calloc(count, size)`.
#[derive(Clone, Copy)]
pub struct Calloc<B>(pub usize, pub usize, pub PhantomData<B>);
impl<B: Backend> Body for Calloc<B> {
    type Out = *mut c_void;
    const FUNC: Func = Func::Calloc;
    #[inline(always)]
    unsafe fn run<S: Scope>(self, s: &S) -> *mut c_void {
        let Some(total) = self.0.checked_mul(self.1) else {
            s.fail(Func::Calloc);
            set_errno(libc::ENOMEM);
            return ptr::null_mut();
        };
        let (count, size) = (self.0, self.1);
        s.alloc_untimed(
            Func::Calloc,
            total,
            // SAFETY: the product does not overflow.
            || unsafe {
                made_untimed::<B, S>(
                    s,
                    Func::Calloc,
                    total,
                    || B::calloc(count, size),
                    || untimed_sized_after::<B, S>(count, size, Func::Calloc, *s),
                )
            },
            // SAFETY: as above.
            || unsafe { calloc_usual::<B, S>(count, size, *s) },
        )
    }
    shim_answers!();
}

/// `calloc` recorded the usual way; see `malloc_usual`.
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only; extern "C" so it cannot unwind and the caller can tail-call it
unsafe extern "C" fn calloc_usual<B: Backend, S: Scope>(
    count: usize,
    size: usize,
    s: S,
) -> *mut c_void {
    let total = count * size;
    if let Some(usable) = recorded_first::<B, S>(total) {
        if sizes::<B, S>() {
            s.allocated(usable);
        }
        s.alloc(Func::Calloc, total);
        // SAFETY: the caller checked that the product does not overflow.
        return s.time(total, move || unsafe { B::calloc(count, size) });
    }
    // SAFETY: as above.
    unsafe { calloc_recorded_after::<B, S>(count, size, s) }
}

/// `calloc` recorded after the call; see `malloc_recorded_after`.
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only; extern "C" so it cannot unwind and the caller can tail-call it
unsafe extern "C" fn calloc_recorded_after<B: Backend, S: Scope>(
    count: usize,
    size: usize,
    s: S,
) -> *mut c_void {
    let total = count * size;
    // SAFETY: the caller checked that the product does not overflow.
    let p = s.time(total, move || unsafe { B::calloc(count, size) });
    // SAFETY: `p` came from B.
    unsafe { handed_out::<B, S>(&s, Func::Calloc, p, total, true) }
}

/// `realloc(ptr, size)`.
#[derive(Clone, Copy)]
pub struct Realloc<B>(pub *mut c_void, pub usize, pub PhantomData<B>);
impl<B: Backend> Body for Realloc<B> {
    type Out = *mut c_void;
    const FUNC: Func = Func::Realloc;
    #[inline(always)]
    unsafe fn run<S: Scope>(self, s: &S) -> *mut c_void {
        let (old, size) = (self.0, self.1);
        if old.is_null() {
            // SAFETY: realloc(NULL, n) is malloc(n).
            let p = s.time(size, move || unsafe { B::malloc(size) });
            // SAFETY: `p` came from B.
            return unsafe { handed_out::<B, S>(s, Func::Realloc, p, size, true) };
        }
        // SAFETY: the program passes a live block of B.
        let old_usable = unsafe { size_to_free::<B, S>(old) };
        if size == 0 {
            // glibc: realloc(p, 0) frees p and returns NULL.
            s.call(Func::Realloc);
            // SAFETY: `old` is the program's live, non-NULL block of B.
            s.time(old_usable, move || unsafe { B::free(old) });
            if sizes::<B, S>() {
                s.freed(old_usable);
            }
            return ptr::null_mut();
        }
        // SAFETY: `old` is the program's live, non-NULL block of B, and
        // size is non-zero, as `Backend::realloc` requires.
        let p = s.time(size.max(old_usable), move || unsafe {
            B::realloc(old, size)
        });
        if p.is_null() {
            // The old block is untouched and still the program's.
            s.fail(Func::Realloc);
        } else {
            if sizes::<B, S>() {
                s.freed(old_usable);
            }
            // SAFETY: `p` is a live block of B.
            unsafe { record_block::<B, S>(s, Func::Realloc, p, size, false) };
        }
        p
    }
    shim_answers!();
}

/// `aligned_alloc(alignment, size)`.
#[derive(Clone, Copy)]
pub struct AlignedAlloc<B>(pub usize, pub usize, pub PhantomData<B>);
impl<B: Backend> Body for AlignedAlloc<B> {
    type Out = *mut c_void;
    const FUNC: Func = Func::AlignedAlloc;
    #[inline(always)]
    unsafe fn run<S: Scope>(self, s: &S) -> *mut c_void {
        let (align, size) = (self.0, self.1);
        if !align.is_power_of_two() {
            s.fail(Func::AlignedAlloc);
            set_errno(libc::EINVAL);
            return ptr::null_mut();
        }
        // SAFETY: a power-of-two alignment.
        let p = s.time(size, move || unsafe { B::aligned(align, size) });
        // SAFETY: `p` came from B.
        unsafe { handed_out::<B, S>(s, Func::AlignedAlloc, p, size, false) }
    }
    shim_answers!();
}

/// `memalign(alignment, size)`.
#[derive(Clone, Copy)]
pub struct Memalign<B>(pub usize, pub usize, pub PhantomData<B>);
impl<B: Backend> Body for Memalign<B> {
    type Out = *mut c_void;
    const FUNC: Func = Func::Memalign;
    #[inline(always)]
    unsafe fn run<S: Scope>(self, s: &S) -> *mut c_void {
        // SAFETY: the backend applies glibc's memalign rules.
        let p = s.time(self.1, move || unsafe { B::memalign(self.0, self.1) });
        if p.is_null() {
            // The backend set errno: EINVAL for an impossible alignment,
            // ENOMEM otherwise.
            s.fail(Func::Memalign);
            return p;
        }
        // SAFETY: `p` came from B.
        unsafe { handed_out::<B, S>(s, Func::Memalign, p, self.1, false) }
    }
    shim_answers!();
}

/// `posix_memalign(&ptr, alignment, size)`.
#[derive(Clone, Copy)]
pub struct PosixMemalign<B>(
    pub *mut *mut c_void,
    pub usize,
    pub usize,
    pub PhantomData<B>,
);
impl<B: Backend> Body for PosixMemalign<B> {
    type Out = c_int;
    const FUNC: Func = Func::PosixMemalign;
    #[inline(always)]
    unsafe fn run<S: Scope>(self, s: &S) -> c_int {
        let (out, align, size) = (self.0, self.1, self.2);
        // A power of two and a multiple of sizeof(void *); `*out` untouched otherwise.
        if !align.is_power_of_two() || align % core::mem::size_of::<*mut c_void>() != 0 {
            s.fail(Func::PosixMemalign);
            return libc::EINVAL;
        }
        // SAFETY: a valid alignment.
        let p = s.time(size, move || unsafe { B::aligned(align, size) });
        if p.is_null() {
            s.fail(Func::PosixMemalign);
            return libc::ENOMEM;
        }
        // SAFETY: `p` is a live block of B; `out` is the program's out-pointer.
        unsafe {
            record_block::<B, S>(s, Func::PosixMemalign, p, size, false);
            *out = p;
        }
        0
    }
    shim_answers!();
}

/// `valloc(size)`.
#[derive(Clone, Copy)]
pub struct Valloc<B>(pub usize, pub PhantomData<B>);
impl<B: Backend> Body for Valloc<B> {
    type Out = *mut c_void;
    const FUNC: Func = Func::Valloc;
    #[inline(always)]
    unsafe fn run<S: Scope>(self, s: &S) -> *mut c_void {
        // SAFETY: no preconditions.
        let p = s.time(self.0, move || unsafe { B::valloc(self.0) });
        // SAFETY: `p` came from B.
        unsafe { handed_out::<B, S>(s, Func::Valloc, p, self.0, false) }
    }
    shim_answers!();
}

/// `pvalloc(size)`.
#[derive(Clone, Copy)]
pub struct Pvalloc<B>(pub usize, pub PhantomData<B>);
impl<B: Backend> Body for Pvalloc<B> {
    type Out = *mut c_void;
    const FUNC: Func = Func::Pvalloc;
    #[inline(always)]
    unsafe fn run<S: Scope>(self, s: &S) -> *mut c_void {
        // SAFETY: no preconditions.
        let p = s.time(self.0, move || unsafe { B::pvalloc(self.0) });
        // SAFETY: `p` came from B.
        unsafe { handed_out::<B, S>(s, Func::Pvalloc, p, self.0, false) }
    }
    shim_answers!();
}

/// `malloc_usable_size(ptr)`.
#[derive(Clone, Copy)]
pub struct MallocUsableSize<B>(pub *mut c_void, pub PhantomData<B>);
impl<B: Backend> Body for MallocUsableSize<B> {
    type Out = usize;
    const FUNC: Func = Func::MallocUsableSize;
    #[inline(always)]
    unsafe fn run<S: Scope>(self, s: &S) -> usize {
        s.call(Func::MallocUsableSize);
        if self.0.is_null() {
            return 0;
        }
        // SAFETY: the program passes a live block of B.
        s.time(0, move || unsafe { B::usable(self.0) })
    }
    shim_answers!();
}

/// A scope that records nothing: forwarding, secure execution, and the
/// sampled level's unsampled calls.
#[derive(Clone, Copy)]
pub struct Unrecorded;
impl Scope for Unrecorded {
    const RECORDS: bool = false;
    #[inline(always)]
    fn time<R>(&self, _size: usize, op: impl FnOnce() -> R) -> R {
        op()
    }
    #[inline(always)]
    fn alloc(&self, _: Func, _: usize) {}
    /// It needs nothing of any call, so every allocation takes the untimed
    /// path, a tail jump to the allocator (the default, `usual`, would
    /// cost a forwarded `malloc` two out-of-line calls: 10 instructions).
    #[inline(always)]
    fn alloc_untimed<R>(
        &self,
        _: Func,
        _: usize,
        untimed: impl FnOnce() -> R,
        _usual: impl FnOnce() -> R,
    ) -> R {
        untimed()
    }
    #[inline(always)]
    fn allocated(&self, _: usize) {}
    #[inline(always)]
    fn freed(&self, _: usize) {}
    #[inline(always)]
    fn call(&self, _: Func) {}
    #[inline(always)]
    fn null_free(&self) {}
    #[inline(always)]
    fn fail(&self, _: Func) {}
}

// What each call does to blocks, for stack recording (`recorder::stacks`).

/// A request of `size` bytes made `to(size)` (see `StackBody::promoted`);
/// a zero-byte one stays (`realloc(p, 0)` frees).
///
/// Every backend's sampled blocks are promoted: glibc's and mimalloc's
/// `free` tell them by their size, jemalloc's (whose hooks learn no sizes:
/// it counts bytes itself) by their alignment, which its promoted calls
/// get from `Backend::Sampled`.
fn promote(size: usize, to: impl Fn(usize) -> usize) -> usize {
    if size == 0 { 0 } else { to(size) }
}

/// `StackBody::run_promoted` and `run_aligned`: the same call on
/// `B::Sampled`, the backend whose blocks a `free` tells from unsampled
/// ones in sample mode (`B` itself but for jemalloc), and on `B::Aligned`,
/// whose blocks are page aligned (the sampled level).
macro_rules! run_on_sampled_backend {
    ($body:ident($($field:tt),*)) => {
        #[inline(always)]
        unsafe fn run_promoted<S: Scope>(self, s: &S) -> Self::Out {
            // SAFETY: the caller's contract; `B::Sampled` serves and frees
            // `B`'s blocks (`Backend::Sampled`).
            unsafe { $body::<B::Sampled>($(self.$field,)* PhantomData).run(s) }
        }
        #[inline(always)]
        unsafe fn run_aligned<S: Scope>(self, s: &S) -> Self::Out {
            // SAFETY: the caller's contract; `B::Aligned` serves and frees
            // `B`'s blocks (`Backend::Aligned`).
            unsafe { $body::<B::Aligned>($(self.$field,)* PhantomData).run(s) }
        }
    };
}

impl<B: Backend> StackBody for Malloc<B> {
    const PROMOTES: bool = true;
    const ALIGNS_SAMPLED: bool = B::OWN_COUNTERS;
    fn request(&self) -> Option<usize> {
        Some(self.0)
    }
    fn handed_out(&self, out: &*mut c_void) -> usize {
        *out as usize
    }
    fn promoted(self, to: impl Fn(usize) -> usize) -> Self {
        Malloc(promote(self.0, to), PhantomData)
    }
    run_on_sampled_backend!(Malloc(0));
}

impl<B: Backend> StackBody for Free<B> {
    const RELEASES: bool = true;
    // The body reads the block's size where the backend keeps no byte
    // counters of its own.
    const RELEASES_BY_SIZE: bool = !B::OWN_COUNTERS;
    // The blocks it releases were promoted when sampled.
    const PROMOTES: bool = true;
    const ALIGNS_SAMPLED: bool = B::OWN_COUNTERS;
    fn request(&self) -> Option<usize> {
        None
    }
    fn released(&self) -> usize {
        self.0 as usize
    }
    fn handed_out(&self, _: &()) -> usize {
        0
    }
}

impl<B: Backend> StackBody for Calloc<B> {
    const PROMOTES: bool = true;
    const ALIGNS_SAMPLED: bool = B::OWN_COUNTERS;
    fn request(&self) -> Option<usize> {
        self.0.checked_mul(self.1) // an overflow fails: nothing to sample
    }
    fn handed_out(&self, out: &*mut c_void) -> usize {
        *out as usize
    }
    fn promoted(self, to: impl Fn(usize) -> usize) -> Self {
        match self.0.checked_mul(self.1) {
            Some(total) => Calloc(1, promote(total, to), PhantomData),
            None => self,
        }
    }
    run_on_sampled_backend!(Calloc(0, 1));
}

impl<B: Backend> StackBody for Realloc<B> {
    const PROMOTES: bool = true;
    const ALIGNS_SAMPLED: bool = B::OWN_COUNTERS;
    const RELEASES: bool = true;
    fn request(&self) -> Option<usize> {
        // realloc(p, 0) frees p and hands out nothing.
        (self.1 != 0 || self.0.is_null()).then_some(self.1)
    }
    fn released(&self) -> usize {
        self.0 as usize
    }
    fn did_release(&self, out: &*mut c_void) -> bool {
        // A failed realloc leaves the old block with the program.
        !out.is_null() || self.1 == 0
    }
    fn handed_out(&self, out: &*mut c_void) -> usize {
        *out as usize
    }
    fn promoted(self, to: impl Fn(usize) -> usize) -> Self {
        Realloc(self.0, promote(self.1, to), PhantomData)
    }
    run_on_sampled_backend!(Realloc(0, 1));
}

macro_rules! hands_out_its_result {
    ($($body:ident($size:tt; $($field:tt),*)),*) => {$(
        impl<B: Backend> StackBody for $body<B> {
            const PROMOTES: bool = true;
            const ALIGNS_SAMPLED: bool = B::OWN_COUNTERS;
            fn request(&self) -> Option<usize> {
                Some(self.$size)
            }
            fn handed_out(&self, out: &*mut c_void) -> usize {
                *out as usize
            }
            fn promoted(mut self, to: impl Fn(usize) -> usize) -> Self {
                self.$size = promote(self.$size, to);
                self
            }
            run_on_sampled_backend!($body($($field),*));
        }
    )*};
}
hands_out_its_result!(
    AlignedAlloc(1; 0, 1),
    Memalign(1; 0, 1),
    Valloc(0; 0),
    Pvalloc(0; 0)
);

impl<B: Backend> StackBody for PosixMemalign<B> {
    const PROMOTES: bool = true;
    const ALIGNS_SAMPLED: bool = B::OWN_COUNTERS;
    fn request(&self) -> Option<usize> {
        Some(self.2)
    }
    fn promoted(self, to: impl Fn(usize) -> usize) -> Self {
        PosixMemalign(self.0, self.1, promote(self.2, to), PhantomData)
    }
    run_on_sampled_backend!(PosixMemalign(0, 1, 2));
    fn handed_out(&self, out: &c_int) -> usize {
        if *out == 0 {
            // SAFETY: on success the call stored the block in the
            // program's out-pointer.
            unsafe { *self.0 as usize }
        } else {
            0
        }
    }
}

impl<B: Backend> StackBody for MallocUsableSize<B> {
    fn request(&self) -> Option<usize> {
        None
    }
    fn handed_out(&self, _: &usize) -> usize {
        0
    }
}

/// glibc's `memalign` on top of an aligned allocation: alignments up to 16
/// still give 16 (as glibc's malloc always does), larger non-powers of two
/// are rounded up, and impossible ones fail with `EINVAL`.
///
/// # Safety
/// `B` must be a backend.
pub unsafe fn memalign_via_aligned<B: Backend>(align: usize, size: usize) -> *mut c_void {
    if align > usize::MAX / 2 + 1 {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    let align = align.max(16).next_power_of_two();
    // SAFETY: align is a power of two.
    unsafe { B::aligned(align, size) }
}

/// glibc's `pvalloc`: whole pages, at least one.
///
/// # Safety
/// `B` must be a backend.
pub unsafe fn pvalloc_via_aligned<B: Backend>(size: usize) -> *mut c_void {
    let page = allocmux_recorder::process::page_size();
    match size.checked_add(page - 1) {
        // SAFETY: the page size is a power of two.
        Some(s) => unsafe { B::aligned(page, (s & !(page - 1)).max(page)) },
        None => {
            set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}
