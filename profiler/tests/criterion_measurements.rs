//! `benches/allocations.rs` run by criterion in quick mode under each of
//! allocmux's measurements, as `cargo bench -- --quick` runs it, in a
//! child process of this test (criterion reads its settings from the
//! command line); then the per-iteration estimates criterion wrote to
//! `estimates.json` are checked: exactly 1 allocation of 15 bytes per heap
//! name, exactly none inline.
//!
//! No harness: criterion's `main` needs the process's command line.

use std::path::{Path, PathBuf};
use std::process::Command;

#[allow(dead_code)] // its `main`: this test has its own
#[path = "../benches/allocations.rs"]
mod bench;

use allocmux::criterion::{Allocations, AllocatorTime, BytesAllocated, SideBySide};

const CHILD: &str = "ALLOCMUX_CRITERION_TEST_CHILD";

fn main() {
    if std::env::var_os(CHILD).is_some() {
        // The bench, under each measurement, into CRITERION_HOME's
        // siblings (see `SideBySide`).
        let run = SideBySide::start();
        bench::bounded_string(&mut run.criterion(Allocations));
        bench::bounded_string(&mut run.criterion(BytesAllocated));
        bench::bounded_string(&mut run.criterion(AllocatorTime));
        run.finish();
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let criterion = home.path().join("criterion");
    let out = Command::new(std::env::current_exe().unwrap())
        // What `cargo bench -- --quick` passes; a zero count cannot reach
        // quick mode's relative precision, so it runs to the measurement
        // time, kept short.
        .args([
            "--bench",
            "--quick",
            "--measurement-time",
            "0.5",
            "--noplot",
        ])
        .env(CHILD, "1")
        .env("CRITERION_HOME", &criterion)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");

    let dir = home.path().join("criterion-allocmux");
    let mut checked = 0;
    let mut check = |measurement: &str, bench: &str, want: Option<f64>| {
        let e = estimates(&dir.join(measurement), bench);
        for key in ["mean", "median", "slope"] {
            let v = e[key];
            match want {
                Some(w) => assert_eq!(v, w, "{measurement} {bench} {key}: {e:?}\n{stdout}"),
                None => assert!(v > 0.0, "{measurement} {bench} {key}: {e:?}"),
            }
        }
        checked += 1;
    };
    check("allocations", "heap", Some(1.0));
    check("allocations", "inline", Some(0.0));
    check("bytes", "heap", Some(bench::NAME.len() as f64));
    check("bytes", "inline", Some(0.0));
    // An estimate from timed calls: some time for the heap name, exactly
    // none where nothing is allocated.
    check("allocator-time", "heap", None);
    check("allocator-time", "inline", Some(0.0));

    // The console reports name the units.
    assert!(stdout.contains("1.0000 allocs"), "{stdout}");
    assert!(stdout.contains("15.000 B"), "{stdout}");
    // And `SideBySide` sums them up, one row per benchmark.
    let table = stdout
        .split_once("allocmux: per iteration")
        .unwrap_or_else(|| panic!("no table in:\n{stdout}"))
        .1;
    let row = |bench: &str| {
        let line = table.lines().find(|l| l.starts_with(bench)).unwrap();
        line.split_whitespace()
            .skip(1)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        row("bounded-string/heap ").starts_with("1.00 15 B "),
        "{table}"
    );
    assert_eq!(row("bounded-string/inline "), "0.00 0 B 0.0 ns", "{table}");
    println!("{checked} passed, 0 failed");
}

/// The point estimates criterion wrote for `bounded-string/<bench>`.
fn estimates(dir: &Path, bench: &str) -> std::collections::HashMap<&'static str, f64> {
    let path: PathBuf = dir
        .join("bounded-string")
        .join(bench)
        .join("new")
        .join("estimates.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    ["mean", "median", "slope"]
        .into_iter()
        .map(|k| {
            let v = json[k]["point_estimate"]
                .as_f64()
                .unwrap_or_else(|| panic!("no {k} in {}: {text}", path.display()));
            (k, v)
        })
        .collect()
}
