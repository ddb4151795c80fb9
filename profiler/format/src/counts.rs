//! [`Counts`]: what `allocmux::Counting` counted, for the process
//! (`allocmux::snapshot`) or for one closure on one thread
//! (`allocmux::measure`).

use core::fmt;
use core::ops::Sub;

use crate::byte_size::ByteSize;
use crate::func::Func;
use crate::totals::Totals;

/// Allocation counts, from `allocmux::snapshot` (the process so far), from
/// `allocmux::measure` (one closure), or the difference of two snapshots.
///
/// Bytes are the sizes the program asked for (`Layout::size`), not what
/// the allocator rounded them up to, so the numbers are the same whichever
/// allocator is inside `allocmux::Counting`. A `realloc` counts as
/// freeing its old size and allocating its new one, besides being counted
/// in `reallocs`.
///
/// `a - b` subtracts field by field: the counters saturate at zero (so a
/// difference taken the wrong way round reads as nothing, not as huge
/// numbers), `live_bytes` is the signed change, and `peak_live_bytes` is
/// how far the process's all-time peak rose between the two (0 if the span
/// stayed below an earlier peak). For the peak *of* a span, relative to its
/// start, use `allocmux::measure`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counts {
    /// Allocations (`alloc` and `alloc_zeroed` calls, failed ones included).
    pub allocs: u64,
    /// Frees (`dealloc` calls).
    pub frees: u64,
    /// Reallocations (`realloc` calls, failed ones included).
    pub reallocs: u64,
    /// Reallocations that kept the block where it was (grown or shrunk in
    /// place; the rest moved it, or failed).
    pub reallocs_in_place: u64,
    /// Calls that returned NULL (allocations and reallocations).
    pub failures: u64,
    /// Bytes allocated (by `alloc`, `alloc_zeroed`, and `realloc`'s new size).
    pub bytes_allocated: u64,
    /// Bytes freed (by `dealloc`, and `realloc`'s old size).
    pub bytes_freed: u64,
    /// Bytes allocated and not freed: `bytes_allocated - bytes_freed`. For
    /// one thread or a difference, negative when more was freed than
    /// allocated (blocks from before, or from other threads).
    pub live_bytes: i64,
    /// From `allocmux::snapshot`: the highest `live_bytes` of the process so far
    /// (exact with one allocating thread; with several, each thread adds
    /// its drift to the process total in steps of 64 KiB, so the peak can
    /// miss up to 64 KiB per other thread). From `allocmux::measure`: how far the
    /// thread's live bytes rose above their value at the start, exactly.
    /// In a difference: see [`Counts`].
    pub peak_live_bytes: u64,
    /// Time spent inside the allocator, in nanoseconds: an unbiased
    /// estimate from timing a random 1 in 256 calls (each thread's first
    /// call of each kind and every call on a block of 64 KiB or more are
    /// always timed), with the TSC, as the shim does. Precise over many
    /// calls; over a handful it is mostly 0 or one timed call scaled up.
    /// `allocmux_recorder::set_time_sample_mean(1)` times every call.
    pub allocator_ns: u64,
    /// Calls actually timed for `allocator_ns`.
    pub timed_calls: u64,
}

impl Counts {
    /// Reallocations that moved the block (or failed).
    pub fn reallocs_moved(&self) -> u64 {
        self.reallocs.saturating_sub(self.reallocs_in_place)
    }

    /// The counts of some totals, and their allocator time in TSC ticks,
    /// estimated with one call in `time_sample_mean` timed (converted to ns
    /// by the caller, once).
    pub fn from_totals(t: &Totals, time_sample_mean: u32) -> (Counts, u64) {
        let reallocs = t.calls_of(Func::Realloc);
        let ticks = t
            .timed_ticks
            .saturating_mul(time_sample_mean as u64)
            .saturating_add(t.exact_ticks);
        let stats = Counts {
            allocs: t.allocation_calls() - reallocs,
            frees: t.calls_of(Func::Free),
            reallocs,
            reallocs_in_place: t.reallocs_in_place,
            failures: t.failed_calls,
            bytes_allocated: t.bytes_allocated,
            bytes_freed: t.bytes_freed,
            live_bytes: t.bytes_allocated.wrapping_sub(t.bytes_freed) as i64,
            peak_live_bytes: t.peak_live_bytes,
            allocator_ns: 0,
            timed_calls: t.timed_calls + t.exact_calls,
        };
        (stats, ticks)
    }
}

