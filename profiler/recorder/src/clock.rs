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
