//! `fork` where glibc allows it, under every backend and stack mode (each
//! case says where it does not hold yet): from a signal handler that
//! interrupted `malloc` (single-threaded, and with threads allocating while
//! one thread takes the signal), from one that interrupted the program's
//! own `fork` (glibc's tst-mallocfork), and racing `getline` and
//! `fflush(NULL)` in other threads (glibc bug 19431's scenario). Each
//! program finishes without the shim; under it, a run that does not finish
//! within `HANG` is a hang, reported with the run's number and the stacks
//! of its threads.
//! Each case repeats its program for `BUDGET` (at least once: 100 to 500
//! forks), since the hangs these guard against came at once or within a
//! few hundred forks.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// A run still going after this long is a hang. They take 1–3 s, but
/// with threads and exact stacks, on a loaded 2-core machine, a run has
/// taken 54 s and finished: its allocating threads spin for the stack
/// table while the forking thread waits for CPU and for glibc's arena
/// locks. A deadlock never finishes, so a generous limit loses nothing.
const HANG: Duration = Duration::from_secs(150);
/// How long each case repeats its program (at least once, so 100 to 500
/// forks a case or more, each a chance to hang). The hangs fixed here came
/// within a few hundred forks; longer hunts, thousands of runs under load,
/// are `scripts/suite_soak.sh`'s and the fork study's
/// (`scripts/studies/results/fork-hangs.md`). Their sum is the longest
/// stretch of the suite, so it is kept to what one run already covers.
const BUDGET: Duration = Duration::from_secs(1);

/// Runs `exe args` under `backend` with stacks `mode` (profiles to a
/// fresh directory, or none if `output` is false) until `BUDGET` is spent
/// (at least once); each run must print `want` and exit 0 within `HANG`.
/// Returns the number of runs and the profiles of the last.
fn repeat(
    exe: &std::path::Path,
    args: &[&str],
    backend: &str,
    mode: &str,
    output: bool,
    want: &str,
) -> (usize, Vec<(String, ProcessProfile)>) {
    repeat_for(exe, args, backend, mode, output, &[], BUDGET, want)
}

/// [`repeat`] with more environment variables and another budget.
#[allow(clippy::too_many_arguments)]
fn repeat_for(
    exe: &std::path::Path,
    args: &[&str],
    backend: &str,
    mode: &str,
    output: bool,
    env: &[(&str, &str)],
    budget: Duration,
    want: &str,
) -> (usize, Vec<(String, ProcessProfile)>) {
    let start = Instant::now();
    let mut runs = 0;
    loop {
        runs += 1;
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(exe);
        cmd.args(args).env("ALLOCMUX_STACKS", mode);
        cmd.envs(env.iter().copied());
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
                let stacks = p.group_stacks();
                p.signal_group(libc::SIGKILL);
                panic!(
                    "SHIM BUG (fork safety): {} under {backend}, stacks {mode}{}{env:?}, \
                     run {runs}: still running after {} s, killed (a hang). Its threads:\n{stacks}",
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
        if start.elapsed() >= budget {
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
/// With a profile written too: the shim's flusher is a thread glibc does
/// not know of under every backend, so glibc's `fork` still takes no
/// lock, nor does the shim run jemalloc's fork handlers; the profile
/// writes in the `fork` and `_exit` handlers stay off glibc's heap, and
/// under mimalloc nothing uses glibc's heap. `docs/guarantees.md` says so.
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

/// glibc's tst-mallocfork and tst-mallocfork2: a single-threaded program
/// forks in a loop while a signal handler forks too, often from inside the
/// program's own `fork` (the signal from a timer, or from another
/// process). glibc's `fork` takes `atfork_lock` only once the process has
/// had a second thread, so any thread glibc counts that the shim started
/// (a `pthread` flusher, say) makes the handler's `fork` wait forever for
/// the lock the interrupted one holds. Under every backend: with a profile
/// written (the flusher), with none, and with the `/debug/pprof` endpoint
/// served (the flusher again, with no profile).
fn fork_in_a_signal_handler_during_fork(backend: &str, mode: &str) {
    let exe = compile_c("mallocfork.c");
    let http = [("ALLOCMUX_HTTP", "127.0.0.1:0")];
    type Env<'a> = &'a [(&'a str, &'a str)];
    let setups: [(&str, bool, Env); 3] = [
        ("a profile", true, &[]),
        ("no output", false, &[]),
        ("the endpoint", false, &http),
    ];
    for (what, output, env) in setups {
        for args in [&["300"][..], &["300", "sender"]] {
            let (runs, files) = repeat_for(
                &exe,
                args,
                backend,
                mode,
                output,
                env,
                Duration::from_millis(500),
                "mallocfork: 300 forks\n",
            );
            if output {
                let own = own_profile(&files, "mallocfork 300");
                assert_eq!(own.state, State::Exited, "{}", summary(&own));
                assert_eq!(own.threads, 1, "single-threaded: {}", summary(&own));
            }
            eprintln!("{backend}, stacks {mode}, {what}: {runs} runs of mallocfork {args:?}");
        }
    }
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
per_mode!(
    fork_in_a_signal_handler_during_fork,
    [system, jemalloc, mimalloc]
);
per_mode!(fork_racing_getline_and_fflush, [system, jemalloc, mimalloc]);
per_mode!(fork_in_a_signal_handler_with_threads, [system, mimalloc]);
