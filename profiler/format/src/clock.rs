//! [`ClockPair`]: the two clocks a profile's times are converted with.

/// A reading of the TSC and the monotonic clock taken together. Two pairs
/// give the tick rate, so timings are converted to nanoseconds when the
/// profile is read, not in the target process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClockPair {
    /// TSC ticks.
    pub tsc: u64,
    /// `CLOCK_MONOTONIC` nanoseconds.
    pub mono_ns: u64,
}

impl ClockPair {
    /// The TSC's rate, in ticks per nanosecond, from `start` to this
    /// reading: `None` unless both clocks advanced. Every conversion of
    /// recorded ticks to time divides by it.
    pub fn ticks_per_ns_since(self, start: ClockPair) -> Option<f64> {
        let ticks = self.tsc.checked_sub(start.tsc).filter(|&t| t > 0)?;
        let ns = self.mono_ns.checked_sub(start.mono_ns).filter(|&n| n > 0)?;
        Some(ticks as f64 / ns as f64)
    }
}
