//! Exact per-stack counts through the shim, the symbolizer and the folded
//! export, for a Rust program (demangled names through std's allocation
//! plumbing) and a C++ one (`operator new`, `std::string`), both built
//! with optimisation and without frame pointers.

use std::path::{Path, PathBuf};

use crate::common;
use common::*;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Runs `exe 1000` with exact stacks and returns the folded stacks by count.
fn folded_counts(dir: &Path, exe: &Path) -> Vec<(String, u64)> {
    let prof = dir.join("p.prof");
    ok(run(allocmux()
        .args(["run", "--stacks", "exact", "-o"])
        .arg(&prof)
        .arg("--")
        .arg(exe)
        .arg("1000")));
    let out = ok(run(allocmux()
        .arg("export")
        .arg(&prof)
        .args(["--format", "folded", "--weight", "count", "-o", "-"])));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').unwrap();
            (stack.to_string(), n.parse().unwrap())
        })
        .collect()
}

fn total(stacks: &[(String, u64)], pattern: &str) -> u64 {
    stacks
        .iter()
        .filter(|(s, _)| s.contains(pattern))
        .map(|(_, n)| n)
        .sum()
}

#[test]
fn rust_program_stacks_are_exact_and_demangled() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(
        "rustc",
        fixture("stacks_rust.rs"),
        &["-O", "-g", "-C", "force-frame-pointers=no"],
    );
    let stacks = folded_counts(dir.path(), &exe);
    let all = || format!("{stacks:#?}");
    assert_eq!(
        total(&stacks, "stacks_rust::middle;stacks_rust::leaf;"),
        3000,
        "{}",
        all()
    );
    assert_eq!(
        total(&stacks, "stacks_rust::main;stacks_rust::other;"),
        1000,
        "{}",
        all()
    );
    // Demangled, and the allocator glue trimmed: no mangled symbol, no
    // `__rust_alloc`, and the leaf is std's allocation function.
    for (s, _) in &stacks {
        assert!(!s.contains("_ZN") && !s.contains(";_R"), "mangled: {s}");
        assert!(
            !s.contains("__rust_alloc") && !s.contains("__rdl_alloc"),
            "{s}"
        );
    }
}

#[test]
fn cxx_program_stacks_are_exact_and_demangled() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(
        "c++",
        fixture("stacks_cxx.cpp"),
        &["-O2", "-g", "-fomit-frame-pointer"],
    );
    let stacks = folded_counts(dir.path(), &exe);
    let all = || format!("{stacks:#?}");
    assert_eq!(
        total(
            &stacks,
            "main;fixture::middle();fixture::leaf();operator new(unsigned long)"
        ),
        3000,
        "{}",
        all()
    );
    assert_eq!(
        total(&stacks, "main;fixture::other(int);"),
        1000,
        "{}",
        all()
    );
}

/// Frames of the standard library's templates inlined into `main`: every
/// one demangled (GCC's `std::make_shared`, whose `enable_if` return type
/// the demangler cannot read, by its name and template arguments), and
/// folded into `[N std frames]` in the report's stack lines.
#[test]
fn cxx_inlined_std_frames_are_demangled_and_folded() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("c++", fixture("stacks_cxx_std.cpp"), &["-O1", "-g"]);
    let stacks = folded_counts(dir.path(), &exe);
    let all = || format!("{stacks:#?}");
    for (s, _) in &stacks {
        assert!(!s.contains(";_Z"), "mangled: {s}");
    }
    assert_eq!(
        total(&stacks, "main;std::make_shared<int, int&>_[i];"),
        1000,
        "{}",
        all()
    );
    assert!(
        total(&stacks, "_M_realloc_insert<std::shared_ptr<int> >(") > 0,
        "{}",
        all()
    );
    let report = ok(run(allocmux()
        .args(["report", "--top", "3"])
        .arg(dir.path().join("p.prof"))));
    let lines = text(&report.stdout);
    let by_count = lines
        .split("top 3 stacks by allocations")
        .nth(1)
        .unwrap_or_else(|| panic!("{lines}"));
    let first = by_count.lines().nth(1).unwrap();
    assert!(
        first.contains(" std frames] ← main (stacks_cxx_std.cpp:"),
        "{lines}"
    );
    assert!(!lines.contains("_M_realloc_insert"), "{lines}");
    assert!(!lines.contains("_ZSt"), "{lines}");
}
