//! `allocmux preload`, which prints the environment `allocmux run` gives a
//! program, and `allocmux run --http`, which serves live profiles while the
//! program runs: run as a user would, with the programs they start.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use allocmux_format::profile::{self, StackMode};

use crate::common;
use common::*;

/// The shim's exact-count fixture.
fn counts_fixture() -> PathBuf {
    compile("cc", "counts.c", &["-O2"])
}

/// `allocmux preload ARGS` with its embedded shim and its cache in
/// `cache`: the lines it printed, in order.
fn preload(cache: &Path, args: &[&str]) -> Vec<(String, String)> {
    let out = ok(run(allocmux_embedded()
        .env("XDG_CACHE_HOME", cache)
        .env_remove("LD_PRELOAD")
        .arg("preload")
        .args(args)));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|l| {
            let (k, v) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("not NAME=VALUE: {l:?}"));
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// The library `allocmux run ARGS` preloads, as the program sees it.
fn run_preloads(cache: &Path, args: &[&str]) -> String {
    let out = ok(run(allocmux_embedded()
        .env("XDG_CACHE_HOME", cache)
        .env_remove("LD_PRELOAD")
        .arg("run")
        .args(args)
        .args(["--", "sh", "-c", "echo \"$LD_PRELOAD\""])));
    text(&out.stdout).trim_end().to_string()
}

#[test]
fn preload_prints_what_run_sets_and_the_program_runs_under_it() {
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("p.%p");
    let lines = preload(
        cache.path(),
        &[
            "-a",
            "jemalloc",
            "--stacks",
            "exact",
            "-o",
            template.to_str().unwrap(),
        ],
    );
    let names: Vec<&str> = lines.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "LD_PRELOAD",
            "ALLOCMUX_ALLOCATOR",
            "ALLOCMUX_STACKS",
            "ALLOCMUX_OUTPUT"
        ]
    );
    let vars: BTreeMap<_, _> = lines.into_iter().collect();
    let shim = Path::new(&vars["LD_PRELOAD"]);
    assert!(
        shim.is_file() && shim.starts_with(cache.path().join("allocmux")),
        "the shim is written to the cache: {}",
        shim.display()
    );
    assert_eq!(vars["ALLOCMUX_OUTPUT"], template.to_str().unwrap());
    assert_eq!(
        vars["LD_PRELOAD"],
        run_preloads(cache.path(), &["-a", "jemalloc", "--stacks", "exact"]),
        "the library run preloads"
    );

    // The program, started with these variables alone, as `env $(...)`.
    let exe = counts_fixture();
    let out = ok(run(Command::new(&exe).arg("1000").envs(&vars)));
    assert!(
        text(&out.stdout).starts_with("counts: 1000 iterations"),
        "{}",
        text(&out.stdout)
    );
    let files: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let p = profile::parse(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(p[0].allocator, "jemalloc");
    assert_eq!(p[0].stacks.mode, StackMode::Exact);
    assert!(p[0].totals.calls_of(allocmux_format::Func::Malloc) >= 1000);
}

#[test]
fn preload_for_a_service_serves_sampled_stacks() {
    let cache = tempfile::tempdir().unwrap();
    let lines = preload(cache.path(), &["--http", "127.0.0.1:0"]);
    let vars: BTreeMap<_, _> = lines.into_iter().collect();
    assert_eq!(vars["ALLOCMUX_HTTP"], "127.0.0.1:0");
    assert!(
        !vars.contains_key("ALLOCMUX_STACKS"),
        "the shim's default: {vars:?}"
    );
    assert_eq!(
        vars["LD_PRELOAD"],
        run_preloads(cache.path(), &["--http", "127.0.0.1:0"])
    );
    let out = ok(run(Command::new(counts_fixture()).arg("10").envs(&vars)));
    let err = text(&out.stderr);
    assert!(
        err.contains("allocmux: serving /debug/pprof on http://127.0.0.1:"),
        "{err}"
    );
}

#[test]
fn preload_refuses_what_env_would_split_or_cannot_serve() {
    let parent = tempfile::tempdir().unwrap();
    let spaced = parent.path().join("a cache");
    let out = run(allocmux_embedded()
        .env("XDG_CACHE_HOME", &spaced)
        .arg("preload"));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("allocmux: LD_PRELOAD would be") && err.contains("white space"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "nothing half printed");

    for bad in ["nonsense", "127.0.0.1", "127.0.0.1:99999", ":6060"] {
        let out = run(allocmux_embedded().args(["preload", "--http", bad]));
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("expected ADDR:PORT"), "{bad}");
    }
}

#[test]
fn run_serves_while_the_program_runs() {
    let out = ok(run(allocmux()
        .args(["run", "--http", "127.0.0.1:0", "--"])
        .arg(counts_fixture())
        .arg("10")));
    let err = text(&out.stderr);
    assert!(
        err.contains("allocmux: serving /debug/pprof on http://127.0.0.1:"),
        "{err}"
    );
    assert!(
        err.contains("exited with status 0"),
        "the report, as ever: {err}"
    );
    // Serving, the level is the sampled one: every figure an estimate.
    assert!(
        err.contains("\n  sampled level: nothing counted or timed per call"),
        "{err}"
    );
    let row = err
        .lines()
        .find(|l| l.contains(" counts "))
        .unwrap_or_default();
    assert!(row.contains('≈') && row.trim_end().ends_with('-'), "{row}");
    let out = ok(run(allocmux()
        .args(["run", "--http", "127.0.0.1:0", "--record", "exact", "--"])
        .arg(counts_fixture())
        .arg("10")));
    assert!(
        !text(&out.stderr).contains("sampled level"),
        "exact on request"
    );
    let out = run(allocmux().args([
        "run",
        "--http",
        "127.0.0.1:0",
        "--record",
        "off",
        "--",
        "true",
    ]));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// The sampled level's JSON: estimates with their intervals, no time.
#[test]
fn sampled_level_json_says_what_is_estimated() {
    let out = ok(run(allocmux()
        .args([
            "run",
            "--record",
            "sampled",
            "--sample-bytes",
            "64",
            "--json",
            "-",
            "--",
        ])
        .arg(counts_fixture())
        .arg("1000")));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &json["processes"][0];
    assert_eq!(p["recording"], "sampled", "{p}");
    assert!(
        p["allocator_ns"].is_null() && p["allocator_time_share"].is_null(),
        "{p}"
    );
    let allocations = p["calls"]["malloc"].as_u64().unwrap();
    let [low, high] = [0, 1].map(|i| p["estimate_intervals"]["allocations"][i].as_u64().unwrap());
    assert!(
        low <= allocations && allocations <= high && low < high,
        "{p}"
    );
}

/// A sampled-level profile's stacks carry the interval the shim summed
/// over its samples (it counts no size histogram to compute one from).
#[test]
fn sampled_level_stack_totals_have_their_interval() {
    let dir = tempfile::tempdir().unwrap();
    let prof = dir.path().join("p.prof");
    ok(run(allocmux()
        .args(["run", "--record", "sampled", "--sample-bytes", "64", "-o"])
        .arg(&prof)
        .arg("--")
        .arg(counts_fixture())
        .arg("1000")));
    let out = ok(run(allocmux().args(["report", "--top", "1"]).arg(&prof)));
    let report = text(&out.stdout);
    let line = report
        .lines()
        .find(|l| l.contains("by allocations"))
        .unwrap_or_else(|| panic!("{report}"));
    let interval = line
        .split("95% interval ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap_or_else(|| panic!("no interval: {line}"));
    let (low, high) = interval.split_once('–').unwrap();
    assert_ne!(low, high, "{line}");
}
