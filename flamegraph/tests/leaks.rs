//! `report --leaks` and `run --limit`, on C and C++ programs built here:
//! programs that free everything leak nothing once the runtimes' own
//! start-up blocks are suppressed by the defaults; a program that leaks K
//! blocks of S bytes from one function shows exactly that stack; LSan
//! suppression files hide it or are refused; and a CI script's `run
//! --limit` passes, fails with status 23, or lets a failing program's
//! status stand.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common;
use common::*;

/// Blocks the leaky program leaks, and their size.
const K: u64 = 7;
const S: u64 = 48;

/// Leaks `K` blocks of `S` bytes from `leak_here`, allocates and frees
/// 43 more: 50 allocations in all, no stdio. Exits with `argv[1]` if given.
const LEAKY: &str = r#"
#include <stdlib.h>
void *volatile kept[64];
__attribute__((noinline)) void *leak_here(size_t n) {
    void *p = malloc(n);
    __asm__ volatile("" : : "r"(p) : "memory"); /* no tail call: a frame of its own */
    return p;
}
int main(int argc, char **argv) {
    for (int i = 0; i < 7; i++) kept[i] = leak_here(48);
    for (int i = 0; i < 43; i++) { void *volatile p = malloc(100); free(p); }
    return argc > 1 ? atoi(argv[1]) : 0;
}
"#;

/// Frees everything it allocates, and writes to stdout through stdio
/// (whose buffer glibc keeps to the end).
const TIDY_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    for (int i = 0; i < 10; i++) { void *volatile p = malloc(100); free(p); }
    printf("tidy\n");
    return 0;
}
"#;

/// Frees everything it allocates, through the C++ library (which sets
/// its exception pool aside when it is loaded).
const TIDY_CXX: &str = r#"
#include <iostream>
#include <string>
#include <vector>
int main() {
    std::vector<std::string> v;
    for (int i = 0; i < 10; i++) v.push_back(std::string(100, 'x'));
    std::cout << v.size() << std::endl;
    return 0;
}
"#;

fn leaky(dir: &Path) -> PathBuf {
    c_program(dir, "leaky", LEAKY, &["-O2", "-g"])
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)))
}

/// Records `exe` with every stack into `dir/NAME.prof`.
fn record(dir: &Path, name: &str, exe: &Path) -> PathBuf {
    let prof = dir.join(format!("{name}.prof"));
    ok(run(allocmux()
        .args(["run", "--stacks", "exact", "-o"])
        .arg(&prof)
        .arg("--")
        .arg(exe)));
    prof
}

/// `report --leaks --json PROFILE EXTRA...`.
fn leaks_json(prof: &Path, extra: &[&str]) -> Value {
    json_of(&ok(run(allocmux()
        .args(["report", "--leaks", "--json"])
        .arg(prof)
        .args(extra))))
}

/// The functions of a JSON stack's frames.
fn functions(stack: &Value) -> Vec<String> {
    stack["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"].as_str().unwrap().to_string())
        .collect()
}

/// What the defaults left out, from the JSON.
fn hidden_by_defaults(doc: &Value) -> (u64, u64) {
    let d = doc["leaks_suppressed"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["file"].is_null())
        .unwrap_or_else(|| panic!("no defaults in {doc}"));
    (d["blocks"].as_u64().unwrap(), d["stacks"].as_u64().unwrap())
}

#[test]
fn a_c_program_that_frees_everything_leaks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let exe = c_program(dir.path(), "tidy", TIDY_C, &["-O2"]);
    let prof = record(dir.path(), "tidy", &exe);
    let doc = leaks_json(&prof, &[]);
    assert_eq!(doc["leaks"], Value::Array(vec![]), "{doc:#}");
    // stdio's buffer stays to the end, and the defaults hide it.
    let (blocks, _) = hidden_by_defaults(&doc);
    assert!(blocks >= 1, "{doc:#}");
    let raw = leaks_json(&prof, &["--no-default-suppressions"]);
    let leaked = raw["leaks"].as_array().unwrap();
    assert!(
        leaked
            .iter()
            .any(|l| functions(l)[0].ends_with("_IO_file_doallocate")),
        "{raw:#}"
    );
    let out = ok(run(allocmux().args(["report", "--leaks"]).arg(&prof)));
    let t = text(&out.stdout);
    assert!(t.contains("leaks: none (no block live at exit)"), "{t}");
    assert!(t.contains(" suppressed by the defaults"), "{t}");
}

