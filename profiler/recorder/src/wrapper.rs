//! [`Counting`], the Rust `#[global_allocator]` wrapper, on the same
//! recording core as the shim.
//!
//! Every `GlobalAlloc` method is a [`Body`] run by [`enter`] on the calling
//! thread's [`ThreadState`], so the wrapper gets what the shim gets: exact
//! per-thread counts with relaxed loads and stores (no shared atomic
//! read-modify-write per call), the thread registry summed on read, the
//! pthread-key hook that folds an exiting thread into the shared totals,
//! shared counters for the calls a thread makes while registering or after
//! its exit hook, and the sampled TSC timing with its calibration.
//!
//! What differs from the shim is where the state lives and what a block's
//! size is:
//!
//! - **Thread state.** A `thread_local!` with a `const { }` initialiser of a
//!   type without `Drop`: std then compiles it to a plain `#[thread_local]`
//!   static (local-exec TLS in an executable: one `%fs`-relative address, no
//!   lazy-initialisation check, no destructor registration, nothing that
//!   allocates), so it is usable inside the global allocator, and even from
//!   other threads' TLS destructors, since a state without destructor is
//!   never "destroyed". Thread exit is the recorder's pthread key (created
//!   without allocating, see `register`), not a TLS destructor: a Rust TLS
//!   destructor is registered lazily, which allocates, so it could not be
//!   armed from inside `alloc`. glibc runs `thread_local!` destructors
//!   before pthread key destructors, so the exit hook sees their frees on
//!   the thread's own counters; whatever later key destructors allocate
//!   goes to the shared counters. The state is global to the crate, not to
//!   a `Counting` value: that is what lets [`crate::measure`] and
//!   [`crate::snapshot`] work without naming the static, and it means one
//!   `Counting` per process (the one `#[global_allocator]`) is the
//!   supported case: two would add into the same counters.
//! - **Sizes.** Rust hands the layout to `dealloc`, so bytes are the
//!   `Layout` sizes the program asked for, exactly, with no
//!   `malloc_usable_size` lookups, and the same whichever allocator is
//!   inside (so runs under different allocators compare).
//! - **Peak.** Every call reports how it moved the thread's live bytes to
//!   [`ThreadState::grew`]/[`ThreadState::shrank`], which keep the distance
//!   below the thread's high mark (one add, or one subtraction and a sign
//!   test, per call: cheaper than recomputing live bytes from the two byte
//!   counters each time), so a thread's own peak is exact, and so is the
//!   process's with one allocating thread.
//!
//! No path here allocates through the global allocator: registration uses
//! `pthread_key_create`/`pthread_setspecific` (glibc's own `malloc` if
//! anything, never Rust's), the calibration reads clocks, and nothing
//! formats or panics, so the wrapper cannot recurse into itself.

