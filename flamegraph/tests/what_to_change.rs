//! What to change, beyond C: temporary allocations, lifetimes and leaks
//! on a Rust program and a C++ program built here (each with a loop of `N`
//! buffers made and dropped, and blocks it never frees), and leaks and
//! lifetimes in python3. The C fixtures with exact figures are in
//! `figures.rs` (temporaries, lifetimes) and `leaks.rs`. Asserted only
//! what holds on any schedule: counts, never how short a lifetime was.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common;
use common::*;

/// Buffers each program makes and drops in its loop.
const N: u64 = 2000;

/// `scratch` makes and drops a `Vec` `N` times (one allocation each, freed
/// before the next: a temporary); `kept` leaks three 4 KiB boxes.
const RUST: &str = r#"
use std::hint::black_box;
#[inline(never)]
fn scratch(n: u64) -> u64 {
    let mut sum = 0;
    for i in 0..n {
        let v: Vec<u64> = (0..8).map(|k| k + i).collect();
        sum += black_box(&v).iter().sum::<u64>();
    }
    sum
}
#[inline(never)]
fn kept() {
    for _ in 0..3 {
        black_box(Box::leak(vec![1u8; 4096].into_boxed_slice()));
    }
}
fn main() {
    black_box(scratch(2000));
    kept();
}
"#;

/// The same in C++: a 100-byte `std::string` (past the small-string
/// buffer) made and destroyed `N` times; two arrays leaked.
const CXX: &str = r#"
#include <string>
template <class T> void keep(T const &v) { asm volatile("" : : "r"(&v) : "memory"); }
__attribute__((noinline)) void scratch(int n) {
    for (int i = 0; i < n; i++) {
        std::string s(100, 'a' + i % 26);
        keep(s);
    }
}
__attribute__((noinline)) void kept() {
    for (int i = 0; i < 2; i++) {
        int *volatile p = new int[1000];
        keep(p);
    }
}
int main() {
    scratch(2000);
    kept();
    return 0;
}
"#;

/// Writes `source` to `dir/NAME.EXT` and builds it with `compiler`.
fn build(
    dir: &Path,
    name: &str,
    ext: &str,
    source: &str,
    compiler: &str,
    flags: &[&str],
) -> PathBuf {
    let src = dir.join(format!("{name}.{ext}"));
    std::fs::write(&src, source).unwrap();
    compile(compiler, &src, flags)
}

/// Records `cmd` with every stack into `dir/NAME.prof`.
fn record(dir: &Path, name: &str, cmd: &[&str]) -> PathBuf {
    let prof = dir.join(format!("{name}.prof"));
    ok(run(allocmux()
        .args(["run", "--stacks", "exact", "-o"])
        .arg(&prof)
        .arg("--")
        .args(cmd)
        .env("PYTHONHASHSEED", "0")
        .env("PYTHONMALLOC", "malloc")));
    prof
}

/// The stacks of `export --format json`.
fn stacks(prof: &Path) -> Vec<Value> {
    let out = ok(run(allocmux()
        .arg("export")
        .arg(prof)
        .args(["--format", "json", "-o", "-"])));
    json_of(&out.stdout).as_array().unwrap().clone()
}

/// Whether `stack`'s frames name `function` (its full name, less any
/// C++ parameter list, ends with it: `wtc_rust::kept`, `kept()`).
fn through(stack: &Value, function: &str) -> bool {
    stack["frames"].as_array().unwrap().iter().any(|f| {
        let name = f["function"].as_str().unwrap();
        name.split('(').next().unwrap().ends_with(function)
    })
}

/// The sum of `key` (a weight's value, or a lifetime figure when `key`
/// starts with `lifetimes.`) over the stacks through `function`.
fn sum_through(stacks: &[Value], function: &str, key: &str) -> u64 {
    stacks
        .iter()
        .filter(|s| through(s, function))
        .map(|s| match key.strip_prefix("lifetimes.") {
            Some(k) => s["lifetimes"][k].as_u64().unwrap(),
            None => s["values"][key].as_u64().unwrap_or(0),
        })
        .sum()
}

