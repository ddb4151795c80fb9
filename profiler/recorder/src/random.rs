//! The recorder's random numbers: xorshift64*, one step per draw, cheap
//! enough for the allocation path and good enough for sampling gaps, and
//! the logarithm that turns a draw into a gap.

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

/// The natural logarithm of a positive, normal `x` (a draw of
/// [`next_uniform`]), within 1e-15 of `f64::ln` (tested below), inline.
///
/// Every timed call draws its successor's gap through a logarithm, and
/// libm's `log` (a call, its argument checks and its table) came to a
/// fifth of what a timed call costs the shim; this is about 40
/// instructions with no call. `x = 2^e · m` with `m` in [√½, √2), and
/// `ln m = 2 atanh s` with `s = (m − 1)/(m + 1)`, `|s| ≤ 0.172`: the
/// series to `s^21` leaves a remainder below 1e-17.
#[inline]
pub fn ln(x: f64) -> f64 {
    const MANTISSA: u64 = (1 << 52) - 1;
    const ONE: u64 = 1.0f64.to_bits();
    let bits = x.to_bits();
    let mut e = (bits >> 52) as i64 - 1023;
    let mut m = f64::from_bits(bits & MANTISSA | ONE);
    if m > core::f64::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let z = s * s;
    // 1/3 + z/5 + z²/7 + … + z⁹/21, by Horner.
    let mut p = 1.0 / 21.0;
    for k in [19.0, 17.0, 15.0, 13.0, 11.0, 9.0, 7.0, 5.0, 3.0] {
        p = p * z + 1.0 / k;
    }
    e as f64 * core::f64::consts::LN_2 + 2.0 * (s + s * z * p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_agrees_with_libm_over_the_draws() {
        let mut state = 0x9E37_79B9_7F4A_7C15;
        let mut worst = 0.0f64;
        let mut check = |x: f64| {
            let (got, want) = (ln(x), x.ln());
            worst = worst.max((got - want).abs() / want.abs().max(1.0));
        };
        for _ in 0..1_000_000 {
            check(next_uniform(&mut state));
        }
        // The ends of the draw's range, and around the mantissa's split.
        for x in [
            1.0,
            1.0 - f64::EPSILON / 2.0,
            0.5,
            0.25,
            f64::powi(2.0, -53),
        ] {
            check(x);
        }
        let split = core::f64::consts::FRAC_1_SQRT_2;
        for k in -4..=4 {
            check(f64::from_bits((split.to_bits() as i64 + k) as u64));
        }
        assert!(worst < 1e-15, "worst error {worst:e}");
        assert_eq!(ln(1.0), 0.0);
    }
}