use core::alloc::{GlobalAlloc, Layout};
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{
    AtomicU8, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::OnceLock;

use super::clock::{ClockPair, monotonic_ns, read_clocks};
use super::stacks::{self, StackBody, StackThread, enter_stacks};
use super::thread::{Body, Scope, ThreadState, enter, set_time_sample_mean, time_sample_mean};
use super::watch;
use allocmux_format::Backend;
use allocmux_format::Func;

thread_local! {
    /// The calling thread's recorder state (see the module docs for why a
    /// const-initialised `thread_local!` and not a lazy one).
    static STATE: ThreadState = const { ThreadState::new() };
    /// The calling thread's stack-sampling state, used while a
    /// [`crate::Profiler`] records stacks; likewise without destructor.
    static STACKS: StackThread = const { StackThread::new() };
}

/// Runs `f` on the calling thread's state.
#[inline(always)]
pub fn with_thread<R>(f: impl FnOnce(&ThreadState) -> R) -> R {
    // Only the address goes through `LocalKey::with`: with the allocator's
    // whole work in its closure, LLVM kept `with` out of line, calling the
    // key's accessor through a pointer and checking for a destroyed key;
    // with this closure it folds to one `%fs`-relative address.
    let p = STATE.with(|t| t as *const ThreadState);
    // SAFETY: `p` is this thread's state. It has no destructor, so it is
    // never "destroyed" and lives as long as the thread, and the borrow
    // ends before this function returns, on the same thread.
    f(unsafe { &*p })
}

/// Runs `f` on the calling thread's stack-sampling state.
#[inline(always)]
/// Makes the calling thread allocmux's own (a `Profiler`'s server): its
/// calls are neither counted nor sampled for stacks. Call before its
/// first allocation.
pub fn own_thread() {
    with_thread(|t| t.ignore());
    // A countdown that never runs out: no allocation of this thread is
    // sampled (exact mode samples every one, and this thread's must not
    // be, so the recorder's own copies are not taken under its lock).
    with_stack_thread(|st| st.resume(i64::MAX));
}

pub fn with_stack_thread<R>(f: impl FnOnce(&StackThread) -> R) -> R {
    let p = STACKS.with(|t| t as *const StackThread);
    // SAFETY: as in `with_thread`: this thread's state, never destroyed,
    // borrowed only until this function returns.
    f(unsafe { &*p })
}

/// Runs one call through the recorder: with its stack when a profiler
/// records stacks or a thread watches its calls (see [`watch`]), else on
/// the plain path (two relaxed loads decide).
///
/// # Safety
/// As for [`enter`]: `t` is the calling thread's state and `body` upholds
/// its allocator call's contract.
#[inline(always)]
unsafe fn record<B: StackBody>(t: &ThreadState, body: B) -> B::Out {
    if stacks::is_on() || watch::is_on() {
        // SAFETY: forwarded from the caller.
        unsafe { record_with_stack(t, body) }
    } else {
        // SAFETY: forwarded from the caller.
        unsafe { enter(t, body) }
    }
}

/// [`record`] while a profiler is on or a thread watches, out of line, so
/// the stack recorder's code does not grow every `alloc` and `dealloc` of
/// programs that never start a profiler.
///
/// # Safety
/// As for [`record`].
#[cold]
#[inline(never)]
unsafe fn record_with_stack<B: StackBody>(t: &ThreadState, body: B) -> B::Out {
    let out = if stacks::is_on() {
        // SAFETY: forwarded; the stack state is this thread's own.
        with_stack_thread(|st| unsafe { enter_stacks(t, st, body) })
    } else {
        // SAFETY: forwarded from the caller.
        unsafe { enter(t, body) }
    };
    if watch::is_on() {
        let old = body.released();
        watch::tell(watch::Event {
            new: body.handed_out(&out),
            size: body.request().unwrap_or(0),
            old: if old != 0 && body.did_release(&out) {
                old
            } else {
                0
            },
        });
    }
    out
}

/// A [`GlobalAlloc`] that counts what passes through it to the allocator
/// inside: allocations, frees, reallocations (in place or moved), bytes,
/// live and peak live bytes, and the time spent in the allocator.
///
/// ```no_run
/// #[global_allocator]
/// static ALLOC: allocmux::Counting<std::alloc::System> =
///     allocmux::Counting::new(std::alloc::System);
///
/// let before = ALLOC.snapshot();
/// let v: Vec<u64> = (0..1000).collect();
/// let used = ALLOC.snapshot() - before;
/// println!("{used}");
/// # drop(v);
/// ```
///
/// Counts are exact under any number of threads: each thread counts on its
/// own state, read by [`snapshot`](Self::snapshot) (the process) and
/// [`measure`](crate::readout::measure) (one closure on one thread). The counters are global
/// to the crate, so use one `Counting` per process, as the
/// `#[global_allocator]`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counting<A> {
    inner: A,
}

impl<A> Counting<A> {
    /// Wraps `inner`; `const`, for a `static`.
    pub const fn new(inner: A) -> Self {
        Counting { inner }
    }

    /// The allocator inside.
    pub fn inner(&self) -> &A {
        &self.inner
    }

    /// The process's counts so far: every thread's, including those that
    /// have exited. Take two and subtract them for what happened between.
    pub fn snapshot(&self) -> allocmux_format::Counts {
        crate::readout::snapshot()
    }
}

/// How a body reaches the inner allocator. A body goes to the recorder's
/// slow path by value, and a body of more than two words is passed in
/// memory, whose stores LLVM places before the fast path's branch, so
/// every call paid for them: a reference is one more word. Zero-sized
/// allocators (`System`, `Jemalloc`, `MiMalloc`, `Switchable`: nearly all)
/// travel as nothing instead, which keeps `alloc`'s body in registers.
trait Inner<A>: Copy {
    fn get(&self) -> &A;
}

impl<A> Inner<A> for &A {
    #[inline(always)]
    fn get(&self) -> &A {
        self
    }
}

/// A zero-sized `A`, by no pointer at all.
struct Zst<A>(PhantomData<fn() -> A>);

impl<A> Clone for Zst<A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A> Copy for Zst<A> {}

