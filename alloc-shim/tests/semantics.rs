//! The glibc/POSIX semantics of the malloc family hold under every backend
//! (semantics.c checks them from inside the program), and failing calls are
//! counted as failures.

use crate::common;

use std::collections::BTreeMap;
use std::process::{Command, Output};

use common::*;

/// The checks semantics.c reported, by name, with their verdict
/// (`ok`, `FAIL` or `skip`) and full line.
fn verdicts(out: &Output) -> BTreeMap<String, (String, String)> {
    let mut map = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let (verdict, rest) = line.split_once(' ').unwrap_or((line, ""));
        if matches!(verdict, "ok" | "FAIL" | "skip") {
            let name = rest.split(':').next().unwrap_or(rest).to_string();
            map.insert(name, (verdict.to_string(), line.to_string()));
        }
    }
    map
}

fn fail_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("FAIL"))
        .map(str::to_string)
        .collect()
}

/// The fixture itself passes with glibc's own malloc (without the POSIX
/// aligned_alloc expectation, which glibc 2.36 does not meet).
fn reference() -> Output {
    let exe = compile_c("semantics.c");
    let out = run_reference(&mut Command::new(&exe), None);
    assert!(
        out.status.success() && fail_lines(&out).is_empty(),
        "semantics.c fails without the shim ({}), so the fixture is wrong for this system:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

#[test]
fn fixture_passes_without_the_shim() {
    let out = reference();
    let v = verdicts(&out);
    assert!(
        v.len() >= 40 && v.values().filter(|(verdict, _)| verdict == "ok").count() >= 35,
        "semantics.c reported only {} checks:\n{}",
        v.len(),
        text(&out.stdout)
    );
}

fn semantics_hold(backend: &str) {
    semantics_hold_recording(backend, &[]);
}

/// With call stacks recorded the hooks take other paths (the sampled and
/// exact bodies): the C semantics must not change with them.
fn semantics_hold_with_sampled_stacks(backend: &str) {
    semantics_hold_recording(
        backend,
        &[
            ("ALLOCMUX_STACKS", "sample"),
            ("ALLOCMUX_SAMPLE_BYTES", "64"),
        ],
    );
}

/// At the sampled level (live profiles) a sampled call is served by other
/// functions still (a block aligned to a page, `realloc` as a new block
/// and a copy): with a sample every 64 bytes, nearly every call is one.
fn semantics_hold_at_the_sampled_level(backend: &str) {
    semantics_hold_recording(
        backend,
        &[
            ("ALLOCMUX_RECORD", "sampled"),
            ("ALLOCMUX_SAMPLE_BYTES", "64"),
        ],
    );
}

/// Forwarding (`ALLOCMUX_RECORD=off`, `compare`'s timing runs): the
/// backend's forwarder, which must keep the C semantics too.
fn semantics_hold_forwarded(backend: &str) {
    semantics_hold_recording(backend, &[("ALLOCMUX_RECORD", "off")]);
}

fn semantics_hold_with_exact_stacks(backend: &str) {
    semantics_hold_recording(backend, &[("ALLOCMUX_STACKS", "exact")]);
}

fn semantics_hold_recording(backend: &str, recording: &[(&str, &str)]) {
    let exe = compile_c("semantics.c");
    let expected = verdicts(&reference());
    let mut env = vec![("ALLOCMUX_EXPECT_POSIX_ALIGNED_ALLOC", "1")];
    env.extend_from_slice(recording);
    let (out, profiles) = run_under(backend, &mut Command::new(&exe), &env);
    let fails = fail_lines(&out);
    assert!(
        out.status.success() && fails.is_empty(),
        "semantics.c under {backend} exited with {} and {} failure(s):\n{}\n\nfull stdout:\n{}\nstderr:\n{}",
        out.status,
        fails.len(),
        fails.join("\n"),
        text(&out.stdout),
        text(&out.stderr)
    );
    let got = verdicts(&out);
    let missing: Vec<&String> = expected.keys().filter(|k| !got.contains_key(*k)).collect();
    assert!(
        missing.is_empty(),
        "semantics.c under {backend} did not report these checks: {missing:?}\n{}",
        text(&out.stdout)
    );
    // With the variable set, the shim's POSIX aligned_alloc is checked, not skipped.
    for check in ["aligned_alloc_align_zero", "aligned_alloc_align_nonpow2"] {
        assert_eq!(
            got.get(check).map(|(v, _)| v.as_str()),
            Some("ok"),
            "under {backend}, {check} should run and pass: {:?}",
            got.get(check)
        );
    }
    if recording.contains(&("ALLOCMUX_RECORD", "off")) {
        assert!(profiles.is_empty(), "forwarding writes no profile");
        return;
    }
    assert_eq!(
        profiles.len(),
        1,
        "semantics.c under {backend}: {:#?}",
        profiles.iter().map(summary).collect::<Vec<_>>()
    );
    let p = &profiles[0];
    assert_eq!(
        (p.state, p.allocator.as_str()),
        (State::Exited, backend),
        "{}",
        summary(p)
    );
}

/// Runs the named semantics.c checks under `backend`, with `env`, and
/// returns the profile.
fn checks_profile(backend: &str, checks: &[&str], env: &[(&str, &str)]) -> ProcessProfile {
    let exe = compile_c("semantics.c");
    let (out, profiles) = run_under(backend, Command::new(&exe).args(checks), env);
    assert!(
        out.status.success(),
        "semantics {checks:?} under {backend} failed ({}):\n{}",
        out.status,
        text(&out.stdout)
    );
    assert_eq!(profiles.len(), 1, "semantics {checks:?} under {backend}");
    profiles.into_iter().next().unwrap()
}

/// posix_memalign_bad_align makes 8 calls that fail with EINVAL,
/// calloc_overflow 1 that fails with ENOMEM, memalign_huge_align 1 that
/// fails with EINVAL; free_null fails nothing. Each failure is a call of
/// its function and a failed call, and requests no bytes.
fn failed_calls_are_counted(backend: &str) {
    failed_calls_are_counted_recording(backend, &[]);
}

/// The same in sample mode, where a request's bytes are counted before
/// the call (the byte countdown that finds the sampled requests) and taken
/// back when it fails.
fn failed_calls_are_counted_with_sampled_stacks(backend: &str) {
    failed_calls_are_counted_recording(backend, &[("ALLOCMUX_STACKS", "sample")]);
}

fn failed_calls_are_counted_recording(backend: &str, env: &[(&str, &str)]) {
    let base = checks_profile(backend, &["free_null"], env);
    let failing = checks_profile(
        backend,
        &[
            "free_null",
            "posix_memalign_bad_align",
            "calloc_overflow",
            "memalign_huge_align",
        ],
        env,
    );
    let (a, b) = (&failing.totals, &base.totals);
    let got = [
        ("failed_calls", delta(a.failed_calls, b.failed_calls), 10),
        (
            "posix_memalign calls",
            delta(
                a.calls_of(Func::PosixMemalign),
                b.calls_of(Func::PosixMemalign),
            ),
            8,
        ),
        (
            "calloc calls",
            delta(a.calls_of(Func::Calloc), b.calls_of(Func::Calloc)),
            1,
        ),
        (
            "memalign calls",
            delta(a.calls_of(Func::Memalign), b.calls_of(Func::Memalign)),
            1,
        ),
        (
            "bytes_requested",
            delta(a.bytes_requested, b.bytes_requested),
            0,
        ),
        (
            "bytes_allocated",
            delta(a.bytes_allocated, b.bytes_allocated),
            0,
        ),
    ];
    let wrong: Vec<String> = got
        .iter()
        .filter(|(_, got, want)| got != want)
        .map(|(what, got, want)| format!("{what}: {got} more, want {want}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "under {backend}, the failing checks are not counted as failures:\n  {}\nbase:    {}\nfailing: {}",
        wrong.join("\n  "),
        summary(&base),
        summary(&failing)
    );
}

per_backend!(
    with_next:
    semantics_hold,
    semantics_hold_with_sampled_stacks,
    semantics_hold_at_the_sampled_level,
    semantics_hold_forwarded,
    semantics_hold_with_exact_stacks,
    failed_calls_are_counted,
    failed_calls_are_counted_with_sampled_stacks
);
