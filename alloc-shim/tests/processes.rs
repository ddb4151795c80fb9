//! The process life cycle as seen from outside: fork and exec get their own
//! profiles with their own counts, the periodic flush survives SIGKILL,
//! existing files are never overwritten, the stderr summary, and how bad
//! settings are reported.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;

// ---- (a) fork and exec -----------------------------------------------------

/// The processes of one forkexec.c run (see the fixture's comment).
struct ForkExec {
    parent: ProcessProfile,
    /// Forked; runs N x malloc(200) and exits.
    child: ProcessProfile,
    /// Forked, then exec'd `--exec-child`: N x malloc(300).
    exec: (String, ProcessProfile),
}

fn fork_exec(backend: &str, n: u64) -> ForkExec {
    let exe = compile_c("forkexec.c");
    let (out, files) = run_under_with(backend, Command::new(&exe).arg(n.to_string()), &[], None);
    let listing = || listing(&files);
    assert!(
        out.status.success(),
        "forkexec {n} under {backend} failed ({}):\n{}\n{}\nprofiles:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr),
        listing()
    );
    assert_eq!(
        text(&out.stdout),
        "exec child done\nparent done\n",
        "forkexec {n} under {backend}"
    );
    let has_exec_arg = |p: &ProcessProfile| p.argv.iter().any(|a| a == "--exec-child");
    // The test process starts the parent directly.
    let me = std::process::id();
    let parents: Vec<_> = files.iter().filter(|(_, p)| p.ppid == me).collect();
    assert_eq!(
        parents.len(),
        1,
        "forkexec {n} under {backend}: want one profile whose parent is the test (pid {me}):\n{}",
        listing()
    );
    let parent = parents[0].1.clone();
    let execs: Vec<_> = files
        .iter()
        .filter(|(_, p)| p.ppid == parent.pid && has_exec_arg(p))
        .collect();
    assert_eq!(
        execs.len(),
        1,
        "forkexec {n} under {backend}: want one exec'd image (argv with --exec-child, ppid {}):\n{}",
        parent.pid,
        listing()
    );
    let exec = execs[0].clone();
    let mut children = Vec::new();
    let mut pre_exec = Vec::new();
    for (f, p) in &files {
        if p.pid == parent.pid || (p.pid == exec.1.pid && has_exec_arg(p)) {
            continue;
        }
        if p.ppid == parent.pid && p.pid == exec.1.pid && !has_exec_arg(p) {
            pre_exec.push((f, p));
        } else if p.ppid == parent.pid && !has_exec_arg(p) {
            children.push(p.clone());
        } else {
            panic!(
                "forkexec {n} under {backend}: unexpected profile {f}:\n{}",
                listing()
            );
        }
    }
    assert_eq!(
        children.len(),
        1,
        "forkexec {n} under {backend}: want one forked child (ppid {}, same exe, not exec'd):\n{}",
        parent.pid,
        listing()
    );
    // The second child's image before its exec leaves a profile (it is a
    // forked child too), written by the exec hook as exited: under its own
    // name, never overwritten by the exec'd image.
    assert_eq!(
        pre_exec.len(),
        1,
        "forkexec {n} under {backend}: want the pre-exec image's profile:\n{}",
        listing()
    );
    if let Some((f, p)) = pre_exec.first() {
        assert_eq!(
            (f.as_str(), p.state),
            (format!("{}.prof", p.pid).as_str(), State::Exited),
            "forkexec {n} under {backend}: the pre-exec image's profile:\n{}",
            listing()
        );
        assert_eq!(
            exec.0,
            format!("{}.prof.1", p.pid),
            "forkexec {n} under {backend}: the exec'd image must take the next free name:\n{}",
            listing()
        );
    }
    let r = ForkExec {
        parent,
        child: children.pop().unwrap(),
        exec,
    };
    for (who, p) in [
        ("parent", &r.parent),
        ("fork child", &r.child),
        ("exec'd image", &r.exec.1),
    ] {
        assert_eq!(
            (p.state, p.allocator.as_str()),
            (State::Exited, backend),
            "forkexec {n} under {backend}: the {who}'s profile:\n{}",
            listing()
        );
    }
    r
}

