//! Long runs: in exact-stack mode the shim's memory and
//! the profile grow with the distinct call stacks and the live blocks, not
//! with the number of calls.
//!
//! `long_run.c` makes N and then 10 × N allocations from the same 8 call
//! sites with at most 64 blocks live, and prints its own peak resident size
//! (`VmHWM`) at the end. Both runs must end with the same stacks, within
//! 1 MiB of each other in peak RSS, and with profiles of the same size
//! but for the numbers' digits (see [`comparable_size`]).
//! `scripts/studies/long_run.sh` is the same at a billion allocations.

use std::process::Command;

use crate::common;
use common::*;

/// Allocations of the shorter run; the longer makes ten times as many.
const N: u64 = 100_000;

/// Growth of the peak resident size allowed between N and 10 × N calls:
/// page-granular noise of the allocator, nothing per call (10 × N calls at
/// even one byte each would be 1 MB). What of the shim's memory depends on
/// the schedule is far less: whether the writer thread's periodic writes
/// (every 500 ms, so more of them the slower the run) touched its stack,
/// and how much of the timeline's fixed buffer (48 KiB) was filled; the
/// buffers a write stages through are those the exit profile uses anyway.
/// (Measured: within ±250 kB, idle or under `stress-ng --cpu 2`.)
const RSS_SLACK_KB: i64 = 1024;

/// Growth of [`comparable_size`] allowed between N and 10 × N calls: a
/// line or two only the longer run might have (a `calls` line for a
/// function libc calls past some count, say); a record per call or per
/// live block would be hundreds of thousands of bytes.
const PROFILE_SLACK_BYTES: usize = 64;

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

/// The size of a profile as the runs compare it: its bytes, without the
/// lines whose number may differ between runs by design, and with each
/// number (a field of hex digits: counts, times, addresses) one byte long.
/// Left out: the memory timeline (`tl`, and `timeline_temporary`'s count
/// per point), which grows with the run's length up to its fixed 2,048
/// points, and the size histogram (`size_hist`, at
/// most 48 buckets), which gains a line for each bucket first reached; and
/// the allocator's readings (`allocator_stat*`), whose reading nearest the
/// peak is written only when a periodic write made one other than the
/// exit's, so depends on how many came before the exit. The numbers'
/// digits grow with the calls (the counts) and with the schedule (the
/// clocks, `cpu_ns`, each stack's ticks). What is left must not grow at
/// all: the lines and fields, as a record per call or per block would.
fn comparable_size(body: &str) -> usize {
    const LEFT_OUT: [&str; 4] = ["tl ", "timeline_temporary ", "size_hist ", "allocator_stat"];
    let field = |f: &str| match f.bytes().all(|b| b.is_ascii_hexdigit()) {
        true if !f.is_empty() => 1,
        _ => f.len(),
    };
    body.lines()
        .filter(|l| !LEFT_OUT.iter().any(|k| l.starts_with(k)))
        // Each field and the space or newline after it.
        .map(|l| l.split(' ').map(|f| field(f) + 1).sum::<usize>())
        .sum()
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
    let body = std::fs::read_to_string(dir.path().join(name)).unwrap();
    let profile_bytes = comparable_size(&body);
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
         profile {} and {} bytes as compared, {} and {} stacks",
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
    assert!(
        long.profile_bytes <= short.profile_bytes + PROFILE_SLACK_BYTES,
        "the profile grew with the number of calls: {figures}"
    );
}

per_backend!(exact_stacks_memory_grows_with_stacks_not_calls);
