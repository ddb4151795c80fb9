//! The shim built from this tree, and programs run under it.

use std::path::Path;
use std::process::{Command, Output};

use allocmux::profile::ProcessProfile;

use crate::process::{run, scrub};
use crate::profiles::read_profiles;

/// Every backend the shim can forward to.
pub const BACKENDS: [&str; 3] = ["system", "jemalloc", "mimalloc"];

/// The freshly built shim (the CLI's build script builds it from this tree).
pub fn shim() -> &'static str {
    allocmux_cli::shim::BUILT_PATH
}

/// Scrubs the environment, then preloads the shim with `backend`, writing
/// profiles to `output` (a template: `%p` becomes the pid).
pub fn preload<'a>(cmd: &'a mut Command, backend: &str, output: Option<&Path>) -> &'a mut Command {
    scrub(cmd)
        .env("LD_PRELOAD", shim())
        .env("ALLOCMUX_ALLOCATOR", backend);
    if let Some(output) = output {
        cmd.env("ALLOCMUX_OUTPUT", output);
    }
    cmd
}

/// Runs a command without the shim (scrubbed environment): the reference.
pub fn run_reference(cmd: &mut Command, input: Option<&[u8]>) -> Output {
    run(scrub(cmd), input)
}

/// Runs a command under the shim with `backend`, profiles going to a fresh
/// directory as `<dir>/%p.prof`, plus `env`; returns the output and every
/// profile written.
pub fn run_under(
    backend: &str,
    cmd: &mut Command,
    env: &[(&str, &str)],
) -> (Output, Vec<ProcessProfile>) {
    let (out, files) = run_under_with(backend, cmd, env, None);
    (out, files.into_iter().map(|(_, p)| p).collect())
}

/// [`run_under`] with stdin input, returning each profile with its file name.
pub fn run_under_with(
    backend: &str,
    cmd: &mut Command,
    env: &[(&str, &str)],
    input: Option<&[u8]>,
) -> (Output, Vec<(String, ProcessProfile)>) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    preload(cmd, backend, Some(&dir.path().join("%p.prof")));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(cmd, input);
    let profiles = read_profiles(dir.path());
    (out, profiles)
}
