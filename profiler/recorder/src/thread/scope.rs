//! How a hooked call records: the [`Scope`] a [`Body`] runs under, chosen
//! per call by [`enter`] (the thread's own counters, a timed sample, a
//! thread's first calls, or the shared counters), and the out-of-line
//! `slow` path behind the countdown.

use super::*;

/// Where a call records what it did, and how its backend call is timed.
///
/// A hook is written once against this trait (see [`Body`]) and runs with
/// whichever scope [`enter`] picks; with the fast scope every method inlines
/// to a few loads and stores on the thread's own state.
pub trait Scope: Copy {
    /// Whether block sizes must be reported even by bodies of an allocator
    /// that counts bytes per thread itself (see [`Body::external_counters`]):
    /// true for the shared counters, which take the calls of threads whose
    /// allocator counters are not read (before registering, after the exit
    /// hook), so without sizes those calls' bytes would be lost.
    const NEEDS_SIZES: bool = false;
    /// Whether the scope records anything at all: a body under one that
    /// does not (forwarding, the sampled level's unsampled calls) looks no
    /// block size up.
    const RECORDS: bool = true;
    /// Runs the allocator's own work on a block of `size` bytes, timing it
    /// if this call was sampled or its size is always timed.
    fn time<R>(&self, size: usize, op: impl FnOnce() -> R) -> R;
    /// A call of `f` handed out a block for a `requested`-byte request.
    fn alloc(&self, f: Func, requested: usize);
    /// Runs `untimed` if the scope needs nothing of this call of `f` but
    /// what [`alloc`](Self::alloc) records for a `requested`-byte request,
    /// having recorded that: the request is small (below
    /// [`EXACT_TIMING_BYTES`]), the call is not timed, nothing is due.
    /// `untimed` makes the call, reporting at most the block's size (a
    /// tail call where the backend counts bytes itself). Otherwise runs
    /// `usual`, with nothing recorded, which records the call the usual way.
    ///
    /// On the thread's own counters the test is one subtraction and one
    /// branch: the byte countdown (`ThreadState::bytes_left`) stands for
    /// the request counter and the large-request test at once. `usual` is
    /// best an out-of-line function: the branch then tail-calls it, and
    /// the fast path saves no registers for a call that returns to it.
    #[inline(always)]
    fn alloc_untimed<R>(
        &self,
        _f: Func,
        _requested: usize,
        _untimed: impl FnOnce() -> R,
        usual: impl FnOnce() -> R,
    ) -> R {
        usual()
    }
    /// As [`alloc`](Self::alloc), for a small request whose bytes the
    /// thread's byte countdown has counted already (sample mode under the
    /// shim takes them before the call's countdown; see
    /// `stacks::enter_sampled`): what `alloc` records besides them.
    #[inline(always)]
    fn alloc_counted(&self, f: Func, requested: usize) {
        self.alloc(f, requested)
    }
    /// As [`alloc_untimed`](Self::alloc_untimed), for a request counted
    /// already (see [`alloc_counted`](Self::alloc_counted)).
    #[inline(always)]
    fn counted_untimed<R>(
        &self,
        _f: Func,
        _requested: usize,
        _untimed: impl FnOnce() -> R,
        usual: impl FnOnce() -> R,
    ) -> R {
        usual()
    }
    /// The block handed out has `usable` bytes (not called for backends
    /// whose own per-thread counters give the bytes; see [`Body`]).
    fn allocated(&self, usable: usize);
    /// A block of `usable` bytes was freed (by `free` or `realloc`); as for
    /// `allocated`, only for backends without byte counters of their own.
    fn freed(&self, usable: usize);
    /// A call that hands out nothing (`free`, `malloc_usable_size`).
    fn call(&self, f: Func);
    /// A `free(NULL)`, besides its [`call`](Self::call): a no-op, which
    /// the totals count apart from the frees of blocks (see
    /// [`null_frees_apart`](super::null_frees_apart)).
    fn null_free(&self);
    /// A call that failed.
    fn fail(&self, f: Func);
    /// A call made by [`alloc_untimed`](Self::alloc_untimed)'s `untimed`
    /// that failed: its request stays counted, as it was asked for.
    #[inline(always)]
    fn fail_untimed(&self, f: Func) {
        self.fail(f)
    }
    /// A `realloc` that returned the block it was given (recorded besides
    /// its `alloc`). Only the Rust wrapper reports it.
    fn in_place(&self) {}
    /// Runs `op`, the allocator's work releasing the block at `ptr` of
    /// `usable` bytes (a `free` whose size the body knows), timed as
    /// [`time`](Self::time) times it. Stack sampling tells the release of
    /// a sampled block apart here, by its size (see
    /// [`stacks::enter_sampled`](crate::stacks::enter_sampled)).
    #[inline(always)]
    fn release<R>(&self, _ptr: usize, usable: usize, op: impl FnOnce() -> R) -> R {
        self.time(usable, op)
    }
}