#[test]
fn a_cxx_program_that_frees_everything_leaks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("tidy_cxx.cpp");
    std::fs::write(&src, TIDY_CXX).unwrap();
    let exe = compile("c++", &src, &["-O2"]);
    let prof = record(dir.path(), "tidy_cxx", &exe);
    let doc = leaks_json(&prof, &[]);
    assert_eq!(doc["leaks"], Value::Array(vec![]), "{doc:#}");
    let (blocks, stacks) = hidden_by_defaults(&doc);
    assert!(blocks >= 1 && stacks >= 1, "{doc:#}");
    // Without the defaults, the C++ library's start-up block shows.
    let raw = leaks_json(&prof, &["--no-default-suppressions"]);
    assert!(
        raw["leaks"].as_array().unwrap().iter().any(|l| l["frames"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["module"]
                .as_str()
                .is_some_and(|m| m.contains("libstdc++")))),
        "{raw:#}"
    );
    let out = ok(run(allocmux().args(["report", "--leaks"]).arg(&prof)));
    let t = text(&out.stdout);
    assert!(t.contains("leaks: none"), "{t}");
    let line = t
        .lines()
        .find(|l| l.ends_with(" suppressed by the defaults"))
        .unwrap_or_else(|| panic!("no defaults line in {t}"));
    assert!(line.contains(" leaked block"), "{line}");
}

#[test]
fn a_leak_is_listed_with_its_blocks_and_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let exe = leaky(dir.path());
    let prof = record(dir.path(), "leaky", &exe);
    let doc = leaks_json(&prof, &[]);
    let leaks = doc["leaks"].as_array().unwrap();
    assert_eq!(leaks.len(), 1, "{doc:#}");
    let l = &leaks[0];
    assert_eq!(l["blocks"], K, "{doc:#}");
    assert_eq!(l["bytes"], K * S, "{doc:#}");
    assert_eq!(l["estimated"], false);
    let f = functions(l);
    assert_eq!(f[0], "leak_here", "{f:?}");
    assert!(f.iter().any(|f| f == "main"), "{f:?}");
    // The JSON's shape: frames as export writes them, the suppressions
    // per list, and whether processes were still running.
    let frame = &l["frames"][0];
    for key in ["file", "function", "inlined", "line", "module"] {
        assert!(frame.get(key).is_some(), "no {key} in {frame}");
    }
    assert!(
        frame["file"].as_str().unwrap().ends_with("leaky.c"),
        "{frame}"
    );
    assert_eq!(doc["leaks_still_running"], 0);
    assert_eq!(doc["leaks_without_stack"], 0);
    assert!(doc["leaks_suppressed"].is_array());
    assert!(
        doc.get("top_stacks").is_none(),
        "--leaks alone lists no top stacks"
    );

    let out = ok(run(allocmux().args(["report", "--leaks"]).arg(&prof)));
    let t = text(&out.stdout);
    assert!(
        t.contains(&format!(
            "leaks: {K} blocks ({} B) live at exit, from 1 stack",
            K * S
        )),
        "{t}"
    );
    let row = t
        .lines()
        .find(|l| l.contains("leak_here"))
        .unwrap_or_else(|| panic!("no leak_here in {t}"));
    assert!(row.contains(&format!("{} B", K * S)) && row.contains(&format!("{K} blocks")));
    assert!(!t.contains("top 5 stacks"), "{t}");
}

