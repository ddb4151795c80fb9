//! Sample mode's hook chain: [`enter_sampled`] takes the call's bytes off
//! the thread's countdown and sends the rare sampled call on to `stacked`;
//! the scopes between them (`SizeChecked`, `ReleaseChecked`) catch the
//! release of a sampled block by its size. [`enter_sampled_level`] is the
//! same at the sampled level, where nothing else is counted.

//!
//! Type parameters keep one meaning throughout: `B` is the call's body,
//! `Th` the thread's own state ([`OwnState`]), `Sk` its stack sampler
//! ([`OwnStacks`]), `S` the [`Scope`] a body records under. `COUNTED`
//! says whether the request's bytes are on the thread's byte countdown
//! already (taken by [`enter_sampled`] before the call's own countdown), so
//! that the scope does not count them twice.
use super::*;

/// Methods of a wrapping [`Scope`] that pass the call on to `self.inner`.
macro_rules! delegate_scope {
    ($($method:ident),*) => { $(delegate_scope!(@ $method);)* };
    (@ time) => {
        #[inline(always)]
        fn time<R>(&self, size: usize, op: impl FnOnce() -> R) -> R {
            self.inner.time(size, op)
        }
    };
    (@ allocated) => {
        #[inline(always)]
        fn allocated(&self, usable: usize) {
            self.inner.allocated(usable)
        }
    };
    (@ freed) => {
        #[inline(always)]
        fn freed(&self, usable: usize) {
            self.inner.freed(usable)
        }
    };
    (@ call) => {
        #[inline(always)]
        fn call(&self, f: Func) {
            self.inner.call(f)
        }
        #[inline(always)]
        fn null_free(&self) {
            self.inner.null_free()
        }
    };
    (@ in_place) => {
        #[inline(always)]
        fn in_place(&self) {
            self.inner.in_place()
        }
    };
    (@ fail_untimed) => {
        #[inline(always)]
        fn fail_untimed(&self, f: Func) {
            self.inner.fail_untimed(f)
        }
    };
    (@ release) => {
        #[inline(always)]
        fn release<R>(&self, ptr: usize, usable: usize, op: impl FnOnce() -> R) -> R {
            self.inner.release(ptr, usable, op)
        }
    };
}

/// [`enter_stacks`] for sample mode, on states the hook may reach from the
/// thread pointer.
///
/// Which allocations are sampled costs a request nothing over stacks off:
/// the thread's byte countdown, which counts its requested bytes and finds
/// its large requests (`ThreadState::take_bytes`), is armed no further than
/// the next sampling point, so the subtraction that counts a request also
/// tells whether it may be sampled. A request it takes is counted already
/// when the call runs (the body's scope records the rest, `COUNTED`); one
/// it does not take goes out of line (`request_out_of_window`), where the
/// sampling point, the window's end and large requests are told apart.
///
/// Where the body reports the size of every block it frees
/// ([`StackBody::RELEASES_BY_SIZE`], [`StackBody::PROMOTES`]: the shim on
/// glibc and mimalloc), a sampled allocation asks the allocator for at
/// least [`SAMPLED_BLOCK_BYTES`] (its stack, weight and requested bytes
/// stay the original request's), so a `free` of a smaller block cannot
/// release a tracked one, and the test a `free` makes anyway, whether its
/// block is large enough to be timed for itself, moves down to that size:
/// only the frees of blocks that large look in the filter, out of line,
/// and a `free` costs what it costs with stacks off. Where the `free`
/// learns no sizes ([`StackBody::ALIGNS_SAMPLED`]: the shim on jemalloc),
/// a sampled block is also aligned to that size, and only releases of
/// blocks so aligned look in the filter: an unsampled `free` pays one test
/// of its address. Other releases (`realloc` on glibc and mimalloc) look
/// in the filter, as under [`enter_stacks`].
/// `t` and `st` are the calling thread's states, by address or, in the
/// shim on x86-64, from the thread pointer ([`OwnState`], [`OwnStacks`]),
/// whose fast path then reaches them with `%fs`-relative instructions.
///
/// # Safety
/// As for [`enter_stacks`]; the mode must be sample mode.
#[inline(always)]
pub unsafe fn enter_sampled<B, Th, Sk>(t: Th, st: Sk, body: B) -> B::Out
where
    B: StackBody,
    Th: OwnState<'static>,
    Sk: OwnStacks,
{
    let Some(n) = body.request() else {
        // SAFETY: forwarded from the caller.
        return unsafe { unsampled::<B, Th, Sk, false>(body, t, st) };
    };
    // The thread's byte countdown counts the request, and its window ends
    // no further than the next sampling point: a request it takes is not
    // sampled, and one it does not take (the window's end, a sample, a
    // large block, a thread not yet registered) goes out of line.
    if !t.take_bytes(n) {
        // SAFETY: forwarded from the caller.
        return unsafe { request_out_of_window(body, t, st) };
    }
    // SAFETY: forwarded from the caller.
    unsafe { unsampled::<B, Th, Sk, true>(body, t, st) }
}

