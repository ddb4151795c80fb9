//! `fork` where glibc allows it, under every backend and stack mode: from a
//! signal handler that interrupted `malloc` (single-threaded, and with
//! threads allocating while one thread takes the signal), and racing
//! `getline` and `fflush(NULL)` in other threads (glibc bug 19431's
//! scenario). Each program finishes without the shim; under it, a run that
//! does not finish within `HANG` is a hang, reported with the run's number.
//! Each case runs for `BUDGET` (at least twice), since the hangs these
//! guard against came at once or within a few hundred forks.

#[macro_use]
mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// A run still going after this long is a hang (they take 1–3 s).
const HANG: Duration = Duration::from_secs(40);
/// How long each case repeats its program.
const BUDGET: Duration = Duration::from_secs(6);

/// Runs `exe args` under `backend` with stacks `mode` (profiles to a
/// fresh directory, or none if `output` is false) until `BUDGET` is spent
/// (at least twice); each run must print `want` and exit 0 within `HANG`.
/// Returns the number of runs and the profiles of the last.
fn repeat(
    exe: &std::path::Path,
    args: &[&str],
    backend: &str,
    mode: &str,
    output: bool,
    want: &str,
) -> (usize, Vec<(String, ProcessProfile)>) {
    let start = Instant::now();
    let mut runs = 0;
    loop {
        runs += 1;
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(exe);
        cmd.args(args);
        preload(
            &mut cmd,
            backend,
            output.then(|| dir.path().join("%p.prof")).as_deref(),
        );
        cmd.env("ALLOCMUX_STACKS", mode)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut p = Spawned::spawn(&mut cmd);
        let out = drain(p.child.stdout.take().unwrap());
        let err = drain(p.child.stderr.take().unwrap());
        let deadline = Instant::now() + HANG;
        let status = loop {
            if let Some(s) = p.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() >= deadline {
                p.signal_group(libc::SIGKILL);
                panic!(
                    "SHIM BUG (fork safety): {} under {backend}, stacks {mode}{}, run {runs}: \
                     still running after {} s, killed (a hang)",
                    p.what(),
                    if output { "" } else { ", no output" },
                    HANG.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        // Reaped by try_wait: dropping `p` must not signal the group again.
        std::mem::forget(p);
        let stdout = out.recv().unwrap();
        let stderr = err.recv().unwrap();
        assert!(
            status.success() && text(&stdout) == want,
            "{exe:?} {args:?} under {backend}, stacks {mode}, run {runs}: {status}, \
             stdout {:?} (want {want:?}), stderr {}",
            text(&stdout),
            text(&stderr)
        );
        if runs >= 2 && start.elapsed() >= BUDGET {
            return (runs, read_profiles(dir.path()));
        }
    }
}

/// The profile of the fixture itself (not of a child it forked).
fn own_profile(files: &[(String, ProcessProfile)], what: &str) -> ProcessProfile {
    let me = std::process::id();
    files
        .iter()
        .find(|(_, p)| p.ppid == me)
        .map(|(_, p)| p.clone())
        .unwrap_or_else(|| {
            panic!(
                "{what}: no profile of the program itself:\n{}",
                listing(files)
            )
        })
}

/// A single-threaded program whose SIGALRM handler forks while main
/// allocates: glibc takes no allocator lock in such a `fork`, and the shim
/// must start no thread that would make it take them, nor take a lock of
/// its own there that the interrupted frame may hold. Without output, the
/// embedded jemalloc's fork handlers (which would hang here) must not run
/// under the other backends.
fn fork_in_a_signal_handler(backend: &str, mode: &str) {
    let exe = compile_c("sigfork.c");
    for output in [true, false] {
        let (runs, files) = repeat(
            &exe,
            &["300"],
            backend,
            mode,
            output,
            "sigfork: 300 forks\n",
        );
        if output {
            let own = own_profile(&files, "sigfork 300");
            assert_eq!(own.state, State::Exited, "{}", summary(&own));
            assert_eq!(own.threads, 1, "single-threaded: {}", summary(&own));
            let children = files.iter().filter(|(_, p)| p.ppid == own.pid).count();
            assert_eq!(children, 300, "a profile per child:\n{}", listing(&files));
        }
        eprintln!("{backend}, stacks {mode}, output {output}: {runs} runs of sigfork 300");
    }
}

/// The same with four threads allocating (SIGALRM blocked in them) and
/// main taking the signal, sent by another process, while it waits:
/// glibc alone never hangs this way.
fn fork_in_a_signal_handler_with_threads(backend: &str, mode: &str) {
    let exe = compile_c("sigfork.c");
    let (runs, files) = repeat(
        &exe,
        &["300", "4"],
        backend,
        mode,
        true,
        "sigfork: 300 forks\n",
    );
    let own = own_profile(&files, "sigfork 300 4");
    assert_eq!(own.state, State::Exited, "{}", summary(&own));
    eprintln!("{backend}, stacks {mode}: {runs} runs of sigfork 300 4");
}

/// Threads forking while others run `getline` and `fflush(NULL)`: no lock
/// of the shim's may be held across `fork`, or a `getline` thread waiting
/// for it (inside `malloc`, holding its stream's lock) closes a cycle with
/// glibc's stdio locks, which the forking thread waits for.
fn fork_racing_getline_and_fflush(backend: &str, mode: &str) {
    let exe = compile_c("forkrace.c");
    let (runs, files) = repeat(
        &exe,
        &["2000"],
        backend,
        mode,
        true,
        "forkrace: 2000 forks\n",
    );
    let own = own_profile(&files, "forkrace 2000");
    assert_eq!(own.state, State::Exited, "{}", summary(&own));
    eprintln!("{backend}, stacks {mode}: {runs} runs of forkrace 2000");
}

/// One test per backend and stack mode for each case.
macro_rules! per_backend_and_mode {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            macro_rules! modes {
                ($backend:ident) => {
                    mod $backend {
                        #[test]
                        fn off() {
                            super::super::$name(stringify!($backend), "off")
                        }
                        #[test]
                        fn sample() {
                            super::super::$name(stringify!($backend), "sample")
                        }
                        #[test]
                        fn exact() {
                            super::super::$name(stringify!($backend), "exact")
                        }
                    }
                };
            }
            modes!(system);
            modes!(jemalloc);
            modes!(mimalloc);
        }
    )*};
}

per_backend_and_mode!(
    fork_in_a_signal_handler,
    fork_in_a_signal_handler_with_threads,
    fork_racing_getline_and_fflush,
);