impl Sub for Counts {
    type Output = Counts;

    /// What happened between two snapshots (`after - before`); see
    /// [`Counts`] for what each field of a difference means.
    fn sub(self, b: Counts) -> Counts {
        Counts {
            allocs: self.allocs.saturating_sub(b.allocs),
            frees: self.frees.saturating_sub(b.frees),
            reallocs: self.reallocs.saturating_sub(b.reallocs),
            reallocs_in_place: self.reallocs_in_place.saturating_sub(b.reallocs_in_place),
            failures: self.failures.saturating_sub(b.failures),
            bytes_allocated: self.bytes_allocated.saturating_sub(b.bytes_allocated),
            bytes_freed: self.bytes_freed.saturating_sub(b.bytes_freed),
            live_bytes: self.live_bytes.wrapping_sub(b.live_bytes),
            peak_live_bytes: self.peak_live_bytes.saturating_sub(b.peak_live_bytes),
            allocator_ns: self.allocator_ns.saturating_sub(b.allocator_ns),
            timed_calls: self.timed_calls.saturating_sub(b.timed_calls),
        }
    }
}

/// One line: `3 allocs, 2 frees, 1 realloc (1 in place), 1.5 KiB allocated,
/// 1.0 KiB freed, 512 B live, 1.5 KiB peak, ~2.1 µs in the allocator`.
impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = |n: u64| if n == 1 { "" } else { "s" };
        write!(
            f,
            "{} alloc{}, {} free{}, {} realloc{} ({} in place), ",
            self.allocs,
            plural(self.allocs),
            self.frees,
            plural(self.frees),
            self.reallocs,
            plural(self.reallocs),
            self.reallocs_in_place,
        )?;
        if self.failures > 0 {
            write!(f, "{} failed, ", self.failures)?;
        }
        let sign = if self.live_bytes < 0 { "-" } else { "" };
        write!(
            f,
            "{} allocated, {} freed, {sign}{} live, {} peak, ~{} in the allocator",
            ByteSize(self.bytes_allocated),
            ByteSize(self.bytes_freed),
            ByteSize(self.live_bytes.unsigned_abs()),
            ByteSize(self.peak_live_bytes),
            Nanos(self.allocator_ns),
        )
    }
}

/// A duration in ns, in the largest unit that keeps it at least 1.
struct Nanos(u64);

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0 as f64;
        match self.0 {
            0..1_000 => write!(f, "{} ns", self.0),
            1_000..1_000_000 => write!(f, "{:.1} µs", ns / 1e3),
            1_000_000..1_000_000_000 => write!(f, "{:.1} ms", ns / 1e6),
            _ => write!(f, "{:.2} s", ns / 1e9),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(allocs: u64, live: i64, peak: u64) -> Counts {
        Counts {
            allocs,
            live_bytes: live,
            peak_live_bytes: peak,
            ..Counts::default()
        }
    }

    #[test]
    fn differences_saturate_counters_and_sign_live_bytes() {
        let d = stats(10, 100, 500) - stats(4, 300, 200);
        assert_eq!((d.allocs, d.live_bytes, d.peak_live_bytes), (6, -200, 300));
        let wrong_way = stats(4, 0, 0) - stats(10, 0, 0);
        assert_eq!(wrong_way.allocs, 0);
    }

    #[test]
    fn display_is_one_line() {
        let s = Counts {
            allocs: 3,
            frees: 1,
            reallocs: 1,
            reallocs_in_place: 1,
            bytes_allocated: 1536,
            bytes_freed: 1024,
            live_bytes: -512,
            peak_live_bytes: 1536,
            allocator_ns: 2100,
            ..Counts::default()
        };
        assert_eq!(
            s.to_string(),
            "3 allocs, 1 free, 1 realloc (1 in place), 1.5 KiB allocated, 1.0 KiB freed, \
             -512 B live, 1.5 KiB peak, ~2.1 µs in the allocator"
        );
    }
}