/// `report --leaks --json`: the leaks through `function`, as (blocks,
/// bytes).
fn leaked_through(prof: &Path, function: &str) -> (u64, u64) {
    let doc = json_of(
        &ok(run(allocmux()
            .args(["report", "--leaks", "--json"])
            .arg(prof)))
        .stdout,
    );
    doc["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| through(l, function))
        .fold((0, 0), |(b, n), l| {
            (
                b + l["blocks"].as_u64().unwrap(),
                n + l["bytes"].as_u64().unwrap(),
            )
        })
}

/// The checks both compiled programs pass: `N` temporaries from
/// `scratch`, each freed (lifetimes), none leaked; the leaks of `kept`.
fn check_program(prof: &Path, scratch: &str, kept: &str, leaked: (u64, u64)) {
    let all = stacks(prof);
    let shown = || format!("{all:#?}");
    assert_eq!(sum_through(&all, scratch, "temporary"), N, "{}", shown());
    assert_eq!(
        sum_through(&all, scratch, "lifetimes.freed"),
        N,
        "{}",
        shown()
    );
    assert_eq!(
        sum_through(&all, scratch, "lifetimes.never_freed"),
        0,
        "{}",
        shown()
    );
    assert_eq!(sum_through(&all, kept, "temporary"), 0, "{}", shown());
    assert_eq!(sum_through(&all, kept, "lifetimes.freed"), 0, "{}", shown());
    assert_eq!(
        sum_through(&all, kept, "lifetimes.never_freed"),
        leaked.0,
        "{}",
        shown()
    );
    assert_eq!(leaked_through(prof, kept), leaked);
    assert_eq!(leaked_through(prof, scratch), (0, 0));
    // The advice names the loop, with its figure.
    let report = text(&ok(run(allocmux().arg("report").arg(prof))).stdout);
    assert!(
        report.contains(&format!("what to change: {} allocations (", "2,000"))
            && report.contains(scratch),
        "{report}"
    );
}

#[test]
fn a_rust_program_s_temporaries_lifetimes_and_leaks() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "wtc_rust", "rs", RUST, "rustc", &["-O", "-g"]);
    let prof = record(dir.path(), "rust", &[exe.to_str().unwrap()]);
    check_program(&prof, "wtc_rust::scratch", "wtc_rust::kept", (3, 3 * 4096));
}

#[test]
fn a_cxx_program_s_temporaries_lifetimes_and_leaks() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "wtc_cxx", "cpp", CXX, "c++", &["-O1", "-g"]);
    let prof = record(dir.path(), "cxx", &[exe.to_str().unwrap()]);
    check_program(&prof, "scratch", "kept", (2, 2 * 4000));
}

/// python3: a 4 MiB buffer held in a global when the interpreter leaves
/// through `os._exit` (no clean-up) is the largest leak, one block; and
/// `N` bytearrays made and dropped add `N` freed blocks to the lifetimes,
/// against a run that makes none.
#[test]
fn python_leaks_and_lifetimes() {
    if !Path::new("/usr/bin/python3").exists() {
        assert!(std::env::var_os("CI").is_none(), "CI must have python3");
        eprintln!("skipping: no /usr/bin/python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("held.py");
    std::fs::write(
        &script,
        "import os, sys\n\
         held = bytearray(4 << 20)\n\
         for _ in range(int(sys.argv[1])):\n    bytearray(1000)\n\
         os._exit(0)\n",
    )
    .unwrap();
    let freed = |n: u64| -> (PathBuf, u64) {
        let prof = record(
            dir.path(),
            &format!("py{n}"),
            &["/usr/bin/python3", script.to_str().unwrap(), &n.to_string()],
        );
        let doc = json_of(&ok(run(allocmux().args(["report", "--json"]).arg(&prof))).stdout);
        let freed = doc["total"]["lifetimes"]["freed"].as_u64().unwrap();
        (prof, freed)
    };
    let (prof, none) = freed(0);
    let (_, some) = freed(N);
    // Each bytearray frees its object and its buffer: at least N more.
    assert!(some >= none + N, "{none} then {some}");
    let doc = json_of(
        &ok(run(allocmux()
            .args(["report", "--leaks", "--json"])
            .arg(&prof)))
        .stdout,
    );
    let largest = &doc["leaks"][0];
    assert_eq!(largest["blocks"], 1, "{doc}");
    assert!(largest["bytes"].as_u64().unwrap() >= 4 << 20, "{doc}");
}
