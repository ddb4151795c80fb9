//! A crate outside the workspace uses allocmux as a user would: a path
//! dependency with the `criterion` and `budget` features (and no default
//! ones), a benchmark with `criterion_main_with_allocs!`, and tests with
//! budgets, one of them against a baseline file it blesses; built and run
//! with `cargo test` and `cargo bench -- --quick`.
//!
//! It builds into `target/downstream-test`, kept between runs so that
//! later runs rebuild only what changed, and apart from the target
//! directory of the `cargo test` that runs it, whose lock that `cargo
//! test` holds. Dependencies are the versions of the workspace's lock
//! file, already fetched, so it needs no network.

use std::fs;
use std::path::Path;
use std::process::Command;

const MANIFEST: &str = r#"[package]
name = "downstream"
version = "0.1.0"
edition = "2024"
publish = false

[dev-dependencies]
allocmux = { path = "PROFILER", default-features = false, features = ["criterion", "budget"] }
criterion = { version = "0.8", default-features = false, features = ["cargo_bench_support"] }

[[bench]]
name = "names"
harness = false

[workspace]
"#;

const LIB: &str = r#"
/// One allocation: the formatted string (14 bytes: `format!` reserves
/// twice its literal text).
pub fn greeting(name: &str) -> String {
    format!("hello, {name}")
}

/// Keeps a block for ever.
#[inline(never)]
pub fn remember(name: &str) -> &'static str {
    Box::leak(name.to_owned().into_boxed_str())
}
"#;

const TEST: &str = r#"
use allocmux::Budget;

#[global_allocator]
static ALLOC: allocmux::Counting<std::alloc::System> =
    allocmux::Counting::new(std::alloc::System);

#[test]
fn greeting_allocates_once() {
    Budget::new().allocs(1).bytes(14).leaked_bytes(0).check(|| downstream::greeting("world"));
}

#[test]
#[should_panic(expected = "downstream::remember")]
fn remember_leaks() {
    Budget::new().leaked_bytes(0).check(|| downstream::remember("x"));
}

#[test]
fn greeting_baseline() {
    Budget::baseline("greeting").check(|| downstream::greeting("world"));
}
"#;

const BENCH: &str = r#"
use std::hint::black_box;
use criterion::{Criterion, measurement::Measurement};

#[global_allocator]
static ALLOC: allocmux::Counting<std::alloc::System> =
    allocmux::Counting::new(std::alloc::System);

fn names<M: Measurement + 'static>(c: &mut Criterion<M>) {
    c.bench_function("greeting", |b| b.iter(|| downstream::greeting(black_box("world"))));
    c.bench_function("len", |b| b.iter(|| black_box("world").len()));
}

allocmux::criterion_main_with_allocs!(names);
"#;

#[test]
fn a_crate_outside_the_workspace_benches_and_budgets_with_allocmux() {
    let profiler = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = profiler.parent().unwrap();
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("downstream-test");
    let project = tempfile::tempdir().unwrap();
    let p = project.path();
    let write = |path: &str, text: &str| {
        let path = p.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    };
    write(
        "Cargo.toml",
        &MANIFEST.replace("PROFILER", profiler.to_str().unwrap()),
    );
    write("src/lib.rs", LIB);
    write("tests/budgets.rs", TEST);
    write("benches/names.rs", BENCH);
    fs::copy(workspace.join("Cargo.lock"), p.join("Cargo.lock")).unwrap();

    let cargo = |args: &[&str], bless: bool| {
        let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        c.current_dir(p)
            .arg("--offline")
            .args(args)
            .env("CARGO_TARGET_DIR", &target)
            .env("CRITERION_HOME", p.join("criterion"))
            .env_remove("ALLOCMUX_BLESS")
            .env_remove("RUSTFLAGS");
        if bless {
            c.env("ALLOCMUX_BLESS", "1");
        }
        let out = c.output().unwrap();
        let text = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };

    // No baseline yet: the baseline test fails, saying how to record it.
    let (ok, out) = cargo(&["test"], false);
    assert!(!ok, "{out}");
    assert!(out.contains("no baseline \"greeting\""), "{out}");
    assert!(out.contains("2 passed; 1 failed"), "{out}");

    let (ok, out) = cargo(&["test"], true);
    assert!(ok, "{out}");
    let baseline = fs::read_to_string(p.join("allocmux-budgets.toml")).unwrap();
    assert!(
        baseline.contains("[greeting]\nallocs = 1\nbytes = 14\n"),
        "{baseline}"
    );
    let (ok, out) = cargo(&["test"], false);
    assert!(ok && out.contains("3 passed"), "{out}");

    // The bench, in the dev profile (counts do not depend on it) to
    // reuse the test build, in quick mode.
    let (ok, out) = cargo(
        &[
            "bench",
            "--bench",
            "names",
            "--profile",
            "dev",
            "--",
            "--quick",
            "--measurement-time",
            "0.3",
            "--noplot",
        ],
        false,
    );
    assert!(ok, "{out}");
    let table = out
        .split_once("allocmux: per iteration")
        .unwrap_or_else(|| panic!("no table in:\n{out}"))
        .1;
    let row = |bench: &str| {
        let line = table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(bench))
            .unwrap_or_else(|| panic!("no {bench} in:\n{table}"));
        line.split_whitespace().skip(1).collect::<Vec<_>>()
    };
    // Time (two words: number and unit), allocation calls, bytes.
    assert_eq!(row("greeting")[2..], ["1.00", "14", "B"], "{table}");
    assert_eq!(row("len")[2..], ["0.00", "0", "B"], "{table}");
    assert!(
        p.join("criterion-allocmux/allocations/greeting/new/estimates.json")
            .exists()
    );
}
