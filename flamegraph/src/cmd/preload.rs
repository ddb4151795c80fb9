//! `allocmux preload`: prints the environment that runs a program under
//! the shim as `allocmux run` would, one `NAME=VALUE` line each, for a
//! program started by hand (`env $(allocmux preload) ./server`), by a
//! systemd unit (`Environment=`) or by a container (`ENV`).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::allocator::Allocator;
use allocmux_format::settings::{self as env, Level};

use crate::launch::{self, StackRecording};
use crate::shim::Origin;

/// What `allocmux preload` is told.
#[derive(Debug)]
pub struct PreloadOptions {
    /// Allocator the program runs on.
    pub allocator: Allocator,
    /// Where the program serves `/debug/pprof`, if anywhere.
    pub http: Option<String>,
    /// Push OTLP profiles: the URL (or `on`), and the seconds between
    /// pushes if given.
    pub otlp: Option<(String, Option<u64>)>,
    /// How to record call stacks; `None` leaves the shim's default (off,
    /// or sampled when serving).
    pub stacks: Option<StackRecording>,
    /// The profile path template (`%p`: the pid), if profiles are written.
    pub profile: Option<PathBuf>,
    /// How much to record (`None`: the shim's default, exact, or sampled
    /// when serving).
    pub record: Option<Level>,
}

/// Writes the shim to the cache if it is not there, and prints the lines.
pub fn run(o: &PreloadOptions) -> Result<i32> {
    let lines = environment(o)?;
    let mut out = std::io::stdout().lock();
    for (name, value) in &lines {
        writeln!(out, "{name}={value}").context("writing to stdout")?;
    }
    out.flush().context("writing to stdout")?;
    Ok(0)
}

/// The variables, in the order they are printed: `LD_PRELOAD` first, then
/// allocmux's own.
pub fn environment(o: &PreloadOptions) -> Result<Vec<(String, String)>> {
    let backend = o.allocator.backend();
    let mut vars = vec![(env::ALLOCATOR.to_string(), backend.name().to_string())];
    if let Some(http) = &o.http {
        vars.push((env::HTTP.to_string(), http.clone()));
    }
    vars.extend(super::run::otlp_env(o.otlp.as_ref()));
    vars.extend(o.stacks.map(StackRecording::env).unwrap_or_default());
    if let Some(level) = o.record {
        vars.push((env::RECORD.to_string(), level.name().to_string()));
    }
    if let Some(profile) = &o.profile {
        let absolute = std::path::absolute(profile)
            .with_context(|| format!("making {} an absolute path", profile.display()))?;
        vars.push((env::OUTPUT.to_string(), words_safe("-o", absolute)?));
    }
    let (level, mode) = launch::shim_hooks(&vars);
    let shim = crate::shim::locate(backend, level, mode)?;
    if let Origin::Temporary(why) = &shim.origin {
        bail!(
            "cannot keep the shim in the cache ({why}), and a temporary copy would be gone \
             when this command ends; set XDG_CACHE_HOME to a writable directory"
        );
    }
    // An allocator library goes behind the shim (`:`, not a space:
    // `env $(...)` would split there).
    let libraries: Vec<&std::path::Path> = std::iter::once(shim.path.as_path())
        .chain(o.allocator.library())
        .collect();
    let preload = PathBuf::from(launch::preload_value(&libraries));
    vars.insert(
        0,
        ("LD_PRELOAD".to_string(), words_safe("LD_PRELOAD", preload)?),
    );
    Ok(vars)
}

/// A value as text that `env $(allocmux preload)` passes whole: no white
/// space (the shell splits there), valid UTF-8.
fn words_safe(what: &str, value: PathBuf) -> Result<String> {
    let Some(text) = value.to_str() else {
        bail!(
            "{what} would be {}, which is not UTF-8 text",
            value.display()
        );
    };
    if text.chars().any(char::is_whitespace) {
        bail!(
            "{what} would be {text:?}, which has white space that `env $(allocmux preload ...)` \
             would split; choose a path without (for the shim: set XDG_CACHE_HOME)"
        );
    }
    Ok(text.to_string())
}
