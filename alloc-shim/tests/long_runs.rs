//! Long runs: in exact-stack mode the shim's memory and
//! the profile grow with the distinct call stacks and the live blocks, not
//! with the number of calls.
//!
//! `long_run.c` makes N and then 10 × N allocations from the same 8 call
//! sites with at most 64 blocks live, and prints its own peak resident size
//! (`VmHWM`) at the end. Both runs must end with the same stacks, within
//! 1 MiB of each other in peak RSS, and with profiles of about the same
//! size. `scripts/studies/long_run.sh` is the same at a billion allocations.

use std::process::Command;

#[macro_use]
mod common;
use common::*;

/// Allocations of the shorter run; the longer makes ten times as many.
const N: u64 = 100_000;

/// Growth of the peak resident size allowed between N and 10 × N calls:
/// page-granular noise of the allocator, nothing per call (10 × N calls at
/// even one byte each would be 1 MB).
const RSS_SLACK_KB: i64 = 1024;

struct Measured {
    hwm_kb: i64,
    profile_bytes: usize,
    profile: ProcessProfile,
}

/// The `VmHWM` figure of long_run's output line.
fn hwm_kb(stdout: &[u8]) -> i64 {
    let line = String::from_utf8_lossy(stdout);
    let after = line
        .split("VmHWM ")
        .nth(1)
        .unwrap_or_else(|| panic!("no VmHWM in {line:?}"));
    after
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM figure in {line:?}"))
}

fn measure(backend: &str, n: u64) -> Measured {
    let exe = compile("cc", "long_run.c", &["-O2", "-fno-optimize-sibling-calls"]);
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(&exe);
    cmd.arg(n.to_string());
    cmd.env("ALLOCMUX_STACKS", "exact");
    preload(&mut cmd, backend, Some(&dir.path().join("%p.prof")));
    let out = run(&mut cmd, None);
    let what = format!("long_run {n} under {backend}, exact stacks");
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        out.status,
        text(&out.stderr)
    );
    assert!(out.stderr.is_empty(), "{what}: {}", text(&out.stderr));
    let mut files = read_profiles(dir.path());
    assert_eq!(files.len(), 1, "{what}: {}", listing(&files));
    let (name, profile) = files.pop().unwrap();
    assert_eq!(profile.state, State::Exited, "{what}");
    // The memory timeline (`tl` lines) grows with the run's length up to
    // its fixed 2,048 points; everything else must not grow at all.
    let body = std::fs::read_to_string(dir.path().join(name)).unwrap();
    let profile_bytes = body
        .lines()
        .filter(|l| !l.starts_with("tl "))
        .map(|l| l.len() + 1)
        .sum();
    assert!(
        profile.timeline.points.len() <= allocmux_format::timeline::CAPACITY,
        "{what}"
    );
    Measured {
        hwm_kb: hwm_kb(&out.stdout),
        profile_bytes,
        profile,
    }
}

fn exact_stacks_memory_grows_with_stacks_not_calls(backend: &str) {
    let exe = compile("cc", "long_run.c", &["-O2", "-fno-optimize-sibling-calls"]);
    let bare = run_reference(Command::new(&exe).arg((10 * N).to_string()), None);
    assert!(bare.status.success());
    let bare_kb = hwm_kb(&bare.stdout);

    let short = measure(backend, N);
    let long = measure(backend, 10 * N);
    let figures = format!(
        "under {backend}: peak RSS {} kB bare, {} kB for {N} calls, {} kB for {} calls; \
         profile {} and {} bytes without its timeline, {} and {} stacks",
        bare_kb,
        short.hwm_kb,
        long.hwm_kb,
        10 * N,
        short.profile_bytes,
        long.profile_bytes,
        short.profile.stacks.stacks.len(),
        long.profile.stacks.stacks.len(),
    );
    eprintln!("{figures}");

    for (m, n) in [(&short, N), (&long, 10 * N)] {
        let s = &m.profile.stacks;
        assert_eq!(
            s.mode,
            allocmux_format::profile::StackMode::Exact,
            "{figures}"
        );
        assert_eq!(s.lost, 0, "{figures}");
        let allocs: u64 = s.stacks.iter().map(|st| st.counts.allocs).sum();
        assert!(
            allocs >= n && allocs <= n + 100,
            "{n} calls, {allocs} in the stacks: {figures}"
        );
        // The 8 call sites, and the few of start-up and stdio.
        assert!(
            (8..=40).contains(&s.stacks.len()),
            "distinct stacks: {figures}"
        );
    }
    assert_eq!(
        short.profile.stacks.stacks.len(),
        long.profile.stacks.stacks.len(),
        "the same code makes the same stacks: {figures}"
    );
    assert!(
        long.hwm_kb - short.hwm_kb <= RSS_SLACK_KB,
        "the peak RSS grew with the number of calls: {figures}"
    );
    // The counts gain a digit; nothing else may grow (the timeline is
    // left out: see `measure`).
    assert!(
        long.profile_bytes <= short.profile_bytes + short.profile_bytes / 20 + 512,
        "the profile grew with the number of calls: {figures}"
    );
}

per_backend!(exact_stacks_memory_grows_with_stacks_not_calls);