/// One hooked call: the allocator work plus what it records, written once
/// and run under the [`Scope`] that [`enter`] chooses.
pub trait Body {
    /// The hooked function's return value.
    type Out;
    /// The function this body implements (its calls are counted in `enter`).
    const FUNC: Func;
    /// Performs the call.
    ///
    /// # Safety
    /// As for the C function the body implements (valid pointers etc.).
    unsafe fn run<S: Scope>(self, s: &S) -> Self::Out;

    /// The allocator's own per-thread byte counters (allocated, freed) for
    /// the calling thread, if it keeps them: asked once per thread, when the
    /// thread registers. Bodies of such an allocator do not report block
    /// sizes through the scope.
    fn external_counters(&self) -> Option<[*mut u64; 2]> {
        None
    }

    /// Readies the process for recording, if it is not yet, and says
    /// whether it records: asked by a thread's first call that goes out of
    /// line ([`ThreadState::first_sight`]), before the thread registers or
    /// samples. The shim makes its choices there (backend, stack mode)
    /// when its exports are the hooks themselves, so that no trampoline
    /// runs first.
    fn process_ready() -> bool {
        true
    }
}

/// Records on the owning thread's counters; reads the clock only for
/// blocks of at least [`EXACT_TIMING_BYTES`]. The state is reached by its
/// address (`&ThreadState`) or, in the shim on x86-64, from the thread
/// pointer ([`FsState`]): its fast path's adds are then `%fs`-relative.
#[derive(Clone, Copy)]
pub(super) struct Owned<S>(pub(super) S);
/// As `Owned`, for a call the random sample picked: times it.
#[derive(Clone, Copy)]
pub(super) struct Sampled<'a>(pub(super) &'a ThreadState);
/// As `Owned`, for a thread's first calls: times them, each standing for itself.
#[derive(Clone, Copy)]
pub(super) struct Exact<'a>(pub(super) &'a ThreadState);
/// Records on the shared counters with atomic adds.
#[derive(Clone, Copy)]
pub(super) struct Shared;

#[inline(always)]
pub(super) fn measure<R>(op: impl FnOnce() -> R) -> (R, u64) {
    let start = Tsc::now();
    let r = op();
    let ticks = Tsc::now()
        .wrapping_sub(start)
        .saturating_sub(TSC_OVERHEAD.load(Relaxed));
    (r, ticks)
}

/// Times a call that is always timed (a large block), out of line so the
/// fast path keeps no registers for it.
///
/// `extern "C"`, though only Rust calls it: such a function cannot unwind
/// (a panic in it aborts), so a hook that calls it last needs no landing
/// pad for the call and can make it a tail jump, with no stack frame on
/// its fast path.
#[allow(improper_ctypes_definitions)] // never called from C
#[inline(never)]
pub(super) extern "C" fn exact_time<R, F: FnOnce() -> R>(t: &ThreadState, op: F) -> R {
    let (r, ticks) = measure(op);
    t.counters.exact::<false>(ticks);
    t.timed.set(t.timed.get().wrapping_add(ticks));
    r
}

/// The histogram and peak work for a large request, out of line.
#[cold]
#[inline(never)]
pub(super) fn large_request(t: &ThreadState, requested: usize) {
    t.counters.histogram::<false>(requested, 1);
    t.check_peak();
}

impl<'a, S: OwnState<'a>> Scope for Owned<S> {
    #[inline(always)]
    fn time<R>(&self, size: usize, op: impl FnOnce() -> R) -> R {
        if size < EXACT_TIMING_BYTES {
            op()
        } else {
            exact_time(self.0.state(), op)
        }
    }
    #[inline(always)]
    fn alloc(&self, _f: Func, requested: usize) {
        // The call itself is counted by the countdown in `enter`, the bytes
        // by the byte countdown; the size histogram of small requests comes
        // from the timed calls (see `Sampled::alloc`), large ones are all
        // counted (`window_ended`).
        if !self.0.take_bytes(requested) {
            self.0.state().window_ended(requested);
        }
    }
    #[inline(always)]
    fn alloc_untimed<R>(
        &self,
        _f: Func,
        requested: usize,
        untimed: impl FnOnce() -> R,
        usual: impl FnOnce() -> R,
    ) -> R {
        if self.0.take_bytes(requested) || self.0.state().window_ended_untimed(requested) {
            untimed()
        } else {
            usual()
        }
    }
    #[inline(always)]
    fn alloc_counted(&self, _f: Func, _requested: usize) {}
    #[inline(always)]
    fn counted_untimed<R>(
        &self,
        _f: Func,
        _requested: usize,
        untimed: impl FnOnce() -> R,
        _usual: impl FnOnce() -> R,
    ) -> R {
        untimed()
    }
    #[inline(always)]
    fn allocated(&self, usable: usize) {
        self.0.allocated(usable);
    }
    #[inline(always)]
    fn freed(&self, usable: usize) {
        self.0.freed(usable);
    }
    #[inline(always)]
    fn call(&self, _f: Func) {
        // Counted by the countdown in `enter`.
    }
    #[inline(always)]
    fn null_free(&self) {
        self.0.state().counters.null_free::<false>();
    }
    #[inline(always)]
    fn fail(&self, _f: Func) {
        self.0.state().counters.failed::<false>();
    }
    #[inline(always)]
    fn in_place(&self) {
        self.0.state().counters.in_place::<false>();
    }
}

