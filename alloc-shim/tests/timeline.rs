//! The memory timeline as the shim records it: live bytes and resident
//! memory sampled over real runs, a fork child's own timeline, and a long
//! run kept within the buffer while spanning the whole run.

use crate::common;

use std::process::Command;

use allocmux_format::timeline::{BASE_INTERVAL_NS, CAPACITY, Timeline, TimelinePoint};
use common::*;

const MIB: u64 = 1 << 20;
const MS: u64 = 1_000_000;

/// Runs the timeline fixture with `args` under `backend`; checks that it
/// printed `done` and returns its profiles.
fn run_fixture(backend: &str, args: &[&str], done: &str) -> Vec<(String, ProcessProfile)> {
    let exe = compile_c("timeline.c");
    let (out, files) = run_under_with(backend, Command::new(&exe).args(args), &[], None);
    assert!(
        out.status.success() && text(&out.stdout) == format!("{done}\n"),
        "timeline {args:?} under {backend} failed ({}):\n{}\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    files
}

/// The points, one per line, for assertion messages.
fn show(t: &Timeline) -> String {
    let lines: Vec<String> = t
        .points
        .iter()
        .map(|p| {
            format!(
                "  {:>9.3} ms  live {:>10}  rss {:>10}",
                p.t_ns as f64 / 1e6,
                p.live_bytes,
                p.rss_bytes
            )
        })
        .collect();
    format!("interval {} ns\n{}", t.interval_ns, lines.join("\n"))
}

/// What every recorded timeline must satisfy: points in time order,
/// within the buffer, starting at start-up and, for an exited process,
/// ending with the exit profile's own figures.
///
/// The start-up point is taken at the shim's initialisation (or a fork
/// child's), before the program's `main`; how long after `clock_start`
/// depends on the schedule, so it is known by its live bytes: those of
/// before the program's blocks (every fixture here allocates its 1 MiB
/// and larger blocks later, after at least 100 points in `long`, whose
/// halvings merge the first points into the first).
fn check_shape(who: &str, p: &ProcessProfile) {
    let t = &p.timeline;
    let first = t.points.first().copied().unwrap_or_default();
    let last = t.points.last().copied().unwrap_or_default();
    let problems = unmet([
        (
            t.points.len() >= 2,
            "at least a start and an end point".to_string(),
        ),
        (
            t.points.len() <= CAPACITY,
            format!("at most {CAPACITY} points"),
        ),
        (
            t.points.windows(2).all(|w| w[0].t_ns <= w[1].t_ns),
            "points in time order".to_string(),
        ),
        (
            first.live_bytes < MIB,
            "the first point at start-up, before the program's blocks (under 1 MiB live)"
                .to_string(),
        ),
        (
            p.state != State::Exited
                || (last.t_ns == p.wall_ns() && last.live_bytes == p.totals.live_bytes()),
            format!(
                "the last point at exit: {} ns (the profile's wall time), live {} (its live bytes at exit)",
                p.wall_ns(),
                p.totals.live_bytes()
            ),
        ),
        (
            t.interval_ns >= BASE_INTERVAL_NS,
            format!("an interval of at least {BASE_INTERVAL_NS} ns"),
        ),
    ]);
    assert!(
        problems.is_empty(),
        "{who}: the timeline should have {}\nprofile: {}\n{}",
        problems.join("; "),
        summary(p),
        show(t)
    );
}

/// Index of the first point matching `f`.
fn find(t: &Timeline, f: impl Fn(&TimelinePoint) -> bool) -> Option<usize> {
    t.points.iter().position(f)
}

/// A 64 MiB block held, then freed: the timeline shows the block live and
/// resident, then gone while the program still runs (not just in the exit
/// point: a large free must reach the sampled live count). The fixture
/// waits for each in its flushed profile (see timeline.c), so a shim that
/// never samples them fails it with a FAIL line after 100 s.
fn timeline_follows_a_64_mib_block(backend: &str) {
    let files = run_fixture(backend, &["phases"], "phases done");
    assert_eq!(files.len(), 1, "{}", listing(&files));
    let p = &files[0].1;
    let who = format!("timeline phases under {backend}");
    check_shape(&who, p);
    let t = &p.timeline;
    let held = find(t, |q| q.live_bytes >= 64 * MIB && q.rss_bytes >= 64 * MIB);
    let Some(held) = held else {
        panic!(
            "{who}: no point with 64 MiB both live and resident\n{}",
            show(t)
        );
    };
    // After the free and before the exit point (the fixture saw two such
    // flushed before it exited, and a halving keeps one of them).
    let freed = t.points[held + 1..t.points.len() - 1]
        .iter()
        .position(|q| q.live_bytes < MIB)
        .map(|i| held + 1 + i);
    let Some(freed) = freed else {
        panic!(
            "{who}: after the 64 MiB point (#{held}) no sample before the exit shows the block freed (live < 1 MiB)\n{}",
            show(t)
        );
    };
    let sleep_after_free = t.points[t.points.len() - 1].t_ns - t.points[freed].t_ns;
    assert!(
        t.points[freed].t_ns > t.points[held].t_ns && sleep_after_free > 0,
        "{who}\n{}",
        show(t)
    );
    if backend == "system" {
        // glibc returns a 64 MiB block to the kernel at once (it is
        // mmapped), so the resident size drops too: it is sampled, not
        // the process's maximum.
        assert!(
            t.points[freed..].iter().any(|q| q.rss_bytes < 32 * MIB),
            "{who}: glibc unmapped the block, yet no later point shows the resident size drop\n{}",
            show(t)
        );
    }
}

/// A forked child records its own timeline from its own start: its
/// points begin at the fork, show its own 1 MiB and not the parent's 64
/// MiB, and end at its exit; the parent's timeline goes on past the fork.
/// Only orderings the fixture's sleeps and `waitpid` impose are checked
/// (a sleep lasts at least its time), never how many points fit in one.
fn fork_child_has_its_own_timeline(backend: &str) {
    let files = run_fixture(backend, &["fork"], "fork done");
    let me = std::process::id();
    let parent = files.iter().map(|(_, p)| p).find(|p| p.ppid == me);
    let child =
        parent.and_then(|parent| files.iter().map(|(_, p)| p).find(|p| p.ppid == parent.pid));
    let (Some(parent), Some(child)) = (parent, child) else {
        panic!(
            "timeline fork under {backend}: want the parent's and the child's profiles:\n{}",
            listing(&files)
        );
    };
    let who = format!("timeline fork under {backend}");
    check_shape(&format!("{who}, parent"), parent);
    check_shape(&format!("{who}, child"), child);
    let (pt, ct) = (&parent.timeline, &child.timeline);
    let forked_at = child
        .clock_start
        .mono_ns
        .saturating_sub(parent.clock_start.mono_ns);
    let problems = unmet([
        (
            forked_at >= 90 * MS,
            "the child starts at the fork, after the parent's 100 ms sleep",
        ),
        (
            ct.peak_live_bytes() >= MIB && ct.peak_live_bytes() < 16 * MIB,
            "the child's live bytes are its own 1 MiB, not the parent's 64 MiB",
        ),
        (
            pt.peak_live_bytes() >= 64 * MIB,
            "the parent's timeline shows its 64 MiB",
        ),
        (
            ct.duration_ns() >= 100 * MS,
            "the child's timeline runs to its exit, after its 100 ms sleep",
        ),
        (
            pt.duration_ns() >= forked_at + ct.duration_ns() + 100 * MS,
            "the parent's timeline goes on after the child's end, through its 100 ms sleep",
        ),
    ]);
    assert!(
        problems.is_empty(),
        "{who}: {}\nforked {} ms after the parent's start\nparent:\n{}\nchild:\n{}",
        problems.join("; "),
        forked_at / MS,
        show(pt),
        show(ct)
    );
}

/// A peak far shorter than the sampling interval (16 MiB held for
/// microseconds) is on the timeline all the same: the timeline's top is
/// the profile's peak, under every backend.
#[test]
fn a_peak_between_samples_is_on_the_timeline() {
    for backend in ["system", "jemalloc", "mimalloc"] {
        let files = run_fixture(backend, &["blip"], "blip done");
        let p = &files[0].1;
        check_shape("timeline blip", p);
        let top = p.timeline.points.iter().map(|q| q.live_bytes).max();
        let peak = p.totals.peak_live_bytes;
        assert!(peak >= 16 * MIB, "{backend}: peak {peak}");
        assert_eq!(
            top,
            Some(peak),
            "{backend}: the timeline tops out at the profile's peak\n{}",
            show(&p.timeline)
        );
    }
}

/// A process that ends before the first 10 ms sample still has a point at
/// its start-up and one at its exit.
#[test]
fn short_process_has_a_start_and_an_end_point() {
    let exe = compile_c("counts.c");
    let (out, profiles) = run_under("system", Command::new(&exe).arg("0"), &[]);
    assert!(out.status.success(), "counts 0: {}", text(&out.stderr));
    assert_eq!(profiles.len(), 1);
    let p = &profiles[0];
    check_shape("counts 0", p);
    let t = &p.timeline;
    assert!(
        t.points[0].t_ns < t.points[t.points.len() - 1].t_ns,
        "counts 0: the start and the exit are distinct points\n{}",
        show(t)
    );
}

/// A run longer than the buffer holds at the first interval: the timeline
/// halves its resolution instead of growing or stopping, still spans the
/// whole run, and spikes early in the run, each a single point, survive
/// the merging. The fixture runs until its flushed profile shows the
/// interval doubled after the spikes (see timeline.c), not for a fixed
/// time: how many samples fit in a time depends on the schedule. Gaps
/// between points are not bounded either: a sample preempted twice in a
/// row holds off the next by up to `SAMPLE_DUTY` times as long
/// (flusher.rs).
#[test]
fn long_run_keeps_a_bounded_timeline_over_the_whole_run() {
    // timeline.c's SPIKES: blocks of 32 MiB, 33 MiB, ...
    const SPIKES: u64 = 4;
    let files = run_fixture("system", &["long"], "long done");
    assert_eq!(files.len(), 1, "{}", listing(&files));
    let p = &files[0].1;
    let who = "timeline long";
    check_shape(who, p);
    let t = &p.timeline;
    // Each spike is a point of its own, two or more points before the next
    // one's (the fixture waits for each in a flushed profile: the sample
    // that added it comes first), so one halving, which merges neighbouring
    // pairs keeping the larger figures, keeps every spike's; later ones may
    // merge spikes into the largest (only where the fixture was held back
    // for the 10 s and more a second halving takes).
    let kept = if t.interval_ns == 2 * BASE_INTERVAL_NS {
        0..SPIKES
    } else {
        SPIKES - 1..SPIKES
    };
    let lost: Vec<u64> = kept
        .map(|k| 32 + k)
        .filter(|mib| {
            !t.points
                .iter()
                .any(|q| q.live_bytes >= mib * MIB && q.live_bytes < (mib + 1) * MIB)
        })
        .collect();
    let problems = unmet([
        (
            t.interval_ns >= 2 * BASE_INTERVAL_NS,
            "a doubled interval (the buffer filled and halved)".to_string(),
        ),
        (
            t.points.len() > CAPACITY / 2,
            format!(
                "over {} points (a halving keeps half of a full buffer)",
                CAPACITY / 2
            ),
        ),
        (
            lost.is_empty(),
            format!("the spikes, kept by the merging (lost: {lost:?} MiB)"),
        ),
    ]);
    assert!(
        problems.is_empty(),
        "{who}: the timeline should have {}\n{}",
        problems.join("; "),
        show(t)
    );
}

per_backend!(
    timeline_follows_a_64_mib_block,
    fork_child_has_its_own_timeline
);
