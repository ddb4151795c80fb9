//! Fuzzing the profile reader: real profiles (the testkit's `corpus/`: the shim
//! under python3, bash with forks and execs, an exact-stacks pipeline, a
//! Rust program's `Profiler`) cut at every byte, and mutated at random by
//! proptest (bytes flipped, lines deleted, duplicated, swapped or made up,
//! numbers replaced by extreme ones). Every input must either parse or give
//! a clean error, never panic; whatever parses must write back to text
//! that parses to the same profiles.
//!
//! `ALLOCMUX_FUZZ_CASES` sets the number of random cases (default 2,000,
//! a few seconds); docs/profile-format.md gives the long run's figures.

use allocmux_format::profile::{self, ProcessProfile};
use allocmux_testkit::fuzz::{CORPUS, apply, cases, edit};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};

/// Parses `text`; if it parses, checks the round trip.
fn check(text: &str) -> Result<(), String> {
    let procs: Vec<ProcessProfile> = match profile::parse(text) {
        Ok(p) => p,
        Err(e) => {
            // The error must be printable as one line.
            let msg = e.to_string();
            return if msg.is_empty() || msg.contains('\n') {
                Err(format!("error message {msg:?}"))
            } else {
                Ok(())
            };
        }
    };
    let written = profile::to_string(&procs);
    match profile::parse(&written) {
        Ok(again) if again == procs => Ok(()),
        Ok(_) => Err(format!("the round trip changed the profiles:\n{written}")),
        Err(e) => Err(format!("its own output does not parse ({e}):\n{written}")),
    }
}

#[test]
fn the_corpus_parses_and_round_trips() {
    for (name, text) in CORPUS {
        let procs = profile::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!procs.is_empty(), "{name}");
        check(text).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn every_truncation_parses_or_errs() {
    for (name, text) in CORPUS {
        for cut in (0..text.len()).filter(|&i| text.is_char_boundary(i)) {
            if let Err(e) = check(&text[..cut]) {
                panic!("{name} cut at byte {cut}: {e}");
            }
        }
    }
}

proptest! {
    #![proptest_config(Config {
        cases: cases(2_000),
        // Failing inputs are kept next to this file and tried first on
        // every later run.
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fuzz_profile.regressions"),
        ))),
        ..Config::default()
    })]

    #[test]
    fn mutated_profiles_parse_or_err(
        doc in 0..CORPUS.len(),
        edits in prop::collection::vec(edit(), 1..6),
    ) {
        let text = apply(CORPUS[doc].1, &edits);
        if let Err(e) = check(&text) {
            return Err(TestCaseError::fail(format!("{} with {edits:?}: {e}", CORPUS[doc].0)));
        }
    }
}
