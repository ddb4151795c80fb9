//! The recorder's random numbers: xorshift64*, one step per draw, cheap
//! enough for the allocation path and good enough for sampling gaps.

/// Advances `state` (xorshift64*, never zero) and returns a uniform number
/// in (0, 1], whose logarithm is finite: the draw behind every geometric
/// or exponential sampling gap.
#[inline]
pub fn next_uniform(state: &mut u64) -> f64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
    1.0 - (r >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}