macro_rules! delegate_recording_to_owned {
    () => {
        fn allocated(&self, usable: usize) {
            Owned(self.0).allocated(usable)
        }
        fn freed(&self, usable: usize) {
            Owned(self.0).freed(usable)
        }
        fn call(&self, f: Func) {
            Owned(self.0).call(f)
        }
        fn null_free(&self) {
            Owned(self.0).null_free()
        }
        fn fail(&self, f: Func) {
            Owned(self.0).fail(f)
        }
        fn in_place(&self) {
            Owned(self.0).in_place()
        }
    };
}

impl Scope for Sampled<'_> {
    fn alloc(&self, f: Func, requested: usize) {
        Owned(self.0).alloc(f, requested);
        self.alloc_counted(f, requested);
    }
    fn alloc_counted(&self, _f: Func, requested: usize) {
        if requested < EXACT_TIMING_BYTES {
            // This call stands for `time_sample_mean` small requests: an
            // unbiased estimate of the histogram at no cost per call.
            let weight = TIME_SAMPLE_MEAN.load(Relaxed) as u64;
            self.0.counters.histogram::<false>(requested, weight);
        }
    }
    fn time<R>(&self, size: usize, op: impl FnOnce() -> R) -> R {
        let (r, ticks) = measure(op);
        let weighted = if size < EXACT_TIMING_BYTES {
            let capped = ticks.min(MAX_SAMPLED_TICKS);
            self.0.counters.sampled::<false>(capped);
            capped * TIME_SAMPLE_MEAN.load(Relaxed) as u64
        } else {
            self.0.counters.exact::<false>(ticks);
            ticks
        };
        let t = &self.0.timed;
        t.set(t.get().wrapping_add(weighted));
        r
    }
    delegate_recording_to_owned!();
}

impl Scope for Exact<'_> {
    fn alloc(&self, f: Func, requested: usize) {
        Owned(self.0).alloc(f, requested);
        self.alloc_counted(f, requested);
    }
    fn alloc_counted(&self, _f: Func, requested: usize) {
        if requested < EXACT_TIMING_BYTES {
            self.0.counters.histogram::<false>(requested, 1);
        }
    }
    fn time<R>(&self, _size: usize, op: impl FnOnce() -> R) -> R {
        exact_time(self.0, op)
    }
    delegate_recording_to_owned!();
}

/// Records nothing: for the calls of allocmux's own threads.
#[derive(Clone, Copy)]
pub(super) struct Unrecorded;

impl Scope for Unrecorded {
    fn time<R>(&self, _size: usize, op: impl FnOnce() -> R) -> R {
        op()
    }
    fn alloc(&self, _f: Func, _requested: usize) {}
    fn allocated(&self, _usable: usize) {}
    fn freed(&self, _usable: usize) {}
    fn call(&self, _f: Func) {}
    fn null_free(&self) {}
    fn fail(&self, _f: Func) {}
}

impl Scope for Shared {
    const NEEDS_SIZES: bool = true;
    fn time<R>(&self, _size: usize, op: impl FnOnce() -> R) -> R {
        op()
    }
    fn alloc(&self, f: Func, requested: usize) {
        SHARED.alloc::<true>(f, requested);
    }
    fn allocated(&self, usable: usize) {
        SHARED.allocated::<true>(usable);
        let before = GLOBAL_LIVE.fetch_add(usable as i64, Relaxed);
        GLOBAL_PEAK.fetch_max(before + usable as i64, Relaxed);
    }
    fn freed(&self, usable: usize) {
        SHARED.freed::<true>(usable);
        GLOBAL_LIVE.fetch_sub(usable as i64, Relaxed);
    }
    fn call(&self, f: Func) {
        SHARED.call::<true>(f)
    }
    fn null_free(&self) {
        SHARED.null_free::<true>()
    }
    fn fail(&self, f: Func) {
        SHARED.fail::<true>(f)
    }
    fn in_place(&self) {
        SHARED.in_place::<true>()
    }
}

