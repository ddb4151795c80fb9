//! Reading saved profiles, for the commands that work on them (`report`,
//! `export`, `diff`), and suppression files (`report --leaks`, `run
//! --limit leaked`).

use std::fs;
use std::path::PathBuf;

use anyhow::{Context, Result};

use allocmux_format::profile::ProcessProfile;

use crate::stacks::StackSet;
use crate::suppressions::{Origin, Suppressions};
use crate::symbolize::Symbolizer;
use crate::units::shell_words;

/// Reads profile files, every process of each.
pub(super) fn load(paths: &[PathBuf]) -> Result<Vec<ProcessProfile>> {
    let mut profiles = Vec::new();
    for path in paths {
        let text =
            fs::read(path).with_context(|| format!("cannot read profile {}", path.display()))?;
        let text = String::from_utf8(text).map_err(|_| {
            anyhow::anyhow!("{} is not an allocmux profile (not text)", path.display())
        })?;
        let mut p = allocmux_format::profile::parse(&text)
            .with_context(|| format!("cannot read profile {}", path.display()))?;
        profiles.append(&mut p);
    }
    Ok(profiles)
}

/// Symbolized stacks of `profiles`, or an error naming `what` if none
/// recorded stacks.
pub(super) fn stack_set<'a>(
    profiles: &'a [ProcessProfile],
    sym: &mut Symbolizer,
    what: &str,
) -> Result<StackSet<'a>> {
    StackSet::build(profiles, sym).map_err(|_| {
        anyhow::anyhow!(
            "{what} has no call stacks; record a profile with them with \
             `allocmux run --stacks sample -o PROFILE -- CMD`"
        )
    })
}

/// The command of the first process that has one (the run's main
/// process: profiles are in start order), for titles.
pub(super) fn command(profiles: &[ProcessProfile]) -> String {
    profiles
        .iter()
        .min_by_key(|p| (p.clock_start.mono_ns, p.pid))
        .filter(|p| !p.argv.is_empty())
        .map_or_else(|| "allocmux profile".to_string(), |p| shell_words(&p.argv))
}

/// The profiles' paths as a shell would take them back, for messages.
pub(super) fn paths_words(paths: &[PathBuf]) -> String {
    let words: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    shell_words(&words)
}

/// The allocators `profiles` ran on, sorted, without repeats.
pub(super) fn allocators(profiles: &[ProcessProfile]) -> Vec<&str> {
    let mut allocators: Vec<&str> = profiles.iter().map(|p| p.allocator.as_str()).collect();
    allocators.sort_unstable();
    allocators.dedup();
    allocators
}

/// The suppressions in use: the defaults if `defaults`, then each file.
/// A file that is not a suppression file is a usage error (status 2),
/// naming the line.
pub(super) fn suppressions(files: &[PathBuf], defaults: bool) -> Result<Suppressions> {
    let mut s = Suppressions::new(defaults);
    for path in files {
        let text = fs::read_to_string(path)
            .with_context(|| format!("cannot read suppressions {}", path.display()))?;
        let patterns = crate::suppressions::parse(&text).map_err(|e| {
            crate::error::usage(format_args!("suppressions {}: {e}", path.display()))
        })?;
        s.add(Origin::File(path.display().to_string()), patterns);
    }
    Ok(s)
}

/// How to record a profile whose leaks can be listed.
pub(super) const RECORD_LEAKS: &str = "`allocmux run --stacks exact -o PROFILE -- CMD`";
