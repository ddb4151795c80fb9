//! `Profiler::builder().serve(addr)`: a Rust program with `Counting` as
//! its global allocator serves `/debug/pprof/heap`, scraped over HTTP by
//! `go tool pprof`, which symbolizes the test binary's frames itself.

use std::alloc::System;
use std::process::Command;

use allocmux::{Counting, Profiler};

#[global_allocator]
static ALLOC: Counting<System> = Counting::new(System);

/// 20,000 strings of 1,000 bytes, kept: 20 MB in use from this function.
#[inline(never)]
fn allocate_strings() -> Vec<String> {
    (0..20_000)
        .map(|i| std::hint::black_box("x".repeat(1000 + i % 2)))
        .collect()
}

/// `go tool pprof -top -cum` of `url`, with `sample_index`.
fn top(url: &str, sample_index: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("go")
        .args([
            "tool",
            "pprof",
            "-top",
            "-cum",
            "-sample_index",
            sample_index,
            url,
        ])
        .env("PPROF_TMPDIR", dir.path())
        .output()
        .expect("go tool pprof runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The cumulative share (percent) of the row naming `function`.
fn cum_share(report: &str, function: &str) -> f64 {
    report
        .lines()
        .find(|l| l.contains(function))
        .and_then(|l| l.split_whitespace().nth(4))
        .and_then(|p| p.trim_end_matches('%').parse().ok())
        .unwrap_or_else(|| panic!("no {function} in {report}"))
}

#[test]
fn serves_the_heap_to_go_tool_pprof() {
    let dir = tempfile::tempdir().unwrap();
    let profiler = Profiler::builder()
        .exact()
        .file(dir.path().join("served.prof"))
        .serve("127.0.0.1:0")
        .build();
    let address = profiler.http_address().expect("serving").to_string();
    let url = format!("http://{address}/debug/pprof/heap");
    let strings = allocate_strings();
    // Nearly all the space in use was allocated under `allocate_strings`.
    let report = top(&url, "inuse_space");
    assert!(cum_share(&report, "allocate_strings") > 90.0, "{report}");
    drop(strings);
    let after = top(&url, "inuse_space");
    assert!(!after.contains("allocate_strings"), "{after}");
    drop(profiler);
    // The profile names the address it was served on.
    let text = std::fs::read_to_string(dir.path().join("served.prof")).unwrap();
    assert!(text.contains(&format!("\nhttp {address}\n")), "{text}");
}

#[test]
fn an_address_that_cannot_be_used_is_not_served() {
    assert!(allocmux_recorder::http::Listener::bind(b"127.0.0.1:70000").is_err());
}
