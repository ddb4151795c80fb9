//! `cargo install allocmux-cli` from the packaged crates gives an
//! `allocmux` that works from any directory: the shim travels inside the
//! binary and is written to the user's cache directory on first use.
//!
//! The crates are packaged as `cargo publish` would upload them, and
//! installed from a registry of their own: a directory source that
//! replaces crates.io, holding them next to the third-party crates the
//! lock file names (vendored), in a cargo home of the test's own. So the
//! build sees only what was packaged: a file the packages miss, or a path
//! into the workspace, fails here, and the shim must be built from the
//! packaged allocmux-shim. The library (`allocmux`, every feature) and
//! the workload programs are built from their packages too, so every
//! published crate is built from what it publishes, as `cargo publish
//! --dry-run` would verify it (CI packages the crates without verifying
//! them again).
//!
//! This is the slow test of the suite, so its builds are debug builds
//! (`cargo install --debug`): what it checks, that the packages hold
//! everything their builds need and that the installed binary finds its
//! shim anywhere, does not depend on the optimization level, and release
//! builds of the packages take 60% longer (measured from nothing on 2
//! cores: 321 s against 198 s). The shim itself is built in release
//! all the same, by the CLI's build script, as every install builds it.
//! jemalloc's C library, which the packages take unchanged from
//! tikv-jemalloc-sys, is not configured and compiled again (a minute of
//! the test on 2 cores): the build links the one the workspace's shim
//! build made from the same tikv-jemalloc-sys release with the same
//! features, through that crate's own `JEMALLOC_OVERRIDE`. Where the
//! workspace has none (`ALLOCMUX_SHIM_TARGET_DIR` elsewhere), jemalloc is
//! built from source, as a user's install builds it.
//! It builds into `target/install-test`,
//! kept between runs so that later runs only rebuild what changed, and
//! apart from the target directory of the `cargo test` that runs it, so
//! neither waits for the other's lock. Vendoring may fetch from crates.io
//! the few crates of other platforms that no build here has downloaded.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::common;
use common::*;

/// The crates of this workspace: those `allocmux-cli` is installed from,
/// and `allocmux`, the library, which the test builds from its package as
/// a user's project would.
const PACKAGES: [&str; 6] = [
    "allocmux-format",
    "allocmux-recorder",
    "allocmux",
    "allocmux-shim",
    "allocmux-workloads",
    "allocmux-cli",
];