/// An unsampled call under [`enter_sampled`], its request (if any) counted
/// already on the byte countdown or not (`COUNTED`): the free of a block
/// that may be tracked goes to [`stacked`], the rest to [`enter`] with the
/// release test of [`SizeChecked`].
///
/// # Safety
/// As for [`enter_sampled`].
#[inline(always)]
pub(super) unsafe fn unsampled<B, Th, Sk, const COUNTED: bool>(body: B, t: Th, st: Sk) -> B::Out
where
    B: StackBody,
    Th: OwnState<'static>,
    Sk: OwnStacks,
{
    if may_release_tracked(&body) {
        if COUNTED {
            // `stacked` counts the request as it makes the call.
            t.state().untake_bytes(body.request().unwrap_or(0));
        }
        // SAFETY: forwarded from the caller.
        return unsafe { stacked(body, t.state(), st.stacks(), false) };
    }
    // SAFETY: forwarded from the caller.
    unsafe {
        t.enter(SizeChecked::<B, Sk, Th, COUNTED> {
            body,
            stacks: st,
            state: t,
        })
    }
}

/// Whether an unsampled call under [`enter_sampled`] may release a tracked
/// block where its size does not tell (see there): then it goes to
/// [`stacked`].
#[inline(always)]
pub(super) fn may_release_tracked<B: StackBody>(body: &B) -> bool {
    if !B::RELEASES || B::RELEASES_BY_SIZE {
        return false;
    }
    let old = body.released();
    // Under `ALIGNS_SAMPLED`, the test of the address's low bits is the
    // whole cost of an unsampled `free`: the filter, out of line.
    (!B::ALIGNS_SAMPLED || is_sampled_aligned(old)) && maybe_tracked(old)
}

/// A request the thread's byte window did not take (see [`enter_sampled`]),
/// taken back: sampled if it crosses the sampling point, else counted the
/// usual way, with the window armed again. A thread's first request here
/// draws its first sampling gap.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only; extern "C" so it cannot unwind
pub(super) unsafe extern "C" fn request_out_of_window<B, Th, Sk>(body: B, t: Th, st: Sk) -> B::Out
where
    B: StackBody,
    Th: OwnState<'static>,
    Sk: OwnStacks,
{
    let n = body.request().unwrap_or(0);
    let (state, stacks) = (t.state(), st.stacks());
    state.first_sight::<B>();
    state.untake_bytes(n);
    if state.may_sample() && !stacks.busy.get() {
        if !state.samples_bytes() {
            // The thread's first request (which also registers it): its
            // first gap, for this request to be sampled as likely as any.
            stacks.rearm(MEAN_BYTES.load(Relaxed));
            state.sample_after(stacks.countdown.get().max(0) as u64);
        }
        if state.sample_due(n) {
            // SAFETY: forwarded from the caller.
            return unsafe {
                if B::PROMOTES {
                    sampled_promoted(body, state, stacks)
                } else {
                    stacked(body, state, stacks, true)
                }
            };
        }
        state.reopen_window();
    }
    // SAFETY: forwarded from the caller.
    unsafe { unsampled::<B, Th, Sk, false>(body, t, st) }
}