/// Runs one hooked call for the thread that owns `t`.
///
/// The fast path is one decrement of the function's countdown, which is
/// also its exact call count; every other case (a sampled call to time, the
/// thread's first call of the function, a thread past its exit hook) is out
/// of line in `slow`.
///
/// # Safety
/// `t` must be the calling thread's own state, and `body` as safe to run as
/// the C function it implements.
#[inline(always)]
pub unsafe fn enter<B: Body>(t: &ThreadState, body: B) -> B::Out {
    #[cfg(target_arch = "x86_64")]
    {
        // One `dec` on the countdown in memory and a branch on its sign:
        // the compiler, given an atomic load and store, emits a load, a
        // `dec`, a store and a branch, two instructions more on every call.
        // SAFETY: the operand is `t.countdown[B::FUNC]` (the offset of the
        // array plus 4 bytes per `AtomicI32` before it), this thread's own
        // aligned 4-byte counter, written through its `UnsafeCell`. The
        // owner alone decrements it; other threads only load it (or store
        // 0 into it, as before). An aligned `dec` on memory without `lock`
        // is one load and one store of the location, each single-copy
        // atomic on x86-64: exactly the relaxed load and store of the
        // portable version below, with its race unchanged. It touches no
        // other memory and no stack; the label tail-calls the slow path
        // with the caller's arguments, as the branch below does.
        unsafe {
            core::arch::asm!(
                "dec dword ptr [{t} + {offset}]",
                "js {slow}",
                t = in(reg) t,
                offset = const core::mem::offset_of!(ThreadState, countdown) + 4 * B::FUNC as usize,
                slow = label {
                    // SAFETY: forwarded from the caller.
                    return unsafe { slow(body, t) };
                },
                options(nostack),
            );
        }
        // SAFETY: forwarded from the caller.
        unsafe { body.run(&Owned(t)) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let countdown = &t.countdown[B::FUNC as usize];
        let c = countdown.load(Relaxed) - 1;
        countdown.store(c, Relaxed);
        if c >= 0 {
            // SAFETY: forwarded from the caller.
            unsafe { body.run(&Owned(t)) }
        } else {
            // SAFETY: forwarded from the caller.
            unsafe { slow(body, t) }
        }
    }
}

/// A call whose countdown went negative. The decrement already counted it
/// on the thread's own counters.
///
/// `extern "C"` on purpose: it cannot unwind, so the hot path may jump to it
/// as a tail call (a call that may unwind needs a landing pad in the
/// caller, which rules the tail call out). The body comes first, so a small
/// one (a hook's arguments) stays in the registers the hook received it
/// in, and the hook's fast path moves nothing to prepare for the jump.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only
pub(super) unsafe extern "C" fn slow<B: Body>(body: B, t: &ThreadState) -> B::Out {
    let f = B::FUNC as usize;
    t.first_sight::<B>();
    match t.status.get() {
        ACTIVE => {
            // A thread's first call of a function is timed exactly: it is
            // where allocators set up per-thread state, far slower than the
            // rest and too rare for the sample to weigh well.
            let first = t.issued[f].load(Relaxed) == 0;
            let r = if first {
                // SAFETY: forwarded from the caller of `enter`.
                unsafe { body.run(&Exact(t)) }
            } else {
                // SAFETY: forwarded from the caller of `enter`.
                unsafe { body.run(&Sampled(t)) }
            };
            t.schedule(f, t.next_countdown());
            t.check_peak();
            crate::program_read::run_if_asked();
            if !t.linked.get() {
                link_later(t);
            }
            r
        }
        // Only a call that hands out a block registers a thread. A thread
        // whose first call is a `free` may be past its pthread key
        // destructors: glibc's `__libc_thread_freeres` frees after them,
        // so a thread that never allocated would register with no
        // destructor left to unlink it, and the next thread given the same
        // TLS block would link it again into a cycle (a hang at exit). Its
        // frees go to the shared counters until it allocates.
        FRESH if B::FUNC.allocates() && register(t, body.external_counters()) => {
            // SAFETY: forwarded; status is ACTIVE now, so this recursion ends.
            unsafe { slow(body, t) }
        }
        IGNORED => {
            t.countdown[f].store(0, Relaxed);
            // SAFETY: forwarded from the caller of `enter`.
            unsafe { body.run(&Unrecorded) }
        }
        _ => {
            // Registering (a re-entrant call), retired or untracked: the
            // shared counters take the call, so undo the decrement (it was
            // 0, or `enter` would not be here) and keep sending calls here.
            t.countdown[f].store(0, Relaxed);
            // SAFETY: forwarded from the caller of `enter`.
            unsafe { body.run(&Shared) }
        }
    }
}
