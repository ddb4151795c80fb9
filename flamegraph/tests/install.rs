//! `cargo install --path flamegraph` gives an `allocmux` that works from
//! any directory: the shim travels inside the binary and is written to the
//! user's cache directory on first use.
//!
//! This is the slow test of the suite: a release build of the CLI and its
//! shim, as `cargo install` makes it. It builds into `target/install-test`,
//! kept between runs so that later runs only rebuild what changed, and
//! apart from the target directory of the `cargo test` that runs it, so
//! neither waits for the other's lock.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

mod common;
use common::*;

#[test]
fn cargo_install_gives_an_allocmux_that_works_anywhere() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    // CARGO_TARGET_TMPDIR is `<target dir>/tmp`, wherever that is.
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("install-test");
    let root = tempfile::tempdir().unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let started = Instant::now();
    let install = run(Command::new(cargo)
        .current_dir(workspace)
        .args(["install", "--locked", "--path", "flamegraph", "--root"])
        .arg(root.path())
        .env("CARGO_TARGET_DIR", &target_dir)
        // `cargo test` has fetched every crate the build needs; the
        // nested cargo that builds the shim reads this too.
        .env("CARGO_NET_OFFLINE", "true")
        .env_remove("ALLOCMUX_SHIM_TARGET_DIR")
        .env_remove("LD_LIBRARY_PATH"));
    assert!(
        install.status.success(),
        "cargo install failed:\n{}",
        text(&install.stderr)
    );
    eprintln!("cargo install took {:.0?}", started.elapsed());

    // Nothing from the build or from this test's environment: a login
    // shell's PATH and a home of its own, in a directory far from the
    // source tree.
    let bin = root.path().join("bin/allocmux");
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let allocmux = || {
        let mut c = Command::new(&bin);
        c.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", home.path())
            .current_dir(cwd.path());
        c
    };

    let version = ok(run(allocmux().arg("--version")));
    assert_eq!(
        text(&version.stdout),
        format!("allocmux {}\n", env!("CARGO_PKG_VERSION"))
    );

    let out = ok(run(allocmux().args([
        "run",
        "--json",
        "report.json",
        "--",
        "sh",
        "-c",
        "seq 1 300 | sort -rn | head -1",
    ])));
    assert_eq!(text(&out.stdout), "300\n");
    let err = text(&out.stderr);
    assert!(err.contains("under system exited with status 0"), "{err}");
    let report: serde_json::Value =
        serde_json::from_slice(&fs::read(cwd.path().join("report.json")).unwrap()).unwrap();
    let programs: Vec<&str> = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["calls"]["malloc"].as_u64().unwrap() > 0)
        .map(|p| p["argv"][0].as_str().unwrap())
        .collect();
    for p in ["sh", "seq", "sort", "head"] {
        assert!(programs.contains(&p), "{p} was not profiled: {programs:?}");
    }

    let cache = home.path().join(".cache/allocmux");
    let cached: Vec<_> = fs::read_dir(&cache)
        .unwrap_or_else(|e| panic!("{}: {e}", cache.display()))
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(cached.len(), 1, "one shim in the cache: {cached:?}");
    let name = cached[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        name.starts_with("liballocmux_shim-") && name.ends_with(".so"),
        "{name}"
    );
    let shim = allocmux_cli::elf::read(&fs::read(&cached[0]).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(shim.kind, allocmux_cli::elf::Kind::SharedLibrary);
    assert!(shim.defines_malloc);
}
