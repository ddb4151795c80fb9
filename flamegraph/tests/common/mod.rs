//! Helpers shared by the CLI's integration tests.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `allocmux` binary of this build, using the shim built from this
/// tree rather than a cached copy.
pub fn allocmux() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_allocmux"));
    c.env("ALLOCMUX_SHIM", allocmux_cli::shim::BUILT_PATH);
    c
}

/// Runs a command to completion.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("allocmux runs")
}

/// Bytes as text, lossily.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The output of a run that must have succeeded.
pub fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// A statically linked program built in `dir` (LD_PRELOAD cannot reach it).
pub fn static_binary(dir: &Path) -> PathBuf {
    static_program(dir, "static", "int main(void) { return 0; }\n")
}

/// The C program `source`, statically linked, built in `dir` as `name`.
pub fn static_program(dir: &Path, name: &str, source: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let bin = dir.join(name);
    let built = Command::new("cc")
        .args(["-static", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("cc runs");
    assert!(built.success(), "cc -static needs libc.a (libc6-dev)");
    bin
}

/// Parses an SVG document (inferno's have a DTD), failing the test if it
/// is not well-formed XML.
pub fn parse_svg(svg: &str) -> roxmltree::Document<'_> {
    roxmltree::Document::parse_with_options(
        svg,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("the SVG is not XML: {e}"))
}

/// The `allocmux` binary of this build with its embedded shim, as an
/// installed one runs: no `ALLOCMUX_SHIM`, and the cache directory
/// taken from `XDG_CACHE_HOME` or `HOME` as the test sets them.
pub fn allocmux_embedded() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_allocmux"));
    c.env_remove("ALLOCMUX_SHIM");
    c
}