/// One hooked call at the sampled recording level (see
/// `docs/recording.md`), where nothing is counted exactly: an allocation
/// pays the thread's byte countdown to its next sample (one subtraction
/// and a branch), a release one test of its address's low bits, and a
/// release of a block so aligned one load of the filter more. Only a
/// sampled allocation, and the release of a block the filter may hold, go
/// out of line ([`sampled_level_stacked`]). Every call runs under
/// `plain`, a scope that records nothing. A sampled block is made at least
/// [`SAMPLED_BLOCK_BYTES`] long and aligned to that, under every backend
/// ([`StackBody::run_aligned`]), so that the test of the address finds
/// it; the test replaces the `free`'s test for NULL (an address that
/// fails it is not NULL), so a release of an unaligned block costs what
/// it costs without recording.
///
/// # Safety
/// The caller's arguments, with the C function's contract; `st` is the
/// calling thread's; the mode is sample mode.
#[inline(always)]
pub unsafe fn enter_sampled_level<B: StackBody, Sk: OwnStacks, S: Scope>(
    st: Sk,
    body: B,
    plain: S,
) -> B::Out {
    let sampled = match body.request() {
        Some(n) => st.take(n),
        None => false,
    };
    if sampled {
        // SAFETY: forwarded from the caller.
        return unsafe { sampled_level_stacked(body, st.stacks(), plain, true) };
    }
    if B::RELEASES {
        let old = body.released();
        if !is_sampled_aligned(old) {
            // SAFETY: an address with a low bit set is not NULL: the
            // body's own test for NULL (a `free(NULL)`) can go.
            unsafe { core::hint::assert_unchecked(old != 0) };
        } else if maybe_tracked(old) {
            // Aligned and in the filter; an aligned block that is not
            // (the first block of an allocator's page: one in 16 to 256
            // of small blocks) costs the filter's load, inline.
            // SAFETY: forwarded from the caller.
            return unsafe { sampled_level_stacked(body, st.stacks(), plain, false) };
        }
    }
    // SAFETY: forwarded from the caller.
    unsafe { body.run(&plain) }
}

/// A sampled call, or the release of a block aligned as sampled ones are,
/// at the sampled level (see [`enter_sampled_level`]): a release the
/// filter says is not of a tracked block runs plainly; the rest are
/// timed, and entered in the tables as [`stacked`] enters them.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only; extern "C" so it cannot unwind
pub(super) unsafe extern "C" fn sampled_level_stacked<B: StackBody, S: Scope>(
    body: B,
    st: &StackThread,
    plain: S,
    mut sample: bool,
) -> B::Out {
    if sample && !st.armed() {
        // A new thread's countdown starts at zero: draw its first gap, and
        // decide again (see `stacked`).
        st.rearm(MEAN_BYTES.load(Relaxed));
        sample = st.take(body.request().unwrap_or(0));
    }
    let old = body.released();
    let releases_tracked = B::RELEASES && old != 0 && maybe_tracked(old);
    if (!sample && !releases_tracked) || st.busy.get() {
        // Neither sampled nor the release of a tracked block; or a call
        // from inside the recorder, which is not the program's.
        // SAFETY: forwarded from the caller.
        return unsafe { body.run(&plain) };
    }
    st.busy.set(true);
    // While busy, every allocation comes here, and runs plainly.
    let resume = st.countdown.replace(-1);
    let start = Tsc::now();
    let fell_back = Cell::new(false);
    let promoted = Promoted::<B, true>::new(body, &fell_back);
    // SAFETY: forwarded from the caller; a sampled call made aligned has
    // the original's contract, with a larger size and alignment.
    let out = unsafe {
        if sample {
            promoted.run(&plain)
        } else {
            body.run(&plain)
        }
    };
    let ticks = sampled_ticks_since(start);
    let released = if releases_tracked && body.did_release(&out) {
        old
    } else {
        0
    };
    // A sampled block that could not be made aligned is not tracked
    // (counted as lost): its release would not be told.
    let new = if sample { promoted.handed_out(&out) } else { 0 };
    let size = body.request().unwrap_or(0) as u64;
    record_call(st, sample, released, new, size, false, |_| {
        Charge::Ticks(ticks)
    });
    if sample {
        st.rearm(MEAN_BYTES.load(Relaxed));
    } else {
        st.countdown.set(resume);
    }
    st.busy.set(false);
    out
}