impl<A> Zst<A> {
    /// `None` unless `A` is zero-sized; taking a value proves it inhabited.
    #[inline(always)]
    fn new(_value: &A) -> Option<Self> {
        (size_of::<A>() == 0).then_some(Zst(PhantomData))
    }
}

impl<A> Inner<A> for Zst<A> {
    #[inline(always)]
    fn get(&self) -> &A {
        // SAFETY: `A` is zero-sized and inhabited (see `new`), so a
        // dangling, aligned, non-null pointer is a valid reference to a
        // value of it, indistinguishable from the wrapper's own but for
        // its address, which no allocator has reason to look at.
        unsafe { NonNull::<A>::dangling().as_ref() }
    }
}

/// `alloc` and `alloc_zeroed` (`ZEROED` picks which, and the function it
/// counts as: `Malloc` or `Calloc`).
struct Alloc<I, A, const ZEROED: bool>(I, Layout, PhantomData<fn() -> A>);
struct Dealloc<I, A>(I, *mut u8, Layout, PhantomData<fn() -> A>);
struct Realloc<I, A>(I, *mut u8, Layout, usize, PhantomData<fn() -> A>);

// `derive` would ask `A: Copy`; the bodies hold no `A`, only a way to it.
impl<I: Copy, A, const ZEROED: bool> Clone for Alloc<I, A, ZEROED> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<I: Copy, A, const ZEROED: bool> Copy for Alloc<I, A, ZEROED> {}
impl<I: Copy, A> Clone for Dealloc<I, A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<I: Copy, A> Copy for Dealloc<I, A> {}
impl<I: Copy, A> Clone for Realloc<I, A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<I: Copy, A> Copy for Realloc<I, A> {}

// What each call does to blocks, for the stack recorder.
impl<I: Inner<A>, A: GlobalAlloc, const ZEROED: bool> StackBody for Alloc<I, A, ZEROED> {
    fn request(&self) -> Option<usize> {
        Some(self.1.size())
    }
    fn handed_out(&self, out: &*mut u8) -> usize {
        *out as usize
    }
}

impl<I: Inner<A>, A: GlobalAlloc> StackBody for Dealloc<I, A> {
    const RELEASES: bool = true;
    fn request(&self) -> Option<usize> {
        None
    }
    fn released(&self) -> usize {
        self.1 as usize
    }
    fn handed_out(&self, _: &()) -> usize {
        0
    }
}

impl<I: Inner<A>, A: GlobalAlloc> StackBody for Realloc<I, A> {
    const RELEASES: bool = true;
    fn request(&self) -> Option<usize> {
        Some(self.3)
    }
    fn released(&self) -> usize {
        self.1 as usize
    }
    fn did_release(&self, out: &*mut u8) -> bool {
        // A failed realloc leaves the old block with the program.
        !out.is_null()
    }
    fn handed_out(&self, out: &*mut u8) -> usize {
        *out as usize
    }
}

impl<I: Inner<A>, A: GlobalAlloc, const ZEROED: bool> Body for Alloc<I, A, ZEROED> {
    type Out = *mut u8;
    const FUNC: Func = if ZEROED { Func::Calloc } else { Func::Malloc };

    #[inline(always)]
    unsafe fn run<S: Scope>(self, s: &S) -> *mut u8 {
        let Alloc(inner, layout, _) = self;
        let inner = inner.get();
        let size = layout.size();
        let p = s.time(size, || {
            if ZEROED {
                // SAFETY: the caller's layout, as `GlobalAlloc::alloc_zeroed` requires.
                unsafe { inner.alloc_zeroed(layout) }
            } else {
                // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
                unsafe { inner.alloc(layout) }
            }
        });
        if p.is_null() {
            s.fail(Self::FUNC);
        } else {
            s.allocated(size);
            s.alloc(Self::FUNC, size);
        }
        p
    }

    fn external_counters(&self) -> Option<[*mut u64; 2]> {
        on_register(core::any::type_name::<A>());
        None
    }
}

impl<I: Inner<A>, A: GlobalAlloc> Body for Dealloc<I, A> {
    type Out = ();
    const FUNC: Func = Func::Free;

    #[inline(always)]
    unsafe fn run<S: Scope>(self, s: &S) {
        let Dealloc(inner, ptr, layout, _) = self;
        let inner = inner.get();
        // SAFETY: the caller's block and layout, as `GlobalAlloc::dealloc` requires.
        s.time(layout.size(), || unsafe { inner.dealloc(ptr, layout) });
        s.call(Func::Free);
        s.freed(layout.size());
    }

