//! The statistics behind `allocmux compare`: medians and spreads of small
//! samples, and confidence intervals for the ratio of two allocators'
//! figures over paired rounds.
//!
//! `compare` runs the allocators interleaved (A B C, A B C, ...), so the runs
//! of one round share the machine's state of the moment: a slow round is
//! slow for all of them. The intervals therefore work on the paired log
//! ratios `dᵢ = ln(xᵢ / yᵢ)`, one per round, which cancels that drift. The
//! estimate is the Hodges–Lehmann estimator (the median of the Walsh
//! averages `(dᵢ + dⱼ) / 2`, i ≤ j) and the interval is its exact
//! distribution-free companion from the Wilcoxon signed-rank test: order
//! statistics of the Walsh averages chosen from the exact null distribution
//! of the signed-rank statistic. It assumes only that the paired log ratios
//! are symmetric about their centre, holds at every sample size (no normal
//! approximation, no resampling), and says how much confidence the sample
//! can give: with n rounds the widest interval has confidence
//! `1 − 2^(1−n)`, so 95% needs at least 6 rounds.

/// Median, quartiles and range of a sample.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Spread {
    /// Middle value (mean of the two middle ones for an even count).
    pub median: f64,
    /// First quartile.
    pub q1: f64,
    /// Third quartile.
    pub q3: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

impl Spread {
    /// The spread of `xs` (which must not be empty).
    pub fn of(xs: &[f64]) -> Spread {
        assert!(!xs.is_empty(), "the spread of an empty sample");
        let mut v = xs.to_vec();
        v.sort_by(f64::total_cmp);
        Spread {
            median: quantile(&v, 0.5),
            q1: quantile(&v, 0.25),
            q3: quantile(&v, 0.75),
            min: v[0],
            max: v[v.len() - 1],
        }
    }

    /// Interquartile range relative to the median: how much runs vary.
    pub fn relative_iqr(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            (self.q3 - self.q1) / self.median.abs()
        }
    }
}

/// Quantile of sorted data by linear interpolation between order
/// statistics (type 7, the default of R and NumPy).
fn quantile(sorted: &[f64], p: f64) -> f64 {
    let h = (sorted.len() - 1) as f64 * p;
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

/// Median of a sample (which must not be empty).
pub fn median(xs: &[f64]) -> f64 {
    Spread::of(xs).median
}

/// An estimate with its confidence interval.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Interval {
    /// Point estimate.
    pub estimate: f64,
    /// Lower end.
    pub low: f64,
    /// Upper end.
    pub high: f64,
    /// The interval's actual coverage probability (at least the level
    /// asked for when the sample allows it, else the most it allows).
    pub confidence: f64,
}

impl Interval {
    /// Whether the whole interval lies above `x`.
    pub fn above(&self, x: f64) -> bool {
        self.low > x
    }

    /// Whether the whole interval lies below `x`.
    pub fn below(&self, x: f64) -> bool {
        self.high < x
    }

    /// The same interval for the inverse ratio (`y / x` from `x / y`).
    pub fn recip(self) -> Interval {
        Interval {
            estimate: 1.0 / self.estimate,
            low: 1.0 / self.high,
            high: 1.0 / self.low,
            confidence: self.confidence,
        }
    }
}

/// The fewest pairs whose signed-rank interval can reach `level` (below 1):
/// with n pairs even the widest interval, from the smallest Walsh average
/// to the largest, misses the centre when all n differences fall on one
/// side, which has probability `2^(1−n)`; so 95% needs 6 (5 reach 93.75%).
pub fn fewest_pairs(level: f64) -> usize {
    assert!(level < 1.0, "no sample gives a 100% interval");
    (1..)
        .find(|&n| 1.0 - 0.5f64.powi(n as i32 - 1) >= level - 1e-9)
        .expect("a level below 1 is reached")
}

/// The ratio `x / y` of paired samples (`x[i]` and `y[i]` from the same
/// round), as the Hodges–Lehmann estimate of the paired log ratios and its
/// exact Wilcoxon signed-rank interval at `level` (e.g. 0.95), taken back
/// from logs. `None` when there are fewer than two pairs or a value is not
/// positive.
pub fn paired_ratio(x: &[f64], y: &[f64], level: f64) -> Option<Interval> {
    assert_eq!(x.len(), y.len(), "paired samples of different lengths");
    if x.len() < 2 || x.iter().chain(y).any(|&v| v.is_nan() || v <= 0.0) {
        return None;
    }
    let d: Vec<f64> = x.iter().zip(y).map(|(a, b)| (a / b).ln()).collect();
    let i = signed_rank_interval(&d, level);
    Some(Interval {
        estimate: i.estimate.exp(),
        low: i.low.exp(),
        high: i.high.exp(),
        confidence: i.confidence,
    })
}

