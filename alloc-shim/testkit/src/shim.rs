//! The shim built from this tree, and programs run under it.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use allocmux_format::Backend;
use allocmux_format::direct::DirectTable;
use allocmux_format::profile::ProcessProfile;
use allocmux_format::settings as env;

use crate::process::{run, scrub, set_on};
use crate::profiles::read_profiles;

/// The allocator library the tests preload after the shim for the `next`
/// backend (`allocmux_format::Backend::Next`): Debian's tcmalloc.
pub const NEXT_LIBRARY: &str = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4";

/// [`NEXT_LIBRARY`], if installed. Its absence fails the test under CI
/// (which installs `libtcmalloc-minimal4`); elsewhere the caller skips.
pub fn next_library() -> Option<&'static Path> {
    let path = Path::new(NEXT_LIBRARY);
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{NEXT_LIBRARY} is not installed: install the `libtcmalloc-minimal4` package (CI must run every test)"
    );
    eprintln!("skipping: {NEXT_LIBRARY} not installed");
    None
}

/// Every built-in backend the shim can forward to.
pub const BACKENDS: [&str; 3] = ["system", "jemalloc", "mimalloc"];

/// The freshly built shim (the CLI's build script builds it from this tree),
/// as built: the universal library, whose exports jump through the table in
/// force. Tests that preload it by hand test it.
pub fn shim() -> &'static str {
    allocmux_cli::shim::BUILT_PATH
}

/// The library `allocmux` preloads for a run with `backend` and the stack
/// settings in `cmd`'s environment (after [`scrub`], the variables it sets
/// are all there are): a direct shim made from [`shim`] where the backend
/// and mode have one, else [`shim`] itself. Direct shims are written next
/// to it, once per content.
pub fn shim_for(cmd: &Command, backend: &str) -> PathBuf {
    let backend = Backend::from_name(backend.as_bytes()).unwrap_or(Backend::System);
    let var = |name: &str| set_on(cmd, name).map(|v| v.as_bytes());
    let (level, mode) = {
        let settings = env::Settings::from_env(env::Reader::Shim, var);
        (settings.level, settings.hooks_mode())
    };
    let Some(table) = DirectTable::serving(backend, level, mode) else {
        return PathBuf::from(shim());
    };
    static WRITTEN: Mutex<Vec<(u8, PathBuf)>> = Mutex::new(Vec::new());
    let mut written = WRITTEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = written.iter().find(|(code, _)| *code == table.code) {
        return path.clone();
    }
    let (bytes, name) =
        allocmux_cli::shim::library(backend, level, mode).expect("making a direct shim");
    let dir = Path::new(shim())
        .parent()
        .expect("the shim is in a directory");
    let path = allocmux_cli::shim::extract(dir, &bytes, &name).expect("writing a direct shim");
    written.push((table.code, path.clone()));
    path
}

/// The forwarder `allocmux` preloads for a run that records nothing under
/// `backend` (none under glibc), written next to the shim.
pub fn forwarder_for(backend: &str) -> Option<PathBuf> {
    let backend = Backend::from_name(backend.as_bytes()).expect("a backend's name");
    let (bytes, name) =
        allocmux_cli::shim::forwarder_library(backend).expect("making a forwarder")?;
    let dir = Path::new(shim())
        .parent()
        .expect("the shim is in a directory");
    Some(allocmux_cli::shim::extract(dir, &bytes, &name).expect("writing a forwarder"))
}

/// Scrubs the environment, then preloads the shim `allocmux` would for
/// `backend` and the stack settings already set on `cmd` ([`shim_for`]: set
/// `ALLOCMUX_STACKS`, `ALLOCMUX_SAMPLE_BYTES` and `ALLOCMUX_HTTP` first),
/// writing profiles to `output` (a template: `%p` becomes the pid).
pub fn preload<'a>(cmd: &'a mut Command, backend: &str, output: Option<&Path>) -> &'a mut Command {
    scrub(cmd).env("ALLOCMUX_ALLOCATOR", backend);
    let library = shim_for(cmd, backend);
    if backend == Backend::Next.name() {
        let next = next_library().expect("the next backend's tests check for its library first");
        let mut both = library.into_os_string();
        both.push(" ");
        both.push(next);
        cmd.env("LD_PRELOAD", both);
    } else {
        cmd.env("LD_PRELOAD", library);
    }
    if let Some(output) = output {
        cmd.env("ALLOCMUX_OUTPUT", output);
    }
    cmd
}

/// Panics if `cmd` preloads a direct shim that is not the one [`shim_for`]
/// picks for its environment now: its stack settings were changed after
/// [`preload`], and the run would test another mode than the test asks for
/// (a direct shim's mode is its table's, whatever the environment says).
/// A forwarder ([`forwarder_for`]) records in no mode, so any goes.
pub fn check_preload(cmd: &Command) {
    let var = |name: &str| set_on(cmd, name).map(|v| v.to_string_lossy().into_owned());
    let Some(preloaded) = var("LD_PRELOAD") else {
        return;
    };
    let direct = Path::new(&preloaded).file_name().is_some_and(|n| {
        let n = n.to_string_lossy();
        n.starts_with("liballocmux_shim-") && !n.contains("_forward-")
    });
    if !direct {
        return;
    }
    let backend = var("ALLOCMUX_ALLOCATOR").unwrap_or_default();
    let picked = shim_for(cmd, &backend);
    assert_eq!(
        Path::new(&preloaded),
        picked,
        "the command preloads a direct shim for another mode than its environment asks for: \
         set the stack variables before `preload`"
    );
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
    for (k, v) in env {
        cmd.env(k, v);
    }
    preload(cmd, backend, Some(&dir.path().join("%p.prof")));
    // `env` over what `preload` set (a test may name its own output).
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(cmd, input);
    let profiles = read_profiles(dir.path());
    (out, profiles)
}
