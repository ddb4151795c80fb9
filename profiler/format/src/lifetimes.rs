//! [`Lifetimes`]: how long the blocks of one call stack lived, in decades.
//!
//! A block's lifetime runs from the call that handed it out to the call
//! that released it (`free`, or a `realloc` that moved or resized it: the
//! block it returns starts a lifetime of its own). Blocks still live are
//! not in it: their count is the stack's live allocations. DHAT and
//! bytehound measure the same span; the decades are the ones their users
//! read ("short-lived": under a millisecond).

/// How many decades a lifetime falls in: under 1 µs, 1–10 µs, …, 1–10 s,
/// and 10 s or more.
pub const DECADES: usize = 9;

/// The upper bounds of the decades but the last, in ns: 1 µs to 10 s.
pub const DECADE_BOUNDS_NS: [u64; DECADES - 1] = [
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
];

/// The decades' names, shortest first, as reports print them.
pub const DECADE_LABELS: [&str; DECADES] = [
    "<1µs", "<10µs", "<100µs", "<1ms", "<10ms", "<100ms", "<1s", "<10s", "≥10s",
];

/// The decades' keys, as the JSON report names them.
pub const DECADE_KEYS: [&str; DECADES] = [
    "under_1us",
    "under_10us",
    "under_100us",
    "under_1ms",
    "under_10ms",
    "under_100ms",
    "under_1s",
    "under_10s",
    "10s_or_more",
];

/// The decades below this one are "short-lived": freed within 1 ms.
pub const SHORT_LIVED_DECADES: usize = 4;

/// The lifetimes of the freed blocks of one stack (estimates in `sample`
/// mode, as the stack's other figures are).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lifetimes {
    /// Blocks freed in each decade (see [`DECADE_BOUNDS_NS`]).
    pub freed: [u64; DECADES],
    /// The sum of their lifetimes, in TSC ticks.
    pub ticks: u64,
}

impl Lifetimes {
    /// Whether no freed block is counted.
    pub fn is_empty(&self) -> bool {
        self.freed.iter().all(|&n| n == 0)
    }

    /// Freed blocks counted.
    pub fn count(&self) -> u64 {
        self.freed.iter().sum()
    }

    /// Freed blocks that lived under 1 ms.
    pub fn short_lived(&self) -> u64 {
        self.freed[..SHORT_LIVED_DECADES].iter().sum()
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Lifetimes) {
        for (a, b) in self.freed.iter_mut().zip(other.freed) {
            *a = a.saturating_add(b);
        }
        self.ticks = self.ticks.saturating_add(other.ticks);
    }

    /// The mean lifetime of the freed blocks, in ns, at `ticks_per_ns`
    /// (`None` when none is counted).
    pub fn mean_ns(&self, ticks_per_ns: f64) -> Option<f64> {
        let n = self.count();
        (n > 0 && ticks_per_ns > 0.0).then(|| self.ticks as f64 / ticks_per_ns / n as f64)
    }
}

/// The decade bounds in TSC ticks, for a counter of `ticks_per_us` ticks
/// a microsecond: what a recorder compares a lifetime in ticks with.
pub fn decade_bounds_ticks(ticks_per_us: u64) -> [u64; DECADES - 1] {
    DECADE_BOUNDS_NS.map(|ns| (ns / 1_000).saturating_mul(ticks_per_us))
}

/// The decade of a lifetime of `ticks`, given the bounds in ticks
/// ([`decade_bounds_ticks`]).
#[inline]
pub fn decade_of(ticks: u64, bounds: &[u64; DECADES - 1]) -> usize {
    // Most blocks are short-lived: the first bound decides.
    if ticks < bounds[0] {
        return 0;
    }
    bounds.iter().take_while(|&&b| ticks >= b).count()
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lifetime_falls_in_the_decade_its_bounds_say() {
        // 3 ticks a ns: 3,000 a µs.
        let b = decade_bounds_ticks(3_000);
        assert_eq!(b[0], 3_000);
        assert_eq!(b[7], 30_000_000_000);
        assert_eq!(decade_of(0, &b), 0);
        assert_eq!(decade_of(2_999, &b), 0);
        assert_eq!(decade_of(3_000, &b), 1, "1 µs is the second decade's start");
        assert_eq!(decade_of(3_000 * 999, &b), 3);
        assert_eq!(decade_of(3_000 * 1_000, &b), 4, "1 ms is not short-lived");
        assert_eq!(decade_of(u64::MAX, &b), DECADES - 1);
    }

    #[test]
    fn counts_add_and_give_a_mean() {
        let mut a = Lifetimes::default();
        assert!(a.is_empty());
        assert_eq!(a.mean_ns(3.0), None);
        let mut b = Lifetimes::default();
        b.freed[0] = 2;
        b.freed[5] = 1;
        b.ticks = 900;
        a.add(&b);
        a.add(&b);
        assert_eq!(a.count(), 6);
        assert_eq!(a.short_lived(), 4);
        assert_eq!(a.mean_ns(3.0), Some(100.0));
    }
}
