//! Per-thread state, the thread registry, and the three ways a call is
//! recorded: on the owning thread's counters (fast), the same with the call
//! timed (sampled), or on the shared counters (threads that are registering,
//! have exited, or could not register).
//!
//! A thread registers at its first allocation: it arms its exit hook and
//! links its state into the registry, which [`snapshot`] walks. If the
//! registry is held too long (its holder preempted), the thread counts on
//! its own counters unlinked and links at a later sampled call, so its own
//! counts ([`ThreadState::own_totals`], what `measure` reads) are exact
//! from its first call whatever the contention.

use core::cell::Cell;
use core::ptr;
use core::sync::atomic::{
    AtomicI32, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, Ordering::Relaxed,
};

use super::clock::Tsc;
use super::counters::Counters;
use super::lock::{AtFork, SpinLock};
use crate::stats::{FUNC_COUNT, Func, Totals};

/// A thread republishes its live bytes to the global live/peak pair once it
/// has drifted this far from what it last published. The process peak is
/// exact for a single thread and within `(threads - 1) * PUBLISH_BYTES` with
/// several.
pub const PUBLISH_BYTES: i64 = 64 * 1024;

/// Calls on blocks of at least this many bytes are always timed (each stands
/// for itself), the rest are sampled: large blocks take the allocators' slow
/// paths (mmap, munmap, page-level work), so they are rare and expensive and
/// would make a sampled estimate noisy. Stratifying keeps it unbiased.
pub const EXACT_TIMING_BYTES: usize = 64 * 1024;

/// The most one sampled call's duration counts for, in TSC ticks (about
/// 70 µs at 3 GHz). The TSC measures wall time, so a call during which the
/// thread was preempted (more runnable threads than cores) lasts a whole
/// scheduler slice, milliseconds, and, standing for `time_sample_mean`
/// calls, would add seconds of allocator time that never happened: `larson`
/// (4 threads, 2 cores) showed 0.1 s to 3.5 s from run to run for about
/// 0.25 s of CPU (see docs/recording.md). A small block's allocator work, even a fresh
/// chunk from the kernel, is far below this; a call that waited on a lock
/// longer than it keeps only this much.
pub const MAX_SAMPLED_TICKS: u64 = 200_000;

const FRESH: u8 = 0; // never seen: the zeroed TLS of a new thread
const BUSY: u8 = 1; // registering or retiring: re-entrant calls go to the shared counters
const ACTIVE: u8 = 2; // registered, counting on its own counters
const RETIRED: u8 = 3; // its thread-exit hook has run
const UNTRACKED: u8 = 4; // could not register (no pthread key, or a stale link): shared counters
const IGNORED: u8 = 5; // a thread of allocmux's own: its calls are not the program's

/// What one thread records. All-zero is a valid, fresh state, so the shim can
/// place it in zero-initialised TLS (`.tbss`).
#[derive(Debug)]
#[repr(C, align(64))]
pub struct ThreadState {
    /// Per function, the calls left before the next one goes to the slow
    /// path (a timed call, the thread's first call of the function, or
    /// shared recording). A call decrements it and takes the slow path when
    /// the result is negative. It doubles as the exact call counter: the
    /// function's calls are `issued - countdown`, true after every store, so
    /// one decrement both counts and samples.
    countdown: [AtomicI32; FUNC_COUNT],
    /// The bytes small requests may still take before one goes to the slow
    /// path (`Scope::alloc`): a request subtracts its size, and one that
    /// is not below what was left ends the window. The window is at most
    /// [`EXACT_TIMING_BYTES`], so the same test catches every large
    /// request, with no comparison of its own. Like `countdown`, it
    /// doubles as the exact counter: the bytes requested are
    /// `bytes_issued - bytes_left`, wrapping (after the subtraction that
    /// takes a request to the slow path, `bytes_left` may have wrapped
    /// below zero, and the difference is still the count).
    bytes_left: AtomicU64,
    /// The sum of the byte windows armed so far (see `bytes_left`).
    bytes_issued: AtomicU64,
    /// In sample mode under the shim (`stacks::enter_sampled`), the
    /// requested-bytes count past which the next request is sampled: the
    /// byte window is then armed no further than this, so the one
    /// subtraction also finds the sampled requests. Owner only.
    sample_at: Cell<u64>,
    /// Whether `sample_at` bounds the byte window (set at the thread's
    /// first request in sample mode under the shim).
    samples_bytes: Cell<bool>,
    /// Per function, the sum of the gaps drawn so far (see `countdown`).
    issued: [AtomicU64; FUNC_COUNT],
    status: Cell<u8>,
    /// Whether the state is in the registry. An `ACTIVE` thread that could
    /// not take the registry in time when it registered counts on its own
    /// counters without it and links at a later call of the slow path
    /// ([`link_later`]); until then a snapshot taken by another thread
    /// misses its calls, as it misses any call in flight. Owner only (and
    /// a `fork` child's handler).
    linked: Cell<bool>,
    /// Highest live byte count of this thread seen at a check since the
    /// last publish.
    live_max: Cell<i64>,
    /// The part of this thread's live bytes already added to `GLOBAL_LIVE`.
    published: Cell<i64>,
    rng: Cell<u64>,
    /// Byte counters the allocator keeps for this thread itself (jemalloc's
    /// `thread.allocatedp`/`deallocatedp`), read instead of counting block
    /// sizes per call; null when the backend has none.
    external: [AtomicPtr<u64>; 2],
    /// Their values when this thread registered.
    external_base: [AtomicU64; 2],
    /// Their last values seen by this thread (a floor, should the allocator
    /// reset its state during thread exit).
    external_seen: [AtomicU64; 2],
    next: AtomicPtr<ThreadState>,
    prev: AtomicPtr<ThreadState>,
    counters: Counters,
    /// Highest live byte count of this thread seen since the mark was
    /// restarted (not lowered by a publish, unlike `live_max`, so never
    /// below it): exact where every block is reported to
    /// [`ThreadState::grew`] and [`ThreadState::shrank`], as in the Rust
    /// wrapper.
    high_water: Cell<i64>,
    /// `live_max - live`, kept per call by `grew`/`shrank` (and set
    /// wherever `live_max` is): it going negative is a new high.
    headroom: Cell<i64>,
    /// The allocator time of the calls the time sample timed since the last
    /// [`ThreadState::take_timed`], weighted as the process total counts it
    /// (a sampled call's capped ticks times the sample's mean, an exactly
    /// timed call's ticks once): what exact stack mode adds to a recorded
    /// call's stack.
    timed: Cell<u64>,
}

// SAFETY: other threads only read `counters` (atomics) and change the links
// under the registry lock; the `Cell`s are touched by the owning thread only.
unsafe impl Sync for ThreadState {}

impl Default for ThreadState {
    fn default() -> Self {
        Self::new()
    }
}

impl ThreadState {
    /// A fresh state (all zero).
    pub const fn new() -> Self {
        ThreadState {
            countdown: [const { AtomicI32::new(0) }; FUNC_COUNT],
            bytes_left: AtomicU64::new(0),
            bytes_issued: AtomicU64::new(0),
            sample_at: Cell::new(0),
            samples_bytes: Cell::new(false),
            issued: [const { AtomicU64::new(0) }; FUNC_COUNT],
            status: Cell::new(FRESH),
            linked: Cell::new(false),
            live_max: Cell::new(0),
            published: Cell::new(0),
            rng: Cell::new(0),
            external: [
                AtomicPtr::new(ptr::null_mut()),
                AtomicPtr::new(ptr::null_mut()),
            ],
            external_base: [AtomicU64::new(0), AtomicU64::new(0)],
            external_seen: [AtomicU64::new(0), AtomicU64::new(0)],
            next: AtomicPtr::new(ptr::null_mut()),
            prev: AtomicPtr::new(ptr::null_mut()),
            counters: Counters::new(),
            high_water: Cell::new(0),
            headroom: Cell::new(0),
            timed: Cell::new(0),
        }
    }

