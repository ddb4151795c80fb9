//! `fork` where glibc allows it, under every backend and stack mode (each
//! case says where it does not hold yet): from a signal handler that
//! interrupted `malloc` (single-threaded, and with threads allocating while
//! one thread takes the signal), and racing `getline` and `fflush(NULL)` in
//! other threads (glibc bug 19431's scenario). Each program finishes without the shim; under it, a run that
//! does not finish within `HANG` is a hang, reported with the run's number.
//! Each case runs for `BUDGET` (at least twice), since the hangs these
//! guard against came at once or within a few hundred forks.

#[macro_use]
mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// A run still going after this long is a hang. They take 1–3 s, but
/// with threads and exact stacks, on a loaded 2-core machine, a run has
/// taken 54 s and finished: its allocating threads spin for the stack
/// table while the forking thread waits for CPU and for glibc's arena
/// locks. A deadlock never finishes, so a generous limit loses nothing.
const HANG: Duration = Duration::from_secs(150);
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
        cmd.args(args).env("ALLOCMUX_STACKS", mode);
        preload(
            &mut cmd,
            backend,
            output.then(|| dir.path().join("%p.prof")).as_deref(),
        );
        cmd.stdin(Stdio::null())
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
/// must take no lock of its own there that the interrupted frame may hold,
/// nor run the embedded jemalloc's fork handlers (which would hang here)
/// under another backend, nor under jemalloc in a single-threaded process.
///
/// With a profile written too, but for jemalloc: there the shim's flusher
/// is a `pthread`, which makes the process multi-threaded, and the shim
/// runs jemalloc's fork handlers, which hang as they do without the shim.
/// Under glibc's allocator the flusher is a thread glibc does not know of,
/// so glibc's `fork` still takes no lock, and the profile writes in the
/// `fork` and `_exit` handlers stay off glibc's heap; under mimalloc
/// nothing uses glibc's heap. `docs/guarantees.md` says so.
fn fork_in_a_signal_handler(backend: &str, mode: &str) {
    let exe = compile_c("sigfork.c");
    let outputs: &[bool] = if backend == "jemalloc" {
        &[false]
    } else {
        &[true, false]
    };
    for &output in outputs {
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
            // A child forked while the handler's interrupted frame was
            // writing the profile writes none (its writer is that frame's).
            let children = files.iter().filter(|(_, p)| p.ppid == own.pid).count();
            assert!(
                (270..=300).contains(&children),
                "a profile per child, but for a few forked mid-write: {children}\n{}",
                listing(&files)
            );
        }
        eprintln!("{backend}, stacks {mode}, output {output}: {runs} runs of sigfork 300");
    }
}

/// The same with two threads allocating (SIGALRM blocked in them) and
/// main taking the signal, sent by another process, while it waits:
/// glibc alone never hangs this way, nor mimalloc alone (it has no fork
/// handlers; the shim's take its locks, so that a child does not inherit
/// one held by another thread). Not under jemalloc: jemalloc alone hangs
/// here now and then (1 run in 5), and so does it under the shim.
fn fork_in_a_signal_handler_with_threads(backend: &str, mode: &str) {
    let exe = compile_c("sigfork.c");
    // Fewer forks: with threads, glibc's `fork` waits for each arena's lock
    // while they churn, which takes long on a loaded 2-core machine.
    let (runs, files) = repeat(
        &exe,
        &["100", "2"],
        backend,
        mode,
        true,
        "sigfork: 100 forks\n",
    );
    let own = own_profile(&files, "sigfork 100 2");
    assert_eq!(own.state, State::Exited, "{}", summary(&own));
    eprintln!("{backend}, stacks {mode}: {runs} runs of sigfork 100 2");
}

/// Threads forking while others run `getline` and `fflush(NULL)`: no lock
/// of the shim's may be held across `fork`, or a `getline` thread waiting
/// for it (inside `malloc`, holding its stream's lock) closes a cycle with
/// glibc's stdio locks, which the forking thread waits for.
fn fork_racing_getline_and_fflush(backend: &str, mode: &str) {
    let exe = compile_c("forkrace.c");
    let (runs, files) = repeat(&exe, &["500"], backend, mode, true, "forkrace: 500 forks\n");
    let own = own_profile(&files, "forkrace 500");
    assert_eq!(own.state, State::Exited, "{}", summary(&own));
    eprintln!("{backend}, stacks {mode}: {runs} runs of forkrace 500");
}

/// One test per stack mode for each backend listed, for a case.
macro_rules! per_mode {
    ($name:ident, [$($backend:ident),*]) => {
        mod $name {
            $(
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
            )*
        }
    };
}

per_mode!(fork_in_a_signal_handler, [system, jemalloc, mimalloc]);
per_mode!(fork_racing_getline_and_fflush, [system, jemalloc, mimalloc]);
per_mode!(fork_in_a_signal_handler_with_threads, [system, mimalloc]);
