//! Fuzzing what the CLI does with a profile that reads but holds nonsense
//! (clocks running backwards, counters at `u64::MAX`, a timeline out of
//! order, stacks without modules): the report, its JSON and the memory
//! timeline chart must come out, or a clean error, never a panic or an
//! arithmetic overflow (tests build with overflow checks).
//!
//! `ALLOCMUX_FUZZ_CASES` sets the number of cases (default 1,000).

use allocmux_cli::plot;
use allocmux_cli::report::Report;
use allocmux_format::profile;
use allocmux_testkit::fuzz::{CORPUS, apply, cases, edit};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};

/// Everything the CLI makes of a profile without symbolizing it.
fn render(text: &str) {
    let Ok(procs) = profile::parse(text) else {
        return; // the reader's own fuzzing covers its errors
    };
    // The memory timeline chart, as `report --plot` draws it.
    let refs: Vec<&profile::ProcessProfile> = procs.iter().collect();
    let offsets = plot::run_offsets(&refs);
    let named: Vec<plot::NamedTimeline<'_>> = procs
        .iter()
        .zip(&offsets)
        .map(|(p, &offset_ns)| plot::NamedTimeline {
            name: "process",
            timeline: &p.timeline,
            offset_ns,
            colour: None,
        })
        .collect();
    if named.iter().any(|n| !n.timeline.points.is_empty()) {
        let _ = plot::timelines_svg(&named, &plot::PlotOptions::new("fuzz".to_string()));
    }
    let report = Report::new(procs, None);
    let mut out = Vec::new();
    report.write_human(&mut out).expect("writing to memory");
    let json = serde_json::to_string(&allocmux_cli::json::ReportJson::from(&report)).expect("JSON");
    assert!(!json.is_empty());
}

#[test]
fn the_corpus_renders() {
    for (_, text) in CORPUS {
        render(text);
    }
}

proptest! {
    #![proptest_config(Config {
        cases: cases(1_000),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fuzz_report.regressions"),
        ))),
        ..Config::default()
    })]

    #[test]
    fn mutated_profiles_render(
        doc in 0..CORPUS.len(),
        edits in prop::collection::vec(edit(), 1..6),
    ) {
        render(&apply(CORPUS[doc].1, &edits));
    }
}
