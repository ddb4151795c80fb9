//! A peer's stress tests (issue 7, item 7): the allocator stress workloads
//! of this crate and `stress-ng --malloc` run clean under the shim with
//! every backend in every recording mode (stacks off, sampled, exact):
//! exit status 0, the program's output unchanged, nothing from the shim on
//! stderr, and a readable profile per process with plausible counts.
//!
//! CI-cheap: small sizes of the debug-built workloads and a short
//! `stress-ng` run. Every process is killed if it runs past a deadline, so
//! a hang fails the test instead of stalling it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use allocmux::Func;
use allocmux::profile::{ProcessProfile, StackMode, State};

const BACKENDS: [&str; 3] = ["system", "jemalloc", "mimalloc"];

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

const DEADLINE: Duration = Duration::from_secs(120);

fn bin(name: &str) -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_allocmux-workload"))
        .parent()
        .expect("binaries live in a directory")
        .join(name)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `cmd` with the shim preloaded (`backend`, `settings`), profiles
/// going to a fresh directory; kills it at the deadline. Returns its output
/// and every profile it left, by file name.
fn run_under(
    cmd: &mut Command,
    backend: &str,
    settings: &[(&str, &str)],
) -> (Output, Vec<(String, ProcessProfile)>) {
    let dir = tempfile::tempdir().unwrap();
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("ALLOCMUX_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("LD_PRELOAD", allocmux_cli::shim::BUILT_PATH)
        .env("ALLOCMUX_ALLOCATOR", backend)
        .env("ALLOCMUX_OUTPUT", dir.path().join("%p.prof"))
        .envs(settings.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    let child = cmd.spawn().expect("the program starts");
    let pid = child.id() as libc::pid_t;
    // The output is read by `wait_with_output` on this thread; a watchdog
    // kills the process group at the deadline.
    let (done, watch) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if watch.recv_timeout(DEADLINE).is_err() {
            // SAFETY: kill has no memory-safety preconditions; the group
            // is our child's, not yet reaped (we still wait for it).
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            return true;
        }
        false
    });
    let started = Instant::now();
    let out = child.wait_with_output().expect("waiting for the program");
    let _ = done.send(());
    let killed = watchdog.join().unwrap();
    assert!(
        !killed,
        "{cmd:?} under {backend} {settings:?} still ran after {:?}: killed (a hang?)\nstderr: {}",
        started.elapsed(),
        text(&out.stderr)
    );
    let mut profiles = Vec::new();
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in names {
        let body = std::fs::read_to_string(dir.path().join(&name))
            .unwrap_or_else(|e| panic!("profile {name}: {e}"));
        let mut p = allocmux::profile::parse(&body)
            .unwrap_or_else(|e| panic!("profile {name} does not parse: {e}\n{body}"));
        assert_eq!(p.len(), 1, "{name} holds one process");
        profiles.push((name, p.pop().unwrap()));
    }
    (out, profiles)
}

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
                    let (out, profiles) = run_under(
                        Command::new(bin(name)).arg(size.to_string()),
                        backend,
                        settings,
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

/// `stress-ng`, or None (the test is skipped) where it is not installed
/// and this is not CI (`.ci/run` installs it).
fn stress_ng() -> Option<PathBuf> {
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        let p = dir.join("stress-ng");
        if p.is_file() {
            return Some(p);
        }
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "stress-ng is not installed (apt-get install stress-ng)"
    );
    eprintln!("skipping: stress-ng is not installed (apt-get install stress-ng)");
    None
}

#[test]
fn stress_ng_malloc_runs_clean_under_every_backend_and_mode() {
    let Some(stress_ng) = stress_ng() else { return };
    const OPS: u64 = 4000;
    for backend in BACKENDS {
        for (mode, settings) in MODES {
            let what = format!("stress-ng --malloc under {backend} with {mode}");
            let (out, profiles) = run_under(
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
                backend,
                settings,
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