    fn external_counters(&self) -> Option<[*mut u64; 2]> {
        on_register(core::any::type_name::<A>());
        None
    }
}

impl<I: Inner<A>, A: GlobalAlloc> Body for Realloc<I, A> {
    type Out = *mut u8;
    const FUNC: Func = Func::Realloc;

    #[inline(always)]
    unsafe fn run<S: Scope>(self, s: &S) -> *mut u8 {
        let Realloc(inner, ptr, layout, new_size, _) = self;
        let inner = inner.get();
        // SAFETY: the caller's block, layout and size, as
        // `GlobalAlloc::realloc` requires.
        let p = s.time(new_size, || unsafe { inner.realloc(ptr, layout, new_size) });
        if p.is_null() {
            // The old block is untouched and still live.
            s.fail(Func::Realloc);
        } else {
            // The old block's bytes go, the new block's come: live bytes
            // move by the difference, and an in-place resize is told apart
            // by the pointer, the only thing `GlobalAlloc` says about it.
            s.freed(layout.size());
            s.allocated(new_size);
            s.alloc(Func::Realloc, new_size);
            if p == ptr {
                s.in_place();
            }
        }
        p
    }

    fn external_counters(&self) -> Option<[*mut u64; 2]> {
        on_register(core::any::type_name::<A>());
        None
    }
}

// SAFETY: every method forwards to the inner allocator with the caller's
// arguments unchanged and returns its result unchanged; the recording
// around it touches only the calling thread's state and the recorder's
// statics, never allocates, and never unwinds.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        with_thread(|t| {
            // SAFETY: `t` is this thread's state; the caller's layout.
            let p = unsafe {
                match Zst::new(&self.inner) {
                    Some(z) => record(t, Alloc::<_, A, false>(z, layout, PhantomData)),
                    None => record(t, Alloc::<_, A, false>(&self.inner, layout, PhantomData)),
                }
            };
            if !p.is_null() {
                t.grew(layout.size());
            }
            p
        })
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        with_thread(|t| {
            // SAFETY: as in `alloc`.
            let p = unsafe {
                match Zst::new(&self.inner) {
                    Some(z) => record(t, Alloc::<_, A, true>(z, layout, PhantomData)),
                    None => record(t, Alloc::<_, A, true>(&self.inner, layout, PhantomData)),
                }
            };
            if !p.is_null() {
                t.grew(layout.size());
            }
            p
        })
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        with_thread(|t| {
            // SAFETY: this thread's state; the caller's block and layout.
            unsafe {
                match Zst::new(&self.inner) {
                    Some(z) => record(t, Dealloc::<_, A>(z, ptr, layout, PhantomData)),
                    None => record(t, Dealloc::<_, A>(&self.inner, ptr, layout, PhantomData)),
                }
            }
            t.shrank(layout.size());
        })
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        with_thread(|t| {
            // SAFETY: this thread's state; the caller's block, layout and size.
            let p = unsafe {
                match Zst::new(&self.inner) {
                    Some(z) => record(t, Realloc::<_, A>(z, ptr, layout, new_size, PhantomData)),
                    None => record(
                        t,
                        Realloc::<_, A>(&self.inner, ptr, layout, new_size, PhantomData),
                    ),
                }
            };
            if !p.is_null() {
                if new_size >= layout.size() {
                    t.grew(new_size - layout.size());
                } else {
                    t.shrank(layout.size() - new_size);
                }
            }
            p
        })
    }
}

const INIT_NOT_YET: u8 = 0;
const INIT_RUNNING: u8 = 1;
const INIT_DONE: u8 = 2;
static INIT: AtomicU8 = AtomicU8::new(INIT_NOT_YET);
/// The clocks when the first thread registered: the start of the span
/// over which TSC ticks are converted to nanoseconds.
static START_TSC: AtomicU64 = AtomicU64::new(0);
static START_NS: AtomicU64 = AtomicU64::new(0);
/// The type of the allocator inside the `Counting` that first registered
/// a thread, for the profile's `allocator` line.
static INNER_TYPE: OnceLock<&'static str> = OnceLock::new();

