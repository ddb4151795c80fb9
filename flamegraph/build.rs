//! Builds the preload shim (always in release mode, in its own target
//! directory) and hands it to the CLI to embed, so that `cargo run`,
//! `cargo install` and the tests all get a shim built from the same
//! sources as the CLI, and never a stale one.
//!
//! A cdylib cannot be an ordinary dependency, and cargo does not build one
//! for another package's tests; a nested cargo with its own target
//! directory (so it takes no lock the outer cargo holds) is the stable way.
//! The shim's sources come through the `allocmux-shim` dependency (its
//! build script reports where they are), so they are found the same way in
//! this workspace and in a registry:
//!
//! - a workspace member is built where it is, with the workspace's lock
//!   file, and this script reruns when any of its sources change;
//! - a package on its own (unpacked from a registry, where sources are
//!   read-only and there is no workspace) is copied under OUT_DIR and built
//!   there with its packaged lock file, against the same `allocmux-format`
//!   and `allocmux-recorder` crates this build resolved.

use std::env;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The shim library's file name, as cargo builds it.
const LIBRARY: &str = "liballocmux_shim.so";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));
    // docs.rs builds documentation offline and never runs the binary: an
    // empty stand-in takes the shim's place there, instead of a nested
    // cargo that would need the network.
    println!("cargo::rerun-if-env-changed=DOCS_RS");
    if env::var_os("DOCS_RS").is_some() {
        let stand_in = out.join(LIBRARY);
        fs::write(&stand_in, b"").expect("writing into OUT_DIR");
        println!(
            "cargo::rustc-env=ALLOCMUX_EMBEDDED_SHIM={}",
            stand_in.display()
        );
        return;
    }
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let shim_sources = dependency_dir("DEP_ALLOCMUX_SHIM_SOURCE_DIR", "allocmux-shim");
    println!("cargo::rerun-if-env-changed=ALLOCMUX_SHIM_TARGET_DIR");
    let workspace = workspace_of(&cargo, &shim_sources);
    // Apart for a copy: its library must not replace the workspace's under
    // the same file name.
    let name = match workspace {
        Some(_) => "allocmux-shim",
        None => "allocmux-shim-packaged",
    };
    let target_dir = env::var_os("ALLOCMUX_SHIM_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| shim_target_dir(&out, name));

    let mut build = nested_cargo(&cargo);
    match &workspace {
        Some(root) => {
            build
                .current_dir(root)
                .args(["build", "--release", "--locked", "-p", "allocmux-shim"]);
        }
        None => {
            let copy = out.join("allocmux-shim-sources");
            copy_package(&shim_sources, &copy);
            // The CLI reads the profiles the shim writes: both use the
            // `allocmux-format` this build resolved, not one resolved anew,
            // and the shim is built against the recorder of the same
            // release (neither needs to be on crates.io: `cargo publish
            // --dry-run` verifies before they are).
            let format = dependency_dir("DEP_ALLOCMUX_FORMAT_SOURCE_DIR", "allocmux-format");
            let recorder = dependency_dir("DEP_ALLOCMUX_RECORDER_SOURCE_DIR", "allocmux-recorder");
            build
                .current_dir(&copy)
                .args(["build", "--release"])
                .arg(format!(
                    "--config=patch.crates-io.allocmux-format.path={}",
                    toml_string(&format)
                ))
                .arg(format!(
                    "--config=patch.crates-io.allocmux-recorder.path={}",
                    toml_string(&recorder)
                ));
            // Registry sources do not change under a given version.
            println!("cargo::rerun-if-changed={}", shim_sources.display());
        }
    }
    let status = build
        .arg("--target-dir")
        .arg(&target_dir)
        .status()
        .expect("running cargo to build the shim");
    assert!(
        status.success(),
        "building allocmux-shim failed (see the output above)"
    );

    let release = target_dir.join("release");
    if let Some(root) = &workspace {
        watch_sources(root, &release.join("liballocmux_shim.d"));
    }

    let built = release.join(LIBRARY);
    let embedded = out.join(LIBRARY);
    // Copy, then rename into place: a test may have the previous copy mapped
    // in a running process, and rewriting a mapped library in place
    // corrupts that process.
    let partial = out.join(format!("{LIBRARY}.partial"));
    fs::copy(&built, &partial).unwrap_or_else(|e| panic!("copying {}: {e}", built.display()));
    fs::rename(&partial, &embedded)
        .unwrap_or_else(|e| panic!("installing {}: {e}", embedded.display()));
    println!(
        "cargo::rustc-env=ALLOCMUX_EMBEDDED_SHIM={}",
        embedded.display()
    );
}

/// A dependency's source directory, from the `links` metadata its build
/// script reports.
fn dependency_dir(var: &str, package: &str) -> PathBuf {
    env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        panic!("{var} is not set: {package}'s build script reports it to its dependents")
    })
}