#[test]
fn a_suppression_file_hides_a_leak_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let exe = leaky(dir.path());
    let prof = record(dir.path(), "leaky", &exe);
    for pattern in ["leak_here", "^leak_h*e$", "leaky.c", "^leaky$"] {
        let supp = dir.path().join("mine.supp");
        std::fs::write(&supp, format!("# ours\n\nleak:{pattern}\n")).unwrap();
        let supp_arg = supp.to_str().unwrap();
        let doc = leaks_json(&prof, &["--suppressions", supp_arg]);
        assert_eq!(doc["leaks"], Value::Array(vec![]), "{pattern}: {doc:#}");
        let mine = doc["leaks_suppressed"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["file"] == supp_arg)
            .unwrap_or_else(|| panic!("{doc:#}"))
            .clone();
        assert_eq!(mine["blocks"], K, "{pattern}");
        assert_eq!(mine["bytes"], K * S, "{pattern}");
        assert_eq!(mine["stacks"], 1, "{pattern}");
        let out = ok(run(allocmux()
            .args(["report", "--leaks", "--suppressions", supp_arg])
            .arg(&prof)));
        let t = text(&out.stdout);
        assert!(
            t.contains(&format!(
                "{K} leaked blocks ({} B) in 1 stack suppressed by {supp_arg}",
                K * S
            )),
            "{t}"
        );
    }
    // A pattern that matches nothing hides nothing.
    let supp = dir.path().join("other.supp");
    std::fs::write(&supp, "leak:^leak$\n").unwrap();
    let doc = leaks_json(&prof, &["--suppressions", supp.to_str().unwrap()]);
    assert_eq!(doc["leaks"].as_array().unwrap().len(), 1, "{doc:#}");
}

#[test]
fn bad_suppression_files_and_profiles_without_stacks_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let exe = leaky(dir.path());
    let prof = record(dir.path(), "leaky", &exe);
    for (body, line) in [
        ("leak:a\n# fine\nrace:b\n", 3),
        ("leak_here\n", 1),
        ("\n\nleak:\n", 3),
    ] {
        let supp = dir.path().join("bad.supp");
        std::fs::write(&supp, body).unwrap();
        let out = run(allocmux()
            .args(["report", "--leaks", "--suppressions"])
            .arg(&supp)
            .arg(&prof));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{body:?}: {err}");
        assert!(err.contains(&format!("line {line}: ")), "{body:?}: {err}");
        assert!(out.stdout.is_empty());
    }
    // `--suppressions` needs `--leaks`.
    let out = run(allocmux()
        .args(["report", "--suppressions", "x.supp"])
        .arg(&prof));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));

    let plain = dir.path().join("plain.prof");
    ok(run(allocmux()
        .arg("run")
        .arg("-o")
        .arg(&plain)
        .arg("--")
        .arg(&exe)));
    let out = run(allocmux().args(["report", "--leaks"]).arg(&plain));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--stacks exact"), "{err}");
}

/// Runs `script` with `sh` in `dir`, as a CI job would, with this
/// build's `allocmux` first on `PATH`.
fn ci(dir: &Path, script: &str) -> Output {
    let ci = dir.join("ci.sh");
    std::fs::write(&ci, script).unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_allocmux")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    run(Command::new("sh")
        .arg(&ci)
        .current_dir(dir)
        .env("PATH", path)
        .env("ALLOCMUX_SHIM", shim()))
}

