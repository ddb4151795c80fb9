//! Counters of allocation activity, as atomics so other threads may read them.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

use allocmux_format::{FUNC_COUNT, Func, SIZE_BUCKETS, Totals};

/// Buckets kept per thread: one per bit length of the request (0 to 64),
/// so the hot path needs no clamp; folded into `SIZE_BUCKETS` on read.
const RAW_BUCKETS: usize = 65;

/// One set of counters: a thread's own, or the shared totals.
///
/// A thread's own counters are written only by that thread, with a relaxed
/// load and store (no read-modify-write, so no bus lock); readers on other
/// threads see each counter whole. Shared counters use `fetch_add`.
#[derive(Debug)]
#[repr(C)]
pub struct Counters {
    calls: [AtomicU64; FUNC_COUNT],
    failed_calls: AtomicU64,
    /// `free(NULL)` calls (also in `calls`, as every `free` is; see
    /// `Totals::null_frees`).
    null_frees: AtomicU64,
    bytes_requested: AtomicU64,
    bytes_allocated: AtomicU64,
    bytes_freed: AtomicU64,
    timed_calls: AtomicU64,
    timed_ticks: AtomicU64,
    /// Sum of the squares of the sampled calls' ticks, for the estimate's
    /// interval (a sampled call counts at most `MAX_SAMPLED_TICKS`, so a
    /// square fits in 36 bits).
    timed_ticks_sq: AtomicU64,
    exact_calls: AtomicU64,
    exact_ticks: AtomicU64,
    size_hist: [AtomicU64; RAW_BUCKETS],
    /// `realloc`s that returned the block they were given (grown or shrunk
    /// in place); counted by the Rust wrapper, where the pointers are at hand.
    reallocs_in_place: AtomicU64,
}

#[inline(always)]
fn bump<const SHARED: bool>(a: &AtomicU64, v: u64) {
    if SHARED {
        a.fetch_add(v, Relaxed);
    } else {
        a.store(a.load(Relaxed).wrapping_add(v), Relaxed);
    }
}

impl Default for Counters {
    fn default() -> Self {
        Self::new()
    }
}

impl Counters {
    /// Where the byte counts a call on the fast path adds to are, from the
    /// start of the struct: for code that adds to them through another
    /// address (see `thread::FsState`, x86-64 only).
    #[cfg(target_arch = "x86_64")]
    pub(crate) const ALLOCATED_AT: usize = core::mem::offset_of!(Counters, bytes_allocated);
    #[cfg(target_arch = "x86_64")]
    pub(crate) const FREED_AT: usize = core::mem::offset_of!(Counters, bytes_freed);

    /// All zero.
    pub const fn new() -> Self {
        #[allow(clippy::declare_interior_mutable_const)]
        const Z: AtomicU64 = AtomicU64::new(0);
        Counters {
            calls: [Z; FUNC_COUNT],
            failed_calls: Z,
            null_frees: Z,
            bytes_requested: Z,
            bytes_allocated: Z,
            bytes_freed: Z,
            timed_calls: Z,
            timed_ticks: Z,
            timed_ticks_sq: Z,
            exact_calls: Z,
            exact_ticks: Z,
            size_hist: [Z; RAW_BUCKETS],
            reallocs_in_place: Z,
        }
    }

    /// Counts a call that handed out a block for a request of `requested` bytes.
    #[inline(always)]
    pub fn alloc<const SHARED: bool>(&self, f: Func, requested: usize) {
        bump::<SHARED>(&self.calls[f as usize], 1);
        self.request::<SHARED>(requested);
        self.histogram::<SHARED>(requested, 1);
    }

    /// Counts the bytes of a request, not the call.
    #[inline(always)]
    pub fn request<const SHARED: bool>(&self, requested: usize) {
        bump::<SHARED>(&self.bytes_requested, requested as u64);
    }

    /// Adds `weight` to the histogram bucket of a `requested`-byte request.
    #[inline(always)]
    pub fn histogram<const SHARED: bool>(&self, requested: usize, weight: u64) {
        let bucket = (usize::BITS - requested.leading_zeros()) as usize;
        bump::<SHARED>(&self.size_hist[bucket], weight);
    }

    /// Counts a failure, not the call.
    #[inline(always)]
    pub fn failed<const SHARED: bool>(&self) {
        bump::<SHARED>(&self.failed_calls, 1);
    }

    /// Counts a `free(NULL)`, not the call.
    #[inline(always)]
    pub fn null_free<const SHARED: bool>(&self) {
        bump::<SHARED>(&self.null_frees, 1);
    }

    /// Adds calls counted elsewhere (a retiring thread's) to shared counters.
    pub fn add_calls(&self, f: Func, n: u64) {
        self.calls[f as usize].fetch_add(n, Relaxed);
    }

    /// Counts the usable size of a block handed out.
    #[inline(always)]
    pub fn allocated<const SHARED: bool>(&self, usable: usize) {
        bump::<SHARED>(&self.bytes_allocated, usable as u64);
    }

    /// Usable bytes handed out so far.
    #[inline]
    pub fn bytes_allocated(&self) -> u64 {
        self.bytes_allocated.load(Relaxed)
    }