/// A cargo for the shim's build, with nothing of what cargo sets for this
/// build script: that would leak into the nested build (the jobserver,
/// CARGO_MAKEFLAGS, is shared on purpose). Its output stays out of the way.
fn nested_cargo(cargo: &OsString) -> Command {
    let mut cmd = Command::new(cargo);
    // Symbols stay (flamegraphs name the shim's frames); DWARF goes.
    cmd.env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo")
        .stdout(Stdio::null());
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
            || key.starts_with("DEP_")
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
    cmd
}

/// The root directory of the workspace `package` is a member of, if it is
/// part of a larger one. A package unpacked from a registry is a workspace
/// of its own; cargo also refuses (an error here) a package inside a
/// workspace that does not list it, which is where `cargo package` puts the
/// packages it verifies.
fn workspace_of(cargo: &OsString, package: &Path) -> Option<PathBuf> {
    let manifest = package.join("Cargo.toml");
    let found = nested_cargo(cargo)
        .args(["locate-project", "--workspace", "--message-format", "plain"])
        .arg("--manifest-path")
        .arg(&manifest)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .expect("running cargo locate-project");
    if !found.status.success() {
        return None;
    }
    let root_manifest = PathBuf::from(String::from_utf8(found.stdout).ok()?.trim_end());
    (root_manifest != manifest).then(|| root_manifest.parent().map(Path::to_path_buf))?
}

/// Copies the package at `from` to `to` (replacing what was there) and
/// makes the copy a workspace of its own, so that whatever lies above
/// OUT_DIR does not claim it.
fn copy_package(from: &Path, to: &Path) {
    if to.exists() {
        fs::remove_dir_all(to).unwrap_or_else(|e| panic!("removing {}: {e}", to.display()));
    }
    copy_dir(from, to);
    let manifest = to.join("Cargo.toml");
    let mut text = fs::read_to_string(&manifest)
        .unwrap_or_else(|e| panic!("reading {}: {e}", manifest.display()));
    if !text.lines().any(|l| l.trim() == "[workspace]") {
        text.push_str("\n[workspace]\n");
        fs::write(&manifest, text)
            .unwrap_or_else(|e| panic!("writing {}: {e}", manifest.display()));
    }
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap_or_else(|e| panic!("creating {}: {e}", to.display()));
    let entries = fs::read_dir(from).unwrap_or_else(|e| panic!("reading {}: {e}", from.display()));
    for entry in entries {
        let entry = entry.unwrap_or_else(|e| panic!("reading {}: {e}", from.display()));
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        // Follows symbolic links: the copy is to be built, not preserved.
        if fs::metadata(&src).is_ok_and(|m| m.is_dir()) {
            copy_dir(&src, &dst);
        } else {
            fs::copy(&src, &dst).unwrap_or_else(|e| panic!("copying {}: {e}", src.display()));
        }
    }
}

/// `path` as a TOML basic string, for a `--config` value.
fn toml_string(path: &Path) -> String {
    let text = path.to_str().expect("a UTF-8 path (cargo reported it)");
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Reruns this script when a source of the shim changes: every file in the
/// workspace the shim's dep-info file (written by the nested cargo) lists,
/// the manifest and build script of each package they belong to, and the
/// workspace's manifest and lock file.
fn watch_sources(root: &Path, dep_info: &Path) {
    let text = fs::read_to_string(dep_info)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dep_info.display()));
    let mut watched = vec![root.join("Cargo.toml"), root.join("Cargo.lock")];
    for file in dep_info_files(&text).filter(|f| f.starts_with(root)) {
        let package = file
            .ancestors()
            .skip(1)
            .take_while(|d| d.starts_with(root))
            .find(|d| d.join("Cargo.toml").is_file());
        if let Some(p) = package {
            watched.extend([p.join("Cargo.toml"), p.join("build.rs")]);
        }
        watched.push(file);
    }
    watched.sort();
    watched.dedup();
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo::rerun-if-changed={}", path.display());
    }
}

/// The prerequisites in a Makefile-style dep-info file's first rule
/// (`target: a b\ c`), where a backslash escapes a space.
fn dep_info_files(text: &str) -> impl Iterator<Item = PathBuf> + '_ {
    let rule = text.lines().next().unwrap_or_default();
    let prerequisites = rule.split_once(": ").map_or("", |(_, p)| p);
    let mut files = Vec::new();
    let mut current = String::new();
    let mut chars = prerequisites.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => current.extend(chars.next()),
            ' ' => files
                .extend((!current.is_empty()).then(|| PathBuf::from(std::mem::take(&mut current)))),
            c => current.push(c),
        }
    }
    files.extend((!current.is_empty()).then(|| PathBuf::from(current)));
    files.into_iter()
}

/// `<target>/<name>`, found from OUT_DIR (`<target>/<profile>/build/<pkg>/out`),
/// so debug and release builds of the CLI share one shim build.
fn shim_target_dir(out: &Path, name: &str) -> PathBuf {
    let target = out.ancestors().nth(4).filter(|t| {
        t.join("CACHEDIR.TAG").exists() || t.file_name().is_some_and(|n| n == "target")
    });
    match target {
        Some(t) => t.join(name),
        None => out.join(name),
    }
}