#[test]
fn cargo_install_from_the_packaged_crates_gives_an_allocmux_that_works_anywhere() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    // CARGO_TARGET_TMPDIR is `<target dir>/tmp`, wherever that is.
    let kept = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("install-test");
    // Kept too: cargo tells registry crates apart by where their sources
    // are, so a new directory each run would rebuild them all.
    let registry = kept.join("registry");
    let started = Instant::now();
    let crates = package(workspace, &kept.join("package"));
    vendor(workspace, &registry);
    for (name, file) in &crates {
        let dir = format!("{name}-{}", env!("CARGO_PKG_VERSION"));
        unpack(file, &registry.join(dir));
    }
    eprintln!("packaging and vendoring took {:.0?}", started.elapsed());

    // Outside the workspace, so no configuration or workspace of it
    // applies; crates.io is the directory of packaged crates.
    let cargo_home = tempfile::tempdir().unwrap();
    fs::write(
        cargo_home.path().join("config.toml"),
        format!(
            "[source.crates-io]\nreplace-with = \"packaged\"\n\n\
             [source.packaged]\ndirectory = {:?}\n",
            registry.to_str().unwrap()
        ),
    )
    .unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut install = cargo();
    if let Some(jemalloc) = workspace_jemalloc(kept.parent().unwrap()) {
        install.env("JEMALLOC_OVERRIDE", jemalloc);
    }
    let install = run(install
        .current_dir(elsewhere.path())
        .args(["install", "--debug", "--locked", "allocmux-cli", "--root"])
        .arg(root.path())
        .env("CARGO_HOME", cargo_home.path())
        .env("CARGO_TARGET_DIR", kept.join("build"))
        // The directory source has every crate the build needs; the
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
    // The CLI's build script built the shim from the packaged allocmux-shim
    // (what it watches names the sources it used), not from this
    // workspace, which lies above the registry directory.
    let shim_sources = registry.join(format!("allocmux-shim-{}", env!("CARGO_PKG_VERSION")));
    let watched = format!("cargo::rerun-if-changed={}\n", shim_sources.display());
    let build_outputs: Vec<String> = fs::read_dir(kept.join("build/debug/build"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|d| {
            d.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("allocmux-cli-")
        })
        .filter_map(|d| fs::read_to_string(d.join("output")).ok())
        .collect();
    assert!(
        build_outputs.iter().any(|o| o.contains(&watched)),
        "no build of allocmux-cli used {}: {build_outputs:?}",
        shim_sources.display()
    );

    // The packages the CLI does not build whole, built from the packages
    // as a user's project and `cargo install` would build them (what
    // `cargo publish` verifies): the library with the features of its own
    // code, and the workload programs. In the same target directory, so
    // the crates the install built are not built again. The library's
    // default features (`jemalloc`, `mimalloc`) only turn on the
    // recorder's, which the shim's build above compiled from its package
    // with the C allocators; without them here, those are not configured
    // and compiled a second time (a minute of the test on 2 cores).
    let user = tempfile::tempdir().unwrap();
    fs::create_dir(user.path().join("src")).unwrap();
    fs::write(
        user.path().join("Cargo.toml"),
        format!(
            "[package]\nname = \"user\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
             [dependencies]\nallocmux = {{ version = \"={}\", default-features = false, features = [\"criterion\", \"budget\"] }}\n\n\
             [workspace]\n",
            env!("CARGO_PKG_VERSION")
        ),
    )
    .unwrap();
    fs::write(
        user.path().join("src/main.rs"),
        "#[global_allocator]\n\
         static A: allocmux::Counting<allocmux::Switchable> = allocmux::Counting::new(allocmux::Switchable::new());\n\
         fn main() {\n    let (v, used) = allocmux::measure(|| std::hint::black_box(vec![1u8; 100]));\n    \
         assert!(used.allocs >= 1 && v.len() == 100);\n}\n",
    )
    .unwrap();
    let packaged = |cmd: &mut Command| {
        cmd.env("CARGO_HOME", cargo_home.path())
            .env("CARGO_TARGET_DIR", kept.join("build"))
            .env("CARGO_NET_OFFLINE", "true")
            .env_remove("LD_LIBRARY_PATH");
        run(cmd)
    };
    let build = packaged(cargo().current_dir(user.path()).arg("run"));
    assert!(
        build.status.success(),
        "a project using the packaged allocmux failed to build or run:\n{}",
        text(&build.stderr)
    );
    let workloads = tempfile::tempdir().unwrap();
    let install = packaged(
        cargo()
            .current_dir(elsewhere.path())
            .args([
                "install",
                "--debug",
                "--locked",
                "allocmux-workloads",
                "--root",
            ])
            .arg(workloads.path()),
    );
    assert!(
        install.status.success(),
        "cargo install allocmux-workloads failed:\n{}",
        text(&install.stderr)
    );
    assert!(workloads.path().join("bin/edit-distance").is_file());

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

    let out = ok(run(allocmux().args(["run", "--", "true"])));
    let err = text(&out.stderr);
    assert!(err.contains("under system exited with status 0"), "{err}");

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

    // The demo's workload comes from the packaged allocmux-workloads; a
    // small size, as in tests/demo.rs, keeps it quick.
    let out =
        ok(run(allocmux().args([
            "demo", "--size", "20000", "--rounds", "6", "-o", ".",
        ])));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("verdict: "), "{stdout}");
    for name in ["compare.svg", "flame-time.svg"] {
        let svg = cwd.path().join(format!("allocmux-demo-{name}"));
        assert!(svg.is_file(), "{} in {stdout}", svg.display());
    }

    let cache = home.path().join(".cache/allocmux");
    let cached: Vec<_> = fs::read_dir(&cache)
        .unwrap_or_else(|e| panic!("{}: {e}", cache.display()))
        .map(|e| e.unwrap().path())
        .collect();
    // The embedded shim for mimalloc, the direct shims of glibc and
    // jemalloc (glibc's also records the demo's exact stacks), and the
    // forwarders of jemalloc and mimalloc (the comparison's timing runs).
    let mut names: Vec<String> = cached
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let kinds: Vec<&str> = names
        .iter()
        .map(|n| {
            let tag = n
                .strip_prefix("liballocmux_shim-")
                .and_then(|r| r.strip_suffix(".so"))
                .unwrap_or_else(|| panic!("{n} in the cache"));
            tag.rsplit_once('-').map_or("embedded", |(table, _)| table)
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "embedded",
            "jemalloc",
            "jemalloc_forward",
            "mimalloc_forward",
            "system"
        ],
        "the shims in the cache: {names:?}"
    );
    for path in &cached {
        let shim = allocmux_cli::elf::read(&fs::read(path).unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(shim.kind, allocmux_cli::elf::Kind::SharedLibrary);
        assert!(shim.defines_malloc, "{}", path.display());
    }
}

/// The jemalloc library the workspace's shim build compiled (with
/// tikv-jemalloc-sys's prefix, as the packaged shim's build would): the
/// newest `libjemalloc_pic.a` in the shim's target directory, which is
/// `ALLOCMUX_SHIM_TARGET_DIR` or `target/allocmux-shim`.
fn workspace_jemalloc(target: &Path) -> Option<PathBuf> {
    let shim_target = std::env::var_os("ALLOCMUX_SHIM_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| target.join("allocmux-shim"));
    fs::read_dir(shim_target.join("release/build"))
        .ok()?
        .filter_map(|e| {
            let dir = e.ok()?.path();
            let name = dir.file_name()?.to_string_lossy().into_owned();
            let lib = dir.join("out/lib/libjemalloc_pic.a");
            let modified = fs::metadata(&lib).ok()?.modified().ok()?;
            name.starts_with("tikv-jemalloc-sys-")
                .then_some((modified, lib))
        })
        .max()
        .map(|(_, lib)| lib)
}

/// The cargo running this test.
fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Packages the workspace's crates (as `cargo publish` would, without
/// verifying: the install below builds them) into `target_dir`, and
/// returns each one's name and `.crate` file.
fn package(workspace: &Path, target_dir: &Path) -> Vec<(&'static str, PathBuf)> {
    let mut cmd = cargo();
    cmd.current_dir(workspace)
        .args(["package", "--locked", "--no-verify", "--allow-dirty"])
        .env("CARGO_TARGET_DIR", target_dir)
        // `cargo test` has fetched what the lock files need.
        .env("CARGO_NET_OFFLINE", "true");
    for p in PACKAGES {
        cmd.args(["-p", p]);
    }
    let out = run(&mut cmd);
    assert!(
        out.status.success(),
        "cargo package failed:\n{}",
        text(&out.stderr)
    );
    PACKAGES
        .iter()
        .map(|&p| {
            let file = target_dir
                .join("package")
                .join(format!("{p}-{}.crate", env!("CARGO_PKG_VERSION")));
            assert!(file.is_file(), "{} was not packaged", file.display());
            (p, file)
        })
        .collect()
}

/// Copies the third-party crates of the workspace's lock file into `dir`,
/// as a directory source.
fn vendor(workspace: &Path, dir: &Path) {
    let out = run(cargo()
        .current_dir(workspace)
        .args(["vendor", "--locked", "--versioned-dirs"])
        .arg(dir));
    assert!(
        out.status.success(),
        "cargo vendor failed:\n{}",
        text(&out.stderr)
    );
}

/// Unpacks a `.crate` file into `dir` as a crate of a directory source:
/// its files and a checksum file naming the package's checksum (the one
/// the packaged lock files record), with no per-file sums to check.
///
/// `cargo package` stamps every file with one fixed old time, and the
/// packaged CLI's build script builds the shim against this directory as a
/// path dependency, which cargo judges by file times: so when the package
/// changed since the last run, its files are stamped now, or the kept
/// build would go on using the old `allocmux` crate.
fn unpack(file: &Path, dir: &Path) {
    let sum = ok(run(Command::new("sha256sum").arg(file)));
    let sum = text(&sum.stdout);
    let sum = sum.split_whitespace().next().unwrap();
    let checksum_file = dir.join(".cargo-checksum.json");
    let unchanged = fs::read_to_string(&checksum_file).is_ok_and(|old| old.contains(sum));
    if dir.exists() {
        fs::remove_dir_all(dir).unwrap();
    }
    fs::create_dir_all(dir).unwrap();
    let untar = run(Command::new("tar")
        .args(["-xzf"])
        .arg(file)
        .arg("--strip-components=1")
        .arg("-C")
        .arg(dir));
    assert!(untar.status.success(), "tar: {}", text(&untar.stderr));
    if !unchanged {
        let touched = run(Command::new("find")
            .arg(dir)
            .args(["-type", "f", "-exec", "touch", "{}", "+"]));
        assert!(touched.status.success(), "touch: {}", text(&touched.stderr));
    }
    fs::write(
        &checksum_file,
        format!("{{\"files\":{{}},\"package\":\"{sum}\"}}"),
    )
    .unwrap();
}
