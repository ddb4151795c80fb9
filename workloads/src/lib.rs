//! Allocation workloads: the demo's default and the patterns the tests and
//! benchmarks run. Each takes a size parameter and returns a checksum, so
//! the work cannot be optimised away and runs can be compared; variants of
//! one pattern (naive and fixed, heap and inline, ...) compute the same
//! checksum, and are separate entries of [`ALL`] so that `allocmux compare`
//! and `allocmux flame` can run each. Every entry is also a binary of its
//! own name (`target/release/edit-distance-fixed 60000`).
//!
//! The first five are the cases people hit in real programs, from the
//! classic write-ups on Rust allocation performance; the last five are the
//! classic allocator stress patterns (as in mimalloc-bench, written here
//! from their descriptions).
#![deny(unsafe_code)] // allowed only for `InlineName::as_bytes`
#![deny(missing_docs)]

pub mod bounded_string;
pub mod cache;
pub mod cli;
pub mod edit_distance;
pub mod filter;
pub mod fragmentation;
pub mod larson;
pub mod producer_consumer;
pub mod readers;
pub mod realloc_growth;
pub mod rng;
pub mod short_threads;

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
    Workload {
        name: "bounded-string-heap",
        about: "validated domain names constructed as String (one allocation each), in batches of 64",
        unit: "names",
        default_size: 4_000_000,
        run: bounded_string::heap,
    },
    Workload {
        name: "bounded-string-inline",
        about: "the same names constructed inline as [MaybeUninit<u8>; 253] and a length (no allocation)",
        unit: "names",
        default_size: 4_000_000,
        run: bounded_string::inline,
    },
    Workload {
        name: "readers-per-stream",
        about: "small in-memory streams, each read through a new BufReader with its 8 KiB buffer",
        unit: "streams",
        default_size: 1_000_000,
        run: readers::per_stream,
    },
    Workload {
        name: "readers-reused",
        about: "the same streams, all read through one 8 KiB buffer",
        unit: "streams",
        default_size: 1_000_000,
        run: readers::reused,
    },
    Workload {
        name: "cache-owned",
        about: "HashMap<String, Row> lookups, an owned String key built from each &str request",
        unit: "lookups",
        default_size: 1_200_000,
        run: cache::owned,
    },
    Workload {
        name: "cache-borrowed",
        about: "the same lookups by the borrowed &str",
        unit: "lookups",
        default_size: 1_200_000,
        run: cache::borrowed,
    },
    Workload {
        name: "filter-boxed",
        about: "log filters compiled to Box<dyn Fn> closures that pass owned Strings around",
        unit: "records",
        default_size: 500_000,
        run: filter::boxed,
    },
    Workload {
        name: "filter-enum",
        about: "the same filters compiled to enum nodes in an arena, strings borrowed or in one scratch buffer",
        unit: "records",
        default_size: 500_000,
        run: filter::enum_arena,
    },
    Workload {
        name: "producer-consumer",
        about: "2 producer threads send buffers of 16 B-4 KiB to 2 consumer threads, which free them",
        unit: "messages",
        default_size: 4_000_000,
        run: producer_consumer::run,
    },
    Workload {
        name: "larson",
        about: "4 worker threads replace random objects in their tables and hand the tables round a ring",
        unit: "replacements",
        default_size: 5_000_000,
        run: larson::run,
    },
    Workload {
        name: "realloc-growth",
        about: "256 vectors at a time grown one element at a time, in turn, to up to 16 Ki elements",
        unit: "vectors",
        default_size: 10_000,
        run: realloc_growth::run,
    },
    Workload {
        name: "fragmentation",
        about: "objects of 16 B-64 KiB interleaved, most short-lived, 1 in 8 long-lived",
        unit: "objects",
        default_size: 1_000_000,
        run: fragmentation::run,
    },
    Workload {
        name: "short-threads",
        about: "threads started 4 at a time, each allocating 200 objects and handing some back",
        unit: "threads",
        default_size: 2_500,
        run: short_threads::run,
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
    fn variants_agree_on_their_checksums() {
        for (a, b) in [
            ("edit-distance", "edit-distance-fixed"),
            ("bounded-string-heap", "bounded-string-inline"),
            ("readers-per-stream", "readers-reused"),
            ("cache-owned", "cache-borrowed"),
            ("filter-boxed", "filter-enum"),
        ] {
            let (a, b) = (find(a).unwrap(), find(b).unwrap());
            assert_eq!((a.run)(2_000), (b.run)(2_000), "{} and {}", a.name, b.name);
            assert_eq!(a.unit, b.unit);
            assert_eq!(a.default_size, b.default_size);
        }
    }
}