/// Process set-up, run from each thread's registration (the recorder asks
/// a body for its external counters exactly then: a once-per-thread hook
/// off the hot path), doing its work at the first: the clock-read cost the
/// timings subtract, the start of the calibration span, and fork handlers.
#[cold]
fn on_register(inner_type: &'static str) {
    // `type_name` returns a static string and `set` stores two words:
    // nothing allocates.
    let _ = INNER_TYPE.set(inner_type);
    if INIT.load(Acquire) == INIT_DONE
        || INIT
            .compare_exchange(INIT_NOT_YET, INIT_RUNNING, Acquire, Relaxed)
            .is_err()
    {
        // Done, or another thread is at it: calls timed meanwhile subtract
        // no clock cost, a few ticks on a handful of calls.
        return;
    }
    super::marks::counting();
    // Keeps a mean set by the program before its first allocation.
    set_time_sample_mean(time_sample_mean());
    let start = read_clocks();
    START_TSC.store(start.tsc, Relaxed);
    START_NS.store(start.mono_ns, Relaxed);
    // Nothing is held across `fork` (see `SpinLock`). The child keeps the
    // parent's counts as its history (the other threads' states are
    // copies that no longer change); it only frees the registry if a
    // thread that is gone held it.
    unsafe extern "C" fn child() {
        super::thread::after_fork_child_keeping_counts();
    }
    // SAFETY: the handler takes no lock and does not allocate; registering
    // it may use glibc's malloc, never ours.
    unsafe { libc::pthread_atfork(None, None, Some(child)) };
    INIT.store(INIT_DONE, Release);
}

/// Whether a [`Counting`] has registered a thread (it is the global
/// allocator and something has allocated through it).
pub fn is_counting() -> bool {
    INIT.load(Acquire) == INIT_DONE
}

/// The clocks at the first registration: where the profile's run starts.
pub fn clock_start() -> ClockPair {
    ClockPair {
        tsc: START_TSC.load(Relaxed),
        mono_ns: START_NS.load(Relaxed),
    }
}

/// The profile's name for the allocator inside the `Counting`: `system`,
/// `jemalloc`, `mimalloc` for the allocators allocmux knows (for
/// `Switchable`, the backend it chose), else the type's last path segment.
pub fn inner_allocator_name() -> &'static str {
    let Some(ty) = INNER_TYPE.get() else {
        return "unknown";
    };
    let last = ty.rsplit("::").next().unwrap_or(ty);
    match last {
        "System" => "system",
        "Jemalloc" => "jemalloc",
        "MiMalloc" => "mimalloc",
        // Chosen by the allocation that registered the `Counting`.
        "Switchable" => super::Switchable::chosen().map_or("unknown", Backend::name),
        _ => last,
    }
}

/// Turns on stack recording for the wrapper (once per process), with
/// `fork` handlers that keep the stack table consistent in a child; in
/// sample mode, the first `exact_first` allocations exactly.
pub fn start_stacks(mode: allocmux_format::profile::StackMode, exact_first: u64) {
    // The recorder's own modules are the program's executable here: no
    // module is skipped; the CLI trims allocmux's frames by name.
    with_stack_thread(|st| st.as_recorder(|| stacks::configure(mode, false, exact_first)));
    // The child keeps the parent's stacks as its history, as it keeps its
    // counts (see `on_register`).
    unsafe extern "C" fn child() {
        stacks::after_fork_child_keeping_stacks();
    }
    // SAFETY: the handler takes no lock and does not allocate; registering
    // it may use glibc's malloc, never ours.
    unsafe { libc::pthread_atfork(None, None, Some(child)) };
}

/// Calibration spans shorter than this are stretched by waiting, so a
/// conversion right after start-up is still within about 0.1%.
const MIN_CALIBRATION_NS: u64 = 2_000_000;

/// Converts TSC ticks to nanoseconds with the rate seen since the first
/// registration (the shim's method: two clock pairs, as far apart as the
/// process allows). 0 before anything was counted.
pub fn ticks_to_ns(ticks: u64) -> u64 {
    let (start_tsc, start_ns) = (START_TSC.load(Relaxed), START_NS.load(Relaxed));
    if ticks == 0 || start_ns == 0 {
        return 0;
    }
    let mut now = read_clocks();
    while now.mono_ns.saturating_sub(start_ns) < MIN_CALIBRATION_NS {
        core::hint::spin_loop();
        if monotonic_ns().saturating_sub(start_ns) >= MIN_CALIBRATION_NS {
            now = read_clocks();
        }
    }
    let start = ClockPair {
        tsc: start_tsc,
        mono_ns: start_ns,
    };
    match now.ticks_per_ns_since(start) {
        Some(ticks_per_ns) => (ticks as f64 / ticks_per_ns).round() as u64,
        None => 0,
    }
}