    /// Takes the weighted allocator time of the calls timed since the last
    /// take (see `timed`), leaving zero. Exact stack mode takes it before
    /// and after each recorded call, so a stack's time is an unbiased
    /// estimate from the same timed calls as the process total, and the
    /// call itself is not timed again. Owner only.
    #[inline(always)]
    pub fn take_timed(&self) -> u64 {
        self.timed.replace(0)
    }

    /// The mean allocator time of this thread's calls that the time sample
    /// timed so far (capped as the sample caps them), if any. Owner only.
    pub fn mean_sampled_ticks(&self) -> Option<u64> {
        self.counters.mean_sampled_ticks()
    }

    /// This thread's live bytes rose by `bytes` (an allocation, a growing
    /// `realloc`), for callers that report every block, as the Rust
    /// wrapper does: its peak is then exact. Owner only; one subtraction
    /// and a sign test, with the rare new high out of line.
    #[inline(always)]
    pub fn grew(&self, bytes: usize) {
        let h = self.headroom.get().wrapping_sub(bytes as i64);
        self.headroom.set(h);
        if h < 0 {
            self.new_high();
        }
    }

    /// This thread's live bytes fell by `bytes` (see [`grew`](Self::grew)).
    #[inline(always)]
    pub fn shrank(&self, bytes: usize) {
        self.headroom
            .set(self.headroom.get().wrapping_add(bytes as i64));
    }

    /// Live bytes went above `live_max`: raise it and the high-water mark.
    #[cold]
    #[inline(never)]
    fn new_high(&self) {
        self.set_live_max(self.live_now());
    }

    /// Raises `live_max` (and the high-water mark) to `live` if below, and
    /// sets the headroom to match.
    fn set_live_max(&self, live: i64) {
        let max = self.live_max.get().max(live);
        self.live_max.set(max);
        if max > self.high_water.get() {
            self.high_water.set(max);
        }
        self.headroom.set(max - live);
    }

    /// On the out-of-line paths a thread's first call can take (before
    /// it registers or samples): readies the process
    /// ([`Body::process_ready`]) and, if the process records nothing,
    /// leaves the thread's calls unrecorded. Owner only.
    #[inline(always)]
    pub(crate) fn first_sight<B: Body>(&self) {
        if self.status.get() == FRESH && !B::process_ready() {
            self.status.set(IGNORED);
        }
    }

    /// Makes this thread's calls unrecorded, for a thread of allocmux's
    /// own (the shim's writer): the calls glibc makes on its behalf (the
    /// frees at its exit) are not the program's. Call before the thread's
    /// first allocator call; owner only.
    pub fn ignore(&self) {
        if self.status.get() == FRESH {
            self.status.set(IGNORED);
        }
    }

    /// Leaves this thread's calls unrecorded until [`resume`](Self::resume),
    /// for allocmux's own work on a program thread (the shim creating its
    /// writer thread, whose TLS block glibc allocates through the hooks):
    /// those blocks are not the program's. Every call goes to the slow path,
    /// which forwards it unrecorded; the countdowns are saved, so the exact
    /// call counts (`issued - countdown`) do not see the paused calls.
    /// Owner only; not nested.
    pub fn pause(&self) -> Paused {
        // The byte window is closed too (the bytes requested unchanged):
        // in sample mode a request is counted on it before the call's
        // countdown sends the call here.
        let bytes_left = self.bytes_left.swap(0, Relaxed);
        let issued = self.bytes_issued.load(Relaxed);
        self.bytes_issued
            .store(issued.wrapping_sub(bytes_left), Relaxed);
        let saved = Paused {
            status: self.status.get(),
            countdown: core::array::from_fn(|f| self.countdown[f].swap(0, Relaxed)),
            bytes_left,
        };
        self.status.set(IGNORED);
        saved
    }

    /// Records this thread's calls again, as before [`pause`](Self::pause).
    pub fn resume(&self, saved: Paused) {
        for (c, v) in self.countdown.iter().zip(saved.countdown) {
            c.store(v, Relaxed);
        }
        let issued = self.bytes_issued.load(Relaxed);
        self.bytes_issued
            .store(issued.wrapping_add(saved.bytes_left), Relaxed);
        self.bytes_left.store(saved.bytes_left, Relaxed);
        self.status.set(saved.status);
    }

    /// Whether calls of this thread are counted on its own counters (it
    /// registered and has not run its exit hook). Owner only.
    pub fn is_active(&self) -> bool {
        self.status.get() == ACTIVE
    }

    /// This thread's live bytes (allocated minus freed, negative if it
    /// freed blocks other threads allocated).
    pub fn live_bytes(&self) -> i64 {
        self.live_now()
    }

    /// The highest [`live_bytes`](Self::live_bytes) seen (see `grew`)
    /// since the mark was last restarted.
    pub fn high_water(&self) -> i64 {
        self.high_water.get()
    }

    /// Restarts the high-water mark at the current live bytes, so a caller
    /// can measure the peak of a span from its start; returns the previous
    /// mark, for [`raise_high_water`](Self::raise_high_water) afterwards.
    /// The thread's unpublished peak goes to the process peak first, so
    /// the mark is never below `live_max` and `grew` may compare with that
    /// alone. Owner only.
    pub fn restart_high_water(&self) -> i64 {
        if self.status.get() == ACTIVE {
            self.publish();
        }
        let live = self.live_now();
        self.live_max.set(live);
        self.headroom.set(0);
        self.high_water.replace(live)
    }

    /// Raises the high-water mark to at least `v`. Owner only.
    pub fn raise_high_water(&self, v: i64) {
        if v > self.high_water.get() {
            self.high_water.set(v);
        }
    }

    /// This thread's own counts so far (not the process's): calls, bytes,
    /// timings; `peak_live_bytes` is its high-water mark.
    pub fn own_totals(&self) -> Totals {
        let mut t = Totals::default();
        self.add_to(&mut t);
        t.peak_live_bytes = self.high_water.get().max(0) as u64;
        t
    }

    /// Bytes the allocator's own counters say this thread allocated and
    /// freed since it registered (0, 0 without such counters).
    fn external_bytes(&self) -> (u64, u64) {
        let mut out = [0u64; 2];
        for (i, o) in out.iter_mut().enumerate() {
            let p = self.external[i].load(Relaxed);
            if p.is_null() {
                continue;
            }
            // SAFETY: points at the owning thread's counter, valid while the
            // thread is registered (callers hold the registry lock or are the
            // owner); only the owner writes it.
            let now = unsafe { ptr::read_volatile(p) };
            // The counters only grow; a smaller value means the allocator
            // reset its thread state (during thread exit): keep the floor.
            // Only the owner raises the floor (`note_external`), so this is
            // a plain load, with no read-modify-write on the sampled path.
            let seen = self.external_seen[i].load(Relaxed).max(now);
            *o = seen.wrapping_sub(self.external_base[i].load(Relaxed));
        }
        (out[0], out[1])
    }