/// A thread's own [`StackThread`] as a hook reaches it: by its address, or
/// on x86-64 from the thread pointer ([`FsStacks`]).
pub trait OwnStacks: Copy {
    /// The state's address.
    fn stacks(self) -> &'static StackThread;

    /// [`StackThread::take`]: counts `size` requested bytes down; true if
    /// this allocation is sampled.
    #[inline(always)]
    fn take(self, size: usize) -> bool {
        self.stacks().take(size)
    }
}

impl OwnStacks for &'static StackThread {
    #[inline(always)]
    fn stacks(self) -> &'static StackThread {
        self
    }
}

/// The calling thread's [`StackThread`] at `AT` bytes into a block of
/// static TLS, the block named by its offset from the thread pointer
/// (x86-64, initial-exec; see [`FsState`](crate::FsState)). Like
/// `FsState`, it holds nothing: the hook passes nothing for it, and the
/// state's address is made only off the fast path.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug)]
pub struct FsStacks<L, const AT: usize>(core::marker::PhantomData<L>);

#[cfg(target_arch = "x86_64")]
impl<L: TlsBlock, const AT: usize> FsStacks<L, AT> {
    /// The state `AT` bytes into block `L`.
    ///
    /// # Safety
    /// Every thread that uses it must have its own `StackThread` there.
    #[inline(always)]
    pub const unsafe fn new() -> Self {
        FsStacks(core::marker::PhantomData)
    }
}

#[cfg(target_arch = "x86_64")]
impl<L: TlsBlock, const AT: usize> OwnStacks for FsStacks<L, AT> {
    #[inline(always)]
    fn stacks(self) -> &'static StackThread {
        // SAFETY: the state is there (`new`), the calling thread's own.
        unsafe { &*(crate::thread::tls_address(L::offset() + AT) as *const StackThread) }
    }

    /// One `%fs`-relative `sub` and a branch on its sign: the state's
    /// address takes two instructions more to make (the thread pointer's
    /// load and an add), on every allocation of the sampled level.
    #[inline(always)]
    fn take(self, size: usize) -> bool {
        let mut sampled = false;
        // SAFETY: the operand is the state's countdown, this thread's own
        // `Cell<i64>` (`new`), which only this thread touches; the label
        // only sets a flag.
        unsafe {
            core::arch::asm!(
                "sub qword ptr fs:[{o} + {at}], {v}",
                "js {crossed}",
                o = in(reg) L::offset(),
                at = const AT + core::mem::offset_of!(StackThread, countdown),
                v = in(reg) size,
                crossed = label {
                    sampled = true;
                },
                options(nostack),
            );
        }
        sampled
    }
}

/// A sampled call under [`enter_sampled`], promoted out of line: the hook
/// passes its arguments on as it received them.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only; extern "C" so it cannot unwind
pub(super) unsafe extern "C" fn sampled_promoted<B: StackBody>(
    body: B,
    t: &ThreadState,
    st: &StackThread,
) -> B::Out {
    let fell_back = Cell::new(false);
    // SAFETY: forwarded from the caller; the promoted call has the
    // original's contract, with a larger size.
    unsafe { stacked(Promoted::<B>::new(body, &fell_back), t, st, true) }
}

/// A sampled allocation asking for at least [`SAMPLED_BLOCK_BYTES`] (see
/// [`enter_sampled`]); recorded as the original request, and made as the
/// original if the larger one fails.
/// `ALIGNED`: the block is aligned too, whatever the backend (the sampled
/// level, see [`enter_sampled_level`]).
#[derive(Clone, Copy)]
pub(super) struct Promoted<'a, B, const ALIGNED: bool = false> {
    pub(super) call: B,
    pub(super) original: B,
    pub(super) requested: usize,
    /// Set when the larger call failed and the original was made instead.
    pub(super) fell_back: &'a Cell<bool>,
}

impl<'a, B: StackBody, const ALIGNED: bool> Promoted<'a, B, ALIGNED> {
    #[inline(always)]
    pub(super) fn new(body: B, fell_back: &'a Cell<bool>) -> Self {
        Promoted {
            requested: body.request().unwrap_or(0),
            call: body.promoted(|n| n.max(SAMPLED_BLOCK_BYTES)),
            original: body,
            fell_back,
        }
    }
}

