//! Edit distance over many word pairs, the allocation-heavy way and fixed.
//!
//! The naive version is the Levenshtein benchmark that looked twice as slow
//! as Go until jemalloc was swapped in: every call re-collects both words'
//! `chars()` into fresh `Vec`s and allocates a new row for every row of the
//! table. The allocator is busy, so the allocator choice shows; but the
//! flamegraph by count points at `levenshtein_naive`'s `collect` and
//! `vec!`, and the fixed version, which converts each word into buffers it
//! reuses and keeps two rows, removes nearly every allocation, which is
//! worth more than any allocator.

use crate::rng::words;

/// Levenshtein distances of `pairs` generated word pairs, summed; each
/// distance computed by [`levenshtein_naive`].
pub fn naive(pairs: u64) -> u64 {
    let a: Vec<String> = words(pairs, 1).collect();
    let b: Vec<String> = words(pairs, 2).collect();
    a.iter()
        .zip(&b)
        .map(|(x, y)| levenshtein_naive(x, y) as u64)
        .sum()
}

/// The same sum as [`naive`], each distance computed by one reused
/// [`Levenshtein`].
pub fn fixed(pairs: u64) -> u64 {
    let a: Vec<String> = words(pairs, 1).collect();
    let b: Vec<String> = words(pairs, 2).collect();
    let mut lev = Levenshtein::default();
    a.iter()
        .zip(&b)
        .map(|(x, y)| lev.distance(x, y) as u64)
        .sum()
}

/// The edit distance between `a` and `b` (in `char`s), allocating two
/// `Vec<char>`s and one row per character of `a` on every call.
#[inline(never)]
pub fn levenshtein_naive(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Edit distances with buffers kept between calls: once they have grown to
/// the longest words seen, a call allocates nothing.
#[derive(Debug, Default)]
pub struct Levenshtein {
    a: Vec<char>,
    b: Vec<char>,
    prev: Vec<usize>,
    cur: Vec<usize>,
}

impl Levenshtein {
    /// The edit distance between `a` and `b` (in `char`s), the same as
    /// [`levenshtein_naive`].
    #[inline(never)]
    pub fn distance(&mut self, a: &str, b: &str) -> usize {
        self.a.clear();
        self.a.extend(a.chars());
        self.b.clear();
        self.b.extend(b.chars());
        let n = self.b.len();
        self.prev.clear();
        self.prev.extend(0..=n);
        self.cur.clear();
        self.cur.resize(n + 1, 0);
        for (i, ca) in self.a.iter().enumerate() {
            self.cur[0] = i + 1;
            for (j, cb) in self.b.iter().enumerate() {
                let cost = usize::from(ca != cb);
                self.cur[j + 1] = (self.prev[j] + cost)
                    .min(self.prev[j + 1] + 1)
                    .min(self.cur[j] + 1);
            }
            std::mem::swap(&mut self.prev, &mut self.cur);
        }
        self.prev[n]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::XorShift;

    #[test]
    fn known_values() {
        let mut lev = Levenshtein::default();
        for (a, b, d) in [
            ("kitten", "sitting", 3),
            ("", "abc", 3),
            ("abc", "", 3),
            ("same", "same", 0),
            ("flaw", "lawn", 2),
            ("größe", "grosse", 3), // by chars; by bytes it would be 4
        ] {
            assert_eq!(levenshtein_naive(a, b), d, "{a} {b}");
            assert_eq!(lev.distance(a, b), d, "{a} {b}");
        }
    }

    #[test]
    fn fixed_agrees_with_naive_on_random_strings() {
        // Short strings over a small alphabet (with a multi-byte letter),
        // so distances take every value from 0 to the longer length.
        let mut r = XorShift::new(11);
        let word = |r: &mut XorShift| -> String {
            let len = r.below(9) as usize;
            (0..len)
                .map(|_| ['a', 'b', 'c', 'é'][r.below(4) as usize])
                .collect()
        };
        let mut lev = Levenshtein::default();
        for _ in 0..2_000 {
            let (a, b) = (word(&mut r), word(&mut r));
            assert_eq!(
                lev.distance(&a, &b),
                levenshtein_naive(&a, &b),
                "{a:?} {b:?}"
            );
        }
        assert_eq!(fixed(3_000), naive(3_000));
    }
}