    /// Records the current external counter values as the floor (owner only).
    fn note_external(&self) {
        for i in 0..2 {
            let p = self.external[i].load(Relaxed);
            if !p.is_null() {
                // SAFETY: as in `external_bytes`; called by the owning thread.
                let now = unsafe { ptr::read_volatile(p) };
                if now > self.external_seen[i].load(Relaxed) {
                    self.external_seen[i].store(now, Relaxed);
                }
            }
        }
    }

    /// This thread's live bytes: what it allocated minus what it freed.
    fn live_now(&self) -> i64 {
        let (ext_alloc, ext_freed) = self.external_bytes();
        let c = &self.counters;
        (c.bytes_allocated() + ext_alloc) as i64 - (c.bytes_freed() + ext_freed) as i64
    }

    /// Takes this thread's live bytes into account for the peak: run at the
    /// sampled calls, after every large allocation, and at exit, never on
    /// the per-call fast path.
    #[cold]
    #[inline(never)]
    fn check_peak(&self) {
        self.note_external();
        let live = self.live_now();
        self.set_live_max(live);
        if (live - self.published.get()).unsigned_abs() > PUBLISH_BYTES as u64 {
            self.publish();
        }
    }

    /// Adds this thread's unpublished live bytes to the global count and
    /// raises the global peak by the highest point seen since last time.
    #[cold]
    #[inline(never)]
    fn publish(&self) {
        let live = self.live_now();
        let published = self.published.get();
        let high = self.live_max.get().max(live);
        let before = GLOBAL_LIVE.fetch_add(live - published, Relaxed);
        GLOBAL_PEAK.fetch_max(before + (high - published), Relaxed);
        self.published.set(live);
        self.live_max.set(live);
        self.headroom.set(0);
    }

    fn next_countdown(&self) -> u32 {
        let mut rng = self.rng.get();
        let gap = geometric_gap(
            &mut rng,
            TIME_SAMPLE_MEAN.load(Relaxed),
            f64::from_bits(LN_Q_BITS.load(Relaxed)),
        );
        self.rng.set(rng);
        gap
    }

    /// One increment of a per-thread counter and nothing else: for the
    /// shim's benchmark builds that measure the cheapest exact counting.
    #[doc(hidden)]
    #[inline(always)]
    pub fn bench_count(&self, f: Func) {
        self.counters.call::<false>(f);
    }

    /// Calls of `f` so far (exact; see `countdown`).
    fn calls(&self, f: usize) -> u64 {
        let issued = self.issued[f].load(Relaxed) as i64;
        (issued - self.countdown[f].load(Relaxed) as i64).max(0) as u64
    }

    /// Bytes requested so far (exact; see `bytes_left`).
    #[inline(always)]
    pub(crate) fn requested_bytes(&self) -> u64 {
        let issued = self.bytes_issued.load(Relaxed);
        issued.wrapping_sub(self.bytes_left.load(Relaxed))
    }

    /// Subtracts a request of `requested` bytes from the byte window
    /// (see `bytes_left`); true if it was below what was left, so small,
    /// with the window going on. Otherwise the caller ends the window.
    #[inline(always)]
    pub(crate) fn take_bytes(&self, requested: usize) -> bool {
        let left = self.bytes_left.load(Relaxed);
        self.bytes_left
            .store(left.wrapping_sub(requested as u64), Relaxed);
        (requested as u64) < left
    }

    /// Ends the byte window a request of `requested` bytes (already
    /// subtracted) did not fit in: arms the next, and records a large
    /// request's histogram entry and peak.
    #[cold]
    #[inline(never)]
    fn window_ended(&self, requested: usize) {
        self.arm_bytes();
        if requested >= EXACT_TIMING_BYTES {
            large_request(self, requested);
        }
    }

    /// [`Scope::alloc_untimed`] on a request `take_bytes` did not take
    /// (already subtracted): a small one ends the window, which is armed
    /// again inline (no call, so the fast path saves no registers for
    /// one), and true is returned (the call goes on untimed); a large one
    /// is taken back out of the count, for the usual way to count it.
    #[inline(always)]
    fn window_ended_untimed(&self, requested: usize) -> bool {
        if requested < EXACT_TIMING_BYTES {
            self.arm_bytes();
            true
        } else {
            self.untake_bytes(requested);
            false
        }
    }

    /// Undoes [`take_bytes`](Self::take_bytes), for a request that goes
    /// on to be counted another way.
    #[inline(always)]
    pub(crate) fn untake_bytes(&self, requested: usize) {
        let left = self.bytes_left.load(Relaxed);
        self.bytes_left
            .store(left.wrapping_add(requested as u64), Relaxed);
    }

    /// Arms a new byte window, keeping the count of bytes requested: at
    /// most [`EXACT_TIMING_BYTES`], and where the window also finds the
    /// sampled requests (`samples_bytes`), no further than the next one
    /// (a request of `n` bytes is sampled when `n` exceeds the distance to
    /// `sample_at`, and takes the slow path when it is not below what is
    /// left: so one more than the distance is left).
    #[inline(always)]
    fn arm_bytes(&self) {
        const WINDOW: u64 = EXACT_TIMING_BYTES as u64;
        let requested = self.requested_bytes();
        let window = if self.samples_bytes.get() {
            let distance = self.sample_at.get().saturating_sub(requested);
            WINDOW.min(distance.saturating_add(1))
        } else {
            WINDOW
        };
        self.bytes_issued
            .store(requested.wrapping_add(window), Relaxed);
        self.bytes_left.store(window, Relaxed);
    }

    /// Whether the byte window finds this thread's sampled requests (see
    /// `sample_at`). Owner only.
    #[inline(always)]
    pub(crate) fn samples_bytes(&self) -> bool {
        self.samples_bytes.get()
    }

    /// Whether a request of `requested` bytes, not yet counted, is past the
    /// next sampling point. Owner only.
    #[inline(always)]
    pub(crate) fn sample_due(&self, requested: usize) -> bool {
        let distance = self.sample_at.get().saturating_sub(self.requested_bytes());
        requested as u64 > distance
    }

    /// Whether this thread's requests are the program's to sample (not
    /// one of allocmux's own threads, nor paused). Owner only.
    #[inline(always)]
    pub(crate) fn may_sample(&self) -> bool {
        self.status.get() != IGNORED
    }

    /// Puts the next sampling point `gap` bytes after those requested so
    /// far, and makes the byte window find it from now on (arming it, if
    /// the thread is registered). Owner only.
    pub(crate) fn sample_after(&self, gap: u64) {
        self.sample_at
            .set(self.requested_bytes().saturating_add(gap));
        self.samples_bytes.set(true);
        self.reopen_window();
    }

    /// Arms the byte window again (see `arm_bytes`), for a request that
    /// found it closed and goes on to be counted; only a registered
    /// thread's window is ever open. Owner only.
    #[inline(always)]
    pub(crate) fn reopen_window(&self) {
        if self.status.get() == ACTIVE {
            self.arm_bytes();
        }
    }

    /// Adds this thread's counts into `t`.
    fn add_to(&self, t: &mut Totals) {
        self.counters.add_to(t);
        for f in 0..FUNC_COUNT {
            t.calls[f] += self.calls(f);
        }
        t.bytes_requested += self.requested_bytes();
        let (ext_alloc, ext_freed) = self.external_bytes();
        t.bytes_allocated += ext_alloc;
        t.bytes_freed += ext_freed;
    }

    /// Sets every function's call count and the bytes requested to zero,
    /// with the next call of each function, and the next request, taking
    /// the slow path.
    fn reset_calls(&self) {
        // The next sampling point keeps its distance.
        let requested = self.requested_bytes();
        self.sample_at
            .set(self.sample_at.get().saturating_sub(requested));
        for f in 0..FUNC_COUNT {
            self.countdown[f].store(0, Relaxed);
            self.issued[f].store(0, Relaxed);
        }
        self.bytes_left.store(0, Relaxed);
        self.bytes_issued.store(0, Relaxed);
    }