impl<B: StackBody, const ALIGNED: bool> Body for Promoted<'_, B, ALIGNED> {
    type Out = B::Out;
    const FUNC: Func = B::FUNC;
    #[inline(always)]
    unsafe fn run<S: Scope>(self, s: &S) -> B::Out {
        let changed =
            ALIGNED || B::ALIGNS_SAMPLED || self.call.request() != self.original.request();
        let scope = AsRequested {
            inner: *s,
            requested: self.requested,
            quiet_failure: changed,
        };
        // SAFETY: the errno location of the calling thread.
        let errno = unsafe { *libc::__errno_location() };
        // SAFETY: the caller's contract, for the promoted call.
        let out = unsafe {
            if ALIGNED {
                self.call.run_aligned(&scope)
            } else {
                self.call.run_promoted(&scope)
            }
        };
        if !changed || self.call.handed_out(&out) != 0 {
            return out;
        }
        // The larger (or aligned) block failed where the program's own
        // request may not: make that one, as without stacks, untracked.
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
        self.fell_back.set(true);
        let scope = AsRequested {
            quiet_failure: false,
            ..scope
        };
        // SAFETY: the caller's contract, for the program's own call.
        unsafe { self.original.run(&scope) }
    }
    fn external_counters(&self) -> Option<[*mut u64; 2]> {
        self.call.external_counters()
    }
}

impl<B: StackBody, const ALIGNED: bool> StackBody for Promoted<'_, B, ALIGNED> {
    const PROMOTES: bool = B::PROMOTES;
    const RELEASES: bool = B::RELEASES;
    const RELEASES_BY_SIZE: bool = B::RELEASES_BY_SIZE;
    const ALIGNS_SAMPLED: bool = B::ALIGNS_SAMPLED;
    fn request(&self) -> Option<usize> {
        self.call.request().map(|_| self.requested)
    }
    fn released(&self) -> usize {
        self.call.released()
    }
    fn did_release(&self, out: &Self::Out) -> bool {
        self.call.did_release(out)
    }
    fn handed_out(&self, out: &Self::Out) -> usize {
        // A block whose release would not be told apart would never be
        // seen freed: not tracked, and counted as lost (a zero-byte
        // request, or the original made after the promoted one failed).
        // (A promoted call under `ALIGNS_SAMPLED` that succeeded gave an
        // aligned block.)
        let p = self.call.handed_out(out);
        let recognisable = !self.fell_back.get()
            && self
                .call
                .request()
                .is_some_and(|n| n >= SAMPLED_BLOCK_BYTES);
        if p != 0 && !recognisable {
            UNRECORDED.fetch_add(1, Relaxed);
            return 0;
        }
        p
    }
}

/// The scope a promoted call runs under: the original request's bytes,
/// and no failure recorded for a larger call, which is followed by the
/// program's own.
#[derive(Clone, Copy)]
pub(super) struct AsRequested<S> {
    pub(super) inner: S,
    pub(super) requested: usize,
    pub(super) quiet_failure: bool,
}

impl<S: Scope> Scope for AsRequested<S> {
    const NEEDS_SIZES: bool = S::NEEDS_SIZES;
    const RECORDS: bool = S::RECORDS;
    #[inline(always)]
    fn alloc(&self, f: Func, _promoted: usize) {
        self.inner.alloc(f, self.requested)
    }
    #[inline(always)]
    fn fail(&self, f: Func) {
        if !self.quiet_failure {
            self.inner.fail(f)
        }
    }
    delegate_scope!(time, allocated, freed, call, in_place, release);
}

/// A call under [`enter_sampled`] that was not sampled: a `free` of a block
/// of [`SAMPLED_BLOCK_BYTES`] or more looks in the filter.
/// `COUNTED`: the request's bytes are counted already, on the thread's
/// byte countdown (see [`enter_sampled`]).
#[derive(Clone, Copy)]
pub(super) struct SizeChecked<B, Sk, Th, const COUNTED: bool> {
    pub(super) body: B,
    pub(super) stacks: Sk,
    pub(super) state: Th,
}