#[test]
fn a_ci_script_passes_within_limits_and_fails_over_them() {
    let dir = tempfile::tempdir().unwrap();
    leaky(dir.path());
    // 50 allocations.
    let out = ci(
        dir.path(),
        "set -e\nallocmux run --limit allocs=50 -- ./leaky\necho ok\n",
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(text(&out.stdout), "ok\n");
    assert!(
        err.contains("allocmux: within limits: allocs 50 ≤ 50\n"),
        "{err}"
    );

    let out = ci(
        dir.path(),
        "set -e\nallocmux run --limit allocs=49,peak=1MiB -- ./leaky\necho ok\n",
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(23), "{err}");
    assert_eq!(text(&out.stdout), "");
    assert!(
        err.contains("allocmux: limit exceeded: allocs 50 > 49\n"),
        "{err}"
    );
    assert!(!err.contains("limit exceeded: peak"), "{err}");

    // With stacks, the stacks behind it.
    let out = ci(
        dir.path(),
        "allocmux run --stacks exact --limit allocs=10 --limit peak=64 -- ./leaky; echo \"status $?\"\n",
    );
    let err = text(&out.stderr);
    assert_eq!(text(&out.stdout), "status 23\n", "{err}");
    assert!(
        err.contains("allocmux: limit exceeded: allocs 50 > 10\n"),
        "{err}"
    );
    assert!(err.contains("allocmux: limit exceeded: peak "), "{err}");
    let after = err.split("limit exceeded: allocs").nth(1).unwrap();
    assert!(
        after.contains("43 allocations") && after.contains("7 allocations"),
        "{err}"
    );
    assert!(after.contains("leak_here"), "{err}");
}

#[test]
fn a_leaked_limit_records_stacks_and_applies_suppressions() {
    let dir = tempfile::tempdir().unwrap();
    leaky(dir.path());
    let out = ci(dir.path(), "allocmux run --limit leaked=1K -- ./leaky\n");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("within limits: leaked {} B ≤ 1.0 KiB", K * S)),
        "{err}"
    );
    assert!(!err.contains("thrown away"), "{err}");

    let out = ci(dir.path(), "allocmux run --limit leaked=100 -- ./leaky\n");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(23), "{err}");
    assert!(
        err.contains(&format!("limit exceeded: leaked {} B > 100 B", K * S)),
        "{err}"
    );
    let row = err
        .lines()
        .find(|l| l.contains("leak_here"))
        .unwrap_or_else(|| panic!("no stack in {err}"));
    assert!(row.contains(&format!("{K} blocks")), "{row}");

    std::fs::write(dir.path().join("ci.supp"), "leak:leak_here\n").unwrap();
    let out = ci(
        dir.path(),
        "allocmux run --limit leaked=0 --suppressions ci.supp -- ./leaky\n",
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("within limits: leaked 0 B ≤ 0 B"), "{err}");
}

#[test]
fn a_failing_program_keeps_its_status_and_limits_are_not_judged() {
    let dir = tempfile::tempdir().unwrap();
    leaky(dir.path());
    let out = ci(
        dir.path(),
        "set -e\nallocmux run --limit allocs=1,leaked=0 -- ./leaky 3\necho ok\n",
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(text(&out.stdout), "");
    assert!(
        err.contains("allocmux: limits not judged: the program failed"),
        "{err}"
    );
    assert!(!err.contains("limit exceeded"), "{err}");
}

#[test]
fn bad_limits_are_usage_errors() {
    for args in [
        &["--limit", "allocz=1"][..],
        &["--limit", "allocs=ten"],
        &["--limit", "peak=5XB"],
        &["--limit", "temporary=1KiB"],
        &["--limit", "temporary=1", "--stacks", "sample"],
        &["--limit", "allocs=1", "--limit", "allocs=2"],
        &["--limit", "leaked=1K", "--stacks", "sample"],
        &["--limit", "allocs=1", "--record", "sampled"],
        &["--limit", "allocs=1", "--record", "off"],
        &["--suppressions", "x.supp"],
    ] {
        let out = run(allocmux().arg("run").args(args).args(["--", "true"]));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
    let dir = tempfile::tempdir().unwrap();
    let supp = dir.path().join("bad.supp");
    std::fs::write(&supp, "thread:x\n").unwrap();
    let out = run(allocmux()
        .args(["run", "--limit", "leaked=0", "--suppressions"])
        .arg(&supp)
        .args(["--", "sh", "-c", "echo ran"]));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty(), "the program ran");
}