    /// Schedules the next slow-path visit for function `f` in `gap` calls,
    /// keeping `issued - countdown` (the call count) unchanged.
    fn schedule(&self, f: usize, gap: u32) {
        let gap = gap.min(i32::MAX as u32);
        self.issued[f].store(self.issued[f].load(Relaxed) + gap as u64, Relaxed);
        self.countdown[f].store(gap as i32 - 1, Relaxed);
    }

    fn reset(&self) {
        self.reset_calls();
        self.live_max.set(0);
        self.published.set(0);
        self.high_water.set(0);
        self.headroom.set(0);
        self.counters.reset();
        self.rebase_external();
    }

    /// Counts the external counters from their current values on.
    fn rebase_external(&self) {
        for i in 0..2 {
            let p = self.external[i].load(Relaxed);
            let now = if p.is_null() {
                0
            } else {
                // SAFETY: as in `external_bytes`; called by the owning thread.
                unsafe { ptr::read_volatile(p) }
            };
            self.external_base[i].store(now, Relaxed);
            self.external_seen[i].store(now, Relaxed);
        }
    }
}

/// The gap to the next timed call: geometric with mean `mean`, so every call
/// is timed with probability 1/mean independently of the calls before it
/// (`ln_q` is ln(1 - 1/mean)). `rng` is xorshift64* state, never zero.
fn geometric_gap(rng: &mut u64, mean: u32, ln_q: f64) -> u32 {
    if mean <= 1 {
        return 1;
    }
    let u = super::random::next_uniform(rng);
    // Both logarithms are negative, so the quotient is at least 0 and its
    // floor is the truncation `as` makes (a float `floor` is a call
    // without SSE4.1). NaN or a non-negative ln_q (never set) would give
    // nonsense: time the next call.
    let g = super::random::ln(u) / ln_q;
    if g >= (u32::MAX - 1) as f64 {
        u32::MAX
    } else if g >= 0.0 {
        1 + g as u32
    } else {
        1
    }
}

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
    /// [`stacks::enter_sampled`](super::stacks::enter_sampled)).
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

#[derive(Clone, Copy)]
/// Records on the owning thread's counters; reads the clock only for
/// blocks of at least [`EXACT_TIMING_BYTES`].
struct Owned<'a>(&'a ThreadState);
/// As `Owned`, for a call the random sample picked: times it.
#[derive(Clone, Copy)]
struct Sampled<'a>(&'a ThreadState);
/// As `Owned`, for a thread's first calls: times them, each standing for itself.
#[derive(Clone, Copy)]
struct Exact<'a>(&'a ThreadState);
/// Records on the shared counters with atomic adds.
#[derive(Clone, Copy)]
struct Shared;

#[inline(always)]
fn measure<R>(op: impl FnOnce() -> R) -> (R, u64) {
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
extern "C" fn exact_time<R, F: FnOnce() -> R>(t: &ThreadState, op: F) -> R {
    let (r, ticks) = measure(op);
    t.counters.exact::<false>(ticks);
    t.timed.set(t.timed.get().wrapping_add(ticks));
    r
}

/// The histogram and peak work for a large request, out of line.
#[cold]
#[inline(never)]
fn large_request(t: &ThreadState, requested: usize) {
    t.counters.histogram::<false>(requested, 1);
    t.check_peak();
}

impl Scope for Owned<'_> {
    #[inline(always)]
    fn time<R>(&self, size: usize, op: impl FnOnce() -> R) -> R {
        if size < EXACT_TIMING_BYTES {
            op()
        } else {
            exact_time(self.0, op)
        }
    }
    #[inline(always)]
    fn alloc(&self, _f: Func, requested: usize) {
        // The call itself is counted by the countdown in `enter`, the bytes
        // by the byte countdown; the size histogram of small requests comes
        // from the timed calls (see `Sampled::alloc`), large ones are all
        // counted (`window_ended`).
        if !self.0.take_bytes(requested) {
            self.0.window_ended(requested);
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
        if self.0.take_bytes(requested) || self.0.window_ended_untimed(requested) {
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
        self.0.counters.allocated::<false>(usable);
    }
    #[inline(always)]
    fn freed(&self, usable: usize) {
        self.0.counters.freed::<false>(usable);
    }
    #[inline(always)]
    fn call(&self, _f: Func) {
        // Counted by the countdown in `enter`.
    }
    #[inline(always)]
    fn fail(&self, _f: Func) {
        self.0.counters.failed::<false>();
    }
    #[inline(always)]
    fn in_place(&self) {
        self.0.counters.in_place::<false>();
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
struct Unrecorded;

impl Scope for Unrecorded {
    fn time<R>(&self, _size: usize, op: impl FnOnce() -> R) -> R {
        op()
    }
    fn alloc(&self, _f: Func, _requested: usize) {}
    fn allocated(&self, _usable: usize) {}
    fn freed(&self, _usable: usize) {}
    fn call(&self, _f: Func) {}
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

/// A thread's own [`ThreadState`] where it lives in the thread's static
/// TLS (x86-64, initial-exec, as in the shim): at the start of the block
/// `L` names ([`TlsBlock`]). The fast path reaches its fields with
/// `%fs`-relative instructions, as a C compiler reaches an initial-exec
/// `__thread` variable: the state's address would take one instruction
/// more per call to make (the thread pointer's `add`).
///
/// A value of it holds nothing: the block's offset is read where it is
/// needed (one load, from the GOT), so a body that carries one to the slow
/// path passes no more registers than without it.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug)]
pub struct FsState<L>(core::marker::PhantomData<L>);

/// Where a block of static TLS is: its offset from the thread pointer
/// (x86-64, initial-exec: a load from the GOT, the same for every thread).
#[cfg(target_arch = "x86_64")]
pub trait TlsBlock: Copy {
    /// The offset.
    fn offset() -> usize;
}

/// The thread pointer plus `offset`: an address in the calling thread's
/// static TLS.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn tls_address(offset: usize) -> usize {
    let tp: usize;
    // SAFETY: reads the thread pointer, which `%fs:0` holds on x86-64
    // Linux and which is fixed for the thread's life (hence `pure`,
    // `nomem`: computed once per function).
    unsafe {
        core::arch::asm!(
            "mov {tp}, qword ptr fs:[0]",
            tp = out(reg) tp,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    tp.wrapping_add(offset)
}

#[cfg(target_arch = "x86_64")]
impl<L: TlsBlock> FsState<L> {
    /// The state at the start of block `L`.
    ///
    /// # Safety
    /// Every thread that uses it must have its own `ThreadState` at the
    /// start of its block `L`.
    #[inline(always)]
    pub const unsafe fn new() -> Self {
        FsState(core::marker::PhantomData)
    }

    /// The state's address, for everything off the fast path.
    #[inline(always)]
    pub fn state(self) -> &'static ThreadState {
        // SAFETY: the state is at the start of the calling thread's block
        // (`new`), zero-initialised or in use, and the thread's own.
        unsafe { &*(tls_address(L::offset()) as *const ThreadState) }
    }

    /// [`ThreadState::take_bytes`], with one `%fs`-relative `sub` and a
    /// branch on its carry or zero (the request was not below what was
    /// left).
    #[inline(always)]
    fn take_bytes(self, requested: usize) -> bool {
        let mut below = true;
        // SAFETY: the operand is the state's `bytes_left`, this thread's
        // own aligned `AtomicU64`. Only the owner changes it; others only
        // load it. A `sub` to memory without `lock` is one load and one
        // store, each single-copy atomic on x86-64: the relaxed load and
        // store of the portable version. The label only sets a flag.
        unsafe {
            core::arch::asm!(
                "sub qword ptr fs:[{o} + {at}], {v}",
                "jbe {ended}",
                o = in(reg) L::offset(),
                at = const core::mem::offset_of!(ThreadState, bytes_left),
                v = in(reg) requested,
                ended = label {
                    below = false;
                },
                options(nostack),
            );
        }
        below
    }

    /// Adds `v` to the `u64` counter `AT` bytes into the state.
    #[inline(always)]
    fn add<const AT: usize>(self, v: usize) {
        // SAFETY: `AT` is the offset of one of the state's `AtomicU64`
        // counters (the constants below), this thread's own, 8-byte
        // aligned (the state is 64-byte aligned). Only the owner adds to
        // it; others only load it. An `add` to memory without `lock` is one
        // load and one store, each single-copy atomic on x86-64: the
        // relaxed load and store of `Counters`' own unshared bump.
        unsafe {
            core::arch::asm!(
                "add qword ptr fs:[{o} + {at}], {v}",
                o = in(reg) L::offset(),
                at = const AT,
                v = in(reg) v,
                options(nostack),
            );
        }
    }
}

#[cfg(target_arch = "x86_64")]
const ALLOCATED_AT: usize = core::mem::offset_of!(ThreadState, counters) + Counters::ALLOCATED_AT;
#[cfg(target_arch = "x86_64")]
const FREED_AT: usize = core::mem::offset_of!(ThreadState, counters) + Counters::FREED_AT;

/// A thread's own state as a hook reaches it: by its address, or on
/// x86-64 from the thread pointer ([`FsState`]).
pub trait OwnState<'a>: Copy {
    /// The state's address.
    fn state(self) -> &'a ThreadState;
    /// [`ThreadState::take_bytes`] on this state.
    fn take_bytes(self, requested: usize) -> bool;
    /// [`enter`] on this state.
    ///
    /// # Safety
    /// As for [`enter`]: the calling thread's own state.
    unsafe fn enter<B: Body>(self, body: B) -> B::Out;
}

impl<'a> OwnState<'a> for &'a ThreadState {
    #[inline(always)]
    fn state(self) -> &'a ThreadState {
        self
    }
    #[inline(always)]
    fn take_bytes(self, requested: usize) -> bool {
        ThreadState::take_bytes(self, requested)
    }
    #[inline(always)]
    unsafe fn enter<B: Body>(self, body: B) -> B::Out {
        // SAFETY: forwarded from the caller.
        unsafe { enter(self, body) }
    }
}

#[cfg(target_arch = "x86_64")]
impl<L: TlsBlock> OwnState<'static> for FsState<L> {
    #[inline(always)]
    fn state(self) -> &'static ThreadState {
        FsState::state(self)
    }
    #[inline(always)]
    fn take_bytes(self, requested: usize) -> bool {
        FsState::take_bytes(self, requested)
    }
    #[inline(always)]
    unsafe fn enter<B: Body>(self, body: B) -> B::Out {
        // SAFETY: forwarded from the caller.
        unsafe { enter_fs(self, body) }
    }
}

