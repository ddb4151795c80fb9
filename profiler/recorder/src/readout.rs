//! Reading what [`Counting`](crate::Counting) counted, as [`Stats`]: for
//! the process ([`snapshot`]) or for one closure on one thread
//! ([`measure`]). The counters themselves are [`Counters`](crate::Counters).

use allocmux_format::Counts;

use crate::{ticks_to_ns, time_sample_mean, with_thread};

/// The process's counts so far, from every thread, including threads
/// that have exited: what [`Counting::snapshot`](crate::Counting::snapshot)
/// returns, without naming the static. All zero if no
/// [`Counting`](crate::Counting) is the global allocator.
///
/// It takes a short lock shared with threads starting and exiting, never
/// one that an allocation takes.
pub fn snapshot() -> Counts {
    let totals = with_thread(|t| crate::snapshot(Some(t)));
    let (mut stats, ticks) = Counts::from_totals(&totals, time_sample_mean());
    stats.allocator_ns = ticks_to_ns(ticks);
    stats
}

/// Runs `f` and returns its result with what it allocated, on the calling
/// thread only: exact, from this thread's own counters, so allocations of
/// other threads meanwhile do not leak in (nor do those of threads `f`
/// spawns; use [`snapshot`] differences for those).
///
/// `peak_live_bytes` is the highest the thread's live bytes rose above
/// their value when `f` started. Calls nest. All zero if no
/// [`Counting`](crate::Counting) is the global allocator, or when called
/// from a thread-local destructor after the thread's exit hook (its calls
/// are on the shared counters by then).
///
/// ```no_run
/// #[global_allocator]
/// static ALLOC: allocmux::Counting<std::alloc::System> =
///     allocmux::Counting::new(std::alloc::System);
///
/// let (v, stats) = allocmux::measure(|| vec![0u8; 1000]);
/// assert_eq!((stats.allocs, stats.bytes_allocated), (1, 1000));
/// # drop(v);
/// ```
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, Counts) {
    /// Restores the thread's high-water mark (raised by whatever the span
    /// reached) even if `f` panics.
    struct Mark(i64);
    impl Drop for Mark {
        fn drop(&mut self) {
            let outer = self.0;
            with_thread(|t| t.raise_high_water(outer));
        }
    }
    let (before, start_live, mark) = with_thread(|t| {
        let mark = Mark(t.restart_high_water());
        (t.own_totals(), t.live_bytes(), mark)
    });
    let r = f();
    let (after, high) = with_thread(|t| (t.own_totals(), t.high_water()));
    drop(mark);
    let (a, a_ticks) = Counts::from_totals(&after, time_sample_mean());
    let (b, b_ticks) = Counts::from_totals(&before, time_sample_mean());
    let mut stats = a - b;
    stats.peak_live_bytes = high.saturating_sub(start_live).max(0) as u64;
    stats.allocator_ns = ticks_to_ns(a_ticks.saturating_sub(b_ticks));
    (r, stats)
}

/// The calling thread's own counts so far, and its allocator time in TSC
/// ticks (estimated): the start and end of a span the criterion
/// measurements take without a closure around it.
pub fn thread_counts() -> (Counts, u64) {
    Counts::from_totals(&with_thread(|t| t.own_totals()), time_sample_mean())
}

/// Panics, saying how to fix it, unless a [`Counting`](crate::Counting) is
/// the global allocator: without one every count reads 0, which a
/// benchmark or a budget would take for a real result.
#[track_caller]
pub fn require_counting(what: &str) {
    // An allocation, so that a `Counting` global allocator has certainly
    // registered by the check below.
    drop(std::hint::black_box(Box::new(0u64)));
    assert!(
        crate::is_counting(),
        "allocmux: {what} counts through allocmux::Counting, which is not the global \
         allocator here, so every count would read 0; add to the benchmark or test crate:\n\
         #[global_allocator]\n\
         static ALLOC: allocmux::Counting<std::alloc::System> = \
         allocmux::Counting::new(std::alloc::System);"
    );
}
