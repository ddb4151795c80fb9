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
use allocmux_format::{FUNC_COUNT, Func, Totals};

mod fs;
mod registry;
mod scope;
#[cfg(test)]
mod tests;

pub use fs::*;
pub use registry::*;
pub use scope::*;

/// A thread republishes its live bytes to the global live/peak pair once it
/// has drifted this far from what it last published. The process peak is
/// exact for a single thread and within `(threads - 1) * PUBLISH_BYTES` with
/// several.
pub const PUBLISH_BYTES: i64 = 64 * 1024;

/// Calls on blocks of at least this many bytes are always timed (each stands
/// for itself), the rest are sampled: large blocks take the allocators' slow
/// paths (mmap, munmap, page-level work), so they are rare and expensive and
/// would make a sampled estimate noisy. Stratifying keeps it unbiased.
pub use allocmux_format::EXACT_TIMING_BYTES;

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
        null_frees_apart(&mut t);
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

/// Takes the `free(NULL)` calls out of the `free` calls: the countdown in
/// [`enter`] counts a call before its body sees the NULL, and the shared
/// counters count it as a `free` too, so inside the recorder `calls[Free]`
/// holds both; totals leave it (process and thread snapshots) with
/// `calls[Free]` the frees of blocks and `null_frees` the rest.
pub(crate) fn null_frees_apart(t: &mut Totals) {
    let frees = &mut t.calls[Func::Free as usize];
    *frees = frees.saturating_sub(t.null_frees);
}
