//! A profile written by `allocmux::Profiler` inside a Rust program (this
//! test binary, with `Counting` as its global allocator) reads through
//! the CLI like the shim's: `report`, `export` as JSON and as an SVG,
//! with the program's own function on top of its heaviest stack and
//! exact counts in exact mode.

mod common;

use std::alloc::System;

use allocmux::{Counting, Profiler};
use allocmux_format::profile::{self, StackMode};
use common::{allocmux, ok, parse_svg, run, text};

#[global_allocator]
static ALLOC: Counting<System> = Counting::new(System);

const BUFFERS: usize = 5_000;
const BUFFER_BYTES: usize = 100;
const THREADS: usize = 4;

/// The call site the profile must name: `BUFFERS` allocations of
/// `BUFFER_BYTES`, all kept.
#[inline(never)]
fn make_buffers() -> Vec<Vec<u8>> {
    let mut all = Vec::new();
    for _ in 0..BUFFERS {
        all.push(std::hint::black_box(Vec::with_capacity(BUFFER_BYTES)));
    }
    all
}

/// The first frame, from the leaf, of the program rather than the
/// standard library (which the CLI already trimmed allocmux's and the
/// allocator's frames from).
fn program_frame(frames: &[serde_json::Value]) -> &str {
    frames
        .iter()
        .map(|f| f["function"].as_str().unwrap_or(""))
        .find(|f| {
            ![
                "alloc::", "core::", "std::", "<alloc::", "<core::", "<std::",
            ]
            .iter()
            .any(|p| f.starts_with(p))
        })
        .unwrap_or("")
}

#[test]
fn an_exact_profile_renders_with_the_programs_function_on_top() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.prof");
    let profiler = Profiler::builder().exact().file(&path).build();
    assert_eq!(profiler.path(), Some(path.as_path()));
    let kept = make_buffers();
    // Other threads allocate from the same function and free it all,
    // meanwhile: their stacks are recorded and their frees found.
    let threads: Vec<_> = (0..THREADS)
        .map(|_| std::thread::spawn(|| drop(make_buffers())))
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    drop(profiler);
    assert_eq!(kept.len(), BUFFERS);

    // The file is the shared format, complete, with exact stacks.
    let procs = profile::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(procs.len(), 1);
    let p = &procs[0];
    assert_eq!(p.pid, std::process::id());
    assert_eq!(p.allocator, "system");
    assert_eq!(p.state, profile::State::Exited);
    assert_eq!(p.stacks.mode, StackMode::Exact);
    // glibc's own figures, as the shim writes them for its backend.
    let glibc = p
        .allocator_stats
        .as_ref()
        .expect("the allocator's statistics");
    assert_eq!(glibc.stats.backend(), allocmux_format::Backend::System);
    assert!(glibc.live_bytes >= (BUFFERS * BUFFER_BYTES) as u64);
    assert!(p.totals.calls_of(allocmux_format::Func::Malloc) >= BUFFERS as u64);

    // By count, the heaviest stacks are `make_buffers`'s (one per thread
    // it ran on), with every one of its allocations, bytes and leaks
    // counted exactly.
    let json = ok(run(allocmux()
        .args(["export", "--format", "json", "--weight", "count", "-o", "-"])
        .arg(&path)));
    let stacks: Vec<serde_json::Value> = serde_json::from_slice(&json.stdout).unwrap();
    let top = &stacks[0];
    let frames = top["frames"].as_array().unwrap();
    assert_eq!(
        program_frame(frames),
        "rust_profiler::make_buffers",
        "{top:#}"
    );
    assert!(
        !frames[0]["function"].as_str().unwrap().contains("allocmux"),
        "allocmux's own frames are trimmed: {top:#}"
    );
    let ours: Vec<&serde_json::Value> = stacks
        .iter()
        .filter(|s| program_frame(s["frames"].as_array().unwrap()) == "rust_profiler::make_buffers")
        .map(|s| &s["values"])
        .filter(|v| v["bytes"] == v["count"].as_u64().unwrap() * BUFFER_BYTES as u64)
        .collect();
    let sum = |k: &str| ours.iter().map(|v| v[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!(sum("count"), ((THREADS + 1) * BUFFERS) as u64, "{ours:?}");
    // Only the main thread's are still live.
    assert_eq!(sum("leaked"), (BUFFERS * BUFFER_BYTES) as u64, "{ours:?}");

    // The flamegraph names it, and the report reads the file.
    let svg_path = dir.path().join("app.svg");
    ok(run(allocmux()
        .args(["export", "--format", "svg", "--weight", "count", "-o"])
        .arg(&svg_path)
        .arg(&path)));
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let doc = parse_svg(&svg);
    assert!(
        doc.descendants().any(|n| n
            .text()
            .is_some_and(|t| t.contains("rust_profiler::make_buffers"))),
        "the SVG names make_buffers"
    );
    let report = text(&ok(run(allocmux().arg("report").arg(&path))).stdout);
    assert!(report.contains("every allocation"), "{report}");
    assert!(report.contains("rust_profiler::make_buffers"), "{report}");
}
