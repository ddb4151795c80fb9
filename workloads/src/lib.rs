//! Allocation workloads: the demo's default and the patterns the tests and
//! benchmarks run. Each takes a size parameter and returns a checksum, so
//! the work cannot be optimised away and runs can be compared; variants of
//! one pattern (naive and fixed, heap and inline, ...) compute the same
//! checksum, and are separate entries of [`ALL`] so that `allocmux compare`
//! and `allocmux flame` can run each.
//!
//! The first five are the cases people hit in real programs, from the
//! classic write-ups on Rust allocation performance; the last five are the
//! classic allocator stress patterns (as in mimalloc-bench, written here
//! from their descriptions).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod edit_distance;
pub mod rng;

/// A workload the CLI can run by name.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// Name used on the command line (and the binary's name).
    pub name: &'static str,
    /// One line on what it does.
    pub about: &'static str,
    /// What the size counts.
    pub unit: &'static str,
    /// Default size: about half a second in a release build on one core
    /// of a 2-core machine.
    pub default_size: u64,
    /// Runs it at the given size and returns a checksum.
    pub run: fn(u64) -> u64,
}

/// Every workload, the demo's default first.
pub const ALL: &[Workload] = &[
    Workload {
        name: "edit-distance",
        about: "Levenshtein distance over word pairs, re-collecting chars into fresh Vecs per call (allocation-heavy)",
        unit: "word pairs",
        default_size: 300_000,
        run: edit_distance::naive,
    },
    Workload {
        name: "edit-distance-fixed",
        about: "the same distances with each word converted once into reused buffers and two reused rows",
        unit: "word pairs",
        default_size: 300_000,
        run: edit_distance::fixed,
    },
];

/// Finds a workload by name.
pub fn find(name: &str) -> Option<&'static Workload> {
    ALL.iter().find(|w| w.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_are_deterministic_and_named_uniquely() {
        for w in ALL {
            assert_eq!((w.run)(300), (w.run)(300), "{}", w.name);
            assert!(
                w.name.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'),
                "{}",
                w.name
            );
            assert_eq!(find(w.name).map(|f| f.name), Some(w.name));
        }
        let mut names: Vec<&str> = ALL.iter().map(|w| w.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        assert_eq!(
            ALL[0].name, "edit-distance",
            "the demo's default comes first"
        );
        assert!(find("nope").is_none());
    }

    #[test]
    #[allow(clippy::single_element_loop)] // until the other variants come
    fn variants_agree_on_their_checksums() {
        for (a, b) in [("edit-distance", "edit-distance-fixed")] {
            let (a, b) = (find(a).unwrap(), find(b).unwrap());
            assert_eq!((a.run)(2_000), (b.run)(2_000), "{} and {}", a.name, b.name);
            assert_eq!(a.unit, b.unit);
            assert_eq!(a.default_size, b.default_size);
        }
    }
}