/// Hodges–Lehmann estimate of the centre of `d` with the signed-rank
/// interval at `level`: `[A(k+1), A(N−k)]` of the N sorted Walsh averages,
/// with the largest k whose coverage `1 − 2·P(W⁺ ≤ k)` is at least `level`
/// (k = 0, the full range, when none is).
pub fn signed_rank_interval(d: &[f64], level: f64) -> Interval {
    let n = d.len();
    assert!(n >= 1, "an interval needs data");
    let mut walsh = Vec::with_capacity(n * (n + 1) / 2);
    for i in 0..n {
        for j in i..n {
            walsh.push((d[i] + d[j]) / 2.0);
        }
    }
    walsh.sort_by(f64::total_cmp);
    let big_n = walsh.len();
    let cdf = signed_rank_cdf(n);
    let alpha = 1.0 - level;
    // Largest k with 2·P(W⁺ ≤ k) ≤ alpha; the lower tail of W⁺ is tiny, so
    // the search stops early.
    let mut k = 0;
    while k + 1 < big_n / 2 && 2.0 * cdf[k + 1] <= alpha {
        k += 1;
    }
    // Below `level` only when not even the full range (k = 0) reaches it.
    let confidence = (1.0 - 2.0 * cdf[k]).max(0.0);
    Interval {
        estimate: quantile(&walsh, 0.5),
        low: walsh[k],
        high: walsh[big_n - 1 - k],
        confidence,
    }
}

