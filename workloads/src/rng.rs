//! A small deterministic random number generator (xorshift64) and the
//! generated inputs the workloads share, so every run of a workload at a
//! given size does the same work and returns the same checksum.

/// Marsaglia's xorshift64: fast, deterministic and good enough to pick
/// sizes, slots and letters.
#[derive(Clone, Debug)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator from `seed` (any value; 0 is mapped to a non-zero state).
    pub fn new(seed: u64) -> XorShift {
        // Spread small seeds over the state so seeds 1, 2, 3 diverge at once.
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number in `0..n` (`n > 0`; the slight modulo bias does not matter
    /// here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A number in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// An allocation size in `lo..=hi` with a skew towards the small end,
    /// as real programs have: log-uniform rather than uniform.
    pub fn size(&mut self, lo: usize, hi: usize) -> usize {
        let span = (hi - lo + 1) as u64;
        let bits = u64::from(u64::BITS - span.leading_zeros());
        let cap = (1u64 << (self.below(bits) + 1)).min(span);
        lo + self.below(cap) as usize
    }
}

/// Deterministic pseudo-random lower-case words of 3 to 11 letters.
pub fn words(n: u64, seed: u64) -> impl Iterator<Item = String> {
    let mut x = seed | 1;
    (0..n).map(move |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = 3 + (x % 9) as usize;
        (0..len)
            .map(|i| (b'a' + ((x >> (i * 5)) % 26) as u8) as char)
            .collect()
    })
}

/// Folds `v` into a running checksum (order-sensitive, so a workload that
/// did its steps differently gets a different sum).
pub fn mix(sum: u64, v: u64) -> u64 {
    (sum ^ v).wrapping_mul(0x100_0000_01B3).rotate_left(5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_stay_in_range_and_favour_small_ones() {
        let mut r = XorShift::new(7);
        let sizes: Vec<usize> = (0..10_000).map(|_| r.size(16, 4096)).collect();
        assert!(sizes.iter().all(|&s| (16..=4096).contains(&s)));
        let small = sizes.iter().filter(|&&s| s < 256).count();
        assert!(small > 5_000, "{small} of 10000 below 256");
        assert!(sizes.iter().any(|&s| s > 2048));
    }

    #[test]
    fn seeds_give_different_streams() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut r = XorShift::new(1);
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..4)
            .map({
                let mut r = XorShift::new(2);
                move |_| r.next_u64()
            })
            .collect();
        assert_ne!(a, b);
        assert_eq!(
            XorShift::new(0).clone().next_u64(),
            XorShift::new(0).next_u64()
        );
    }
}
