//! Allocation workloads: the demo's default and the patterns the tests and
//! benchmarks run. Each takes a size parameter and returns a checksum, so
//! the work cannot be optimised away and runs can be compared.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::collections::HashMap;

/// A workload the CLI can run by name.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// Name used on the command line.
    pub name: &'static str,
    /// One line on what it does.
    pub about: &'static str,
    /// Default size for the demo.
    pub default_size: u64,
    /// Runs it at the given size and returns a checksum.
    pub run: fn(u64) -> u64,
}

/// Every workload, the demo's default first.
pub const ALL: &[Workload] = &[
    Workload {
        name: "edit-distance",
        about: "Levenshtein distance over word pairs, re-collecting chars into fresh Vecs per call (allocation-heavy)",
        default_size: 60_000,
        run: edit_distance_naive,
    },
    Workload {
        name: "word-count",
        about: "counts words of generated text in a HashMap<String, usize>, an owned String per lookup",
        default_size: 400_000,
        run: word_count,
    },
];

/// Finds a workload by name.
pub fn find(name: &str) -> Option<&'static Workload> {
    ALL.iter().find(|w| w.name == name)
}

/// Deterministic pseudo-random words.
fn words(n: u64, seed: u64) -> impl Iterator<Item = String> {
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

/// Edit distance between word pairs, written the allocation-heavy way:
/// both strings re-collected into `Vec<char>` and a fresh row per call.
pub fn edit_distance_naive(pairs: u64) -> u64 {
    let a: Vec<String> = words(pairs, 1).collect();
    let b: Vec<String> = words(pairs, 2).collect();
    a.iter()
        .zip(&b)
        .map(|(x, y)| levenshtein_naive(x, y) as u64)
        .sum()
}

fn levenshtein_naive(a: &str, b: &str) -> usize {
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

/// Word frequencies with an owned `String` key built per lookup.
pub fn word_count(n: u64) -> u64 {
    let mut counts: HashMap<String, u64> = HashMap::new();
    for w in words(n, 3) {
        *counts.entry(w.to_uppercase()).or_default() += 1;
    }
    counts.values().map(|&c| c * c).sum::<u64>() + counts.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levenshtein_known_values() {
        assert_eq!(levenshtein_naive("kitten", "sitting"), 3);
        assert_eq!(levenshtein_naive("", "abc"), 3);
        assert_eq!(levenshtein_naive("same", "same"), 0);
    }

    #[test]
    fn workloads_are_deterministic() {
        for w in ALL {
            assert_eq!((w.run)(500), (w.run)(500), "{}", w.name);
        }
        assert!(find("edit-distance").is_some());
        assert!(find("nope").is_none());
    }
}
