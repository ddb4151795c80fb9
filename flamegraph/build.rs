//! Builds the preload shim (always in release mode, in its own target
//! directory) and hands it to the CLI to embed, so that `cargo run`,
//! `cargo install --path flamegraph` and the tests all get a shim built
//! from the same sources as the CLI, and never a stale one.
//!
//! A cdylib cannot be an ordinary dependency, and cargo does not build one
//! for another package's tests; a nested cargo with its own target
//! directory (so it takes no lock the outer cargo holds) is the stable way.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let workspace = manifest
        .parent()
        .expect("the CLI lives in the workspace")
        .to_path_buf();
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));
    for dir in [
        "alloc-shim/src",
        "alloc-shim/Cargo.toml",
        "profiler/src",
        "profiler/Cargo.toml",
        "Cargo.toml",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", workspace.join(dir).display());
    }
    println!("cargo:rerun-if-env-changed=ALLOCMUX_SHIM_TARGET_DIR");

    let target_dir = env::var_os("ALLOCMUX_SHIM_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| shim_target_dir(&out));
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&workspace)
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "allocmux-shim",
            "--target-dir",
        ])
        .arg(&target_dir)
        // Symbols stay (flamegraphs name the shim's frames); DWARF goes.
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo")
        .stdout(Stdio::null());
    // What cargo sets for this build script must not leak into the nested
    // build (the jobserver, CARGO_MAKEFLAGS, is shared on purpose).
    for (key, _) in env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        let leak = [
            "OUT_DIR",
            "TARGET",
            "HOST",
            "NUM_JOBS",
            "OPT_LEVEL",
            "DEBUG",
            "PROFILE",
            "RUSTC",
            "RUSTDOC",
            "RUSTC_LINKER",
        ]
        .contains(&key.as_str())
            || key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_CFG_")
            || key.starts_with("CARGO_FEATURE_")
            || key.starts_with("CARGO_MANIFEST_")
            || [
                "CARGO_ENCODED_RUSTFLAGS",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_DIR",
                "CARGO_BUILD_TARGET_DIR",
            ]
            .contains(&key.as_str());
        if leak {
            cmd.env_remove(&key);
        }
    }
    let status = cmd.status().expect("running cargo to build the shim");
    assert!(
        status.success(),
        "building allocmux-shim failed (see the output above)"
    );

    let built = target_dir.join("release").join("liballocmux_shim.so");
    let embedded = out.join("liballocmux_shim.so");
    // Copy, then rename into place: a test may have the previous copy mapped
    // in a running process, and rewriting a mapped library in place
    // corrupts that process.
    let partial = out.join("liballocmux_shim.so.partial");
    std::fs::copy(&built, &partial).unwrap_or_else(|e| panic!("copying {}: {e}", built.display()));
    std::fs::rename(&partial, &embedded)
        .unwrap_or_else(|e| panic!("installing {}: {e}", embedded.display()));
    println!(
        "cargo:rustc-env=ALLOCMUX_EMBEDDED_SHIM={}",
        embedded.display()
    );
}

/// `<target>/allocmux-shim`, found from OUT_DIR (`<target>/<profile>/build/<pkg>/out`),
/// so debug and release builds of the CLI share one shim build.
fn shim_target_dir(out: &Path) -> PathBuf {
    let target = out.ancestors().nth(4).filter(|t| {
        t.join("CACHEDIR.TAG").exists() || t.file_name().is_some_and(|n| n == "target")
    });
    match target {
        Some(t) => t.join("allocmux-shim"),
        None => out.join("allocmux-shim"),
    }
}