impl<B: StackBody, Sk: OwnStacks, Th: OwnState<'static>, const COUNTED: bool> Body
    for SizeChecked<B, Sk, Th, COUNTED>
{
    type Out = B::Out;
    const FUNC: Func = B::FUNC;
    #[inline(always)]
    unsafe fn run<S: Scope>(self, s: &S) -> B::Out {
        let s = ReleaseChecked::<S, Sk, Th, COUNTED> {
            inner: *s,
            stacks: self.stacks,
            state: self.state,
            // Made here, not carried in the body: the call's slow path
            // then receives the hook's arguments alone.
            requested: self.body.request().unwrap_or(0),
        };
        // SAFETY: the caller's contract.
        unsafe { self.body.run(&s) }
    }
    fn external_counters(&self) -> Option<[*mut u64; 2]> {
        self.body.external_counters()
    }
}

/// The scope of a [`SizeChecked`] call.
#[derive(Clone, Copy)]
pub(super) struct ReleaseChecked<S, Sk, Th, const COUNTED: bool> {
    pub(super) inner: S,
    pub(super) stacks: Sk,
    /// The thread's recorder state, to take a counted request's bytes back
    /// when the call fails.
    pub(super) state: Th,
    pub(super) requested: usize,
}

impl<S: Scope, Sk: OwnStacks, Th: OwnState<'static>, const COUNTED: bool> Scope
    for ReleaseChecked<S, Sk, Th, COUNTED>
{
    const NEEDS_SIZES: bool = S::NEEDS_SIZES;
    #[inline(always)]
    fn release<R>(&self, ptr: usize, usable: usize, op: impl FnOnce() -> R) -> R {
        if usable < SAMPLED_BLOCK_BYTES {
            self.inner.release(ptr, usable, op)
        } else {
            // The block's address first, where the hook received it.
            release_large(ptr, usable, self.inner, self.stacks.stacks(), op)
        }
    }
    #[inline(always)]
    fn alloc(&self, f: Func, requested: usize) {
        if COUNTED {
            self.inner.alloc_counted(f, requested)
        } else {
            self.inner.alloc(f, requested)
        }
    }
    #[inline(always)]
    fn alloc_untimed<R>(
        &self,
        f: Func,
        requested: usize,
        untimed: impl FnOnce() -> R,
        usual: impl FnOnce() -> R,
    ) -> R {
        if COUNTED {
            self.inner.counted_untimed(f, requested, untimed, usual)
        } else {
            self.inner.alloc_untimed(f, requested, untimed, usual)
        }
    }
    #[inline(always)]
    fn fail(&self, f: Func) {
        if COUNTED {
            // The usual way counts a request only once its call succeeds
            // (`alloc`).
            self.state.state().untake_bytes(self.requested);
        }
        self.inner.fail(f)
    }
    delegate_scope!(time, allocated, freed, call, in_place, fail_untimed);
}

/// The `free` of a block that may be a sampled one (see [`enter_sampled`]):
/// if the filter says it may be tracked, the call is timed for the block's
/// stack, as [`stacked`] times it, and the block is let go of.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only; extern "C" so it cannot unwind
pub(super) extern "C" fn release_large<S: Scope, R, F: FnOnce() -> R>(
    ptr: usize,
    usable: usize,
    s: S,
    st: &StackThread,
    op: F,
) -> R {
    if !maybe_tracked(ptr) || st.busy.get() {
        return s.release(ptr, usable, op);
    }
    st.busy.set(true);
    let start = Tsc::now();
    let out = s.release(ptr, usable, op);
    let end = Tsc::now();
    let ticks = end
        .wrapping_sub(start)
        .saturating_sub(crate::thread::tsc_overhead())
        .min(crate::thread::MAX_SAMPLED_TICKS);
    // Not recorded if the lock is held too long, as in `stacked`: the
    // block stays in the table until its address is handed out again.
    if let Some(mut s) = STATE.lock_within(WAIT_YIELDS) {
        s.enter_release(ptr, end, |size| promoted_call_ticks(size, ticks));
    }
    st.busy.set(false);
    out
}