/// `P(W⁺ ≤ w)` for w = 0..=n(n+1)/2 under the null hypothesis: W⁺ is the sum
/// of a random subset of the ranks 1..=n, each in with probability ½. Built
/// by adding one rank at a time (O(n³), exact for the run counts `compare`
/// allows).
fn signed_rank_cdf(n: usize) -> Vec<f64> {
    let max = n * (n + 1) / 2;
    let mut p = vec![0.0; max + 1];
    p[0] = 1.0;
    let mut top = 0;
    for rank in 1..=n {
        top += rank;
        for w in (0..=top).rev() {
            let with = if w >= rank { p[w - rank] } else { 0.0 };
            p[w] = 0.5 * (p[w] + with);
        }
    }
    let mut acc = 0.0;
    for v in &mut p {
        acc += *v;
        *v = acc;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn spread_of_known_samples() {
        let s = Spread::of(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!(
            (s.median, s.q1, s.q3, s.min, s.max),
            (3.0, 2.0, 4.0, 1.0, 5.0)
        );
        let s = Spread::of(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(s.median, 2.5);
        assert!(close(s.q1, 1.75) && close(s.q3, 3.25));
        assert!(close(s.relative_iqr(), 0.6));
        assert_eq!(Spread::of(&[7.0]).median, 7.0);
    }

    #[test]
    fn signed_rank_distribution_matches_tables() {
        // n = 5: 32 equally likely subsets; W⁺ = 0 once, 1 once, 2 once, 3 twice.
        let c = signed_rank_cdf(5);
        assert!(close(c[0], 1.0 / 32.0));
        assert!(close(c[3], 5.0 / 32.0));
        assert!(close(*c.last().unwrap(), 1.0));
        // Tabulated two-sided 5% critical value for n = 10 is 8:
        // P(W⁺ ≤ 8) = 0.02441, P(W⁺ ≤ 9) = 0.03223.
        let c = signed_rank_cdf(10);
        assert!((c[8] - 0.024_414).abs() < 1e-5, "{}", c[8]);
        assert!((c[9] - 0.032_227).abs() < 1e-5, "{}", c[9]);
    }

    #[test]
    fn interval_uses_the_right_order_statistics() {
        // n = 10 at 95%: k = 8, so [A(9), A(47)] of the 55 Walsh averages.
        let d: Vec<f64> = (1..=10).map(f64::from).collect();
        let i = signed_rank_interval(&d, 0.95);
        let mut walsh = vec![];
        for a in 0..10 {
            for b in a..10 {
                walsh.push((d[a] + d[b]) / 2.0);
            }
        }
        walsh.sort_by(f64::total_cmp);
        assert_eq!((i.low, i.high), (walsh[8], walsh[46]));
        assert!(close(i.estimate, 5.5));
        assert!((i.confidence - (1.0 - 2.0 * 0.024_414)).abs() < 1e-5);
    }

    #[test]
    fn few_rounds_report_the_confidence_they_reach() {
        // Five pairs cannot give 95%: the full range gives 1 − 2/32.
        let i = signed_rank_interval(&[0.1, 0.2, 0.3, 0.4, 0.5], 0.95);
        assert!(close(i.confidence, 0.9375));
        assert_eq!((i.low, i.high), (0.1, 0.5));
        // Six reach it: 1 − 2/64.
        let i = signed_rank_interval(&[0.1, 0.2, 0.3, 0.4, 0.5, 0.6], 0.95);
        assert!(close(i.confidence, 1.0 - 2.0 / 64.0));
    }

    #[test]
    fn the_fewest_pairs_are_those_whose_widest_interval_reaches_the_level() {
        assert_eq!(fewest_pairs(0.95), 6);
        assert_eq!(fewest_pairs(0.99), 8);
        for level in [0.5, 0.9, 0.95, 0.975, 0.99, 0.999] {
            let n = fewest_pairs(level);
            let d: Vec<f64> = (1..=n).map(|i| i as f64).collect();
            assert!(signed_rank_interval(&d, level).confidence >= level);
            assert!(signed_rank_interval(&d[1..], level).confidence < level);
        }
    }

    #[test]
    fn recip_inverts_the_ratio_and_keeps_the_confidence() {
        let x = [1.0, 1.2, 0.9, 1.1, 1.3, 1.05];
        let y = [2.0, 2.1, 1.9, 2.3, 2.2, 2.0];
        let xy = paired_ratio(&x, &y, 0.95).unwrap();
        let yx = paired_ratio(&y, &x, 0.95).unwrap();
        let r = xy.recip();
        for (a, b) in [
            (r.estimate, yx.estimate),
            (r.low, yx.low),
            (r.high, yx.high),
            (r.confidence, yx.confidence),
        ] {
            assert!((a - b).abs() < 1e-9, "{r:?} against {yx:?}");
        }
    }

    #[test]
    fn identical_samples_give_a_ratio_of_one() {
        let x = [1.0, 1.1, 0.9, 1.05, 0.95, 1.0, 1.02, 0.98];
        let i = paired_ratio(&x, &x, 0.95).unwrap();
        assert_eq!((i.estimate, i.low, i.high), (1.0, 1.0, 1.0));
        assert!(!i.above(1.0) && !i.below(1.0));
    }

    #[test]
    fn separated_samples_exclude_one() {
        // y is x slowed by 20% with per-round noise that the pairing cancels.
        let x = [
            100.0, 130.0, 95.0, 120.0, 101.0, 99.0, 140.0, 110.0, 105.0, 98.0,
        ];
        let y: Vec<f64> = x
            .iter()
            .enumerate()
            .map(|(i, v)| v * (1.2 + 0.01 * ((i % 3) as f64 - 1.0)))
            .collect();
        let i = paired_ratio(&y, &x, 0.95).unwrap();
        assert!(i.above(1.0), "{i:?}");
        assert!(i.low > 1.18 && i.high < 1.22, "{i:?}");
        assert!((i.estimate - 1.2).abs() < 0.01, "{i:?}");
    }

    #[test]
    fn noise_larger_than_the_effect_includes_one() {
        let x = [100.0, 102.0, 98.0, 101.0, 99.0, 100.0, 103.0, 97.0];
        let y = [101.0, 97.0, 103.0, 99.0, 100.0, 104.0, 96.0, 100.0];
        let i = paired_ratio(&y, &x, 0.95).unwrap();
        assert!(i.low < 1.0 && i.high > 1.0, "{i:?}");
    }

    #[test]
    fn rejects_unusable_samples() {
        assert!(paired_ratio(&[1.0], &[1.0], 0.95).is_none());
        assert!(paired_ratio(&[1.0, 0.0], &[1.0, 1.0], 0.95).is_none());
    }
}
