//! CI's smoke test: every workload binary runs once at a tiny size, plain
//! and under the shim with each allocator (and once recording exact
//! stacks), and prints the checksum the library computes. No timings.

use std::path::Path;
use std::process::Command;

use allocmux_testkit::{BACKENDS, ok_as, shim, text};
use allocmux_workloads::ALL;

use crate::common;
use common::bin;

/// Small enough for debug builds: the whole test takes a few seconds.
const SIZE: u64 = 200;

#[test]
fn every_workload_has_a_binary_and_every_binary_a_workload() {
    for w in ALL {
        assert!(bin(w.name).is_file(), "no binary for {}", w.name);
    }
    let sources = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin");
    for entry in std::fs::read_dir(sources).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap();
        assert!(
            name == "allocmux-workload" || allocmux_workloads::find(name).is_some(),
            "src/bin/{name}.rs runs no workload"
        );
    }
}

#[test]
fn every_binary_prints_the_checksum_plain_and_under_the_shim() {
    let dir = tempfile::tempdir().unwrap();
    // The workloads are independent: run them on two threads.
    std::thread::scope(|s| {
        for half in ALL.chunks(ALL.len().div_ceil(2)) {
            let dir = dir.path();
            s.spawn(move || {
                for w in half {
                    let want = format!("{} {}\n", w.name, (w.run)(SIZE));
                    let run = |c: &mut Command, what: &str| {
                        let out = ok_as(what, c.arg(SIZE.to_string()).output().unwrap());
                        assert_eq!(text(&out.stdout), want, "{what}");
                        out
                    };
                    run(&mut Command::new(bin(w.name)), w.name);
                    let generic = format!("allocmux-workload {}", w.name);
                    run(Command::new(bin("allocmux-workload")).arg(w.name), &generic);
                    for a in BACKENDS {
                        let what = format!("{} under the shim with {a}", w.name);
                        let out = run(
                            Command::new(bin(w.name))
                                .env("LD_PRELOAD", shim())
                                .env("ALLOCMUX_ALLOCATOR", a)
                                .env_remove("ALLOCMUX_OUTPUT")
                                .env_remove("ALLOCMUX_STACKS"),
                            &what,
                        );
                        // The shim's summary line at exit shows it was loaded
                        // and which allocator served the run.
                        let err = text(&out.stderr);
                        assert!(err.contains(&format!("({a}): ")), "{what}: {err}");
                    }
                    let profile = dir.join(format!("{}.prof", w.name));
                    let what = format!("{} recording exact stacks", w.name);
                    run(
                        Command::new(bin(w.name))
                            .env("LD_PRELOAD", shim())
                            .env("ALLOCMUX_ALLOCATOR", "jemalloc")
                            .env("ALLOCMUX_STACKS", "exact")
                            .env("ALLOCMUX_OUTPUT", &profile),
                        &what,
                    );
                    let len = std::fs::metadata(&profile).map_or(0, |m| m.len());
                    assert!(len > 0, "{what}: no profile at {}", profile.display());
                }
            });
        }
    });
}

#[test]
fn bad_arguments_fail_with_the_usage() {
    for (args, needle) in [
        (
            vec!["edit-distance", "many"],
            "bad SIZE \"many\": expected a whole number of word pairs",
        ),
        (
            vec!["no-such-workload"],
            "unknown workload \"no-such-workload\"",
        ),
        (vec![], "no workload named"),
    ] {
        let out = Command::new(bin("allocmux-workload"))
            .args(&args)
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.starts_with(&format!("allocmux-workload: {needle}")),
            "{args:?}: {err}"
        );
        assert!(
            err.contains("usage: allocmux-workload NAME [SIZE]"),
            "{err}"
        );
        assert!(out.stdout.is_empty());
    }
    let out = Command::new(bin("larson"))
        .args(["10", "20"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with("larson: unexpected argument \"20\"\nusage: larson [SIZE]")
    );
    let out = ok_as(
        "--help",
        Command::new(bin("larson")).arg("--help").output().unwrap(),
    );
    assert!(text(&out.stdout).starts_with("usage: larson [SIZE]\n"));
}