    /// Usable bytes freed so far.
    #[inline]
    pub fn bytes_freed(&self) -> u64 {
        self.bytes_freed.load(Relaxed)
    }

    /// Counts a freed block of `usable` bytes (the call itself is counted by
    /// [`Counters::call`], since `realloc` frees without being `free`).
    #[inline(always)]
    pub fn freed<const SHARED: bool>(&self, usable: usize) {
        bump::<SHARED>(&self.bytes_freed, usable as u64);
    }

    /// Counts a call that handed out nothing (`free`, `malloc_usable_size`).
    #[inline(always)]
    pub fn call<const SHARED: bool>(&self, f: Func) {
        bump::<SHARED>(&self.calls[f as usize], 1);
    }

    /// Counts a failed call (NULL or an error code).
    #[inline(always)]
    pub fn fail<const SHARED: bool>(&self, f: Func) {
        bump::<SHARED>(&self.calls[f as usize], 1);
        bump::<SHARED>(&self.failed_calls, 1);
    }

    /// Counts a `realloc` that kept its block where it was.
    #[inline(always)]
    pub fn in_place<const SHARED: bool>(&self) {
        bump::<SHARED>(&self.reallocs_in_place, 1);
    }

    /// Adds one call of `ticks` TSC ticks that was timed because the random
    /// sample picked it (it stands for `time_sample_mean` calls).
    #[inline(always)]
    pub fn sampled<const SHARED: bool>(&self, ticks: u64) {
        bump::<SHARED>(&self.timed_calls, 1);
        bump::<SHARED>(&self.timed_ticks, ticks);
        bump::<SHARED>(&self.timed_ticks_sq, ticks.saturating_mul(ticks));
    }

    /// Adds one call of `ticks` TSC ticks that was timed because every call
    /// of its kind is (large blocks, a thread's first calls): it stands for
    /// itself only.
    #[inline(always)]
    pub fn exact<const SHARED: bool>(&self, ticks: u64) {
        bump::<SHARED>(&self.exact_calls, 1);
        bump::<SHARED>(&self.exact_ticks, ticks);
    }

    /// Adds these counters into `t` (peak excluded: it is not a counter).
    pub fn add_to(&self, t: &mut Totals) {
        for (a, c) in t.calls.iter_mut().zip(&self.calls) {
            *a += c.load(Relaxed);
        }
        for (raw, c) in self.size_hist.iter().enumerate() {
            t.size_hist[raw.min(SIZE_BUCKETS - 1)] += c.load(Relaxed);
        }
        t.failed_calls += self.failed_calls.load(Relaxed);
        t.null_frees += self.null_frees.load(Relaxed);
        t.bytes_requested += self.bytes_requested.load(Relaxed);
        t.bytes_allocated += self.bytes_allocated.load(Relaxed);
        t.bytes_freed += self.bytes_freed.load(Relaxed);
        t.timed_calls += self.timed_calls.load(Relaxed);
        t.timed_ticks += self.timed_ticks.load(Relaxed);
        t.timed_ticks_sq = t
            .timed_ticks_sq
            .saturating_add(self.timed_ticks_sq.load(Relaxed));
        t.exact_calls += self.exact_calls.load(Relaxed);
        t.exact_ticks += self.exact_ticks.load(Relaxed);
        t.reallocs_in_place += self.reallocs_in_place.load(Relaxed);
    }

    /// Adds another set of counters into these (shared) ones.
    pub fn absorb(&self, o: &Counters) {
        let mut t = Totals::default();
        o.add_to(&mut t);
        for (c, v) in self.calls.iter().zip(t.calls) {
            c.fetch_add(v, Relaxed);
        }
        // Folded buckets go back to their first raw bucket (same fold on read).
        for (c, v) in self.size_hist.iter().zip(t.size_hist) {
            c.fetch_add(v, Relaxed);
        }
        self.failed_calls.fetch_add(t.failed_calls, Relaxed);
        self.null_frees.fetch_add(t.null_frees, Relaxed);
        self.bytes_requested.fetch_add(t.bytes_requested, Relaxed);
        self.bytes_allocated.fetch_add(t.bytes_allocated, Relaxed);
        self.bytes_freed.fetch_add(t.bytes_freed, Relaxed);
        self.timed_calls.fetch_add(t.timed_calls, Relaxed);
        self.timed_ticks.fetch_add(t.timed_ticks, Relaxed);
        self.timed_ticks_sq.fetch_add(t.timed_ticks_sq, Relaxed);
        self.exact_calls.fetch_add(t.exact_calls, Relaxed);
        self.exact_ticks.fetch_add(t.exact_ticks, Relaxed);
        self.reallocs_in_place
            .fetch_add(t.reallocs_in_place, Relaxed);
    }

    /// Sets every counter to zero.
    pub fn reset(&self) {
        for c in self.calls.iter().chain(&self.size_hist) {
            c.store(0, Relaxed);
        }
        for c in [
            &self.failed_calls,
            &self.null_frees,
            &self.bytes_requested,
            &self.bytes_allocated,
            &self.bytes_freed,
            &self.timed_calls,
            &self.timed_ticks,
            &self.timed_ticks_sq,
            &self.exact_calls,
            &self.exact_ticks,
            &self.reallocs_in_place,
        ] {
            c.store(0, Relaxed);
        }
    }
}
