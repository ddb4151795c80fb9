//! Fixtures compiled for tests: files (the shim's C and C++ fixtures, or
//! any source by path) built once per test binary, and small programs
//! written by a test.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use crate::process::{run, scrub, shortened};

/// The shim's test fixtures (`alloc-shim/tests/fixtures`), which the CLI's
/// tests run too. This crate lives in the shim's directory, so the path
/// stays inside the shim's tree.
pub fn shim_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}

/// Where this test binary puts compiled fixtures: one directory per test
/// binary, next to the test binaries in cargo's target directory, reused
/// (and overwritten) by each run. (`CARGO_TARGET_TMPDIR` would be the place,
/// but cargo gives it to integration tests only, not to a library of theirs.)
fn build_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's path");
        let stem = exe
            .file_stem()
            .expect("the test binary has a name")
            .to_string_lossy()
            .into_owned();
        let deps = exe.parent().expect("the test binary is in a directory");
        let dir = deps
            .parent()
            .unwrap_or(deps)
            .join("allocmux-test-fixtures")
            .join(stem);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        dir
    })
}

/// Compiles the shim's fixture `name` with `cc -O2 -pthread` (once per test binary).
pub fn compile_c(name: &str) -> PathBuf {
    compile("cc", name, &["-O2", "-pthread"])
}

/// Compiles the shim's fixture `name` with `c++ -std=c++17 -O2 -pthread`.
pub fn compile_cxx(name: &str) -> PathBuf {
    compile("c++", name, &["-std=c++17", "-O2", "-pthread"])
}

/// Compiles `source` (a relative path names one of the shim's fixtures,
/// see [`shim_fixture`]) with the given compiler and flags, placed after
/// the source so libraries may be among them. Once per test binary: tests
/// asking concurrently for the same build wait for the first one. The
/// program keeps the source's stem as its file name (in a directory of
/// its own for each compiler and flags).
pub fn compile(compiler: &str, source: impl AsRef<Path>, flags: &[&str]) -> PathBuf {
    type Cache = Mutex<HashMap<String, Arc<OnceLock<PathBuf>>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let source = source.as_ref();
    let source = if source.is_relative() {
        shim_fixture(&source.to_string_lossy())
    } else {
        source.to_path_buf()
    };
    let key = format!("{compiler} {} {}", source.display(), flags.join(" "));
    let cell = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key.clone())
        .or_default()
        .clone();
    cell.get_or_init(|| {
        let stem = source
            .file_stem()
            .expect("a source file name")
            .to_string_lossy();
        let dir = build_dir().join(format!("{stem}-{:08x}", fnv(&key) as u32));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        let out = dir.join(&*stem);
        // Build under a private name, then rename: a concurrent run of the
        // same test binary never sees a half-written executable.
        let tmp = out.with_extension(format!("{}.tmp", std::process::id()));
        let mut cmd = Command::new(compiler);
        cmd.arg(&source).arg("-o").arg(&tmp).args(flags);
        scrub(&mut cmd);
        let o = run(&mut cmd, None);
        assert!(
            o.status.success(),
            "compiling {} with {compiler} failed ({}):\n{}",
            source.display(),
            o.status,
            shortened(&o.stderr)
        );
        std::fs::rename(&tmp, &out).unwrap_or_else(|e| panic!("renaming {}: {e}", tmp.display()));
        out
    })
    .clone()
}

/// A short stable hash, to tell builds of one source apart by their flags.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// The C program `source`, written to `dir` as `<name>.c` and built
/// there by `cc <name>.c -o <name> <flags>` (flags after the source, so
/// libraries may be among them; run in `dir`, so `-L.` finds its files).
pub fn c_program(dir: &Path, name: &str, source: &str, flags: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap_or_else(|e| panic!("writing {}: {e}", src.display()));
    let bin = dir.join(name);
    let built = Command::new("cc")
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .args(flags)
        .current_dir(dir)
        .output()
        .expect("cc runs");
    assert!(
        built.status.success(),
        "cc {name}.c {flags:?} failed (-static needs libc.a, from libc6-dev):\n{}",
        shortened(&built.stderr)
    );
    bin
}

/// The C program `source`, statically linked (LD_PRELOAD cannot reach
/// it), built in `dir` as `name`.
pub fn static_program(dir: &Path, name: &str, source: &str) -> PathBuf {
    c_program(dir, name, source, &["-static"])
}
