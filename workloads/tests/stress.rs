//! Stress tests: the allocator stress workloads
//! of this crate and `stress-ng --malloc` run clean under the shim with
//! every backend in every recording mode (stacks off, sampled, exact):
//! exit status 0, the program's output unchanged, nothing from the shim on
//! stderr, and a readable profile per process with plausible counts.
//!
//! CI-cheap: small sizes of the debug-built workloads and a short
//! `stress-ng` run. Every process is killed if it runs past a deadline, so
//! a hang fails the test instead of stalling it.

use std::process::Command;

use allocmux::Func;
use allocmux_format::profile::{ProcessProfile, StackMode, State};
use allocmux_testkit::{BACKENDS, require, run_under_with, text};

use crate::common;
use common::bin;

/// (mode name, the shim's settings for it).
const MODES: [(&str, &[(&str, &str)]); 3] = [
    ("stacks off", &[("ALLOCMUX_STACKS", "off")]),
    (
        "sampled stacks",
        // Sampled more often than the default, so small runs get samples.
        &[
            ("ALLOCMUX_STACKS", "sample"),
            ("ALLOCMUX_SAMPLE_BYTES", "16384"),
        ],
    ),
    ("exact stacks", &[("ALLOCMUX_STACKS", "exact")]),
];

/// The stress workloads and their sizes: a fraction of a second each in a
/// debug build, enough for tens of thousands of cross-thread frees.
const STRESS: [(&str, u64); 5] = [
    ("producer-consumer", 100_000),
    ("larson", 100_000),
    ("realloc-growth", 1_000),
    ("fragmentation", 50_000),
    ("short-threads", 300),
];

/// What every process's profile must show in `mode`.
fn check_stacks(p: &ProcessProfile, mode: &str, what: &str) {
    let s = &p.stacks;
    let allocs: u64 = s.stacks.iter().map(|st| st.counts.allocs).sum();
    match mode {
        "stacks off" => assert_eq!(s.mode, StackMode::Off, "{what}"),
        "sampled stacks" => assert_eq!(s.mode, StackMode::Sample { mean_bytes: 16384 }, "{what}"),
        _ => {
            assert_eq!(s.mode, StackMode::Exact, "{what}");
            // Every allocation call has a stack, or is counted as lost.
            let calls = p.totals.allocation_calls();
            assert!(
                allocs + s.lost >= calls * 99 / 100 && allocs <= calls,
                "{what}: {allocs} allocations in stacks + {} lost against {calls} calls",
                s.lost
            );
        }
    }
}

#[test]
fn stress_workloads_run_clean_under_every_backend_and_mode() {
    let mut runs = Vec::new();
    for (name, size) in STRESS {
        for backend in BACKENDS {
            for (mode, settings) in MODES {
                runs.push((name, size, backend, mode, settings));
            }
        }
    }
    let expected: Vec<(&str, String)> = STRESS
        .iter()
        .map(|&(name, size)| {
            let w = allocmux_workloads::find(name).expect("a workload");
            (name, format!("{name} {}\n", (w.run)(size)))
        })
        .collect();
    // Two at a time: this is what the CI machine has.
    std::thread::scope(|s| {
        for half in [0, 1] {
            let (runs, expected) = (&runs, &expected);
            s.spawn(move || {
                for &(name, size, backend, mode, settings) in runs.iter().skip(half).step_by(2) {
                    let what = format!("{name} {size} under {backend} with {mode}");
                    let (out, profiles) = run_under_with(
                        backend,
                        Command::new(bin(name)).arg(size.to_string()),
                        settings,
                        None,
                    );
                    assert!(
                        out.status.success(),
                        "{what}: {}\n{}",
                        out.status,
                        text(&out.stderr)
                    );
                    let want = &expected.iter().find(|(n, _)| *n == name).unwrap().1;
                    assert_eq!(&text(&out.stdout), want, "{what}: stdout");
                    assert!(
                        out.stderr.is_empty(),
                        "{what}: stderr: {}",
                        text(&out.stderr)
                    );
                    assert_eq!(profiles.len(), 1, "{what}: one process, one profile");
                    let p = &profiles[0].1;
                    assert_eq!(
                        (p.state, p.allocator.as_str()),
                        (State::Exited, backend),
                        "{what}"
                    );
                    // Each unit of work allocates at least once.
                    assert!(
                        p.totals.allocation_calls() >= size,
                        "{what}: {} allocation calls",
                        p.totals.allocation_calls()
                    );
                    assert!(
                        p.totals.calls_of(Func::Free) >= size / 2,
                        "{what}: {} frees",
                        p.totals.calls_of(Func::Free)
                    );
                    if name == "realloc-growth" {
                        assert!(
                            p.totals.calls_of(Func::Realloc) > p.totals.calls_of(Func::Malloc),
                            "{what}: reallocs outnumber mallocs"
                        );
                    }
                    if name == "short-threads" {
                        assert!(p.threads > size, "{what}: {} threads", p.threads);
                    }
                    check_stacks(p, mode, &what);
                }
            });
        }
    });
}

#[test]
fn stress_ng_malloc_runs_clean_under_every_backend_and_mode() {
    let Some(stress_ng) = require("stress-ng", "stress-ng") else {
        return;
    };
    const OPS: u64 = 4000;
    for backend in BACKENDS {
        for (mode, settings) in MODES {
            let what = format!("stress-ng --malloc under {backend} with {mode}");
            let (out, profiles) = run_under_with(
                backend,
                Command::new(&stress_ng).args([
                    "--malloc",
                    "2",
                    "--malloc-pthreads",
                    "2",
                    "--malloc-ops",
                    &OPS.to_string(),
                    "--malloc-bytes",
                    "64K",
                    "--timeout",
                    "20s",
                    "--metrics-brief",
                ]),
                settings,
                None,
            );
            let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
            assert!(out.status.success(), "{what}: {}\n{all}", out.status);
            assert!(
                all.contains("successful run completed"),
                "{what}: stress-ng did not report success:\n{all}"
            );
            let ours: Vec<&str> = all.lines().filter(|l| l.contains("allocmux")).collect();
            assert!(ours.is_empty(), "{what}: the shim said {ours:#?}");
            // The parent and its workers (processes and their threads),
            // each with its own profile.
            assert!(profiles.len() >= 3, "{what}: {} profiles", profiles.len());
            let mut mallocs = 0;
            for (file, p) in &profiles {
                let what = format!("{what}, {file}");
                assert_eq!(p.allocator, backend, "{what}");
                assert!(matches!(p.state, State::Exited | State::Running), "{what}");
                check_stacks(p, mode, &what);
                mallocs += p.totals.calls_of(Func::Malloc)
                    + p.totals.calls_of(Func::Calloc)
                    + p.totals.calls_of(Func::Realloc);
            }
            // The workers make OPS bogo operations in all, each of which
            // allocates, reallocates or frees (a free per allocation, as
            // the table fills and empties).
            assert!(mallocs >= OPS / 2, "{what}: {mallocs} allocation calls");
        }
    }
}
