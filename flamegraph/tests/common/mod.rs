//! Helpers shared by the CLI's integration tests: the `allocmux` binary
//! of this build, and those of `allocmux-testkit` the tests use.
#![allow(dead_code, unused_imports)] // each test binary uses its own subset

use std::process::{Command, Output};

pub use allocmux_testkit::{
    c_program, compile, ok, ok_as, require, shim, shim_fixture, shim_for, static_program, text,
};
use std::path::{Path, PathBuf};

/// The `allocmux` binary of this build, using the shim built from this
/// tree rather than a cached copy.
pub fn allocmux() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_allocmux"));
    c.env("ALLOCMUX_SHIM", shim());
    c
}

/// The `allocmux` binary of this build with its embedded shim, as an
/// installed one runs: no `ALLOCMUX_SHIM`, and the cache directory
/// taken from `XDG_CACHE_HOME` or `HOME` as the test sets them.
pub fn allocmux_embedded() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_allocmux"));
    c.env_remove("ALLOCMUX_SHIM");
    c
}

/// Runs a command to completion. No timeout, unlike the testkit's `run`:
/// the install test's `cargo install` takes minutes.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("allocmux runs")
}

/// Parses a command's JSON output, failing the test with the text if it
/// is not JSON.
pub fn json_of(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(bytes)))
}

/// A statically linked program built in `dir` (LD_PRELOAD cannot reach it).
pub fn static_binary(dir: &Path) -> PathBuf {
    static_program(dir, "static", "int main(void) { return 0; }\n")
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