fn fork_and_exec_counts_are_exact_per_process(backend: &str) {
    const N: u64 = 500;
    let base = fork_exec(backend, 0);
    let run = fork_exec(backend, N);
    let mut wrong = Vec::new();
    for (who, a, b, size) in [
        ("parent", &run.parent, &base.parent, 100),
        ("fork child", &run.child, &base.child, 200),
        ("exec'd image", &run.exec.1, &base.exec.1, 300),
    ] {
        let (ta, tb) = (&a.totals, &b.totals);
        let got = [
            (
                "malloc calls",
                delta(ta.calls_of(Func::Malloc), tb.calls_of(Func::Malloc)),
                N as i128,
            ),
            (
                "free calls",
                delta(ta.calls_of(Func::Free), tb.calls_of(Func::Free)),
                N as i128,
            ),
            (
                "bytes_requested",
                delta(ta.bytes_requested, tb.bytes_requested),
                (N * size) as i128,
            ),
        ];
        for (what, got, want) in got {
            if got != want {
                wrong.push(format!(
                    "{who}: {what} {got} more with N={N} than with N=0, want {want}\n    N=0: {}\n    N={N}: {}",
                    summary(b),
                    summary(a)
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "under {backend}, forkexec's per-process counts are not exact:\n  {}",
        wrong.join("\n  ")
    );
}

// ---- fork while other threads allocate --------------------------------------

/// Counts across fork with other threads allocating: each child starts
/// from zero with one thread. The threads warm up for 100 ms first, so this
/// checks the counting, not the start-up race of the test below.
fn fork_while_threads_allocate(backend: &str) {
    const FORKS: usize = 40;
    let exe = compile_c("forkstress.c");
    let (out, files) = run_under_with(
        backend,
        Command::new(&exe).args([FORKS.to_string(), "4".into(), "100".into()]),
        &[],
        None,
    );
    assert!(
        out.status.success(),
        "forkstress {FORKS} under {backend} failed ({}): {}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(
        text(&out.stdout),
        format!("forkstress: {FORKS} forks, 0 bad\n")
    );
    let me = std::process::id();
    let parent = files
        .iter()
        .find(|(_, p)| p.ppid == me)
        .map(|(_, p)| p.clone())
        .expect("a profile of forkstress itself");
    let children: Vec<&ProcessProfile> = files
        .iter()
        .map(|(_, p)| p)
        .filter(|p| p.ppid == parent.pid)
        .collect();
    let listing = || listing(&files);
    assert_eq!(
        (children.len(), files.len()),
        (FORKS, FORKS + 1),
        "forkstress under {backend}: want a profile per child and one for the parent:\n{}",
        listing()
    );
    assert!(
        parent.threads >= 5,
        "forkstress under {backend}: the parent had 5 allocating threads: {}",
        summary(&parent)
    );
    // Each child starts from zero with only the forking thread, whatever the
    // other threads were doing, and then does the same as every other child.
    let first = children[0];
    for c in &children {
        let same = c.totals.calls == first.totals.calls
            && c.totals.bytes_requested == first.totals.bytes_requested
            && c.threads == 1
            && c.state == State::Exited;
        assert!(
            same,
            "forkstress under {backend}: the children's profiles differ (or count other threads):\n  {}\n  {}",
            summary(first),
            summary(c)
        );
    }
    let mallocs = first.totals.calls_of(Func::Malloc);
    assert!(
        (100..1000).contains(&mallocs),
        "forkstress under {backend}: a child made 100 mallocs (plus a few from libc), the profile says {mallocs}: {}",
        summary(first)
    );
}

/// A fork right after threads start allocating must not leave the child
/// hanging on an allocator lock that another thread of the parent held.
///
/// The window is short (while the allocator sets up or walks shared state:
/// mimalloc 3.x reserving an arena under its `arena_reserve_lock`, 2.x
/// walking its abandoned-segment list, whose lock a child's `exit` waits
/// for), so this runs `forkstress 1 4` (one fork at once) up to RUNS times
/// and stops at the first child that hangs (forkstress kills it after 60 s
/// and says so). Under mimalloc 3.x about 3 runs in 100 hung here; 2.x
/// without the shim's handling of its locks hung in CI once in some
/// thousands of forks (the shim's unit tests cover that deterministically).
/// glibc and jemalloc (which registers fork handlers for its locks) never
/// hang.
fn fork_right_after_threads_start_does_not_hang(backend: &str) {
    const RUNS: usize = 200;
    const BUDGET: std::time::Duration = Duration::from_secs(40);
    let exe = compile_c("forkstress.c");
    let start = std::time::Instant::now();
    let mut runs = 0;
    while runs < RUNS && start.elapsed() < BUDGET {
        runs += 1;
        let (out, _) = run_under(backend, Command::new(&exe).args(["1", "4"]), &[]);
        assert!(
            out.status.success(),
            "SHIM BUG (fork safety): under {backend}, run {runs} of forkstress 1 4 failed ({}): {}\n\
             A child forked while other threads allocate blocked forever inside the allocator: \
             a lock held by another thread at the fork stays held in the child (mimalloc has no \
             pthread_atfork handlers: the shim's take its locks, see backend/mimalloc.rs).",
            out.status,
            text(&out.stdout).trim_end()
        );
    }
    eprintln!("{backend}: {runs} runs of forkstress 1 4 without a hang");
}

/// `main` leaving through `pthread_exit`: glibc ends the process, with
/// status 0, when its last thread ends, and so it must under the shim,
/// with its exit profile. A writer thread glibc counted kept such a
/// process alive for good, and since it blocks every signal, nothing but
/// SIGKILL ended it.
fn main_leaving_through_pthread_exit_ends_with_the_last_thread(backend: &str) {
    let exe = compile_c("mainexit.c");
    for (threads, want) in [
        ("0", "main leaves\n"),
        ("2", "main leaves\nworker done\nworker done\n"),
    ] {
        let (out, files) = run_under(backend, Command::new(&exe).arg(threads), &[]);
        assert!(
            out.status.success() && text(&out.stdout) == want,
            "SHIM BUG: mainexit {threads} under {backend}: {}, stdout {:?} (want {want:?}), \
             stderr {}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
        assert_eq!(files.len(), 1, "mainexit {threads}: one process");
        let p = &files[0];
        assert_eq!(p.state, State::Exited, "mainexit {threads}: {}", summary(p));
    }
}

/// A process started as root gives up root (`setgroups`, `setgid`,
/// `setuid`), as daemons do: afterwards no thread of it keeps root's ids
/// (glibc changes every thread it knows, and the shim restarts its writer
/// thread, which glibc may not know, with the new ones), and its exit
/// profile is still written. Skipped unless the tests run as root.
fn no_thread_keeps_root_after_setuid(backend: &str) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: skipped");
        return;
    }
    let exe = compile_c("dropuid.c");
    let dir = tempfile::tempdir().unwrap();
    // The exit profile is written as nobody.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut cmd = Command::new(&exe);
    preload(&mut cmd, backend, Some(&dir.path().join("%p.prof")));
    let out = run(&mut cmd, None);
    assert!(
        out.status.success() && text(&out.stdout) == "dropped\n",
        "SHIM BUG: dropuid under {backend}: {}, stdout {:?}, stderr {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    let files = read_profiles(dir.path());
    assert_eq!(files.len(), 1, "one process:\n{}", listing(&files));
    assert_eq!(files[0].1.state, State::Exited, "{}", summary(&files[0].1));
}

// ---- (b) the periodic flush survives SIGKILL --------------------------------

/// A process killed by SIGKILL keeps what the shim's periodic flush wrote:
/// its counts and its timeline so far, as a running profile. It is killed
/// once a flush holding the blocks and 50+ timeline points is on disk,
/// however long that takes (sleeper.c sleeps until killed); the test is
/// that the kill keeps it.
fn periodic_flush_survives_sigkill(backend: &str) {
    const BLOCKS: u64 = 1000;
    const SIZE: u64 = 64;
    // From the start, under the 120 s the harness lets the process run.
    const GIVE_UP: Duration = Duration::from_secs(100);
    let exe = compile_c("sleeper.c");
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(&exe);
    cmd.args([BLOCKS.to_string(), SIZE.to_string()]);
    preload(&mut cmd, backend, Some(&dir.path().join("%p.prof")));
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let give_up = std::time::Instant::now() + GIVE_UP;
    let mut p = Spawned::spawn(&mut cmd);
    p.expect_first_line("ready\n");
    let path = dir.path().join(format!("{}.prof", p.pid()));
    loop {
        let flushed = flushed(&path);
        if flushed.as_ref().is_some_and(|f| {
            f.totals.calls_of(Func::Malloc) >= BLOCKS && f.timeline.points.len() >= 50
        }) {
            break;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "{}: no flush with {BLOCKS} mallocs and 50 timeline points within {} s; the last: {}",
            p.what(),
            GIVE_UP.as_secs(),
            flushed.as_ref().map_or("none".to_string(), summary)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    p.child.kill().expect("SIGKILL to sleeper");
    let status = p.wait();
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "sleeper under {backend}: {status}"
    );

    let prof = read_profile(&path);
    let t = &prof.totals;
    let problems = unmet([
        (
            prof.state == State::Running,
            "state is running (no exit handler ran)".to_string(),
        ),
        (prof.allocator == backend, format!("allocator is {backend}")),
        (
            t.calls_of(Func::Malloc) >= BLOCKS,
            format!("at least {BLOCKS} mallocs were flushed"),
        ),
        (
            t.bytes_requested >= BLOCKS * SIZE,
            format!("at least {} bytes requested", BLOCKS * SIZE),
        ),
        (
            t.bytes_allocated.saturating_sub(t.bytes_freed) >= BLOCKS * SIZE
                && t.peak_live_bytes >= BLOCKS * SIZE,
            format!("at least {} bytes live and peak", BLOCKS * SIZE),
        ),
        (
            prof.timeline.points.len() >= 50
                && prof.timeline.duration_ns() <= prof.wall_ns()
                && prof.timeline.peak_live_bytes() >= BLOCKS * SIZE,
            "the memory timeline so far: 50+ points, the blocks live".to_string(),
        ),
    ]);
    assert!(
        problems.is_empty(),
        "the profile of sleeper killed under {backend} should show: {}\nprofile: {}",
        problems.join("; "),
        summary(&prof)
    );
}

/// The profile at `path`, if it is there and parses (a rename makes each
/// flush appear whole).
fn flushed(path: &Path) -> Option<ProcessProfile> {
    let text = std::fs::read_to_string(path).ok()?;
    let procs = allocmux_format::profile::parse(&text).ok()?;
    procs.into_iter().next()
}

// ---- (c) existing files are never overwritten ------------------------------

/// Runs `counts n` under the system backend writing to `output`.
fn counts_to(output: &Path, n: u64) -> Output {
    let exe = compile_c("counts.c");
    let mut cmd = Command::new(&exe);
    cmd.arg(n.to_string());
    preload(&mut cmd, "system", Some(output));
    let out = run(&mut cmd, None);
    assert!(
        out.status.success(),
        "counts {n} with ALLOCMUX_OUTPUT={} failed: {}\n{}",
        output.display(),
        out.status,
        text(&out.stderr)
    );
    out
}

fn file_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn existing_output_file_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.prof");
    std::fs::write(&out, "keep").unwrap();

    counts_to(&out, 5);
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "keep",
        "the shim overwrote an existing file at ALLOCMUX_OUTPUT"
    );
    let first = read_profile(&dir.path().join("out.prof.1"));
    assert_eq!(
        (first.argv.last().map(String::as_str), first.state),
        (Some("5"), State::Exited),
        "out.prof.1: {}",
        summary(&first)
    );
    let first_text = std::fs::read_to_string(dir.path().join("out.prof.1")).unwrap();

    // A second run moves on to .2 and leaves .1 alone.
    counts_to(&out, 7);
    let second = read_profile(&dir.path().join("out.prof.2"));
    assert_eq!(
        second.argv.last().map(String::as_str),
        Some("7"),
        "out.prof.2: {}",
        summary(&second)
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.prof.1")).unwrap(),
        first_text,
        "the second run changed the first run's profile"
    );
    assert_eq!(
        file_names(dir.path()),
        ["out.prof", "out.prof.1", "out.prof.2"]
    );
}

#[test]
fn symlink_at_output_path_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.prof");
    let victim = dir.path().join("victim");
    std::os::unix::fs::symlink(&victim, &out).unwrap();
    counts_to(&out, 3);
    assert!(
        !victim.exists(),
        "the shim wrote through a symlink at ALLOCMUX_OUTPUT into {}",
        victim.display()
    );
    assert!(
        std::fs::symlink_metadata(&out)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let p = read_profile(&dir.path().join("out.prof.1"));
    assert_eq!(p.state, State::Exited, "{}", summary(&p));
}

/// The profile is written through `<path>.tmp` and a rename. A file that
/// already has that name is not the shim's to truncate and rename away.
#[test]
fn existing_tmp_sibling_of_output_is_not_clobbered() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.prof");
    let sibling = dir.path().join("out.prof.tmp");
    std::fs::write(&sibling, "keep").unwrap();
    counts_to(&out, 3);
    let p = read_profile(&out);
    assert_eq!(p.state, State::Exited, "{}", summary(&p));
    assert_eq!(
        std::fs::read_to_string(&sibling).ok().as_deref(),
        Some("keep"),
        "SHIM BUG: the pre-existing file out.prof.tmp was truncated and renamed over the \
         profile (the writer opens <path>.tmp with O_TRUNC, not O_EXCL); files now: {:?}",
        file_names(dir.path())
    );
}

/// A symlink at `<path>.tmp` must not be followed (it is not), and the
/// profile must still be written, or the failure reported on stderr.
#[test]
fn symlink_at_tmp_sibling_does_not_silently_lose_the_profile() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.prof");
    let victim = dir.path().join("victim");
    std::os::unix::fs::symlink(&victim, dir.path().join("out.prof.tmp")).unwrap();
    let o = counts_to(&out, 3);
    assert!(
        !victim.exists(),
        "the shim wrote through the symlink out.prof.tmp"
    );
    let content = std::fs::read_to_string(&out).unwrap_or_default();
    let warned = String::from_utf8_lossy(&o.stderr).contains("allocmux:");
    assert!(
        allocmux_format::profile::parse(&content).is_ok() || warned,
        "SHIM BUG: with a symlink at out.prof.tmp no profile is ever written (out.prof holds \
         {} bytes) and nothing is reported on stderr: {:?}",
        content.len(),
        text(&o.stderr)
    );
}

// ---- (d) the stderr summary ------------------------------------------------

/// Runs counts.c under the shim without ALLOCMUX_OUTPUT and checks stdout
/// and stderr against the run without the shim; returns the summary line
/// and the numbers of allocations and frees in it.
fn summary_line(backend: &str, arg: &str) -> (String, u64, u64) {
    let exe = compile_c("counts.c");
    let reference = run_reference(Command::new(&exe).arg(arg), None);
    let mut cmd = Command::new(&exe);
    cmd.arg(arg);
    preload(&mut cmd, backend, None);
    let (pid, out) = run_with_pid(&mut cmd, None);
    assert_eq!(
        out.status.code(),
        reference.status.code(),
        "counts {arg} under {backend}: exit status"
    );
    assert_eq!(
        text(&out.stdout),
        text(&reference.stdout),
        "counts {arg} under {backend}: stdout changed"
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("allocmux:"))
        .collect();
    assert_eq!(
        ours.len(),
        1,
        "counts {arg} under {backend}: want exactly one allocmux line on stderr:\n{stderr}"
    );
    let line = ours[0].to_string();
    let prefix = format!("allocmux: pid {pid} ({backend}): ");
    assert!(
        line.starts_with(&prefix),
        "summary line {line:?} should start with {prefix:?}"
    );
    // The program's own stderr comes first, unchanged; then the summary.
    assert_eq!(
        stderr,
        format!("{}{line}\n", String::from_utf8_lossy(&reference.stderr)),
        "counts {arg} under {backend}: stderr should be the program's plus one line"
    );
    let number_before = |word: &str| -> u64 {
        let rest = &line[prefix.len()..];
        let at = rest
            .find(word)
            .unwrap_or_else(|| panic!("no {word:?} in the summary line {line:?}"));
        rest[..at]
            .rsplit(|c: char| !c.is_ascii_digit())
            .find(|s| !s.is_empty())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no number before {word:?} in {line:?}"))
    };
    let (allocations, frees) = (number_before(" allocations"), number_before(" frees"));
    (line, allocations, frees)
}

fn summary_on_stderr_without_output(backend: &str) {
    let (line0, alloc0, free0) = summary_line(backend, "0");
    let (line1, alloc1, free1) = summary_line(backend, "1000");
    // counts.c: 8 allocating calls (all but malloc_usable_size and free)
    // and 7 frees per iteration (its free(NULL) is not one).
    assert_eq!(
        (delta(alloc1, alloc0), delta(free1, free0)),
        (8000, 7000),
        "summary lines of counts 1000 and counts 0 under {backend}:\n{line1}\n{line0}"
    );
    // A program that writes to stderr itself and fails keeps both.
    summary_line(backend, "not-a-number");
}

// ---- (e), (f) settings ----------------------------------------------------

/// Runs counts 10 under the shim with extra settings; checks that it works
/// and returns the allocmux lines on stderr and the profile.
fn counts_with(backend: &str, env: &[(&str, &str)]) -> (Vec<String>, ProcessProfile) {
    let exe = compile_c("counts.c");
    let (out, profiles) = run_under(backend, Command::new(&exe).arg("10"), env);
    assert!(
        out.status.success(),
        "counts 10 with {env:?} failed: {}\n{}",
        out.status,
        text(&out.stderr)
    );
    assert_eq!(
        text(&out.stdout),
        "counts: 10 iterations, checksum 10\n",
        "counts 10 with {env:?}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let lines: Vec<String> = stderr.lines().map(str::to_string).collect();
    assert!(
        lines.iter().all(|l| l.starts_with("allocmux: ")),
        "counts 10 with {env:?}: stderr has lines not from the shim:\n{stderr}"
    );
    assert_eq!(profiles.len(), 1, "counts 10 with {env:?}");
    let p = profiles.into_iter().next().unwrap();
    assert!(
        p.state == State::Exited && p.totals.calls_of(Func::Malloc) >= 10,
        "counts 10 with {env:?}: {}",
        summary(&p)
    );
    (lines, p)
}

#[test]
fn unknown_allocator_warns_once_and_uses_system() {
    // run_under sets ALLOCMUX_ALLOCATOR to the "backend" it is given.
    let (lines, p) = counts_with("bogus", &[]);
    assert_eq!(
        lines.len(),
        1,
        "ALLOCMUX_ALLOCATOR=bogus: want exactly one warning line, got {lines:#?}"
    );
    assert!(
        lines[0].starts_with("allocmux: unknown ALLOCMUX_ALLOCATOR") && lines[0].contains("bogus"),
        "the warning should name the variable and the value: {:?}",
        lines[0]
    );
    assert_eq!(p.allocator, "system", "{}", summary(&p));
}

#[test]
fn bad_numeric_settings_warn_and_fall_back() {
    let default = allocmux_recorder::DEFAULT_TIME_SAMPLE_MEAN;
    // Good values: no warning, and the sample mean is honoured.
    let (lines, p) = counts_with(
        "jemalloc",
        &[
            ("ALLOCMUX_TIME_SAMPLE", "7"),
            ("ALLOCMUX_SAMPLE_BYTES", "4096"),
        ],
    );
    assert!(lines.is_empty(), "good settings gave warnings: {lines:#?}");
    assert_eq!(
        p.time_sample_mean,
        7,
        "ALLOCMUX_TIME_SAMPLE=7: {}",
        summary(&p)
    );

    for bad in ["abc", "0", "-5", "1.5", "99999999999999999999999"] {
        let (lines, p) = counts_with("jemalloc", &[("ALLOCMUX_TIME_SAMPLE", bad)]);
        assert!(
            lines.len() == 1 && lines[0].contains("ALLOCMUX_TIME_SAMPLE"),
            "ALLOCMUX_TIME_SAMPLE={bad:?}: want one warning naming the variable, got {lines:#?}"
        );
        assert_eq!(
            p.time_sample_mean, default,
            "ALLOCMUX_TIME_SAMPLE={bad:?} should fall back to the default"
        );

        let (lines, p) = counts_with("mimalloc", &[("ALLOCMUX_SAMPLE_BYTES", bad)]);
        assert!(
            lines.len() == 1 && lines[0].contains("ALLOCMUX_SAMPLE_BYTES"),
            "ALLOCMUX_SAMPLE_BYTES={bad:?}: want one warning naming the variable, got {lines:#?}"
        );
        assert_eq!(p.allocator, "mimalloc");
    }

    let (lines, _) = counts_with(
        "system",
        &[
            ("ALLOCMUX_TIME_SAMPLE", "often"),
            ("ALLOCMUX_SAMPLE_BYTES", "big"),
        ],
    );
    assert_eq!(lines.len(), 2, "two bad settings, two warnings: {lines:#?}");
}

per_backend!(
    with_next:
    fork_and_exec_counts_are_exact_per_process,
    fork_while_threads_allocate
);

per_backend!(
    fork_right_after_threads_start_does_not_hang,
    main_leaving_through_pthread_exit_ends_with_the_last_thread,
    no_thread_keeps_root_after_setuid,
    periodic_flush_survives_sigkill,
    summary_on_stderr_without_output,
);
