//! `-a NAME=PATH`: any allocator library, by path. A recorded run puts
//! the shim in front of it (its `next` backend), a run that records
//! nothing preloads the library alone, and a path that cannot serve is
//! refused before anything runs.

use std::fs;

use crate::common;
use common::*;

/// tcmalloc as the tests' allocator library, where installed (CI
/// installs it).
fn tcmalloc() -> Option<String> {
    allocmux_testkit::next_library().map(|p| format!("tcmalloc={}", p.display()))
}

#[test]
fn run_records_a_program_under_an_allocator_library() {
    let Some(tcmalloc) = tcmalloc() else { return };
    let exe = compile("cc", "counts.c", &["-O2"]);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = run(allocmux()
        .args(["run", "-a", &tcmalloc, "--json"])
        .arg(&json)
        .arg("--")
        .arg(&exe)
        .arg("1000"));
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("under tcmalloc exited with status 0"), "{err}");
    assert!(
        err.contains("tcmalloc's own statistics: not read"),
        "what cannot be read is said: {err}"
    );
    let report: serde_json::Value = serde_json::from_slice(&fs::read(&json).unwrap()).unwrap();
    let p = &report["processes"][0];
    // counts.c's loop: one calloc per iteration, exactly.
    assert_eq!(p["calls"]["calloc"], 1000, "{p}");
    assert_eq!(p["allocator"], "next", "{p}");
}

#[test]
fn timing_runs_preload_the_library_alone_and_recorded_runs_the_shim_before_it() {
    let Some(tcmalloc) = tcmalloc() else { return };
    let library = tcmalloc.split_once('=').unwrap().1.to_string();
    let show = ["sh", "-c", "echo \"$LD_PRELOAD\""];
    let out = ok(run(allocmux()
        .env_remove("LD_PRELOAD")
        .args(["run", "-a", &tcmalloc, "--record", "off", "--"])
        .args(show)));
    assert_eq!(text(&out.stdout), format!("{library}\n"));
    let out = ok(run(allocmux()
        .env_remove("LD_PRELOAD")
        .args(["run", "-a", &tcmalloc, "--"])
        .args(show)));
    let preload = text(&out.stdout);
    let (shim, after) = preload.trim_end().split_once(':').unwrap();
    assert!(shim.contains("allocmux_shim"), "{preload}");
    assert_eq!(after, library);
    let out = ok(run(allocmux_embedded()
        .env_remove("LD_PRELOAD")
        .env("XDG_CACHE_HOME", tempfile::tempdir().unwrap().path())
        .args(["preload", "-a", &tcmalloc])));
    let lines = text(&out.stdout);
    let preload = lines.lines().next().unwrap();
    assert!(
        preload.starts_with("LD_PRELOAD=") && preload.ends_with(&format!(":{library}")),
        "{lines}"
    );
    assert!(lines.contains("ALLOCMUX_ALLOCATOR=next"), "{lines}");
}

#[test]
fn a_path_that_cannot_serve_is_refused_before_the_program_runs() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    for (value, why) in [
        ("x=/nonexistent/libx.so", "No such file"),
        ("x=/bin/sh", "a program, not a shared library"),
        ("x=/etc/passwd", "not an ELF file"),
        ("jemalloc=/bin/sh", "built-in allocator's name"),
        ("tcmalloc", "unknown allocator"),
    ] {
        let out = run(allocmux().args(["run", "-a", value, "--", "sh", "-c", &touch]));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value}: {err}");
        assert!(err.contains(why), "{value}: {err}");
        assert_eq!(err.lines().count(), 1, "{value}: one line: {err}");
        assert!(!marker.exists(), "{value}: the program ran");
    }
    // A library that is no allocator: its missing functions are named.
    let libc = "/lib/x86_64-linux-gnu/libm.so.6";
    if std::path::Path::new(libc).exists() {
        let out = run(allocmux().args(["run", "-a", &format!("m={libc}"), "--", "true"]));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("does not define malloc, free"), "{err}");
    }
}

/// `compare` with a library among the allocators: its timing runs preload
/// the library alone, its recorded runs the shim before it, and the
/// table's counts are the program's, exactly.
#[test]
fn compare_times_the_library_alone_and_records_it_behind_the_shim() {
    let Some(tcmalloc) = tcmalloc() else { return };
    let library = tcmalloc.split_once('=').unwrap().1.to_string();
    let exe = compile("cc", "counts.c", &["-O2"]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("programs.log");
    let json = dir.path().join("c.json");
    let script = format!(
        "echo \"preload=$LD_PRELOAD record=$ALLOCMUX_RECORD\"; exec {} 1000",
        exe.display()
    );
    let out = ok(run(allocmux()
        .env_remove("LD_PRELOAD")
        .args(["compare", "-a", &format!("system,{tcmalloc}"), "-n", "6"])
        .args(["--warmup", "0", "--log"])
        .arg(&log)
        .arg("--json")
        .arg(&json)
        .args(["--", "sh", "-c", &script])));
    let logged = fs::read_to_string(&log).unwrap();
    let runs: Vec<&str> = logged.split("==> ").skip(1).collect();
    for run in &runs {
        let line = run.lines().nth(1).unwrap();
        match (run.contains("under tcmalloc"), run.contains(", recorded")) {
            (true, false) => assert_eq!(line, format!("preload={library} record="), "{run}"),
            (true, true) => {
                assert!(line.contains("allocmux_shim"), "{run}");
                assert!(line.ends_with(&format!(":{library} record=")), "{run}");
            }
            (false, _) => {}
        }
    }
    assert!(
        runs.iter().any(|r| r.contains("under tcmalloc, recorded")),
        "{logged}"
    );
    let report: serde_json::Value = serde_json::from_slice(&fs::read(&json).unwrap()).unwrap();
    let allocators = report["allocators"].as_array().unwrap();
    let names: Vec<&str> = allocators
        .iter()
        .map(|a| a["allocator"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["system", "tcmalloc"], "{}", text(&out.stdout));
    // The shell and counts.c's 8 allocations per iteration, under both
    // (the shell's own few may differ with its environment's length).
    let calls =
        |a: &serde_json::Value| a["figures"]["allocation_calls"]["median"].as_f64().unwrap();
    let (system, tc) = (calls(&allocators[0]), calls(&allocators[1]));
    assert!(tc >= 8000.0 && (tc - system).abs() < 10.0, "{report}");
}
