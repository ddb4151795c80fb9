//! Helpers shared by the CLI's integration tests.
#![allow(dead_code)] // each test binary uses its own subset

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

/// The `allocmux` binary of this build with its embedded shim, as an
/// installed one runs: no `ALLOCMUX_SHIM`, and the cache directory
/// taken from `XDG_CACHE_HOME` or `HOME` as the test sets them.
pub fn allocmux_embedded() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_allocmux"));
    c.env_remove("ALLOCMUX_SHIM");
    c
}