/// [`enter`] for a state in static TLS (see [`FsState`]): the same
/// decrement and branch, and on the fast path the same recording, each
/// one `%fs`-relative instruction.
///
/// # Safety
/// As for [`enter`], with `t` the calling thread's state.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub unsafe fn enter_fs<B: Body, L: TlsBlock>(t: FsState<L>, body: B) -> B::Out {
    // SAFETY: as in `enter`, with the counter addressed from the thread
    // pointer: `t` names the calling thread's own state.
    unsafe {
        core::arch::asm!(
            "dec dword ptr fs:[{o} + {offset}]",
            "js {slow}",
            o = in(reg) L::offset(),
            offset = const core::mem::offset_of!(ThreadState, countdown) + 4 * B::FUNC as usize,
            slow = label {
                // SAFETY: forwarded from the caller.
                return unsafe { slow(body, t.state()) };
            },
            options(nostack),
        );
    }
    // SAFETY: forwarded from the caller.
    unsafe { body.run(&OwnedFs(t)) }
}

/// [`Owned`] for a state in static TLS: the fast path's adds are
/// `%fs`-relative; everything else goes through the state's address.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct OwnedFs<L>(FsState<L>);

#[cfg(target_arch = "x86_64")]
impl<L: TlsBlock> Scope for OwnedFs<L> {
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
        // As `Owned::alloc`.
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
        // As `Owned::alloc_untimed`.
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
        self.0.add::<ALLOCATED_AT>(usable);
    }
    #[inline(always)]
    fn freed(&self, usable: usize) {
        self.0.add::<FREED_AT>(usable);
    }
    #[inline(always)]
    fn call(&self, _f: Func) {
        // Counted by the countdown in `enter_fs`.
    }
    #[inline(always)]
    fn fail(&self, f: Func) {
        Owned(self.0.state()).fail(f)
    }
    #[inline(always)]
    fn in_place(&self) {
        Owned(self.0.state()).in_place()
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
unsafe extern "C" fn slow<B: Body>(body: B, t: &ThreadState) -> B::Out {
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

/// A thread's recording state while paused (see [`ThreadState::pause`]).
#[derive(Debug)]
#[must_use = "pass it to `resume`, or the thread stays unrecorded"]
pub struct Paused {
    status: u8,
    countdown: [i32; FUNC_COUNT],
    bytes_left: u64,
}

struct Registry {
    head: *mut ThreadState,
}

// SAFETY: the pointers are only followed under the registry lock, and each
// points at a registered thread's state, unlinked before that thread ends.
unsafe impl Send for Registry {}

static REGISTRY: SpinLock<Registry> = SpinLock::new(Registry {
    head: ptr::null_mut(),
});
/// Totals of exited threads and of calls recorded in the `Shared` scope.
static SHARED: Counters = Counters::new();
static GLOBAL_LIVE: AtomicI64 = AtomicI64::new(0);
static GLOBAL_PEAK: AtomicI64 = AtomicI64::new(0);
static THREADS_SEEN: AtomicU64 = AtomicU64::new(0);
static TSC_OVERHEAD: AtomicU64 = AtomicU64::new(0);
static TIME_SAMPLE_MEAN: AtomicU32 = AtomicU32::new(DEFAULT_TIME_SAMPLE_MEAN);
/// ln(1 - 1/DEFAULT_TIME_SAMPLE_MEAN), valid before `set_time_sample_mean`
/// runs (allocations come before the shim's constructor).
static LN_Q_BITS: AtomicU64 = AtomicU64::new(0xbf70_0805_5958_8b35);
/// The pthread key whose destructor retires a thread; `u32::MAX` while
/// not yet created, `u32::MAX - 1` if creation failed.
static THREAD_KEY: AtomicU32 = AtomicU32::new(KEY_UNSET);
const KEY_UNSET: u32 = u32::MAX;
const KEY_FAILED: u32 = u32::MAX - 1;
const KEY_CREATING: u32 = u32::MAX - 2;

/// How long a thread's registration waits for the registry (in yields to
/// the scheduler) before the thread counts unlinked and links later.
const REGISTER_YIELDS: u32 = 1000;

/// The default mean number of calls between two timed calls.
pub const DEFAULT_TIME_SAMPLE_MEAN: u32 = 256;

/// Sets the mean number of calls between timed calls (1 times every call),
/// and measures the cost of a clock read to subtract from each timing.
/// Call once, before threads allocate (the shim does it at start-up).
pub fn set_time_sample_mean(mean: u32) {
    let mean = mean.max(1);
    TIME_SAMPLE_MEAN.store(mean, Relaxed);
    let p = 1.0 / mean as f64;
    LN_Q_BITS.store((1.0 - p).ln().to_bits(), Relaxed);
    TSC_OVERHEAD.store(Tsc::overhead(), Relaxed);
}

/// The calibrated cost of one pair of clock reads, in ticks, to subtract
/// from a timing.
pub fn tsc_overhead() -> u64 {
    TSC_OVERHEAD.load(Relaxed)
}

/// The mean number of calls between timed calls, so that the sum of timed
/// ticks times this mean estimates the allocator's total time.
pub fn time_sample_mean() -> u32 {
    TIME_SAMPLE_MEAN.load(Relaxed)
}

/// Threads of the program that have made an allocation call in this
/// process, including those counting on the shared counters because they
/// could not register.
pub fn threads_seen() -> u64 {
    THREADS_SEEN.load(Relaxed)
}

unsafe extern "C" fn on_thread_exit(state: *mut libc::c_void) {
    // SAFETY: the key's value is the exiting thread's own state, set by
    // `register`, and the thread is still running its destructors.
    unsafe { retire_thread(&*(state as *const ThreadState)) }
}

fn thread_key() -> Option<libc::pthread_key_t> {
    loop {
        match THREAD_KEY.load(Relaxed) {
            KEY_FAILED => return None,
            KEY_CREATING => core::hint::spin_loop(),
            KEY_UNSET => {
                if THREAD_KEY
                    .compare_exchange(KEY_UNSET, KEY_CREATING, Relaxed, Relaxed)
                    .is_ok()
                {
                    let stored = match create_last_inline_key() {
                        Some(key) if key < KEY_CREATING => key,
                        _ => KEY_FAILED,
                    };
                    THREAD_KEY.store(stored, Relaxed);
                }
            }
            key => return Some(key),
        }
    }
}

/// The number of pthread keys glibc keeps in the thread descriptor; a
/// thread's first `pthread_setspecific` of a higher key allocates.
const INLINE_KEYS: libc::pthread_key_t = 32;

/// Creates the thread-exit key as the last one glibc keeps in the thread
/// descriptor (number 31) if it is free, else the lowest free one.
///
/// glibc runs key destructors in rounds (at most four), each visiting the
/// keys in order of their numbers and calling the destructor of every key
/// whose value is set *at the visit*. A thread whose first allocation comes
/// in another key's destructor registers then and sets this key: with a
/// number above the program's keys, this key is visited later in the same
/// round and retires the thread even in the last round. With a low number,
/// a registration in the last round left the thread linked after its exit,
/// its state in a stack that glibc unmaps (the writer then read unmapped
/// memory: `hostile last-round` in the shim's tests). Only keys numbered
/// 32 and up, which a program creates after 31 others, still run after it.
fn create_last_inline_key() -> Option<libc::pthread_key_t> {
    let mut made = [0 as libc::pthread_key_t; INLINE_KEYS as usize];
    let mut n = 0;
    let mut chosen = None;
    while n < made.len() {
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: valid out-pointer and destructor; pthread_key_create
        // does not allocate.
        if unsafe { libc::pthread_key_create(&mut key, Some(on_thread_exit)) } != 0 {
            break;
        }
        made[n] = key;
        n += 1;
        if key >= INLINE_KEYS - 1 {
            break;
        }
    }
    if n > 0 {
        // The key numbered 31, or failing that the first one made (the
        // lowest free number, as before).
        let keep = if made[n - 1] == INLINE_KEYS - 1 {
            n - 1
        } else {
            0
        };
        chosen = Some(made[keep]);
        for (i, &k) in made[..n].iter().enumerate() {
            if i != keep {
                // SAFETY: a key made above and never set.
                unsafe { libc::pthread_key_delete(k) };
            }
        }
    }
    chosen
}

/// Creates the thread-exit key now, before the program's (see
/// `create_last_inline_key`).
pub fn prepare_thread_key() -> bool {
    thread_key().is_some()
}

fn register(t: &ThreadState, external: Option<[*mut u64; 2]>) -> bool {
    t.status.set(BUSY);
    // Counted whether or not registration succeeds: a thread that falls
    // back to the shared counters is still one of the program's threads.
    THREADS_SEEN.fetch_add(1, Relaxed);
    if let Some(ext) = external {
        for (slot, p) in t.external.iter().zip(ext) {
            slot.store(p, Relaxed);
        }
    }
    t.rebase_external();
    let Some(key) = thread_key() else {
        t.status.set(UNTRACKED);
        return false;
    };
    t.rng
        .set(Tsc::now() ^ (t as *const ThreadState as u64).rotate_left(32) | 1);
    t.linked.set(false);
    // Bounded: a thread's first allocation may come while it holds a lock
    // of the program's (a stream's, in `getline`), so it must not wait on a
    // registry that a signal handler's interrupted frame holds. Past the
    // bound (usually a holder preempted, or its virtual CPU descheduled)
    // it counts on its own counters unlinked and links later.
    if let Some(mut reg) = REGISTRY.lock_within(REGISTER_YIELDS)
        && !link(&mut reg, t)
    {
        return false;
    }
    // SAFETY: `key` is a live key; a non-NULL value arms the destructor.
    if unsafe { libc::pthread_setspecific(key, t as *const ThreadState as *const libc::c_void) }
        != 0
    {
        retire_thread(t);
        return false;
    }
    t.status.set(ACTIVE);
    true
}

/// Puts `t` at the head of the registry and marks it linked; or, if it is
/// in the list already (see [`is_linked`]), leaves it there and makes the
/// thread count on the shared counters from now on (the stale entry still
/// adds what the state counted so far). Returns whether it linked.
fn link(reg: &mut Registry, t: &ThreadState) -> bool {
    let me = t as *const ThreadState as *mut ThreadState;
    if is_linked(reg, me) {
        t.status.set(UNTRACKED);
        return false;
    }
    t.prev.store(ptr::null_mut(), Relaxed);
    t.next.store(reg.head, Relaxed);
    if !reg.head.is_null() {
        // SAFETY: registered states stay valid while linked (lock held).
        unsafe { (*reg.head).prev.store(me, Relaxed) };
    }
    reg.head = me;
    t.linked.set(true);
    true
}

/// Links a thread that registered without the registry (see `register`),
/// if the registry is free now; else a later slow call tries again. Never
/// waits, for the reason `register` waits only so long.
#[cold]
#[inline(never)]
fn link_later(t: &ThreadState) {
    if let Some(mut reg) = REGISTRY.try_lock() {
        link(&mut reg, t);
    }
}

/// Whether `me` is already in the registry: a state left there by a dead
/// thread that allocated after its key destructors had run (so nothing
/// unlinked it), whose TLS block a new thread now has. Linking it again
/// would make a cycle; one walk per thread start rules that out.
fn is_linked(reg: &Registry, me: *mut ThreadState) -> bool {
    let mut p = reg.head;
    while !p.is_null() {
        if p == me {
            return true;
        }
        // SAFETY: linked states are valid while the lock is held.
        p = unsafe { (*p).next.load(Relaxed) };
    }
    false
}

/// Folds an exiting thread's counts into the shared totals and unlinks it
/// (if it linked). Calls the thread makes afterwards (from later
/// destructors) are recorded on the shared counters. Runs from the pthread
/// key destructor.
pub fn retire_thread(t: &ThreadState) {
    let status = t.status.get();
    if status != ACTIVE && status != BUSY {
        return;
    }
    t.status.set(BUSY);
    t.note_external();
    t.publish();
    let (ext_alloc, ext_freed) = t.external_bytes();
    {
        let mut reg = REGISTRY.lock();
        if t.linked.replace(false) {
            let next = t.next.load(Relaxed);
            let prev = t.prev.load(Relaxed);
            // SAFETY: neighbours are registered states, valid while linked.
            unsafe {
                if !next.is_null() {
                    (*next).prev.store(prev, Relaxed);
                }
                if prev.is_null() {
                    if core::ptr::eq(reg.head, t) {
                        reg.head = next;
                    }
                } else {
                    (*prev).next.store(next, Relaxed);
                }
            }
        }
        SHARED.absorb(&t.counters);
        for f in Func::ALL {
            SHARED.add_calls(f, t.calls(f as usize));
        }
        SHARED.request::<true>(t.requested_bytes() as usize);
        SHARED.allocated::<true>(ext_alloc as usize);
        SHARED.freed::<true>(ext_freed as usize);
    }
    t.status.set(RETIRED);
    t.reset_calls();
}

/// The process totals so far: the shared counters plus every live thread's.
///
/// `current`, if given and registered, first publishes its live bytes, so a
/// single-threaded program's peak is exact at exit; and if it is not linked
/// into the registry yet (see `register`), its own counts are added, so a
/// thread's snapshot always has its own calls.
pub fn snapshot(current: Option<&ThreadState>) -> Totals {
    let mut tot = Totals::default();
    if let Some(t) = current
        && t.status.get() == ACTIVE
    {
        t.check_peak();
        t.publish();
        if !t.linked.get() {
            // Not in the walk below yet: its own calls are still counted.
            t.add_to(&mut tot);
        }
    }
    {
        // Held by this very thread only when a signal handler that
        // interrupted a registration or a retirement takes the snapshot
        // (on its way to `_exit`): the list is then read without the lock,
        // which is safe because links are only followed through `next`,
        // set before a state is published at the head; the thread being
        // retired may be missed.
        let _reg = REGISTRY.lock_unless_held_here();
        // SAFETY: either the lock is held, or only this thread's
        // interrupted frame changes the list (see above).
        let reg = unsafe { &*REGISTRY.as_ptr() };
        SHARED.add_to(&mut tot);
        let mut p = reg.head;
        while !p.is_null() {
            // SAFETY: linked states are valid while the lock is held.
            unsafe {
                (*p).add_to(&mut tot);
                p = (*p).next.load(Relaxed);
            }
        }
    }
    let live = tot.bytes_allocated as i64 - tot.bytes_freed as i64;
    tot.peak_live_bytes = GLOBAL_PEAK.load(Relaxed).max(live).max(0) as u64;
    tot
}

/// The process's high-water mark of live heap bytes so far, as the
/// profile's `peak_live_bytes` has it (without the calls in flight).
pub fn peak_live_bytes() -> u64 {
    GLOBAL_PEAK.load(Relaxed).max(0) as u64
}

/// The process's live heap bytes now: what every thread allocated minus
/// what it freed, summed over the registry and the shared counters (0 if
/// more was freed than allocated, as in a forked child freeing its
/// parent's blocks).
///
/// For a periodic sampler such as the memory timeline, not for the
/// allocation path: it takes the registry lock and reads a few counters per
/// registered thread. It is exact up to the calls in flight, unlike the
/// published global count behind the peak, which a thread updates only at
/// its sampled calls and large allocations (a thread that frees a large
/// block and then sleeps would otherwise look as if it still held it).
pub fn live_bytes() -> u64 {
    // Under the lock: a retiring thread moves its counts to SHARED there.
    // Without it (0) if this thread holds it: a signal handler's timeline
    // sample that interrupted a registration.
    let Some(reg) = REGISTRY.lock_unless_held_here() else {
        return 0;
    };
    let (mut allocated, mut freed) = (SHARED.bytes_allocated(), SHARED.bytes_freed());
    let mut p = reg.head;
    while !p.is_null() {
        // SAFETY: linked states are valid while the lock is held.
        let t = unsafe { &*p };
        let (ext_alloc, ext_freed) = t.external_bytes();
        allocated += t.counters.bytes_allocated() + ext_alloc;
        freed += t.counters.bytes_freed() + ext_freed;
        p = t.next.load(Relaxed);
    }
    drop(reg);
    allocated.saturating_sub(freed)
}

/// `fork` child handler of a recorder whose child keeps its parent's
/// counts as its history (the Rust wrapper): only frees the registry if a
/// thread that no longer exists held it. The list stays walkable whatever
/// step of linking or unlinking that thread was at, since it is only
/// followed through `next`; a thread it was retiring may be missed.
pub fn after_fork_child_keeping_counts() {
    // SAFETY: this is the child of a fork, still with one thread.
    unsafe { REGISTRY.after_fork_in_child() };
}

/// `fork` child handler: the child starts from zero, with the forking
/// thread (`current`) as its only thread. Nothing is held across the fork
/// (see `SpinLock`); if the registry was being changed by
/// an interrupted frame of this very thread (the fork came from a signal
/// handler), it is left to that frame, and the child's figures include
/// its parent's.
pub fn after_fork_child(current: &ThreadState) {
    // SAFETY: this is the child of a fork, still with one thread.
    if unsafe { REGISTRY.after_fork_in_child() } == AtFork::HeldHere {
        return;
    }
    let mut reg = REGISTRY.lock();
    reg.head = ptr::null_mut();
    SHARED.reset();
    GLOBAL_LIVE.store(0, Relaxed);
    GLOBAL_PEAK.store(0, Relaxed);
    // The forking thread has made calls unless it is allocmux's own.
    let seen = !matches!(current.status.get(), FRESH | IGNORED);
    THREADS_SEEN.store(seen as u64, Relaxed);
    if current.status.get() == ACTIVE {
        current.reset();
        current.next.store(ptr::null_mut(), Relaxed);
        current.prev.store(ptr::null_mut(), Relaxed);
        reg.head = current as *const ThreadState as *mut ThreadState;
        current.linked.set(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Alloc(usize);
    impl Body for Alloc {
        type Out = ();
        const FUNC: Func = Func::Malloc;
        unsafe fn run<S: Scope>(self, s: &S) {
            s.time(self.0, || ());
            s.allocated(self.0);
            s.alloc(Func::Malloc, self.0);
        }
    }
    struct Free(usize);
    impl Body for Free {
        type Out = ();
        const FUNC: Func = Func::Free;
        unsafe fn run<S: Scope>(self, s: &S) {
            s.call(Func::Free);
            s.freed(self.0);
        }
    }

    #[test]
    fn the_byte_countdown_counts_every_request_and_sees_every_large_one() {
        let t = ThreadState::new();
        let owned = Owned(&t);
        let (mut want, mut untimed, mut large) = (0u64, 0, 0);
        // Small requests across many windows, some landing exactly on a
        // window's end, large ones between them (one exactly at the
        // threshold, one whose subtraction wraps the countdown far below
        // zero), through both ways a body records a request.
        let sizes = (0..20_000u64)
            .map(|i| (i * 7919) % 3000)
            .chain([EXACT_TIMING_BYTES as u64 - 1, 1])
            .chain([EXACT_TIMING_BYTES as u64, 5 << 20, u64::MAX / 2, 0, 16]);
        for (i, n) in sizes.enumerate() {
            let n = n as usize;
            if i % 2 == 0 {
                owned.alloc(Func::Malloc, n);
                want = want.wrapping_add(n as u64);
            } else if owned.alloc_untimed(Func::Malloc, n, || true, || false) {
                assert!(
                    n < EXACT_TIMING_BYTES,
                    "a request of {n} bytes went untimed"
                );
                untimed += 1;
                want = want.wrapping_add(n as u64);
            } else {
                // The usual way counts it.
                assert!(
                    n >= EXACT_TIMING_BYTES,
                    "a request of {n} bytes was not untimed"
                );
                owned.alloc(Func::Malloc, n);
                want = want.wrapping_add(n as u64);
            }
            if n >= EXACT_TIMING_BYTES {
                large += 1;
            }
            assert_eq!(t.requested_bytes(), want, "after request {i} ({n} bytes)");
            let left = t.bytes_left.load(Relaxed);
            assert!(
                (1..=EXACT_TIMING_BYTES as u64).contains(&left),
                "{left} left"
            );
        }
        assert!(untimed > 9_000);
        let mut totals = Totals::default();
        t.add_to(&mut totals);
        assert_eq!(totals.bytes_requested, want);
        // Every large request made its histogram entry (the small ones'
        // come from timed calls, none here).
        assert_eq!(totals.size_hist.iter().sum::<u64>(), large);
    }

    #[test]
    fn a_preempted_sampled_call_counts_at_most_the_cap() {
        // A 2 ms call, as a thread preempted inside a small malloc sees it.
        struct Slow;
        impl Body for Slow {
            type Out = ();
            const FUNC: Func = Func::Malloc;
            unsafe fn run<S: Scope>(self, s: &S) {
                s.time(16, || {
                    std::thread::sleep(std::time::Duration::from_millis(2))
                });
            }
        }
        let t = ThreadState::new();
        // SAFETY: `Slow` touches nothing; the state is private to the test.
        unsafe { Slow.run(&Sampled(&t)) };
        let mut totals = Totals::default();
        t.counters.add_to(&mut totals);
        assert_eq!(totals.timed_calls, 1);
        assert_eq!(totals.timed_ticks, MAX_SAMPLED_TICKS);
    }

    // One test owns the process-wide registry; the others use private states.
    #[test]
    fn counts_peak_and_thread_exit() {
        set_time_sample_mean(4);
        std::thread::spawn(|| {
            // Lives as long as the thread, as TLS does: the exit hook reads it.
            let t: &ThreadState = Box::leak(Box::new(ThreadState::new()));
            for _ in 0..1000 {
                // SAFETY: `t` stands for this thread's state.
                unsafe { enter(t, Alloc(100)) };
            }
            // SAFETY: `t` stands for this thread's state.
            unsafe { enter(t, Alloc(1 << 20)) };
            assert_eq!(live_bytes(), 100_000 + (1 << 20));
            // SAFETY: `t` stands for this thread's state.
            unsafe { enter(t, Free(1 << 20)) };
            // A large free is not published to the global count until a
            // sampled call, but the sum over threads sees it at once.
            assert_eq!(live_bytes(), 100_000);
            for _ in 0..1000 {
                // SAFETY: `t` stands for this thread's state.
                unsafe { enter(t, Free(100)) };
            }
            let s = snapshot(Some(t));
            assert_eq!(s.calls_of(Func::Malloc), 1001);
            assert_eq!(s.calls_of(Func::Free), 1001);
            assert_eq!(s.bytes_allocated, 100_000 + (1 << 20));
            assert_eq!(s.live_bytes(), 0);
            assert_eq!(s.peak_live_bytes, 100_000 + (1 << 20));
            // The thread's first malloc and the 1 MiB one are timed exactly
            // (this test's Free body times nothing), a sample of the rest.
            assert_eq!(s.exact_calls, 2);
            assert!(
                s.timed_calls > 0 && s.timed_calls < 1000,
                "{}",
                s.timed_calls
            );
            retire_thread(t);
            // After the exit hook, calls land on the shared counters.
            // SAFETY: `t` stands for this thread's state.
            unsafe { enter(t, Alloc(8)) };
            let s = snapshot(None);
            assert_eq!(s.calls_of(Func::Malloc), 1002);
            assert_eq!(s.bytes_allocated, 100_008 + (1 << 20));
            // The retired thread's counts are in the shared ones.
            assert_eq!(live_bytes(), 8);
        })
        .join()
        .unwrap();
        assert_eq!(threads_seen(), 1);

        // A thread that cannot take the registry in time (its holder was
        // preempted) counts on its own counters from its first call, and
        // links at a later slow call once the registry is free.
        let unlinked_thread = |calls_after_release: u64| {
            let before = snapshot(None).calls_of(Func::Malloc);
            let (to_main, from_thread) = std::sync::mpsc::channel();
            let (to_thread, from_main) = std::sync::mpsc::channel::<()>();
            let held = REGISTRY.lock();
            let thread = std::thread::spawn(move || {
                let t: &ThreadState = Box::leak(Box::new(ThreadState::new()));
                // SAFETY: `t` stands for this thread's state.
                unsafe { enter(t, Alloc(8)) };
                to_main.send(t).unwrap();
                from_main.recv().unwrap();
                let mut calls = 1;
                while calls < 1 + calls_after_release {
                    // SAFETY: `t` stands for this thread's state.
                    unsafe { enter(t, Alloc(8)) };
                    calls += 1;
                }
                assert_eq!(snapshot(Some(t)).calls_of(Func::Malloc), before + calls);
                (calls, t.linked.get())
            });
            let t = from_thread.recv().unwrap();
            assert_eq!(t.status.get(), ACTIVE);
            assert!(!t.linked.get());
            assert_eq!(t.own_totals().calls_of(Func::Malloc), 1);
            // Read while this thread holds the registry: the unlinked
            // thread's call is not in the walk yet.
            assert_eq!(snapshot(None).calls_of(Func::Malloc), before);
            drop(held);
            to_thread.send(()).unwrap();
            let (calls, linked) = thread.join().unwrap();
            // Linked or not, its exit hook folded every call in.
            assert_eq!(snapshot(None).calls_of(Func::Malloc), before + calls);
            linked
        };
        // Exits before another slow call: retired without ever linking.
        assert!(!unlinked_thread(0));
        // With a mean gap of 4, a few hundred calls reach the slow path.
        assert!(unlinked_thread(400));
        assert_eq!(threads_seen(), 3);
    }

    #[test]
    fn default_sampling_constant_matches_default_mean() {
        let want = (1.0f64 - 1.0 / DEFAULT_TIME_SAMPLE_MEAN as f64).ln();
        assert_eq!(f64::from_bits(0xbf70_0805_5958_8b35), want);
    }

    #[test]
    fn countdown_is_geometric_with_the_set_mean() {
        let mut rng = 12345;
        let ln_q = (1.0f64 - 1.0 / 64.0).ln();
        let n = 200_000;
        let gaps: Vec<u32> = (0..n).map(|_| geometric_gap(&mut rng, 64, ln_q)).collect();
        let mean = gaps.iter().map(|&g| g as f64).sum::<f64>() / n as f64;
        assert!((mean - 64.0).abs() < 1.0, "mean gap {mean}");
        // Memoryless: P(gap = 1) = 1/64.
        let ones = gaps.iter().filter(|&&g| g == 1).count() as f64 / n as f64;
        assert!((ones - 1.0 / 64.0).abs() < 0.002, "P(gap=1) = {ones}");
        assert_eq!(geometric_gap(&mut rng, 1, 0.0), 1);
    }
}
