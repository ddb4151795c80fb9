//! [`Totals`]: everything counted for one process, and the buckets of its
//! request-size histogram.

use crate::func::{FUNC_COUNT, Func};

/// Number of buckets of the request-size histogram.
///
/// Bucket 0 counts zero-byte requests; bucket `k` (1 ≤ k < 47) counts requests
/// of `2^(k-1)` to `2^k - 1` bytes; the last bucket counts everything from
/// 64 TiB up (requests that no allocator here can satisfy).
pub const SIZE_BUCKETS: usize = 48;

/// Requests of at least this many bytes are counted one by one, in the
/// histogram and in allocator time: each stands for itself. Smaller ones
/// are counted at the timed calls, a sample weighted by its mean, so their
/// histogram counts are estimates.
pub const EXACT_TIMING_BYTES: usize = 64 * 1024;

/// The histogram bucket of a request of `size` bytes.
#[inline(always)]
pub const fn size_bucket(size: usize) -> usize {
    let b = (usize::BITS - size.leading_zeros()) as usize;
    if b < SIZE_BUCKETS {
        b
    } else {
        SIZE_BUCKETS - 1
    }
}

/// The smallest request size that falls in `bucket`.
pub const fn bucket_floor(bucket: usize) -> u64 {
    if bucket == 0 { 0 } else { 1u64 << (bucket - 1) }
}

/// [`Totals`], its `Default` and [`Totals::add`], from the profile's list
/// of keys: a field per total, and `reallocs_in_place`, which profiles do
/// not carry.
macro_rules! define_totals {
    (
        lines { $($line:ident => $Variant:ident,)* }
        per_function { $($(#[$fm:meta])* $f:ident,)* }
        per_process { $($(#[$pm:meta])* $p:ident,)* }
        per_size_bucket { $($(#[$bm:meta])* $b:ident,)* }
    ) => {
        /// Everything counted for one process (or a sum of processes).
        ///
        /// Byte figures of blocks are *usable* sizes as the backend reports them
        /// (`malloc_usable_size`), because only those can be matched at `free`;
        /// `bytes_requested` is the sum of the sizes the program asked for.
        ///
        /// Its fields but `reallocs_in_place` are the totals of the profile
        /// format, each written under its own name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct Totals {
            $($(#[$fm])* pub $f: [u64; FUNC_COUNT],)*
            $($(#[$pm])* pub $p: u64,)*
            $($(#[$bm])* pub $b: [u64; SIZE_BUCKETS],)*
            /// `realloc` calls that returned the block they were given (resized in
            /// place). Counted by the Rust wrapper (`allocmux::Counting`); the shim
            /// and the profile format do not carry it (0 there).
            pub reallocs_in_place: u64,
        }

        impl Default for Totals {
            fn default() -> Self {
                Totals {
                    $($f: [0; FUNC_COUNT],)*
                    $($p: 0,)*
                    $($b: [0; SIZE_BUCKETS],)*
                    reallocs_in_place: 0,
                }
            }
        }

        impl Totals {
            /// Adds another set of totals into this one. Peaks add up, so the sum of
            /// several processes' peaks is an upper bound of their combined peak.
            pub fn add(&mut self, o: &Totals) {
                $(
                    for (a, b) in self.$f.iter_mut().zip(o.$f) {
                        *a = a.saturating_add(b);
                    }
                )*
                $(
                    for (a, b) in self.$b.iter_mut().zip(o.$b) {
                        *a = a.saturating_add(b);
                    }
                )*
                $(self.$p = self.$p.saturating_add(o.$p);)*
                self.reallocs_in_place = self.reallocs_in_place.saturating_add(o.reallocs_in_place);
            }
        }
    };
}

crate::profile::keys::for_each_profile_key!(define_totals);

impl Totals {
    /// Estimated TSC ticks spent inside the allocator: the always-timed
    /// calls' ticks plus the sampled calls' ticks scaled by the sampling
    /// mean (a stratified, unbiased estimate). Divide by
    /// [`ClockPair::ticks_per_ns_since`](crate::profile::ClockPair::ticks_per_ns_since)
    /// for nanoseconds.
    pub fn estimated_allocator_ticks(&self, time_sample_mean: u32) -> f64 {
        self.exact_ticks as f64 + self.timed_ticks as f64 * time_sample_mean as f64
    }

    /// Half the width of a 95% confidence interval of
    /// [`estimated_allocator_ticks`](Self::estimated_allocator_ticks), in
    /// TSC ticks: `1.96 * sqrt((1 - q) * sum(t²)) / q` over the sampled
    /// calls' ticks `t`, with `q = 1 / time_sample_mean` the probability
    /// that a call is timed (the variance of a Horvitz-Thompson total under
    /// independent sampling; the always-timed calls add none). 0 when every
    /// call is timed; `None` when the profile carries no sum of squares
    /// (written before it was recorded) although calls were sampled.
    pub fn allocator_ticks_margin(&self, time_sample_mean: u32) -> Option<f64> {
        if time_sample_mean <= 1 {
            return Some(0.0);
        }
        if self.timed_ticks_sq == 0 && self.timed_ticks > 0 {
            return None;
        }
        let m = time_sample_mean as f64;
        Some(1.96 * ((1.0 - 1.0 / m) * self.timed_ticks_sq as f64).sqrt() * m)
    }

    /// Calls of one function.
    pub fn calls_of(&self, f: Func) -> u64 {
        self.calls[f as usize]
    }

    /// All calls of all functions.
    pub fn total_calls(&self) -> u64 {
        self.calls.iter().fold(0, |a, &b| a.saturating_add(b))
    }

    /// Calls that hand out a block (everything but `free` and `malloc_usable_size`).
    pub fn allocation_calls(&self) -> u64 {
        Func::ALL
            .iter()
            .filter(|f| f.allocates())
            .map(|&f| self.calls_of(f))
            .fold(0, u64::saturating_add)
    }

    /// Bytes allocated and not yet freed (0 if more was freed than allocated,
    /// as in a forked child that frees its parent's blocks).
    pub fn live_bytes(&self) -> u64 {
        self.bytes_allocated.saturating_sub(self.bytes_freed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two() {
        assert_eq!(size_bucket(0), 0);
        assert_eq!(size_bucket(1), 1);
        assert_eq!(size_bucket(2), 2);
        assert_eq!(size_bucket(3), 2);
        assert_eq!(size_bucket(4), 3);
        assert_eq!(size_bucket(4095), 12);
        assert_eq!(size_bucket(4096), 13);
        assert_eq!(size_bucket(usize::MAX), SIZE_BUCKETS - 1);
        for b in 1..SIZE_BUCKETS - 1 {
            assert_eq!(size_bucket(bucket_floor(b) as usize), b);
            assert_eq!(size_bucket(bucket_floor(b + 1) as usize - 1), b);
        }
    }
}
