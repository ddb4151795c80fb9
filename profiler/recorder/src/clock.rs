//! The cycle counter used to time allocator calls, and its calibration.

/// Reads of the time-stamp counter (or, off x86-64, of the monotonic clock in
/// nanoseconds, which then serves as a counter of 1 tick per ns).
#[derive(Debug, Clone, Copy)]
pub struct Tsc;

impl Tsc {
    /// The counter, ordered after earlier loads (`lfence; rdtsc`).
    #[inline(always)]
    pub fn now() -> u64 {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: lfence and rdtsc are available on every x86-64 CPU.
            unsafe {
                core::arch::x86_64::_mm_lfence();
                core::arch::x86_64::_rdtsc()
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            monotonic_ns()
        }
    }

    /// The counter, unordered (`rdtsc` alone): for times that need no
    /// fence against the loads before them, such as a block's birth and
    /// death, whose decades a few cycles do not move.
    #[inline(always)]
    pub fn now_unordered() -> u64 {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: rdtsc is available on every x86-64 CPU.
            unsafe { core::arch::x86_64::_rdtsc() }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            monotonic_ns()
        }
    }

    /// The smallest difference between two back-to-back reads: the cost of
    /// the measurement itself, subtracted from every timed call.
    pub fn overhead() -> u64 {
        let mut best = u64::MAX;
        for _ in 0..64 {
            let a = Tsc::now();
            let b = Tsc::now();
            best = best.min(b.wrapping_sub(a));
        }
        best
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// A clock in nanoseconds (0 if the clock cannot be read).
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; clock_gettime does not allocate.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

pub use allocmux_format::clock::ClockPair;

/// Reads both clocks, the TSC between two monotonic reads.
pub fn read_clocks() -> ClockPair {
    let a = monotonic_ns();
    let tsc = Tsc::now();
    let b = monotonic_ns();
    ClockPair {
        tsc,
        mono_ns: a + (b.wrapping_sub(a)) / 2,
    }
}

/// The TSC's ticks per µs, measured over 50 µs of the monotonic clock
/// (the time a block's lifetime is bucketed by: one part in a few hundred
/// is ample for decades). Each end is a TSC read bracketed by two
/// monotonic reads less than 2 µs apart (a preempted read is taken
/// again). Allocation-free; at least 1.
pub fn ticks_per_us() -> u64 {
    fn tight() -> ClockPair {
        let mut best = read_clocks();
        for _ in 0..8 {
            let a = monotonic_ns();
            let tsc = Tsc::now();
            let b = monotonic_ns();
            best = ClockPair {
                tsc,
                mono_ns: a + b.wrapping_sub(a) / 2,
            };
            if b.wrapping_sub(a) < 2_000 {
                break;
            }
        }
        best
    }
    let start = tight();
    while monotonic_ns().wrapping_sub(start.mono_ns) < 50_000 {
        core::hint::spin_loop();
    }
    let end = tight();
    let ns = end.mono_ns.wrapping_sub(start.mono_ns).max(1);
    let ticks = end.tsc.wrapping_sub(start.tsc);
    (ticks.saturating_mul(1_000) / ns).max(1)
}
