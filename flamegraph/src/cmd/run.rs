//! `allocmux run`: runs a command under the profiler and prints what it
//! allocated, optionally saving the profile and a JSON report.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::allocator::Allocator;
use allocmux_format::profile::StackMode;
use allocmux_format::settings::{self as env, Level};

use crate::json::ReportJson;
use crate::launch::{self, StackRecording};
use crate::output::{JsonOut, OutputFile};

/// What `allocmux run` is told.
#[derive(Debug)]
pub struct RunOptions {
    /// Allocator the program runs on.
    pub allocator: Allocator,
    /// Where to save the profile of every process of the run, if anywhere.
    pub profile: Option<PathBuf>,
    /// Where to write the JSON report (`-` for stdout), if anywhere.
    pub json: Option<PathBuf>,
    /// Where to write the HTML report, if anywhere.
    pub html: Option<PathBuf>,
    /// How to record call stacks; `None` leaves the shim's default (off,
    /// or sampled when serving).
    pub stacks: Option<StackRecording>,
    /// Where the program serves `/debug/pprof` while it runs, if anywhere.
    pub http: Option<String>,
    /// How much to record (`None`: the shim's default, exact, or sampled
    /// when serving); at `Off` the program only runs under the allocator
    /// (its forwarder), and `run` says how long it took.
    pub record: Option<Level>,
    /// Overwrite the output files if they exist.
    pub force: bool,
    /// The command and its arguments.
    pub command: Vec<String>,
}

/// Runs the command; returns its exit status, as a shell would report it.
pub fn run(o: &RunOptions) -> Result<i32> {
    crate::output::check_distinct(
        &[],
        &[
            ("profile", o.profile.as_deref()),
            ("HTML report", o.html.as_deref()),
            ("JSON report", o.json.as_deref()),
        ],
    )?;
    if o.record == Some(Level::Off) {
        return run_unrecorded(o);
    }
    let json = o
        .json
        .as_deref()
        .map(|p| JsonOut::claim(p, o.force))
        .transpose()?;
    let profile_out = OutputFile::claim_if(o.profile.as_deref(), o.force, "profile")?;
    let html_out = OutputFile::claim_if(o.html.as_deref(), o.force, "HTML report")?;
    if o.stacks.is_some_and(|s| s.mode != StackMode::Off) && o.profile.is_none() && o.html.is_none()
    {
        crate::error::say(
            "warning: call stacks are recorded but thrown away: pass -o PROFILE to keep \
             them (for report, export and diff), or draw them with `allocmux flame`",
        );
    }
    let mut env = o.stacks.map(StackRecording::env).unwrap_or_default();
    if let Some(http) = &o.http {
        env.push((env::HTTP.to_string(), http.clone()));
    }
    if let Some(level) = o.record {
        env.push((env::RECORD.to_string(), level.name().to_string()));
    }
    // `--json -` owns stdout: the program's goes to stderr.
    let output = match json {
        Some(JsonOut::Stdout) => launch::Output::StdoutToStderr,
        _ => launch::Output::Inherit,
    };
    let outcome = launch::in_foreground(&o.command, o.allocator.clone(), env, output)?;
    let status = outcome.exit.shell_status();
    // The program ran, so `run` exits as it did (as `time` would),
    // whatever becomes of the report.
    Ok(crate::error::after_run(
        status,
        write_report(o, &outcome, json, profile_out, html_out),
    ))
}

/// The summary on stderr, and the profile and JSON report where asked.
fn write_report(
    o: &RunOptions,
    outcome: &launch::Outcome,
    json: Option<JsonOut>,
    profile_out: Option<OutputFile>,
    html_out: Option<OutputFile>,
) -> Result<()> {
    // An empty report or profile would pass for a program that does not
    // allocate, so none is written (the claimed files go with the claims).
    if let Err(e) = outcome.check_recorded() {
        if outcome.profiles.is_empty() {
            return Err(e);
        }
        crate::error::say(format_args!("{e:#}"));
    }
    if let Some(out) = &profile_out {
        out.write(allocmux_format::profile::to_string(&outcome.profiles).as_bytes())?;
    }
    let report = outcome.report(&o.command, o.allocator.name());
    if let Some(json) = json {
        json.write(&ReportJson::from(&report))?;
    }
    if let Some(out) = &html_out {
        let mut sym = crate::symbolize::Symbolizer::new();
        let set = crate::stacks::StackSet::build(&outcome.profiles, &mut sym).ok();
        let title = format!(
            "{} — {}",
            crate::units::shell_words(&o.command),
            o.allocator.name()
        );
        let data = crate::html::profile_data(
            title,
            &outcome.profiles,
            &report,
            set.as_ref(),
            crate::stacks::Weight::Bytes,
        );
        out.write(crate::html::page(&data).as_bytes())?;
    }
    let mut err = std::io::stderr().lock();
    report
        .write_human(&mut err)
        .context("writing the summary")?;
    if let Some(out) = &profile_out {
        writeln!(err, "  profile saved to {}", out.path().display())?;
    }
    if let Some(out) = &html_out {
        writeln!(err, "  HTML report written to {}", out.path().display())?;
    }
    Ok(())
}

/// `run --record off`: the program under the allocator's forwarder (no
/// preload at all under glibc), then what `time` would say.
fn run_unrecorded(o: &RunOptions) -> Result<i32> {
    let outcome = launch::launch(&launch::Launch {
        command: &o.command,
        allocator: o.allocator.clone(),
        record: false,
        output: launch::Output::Inherit,
        input: None,
        env: Vec::new(),
    })?;
    let e = outcome.exit;
    let status = e.shell_status();
    Ok(crate::error::after_run(status, write_times(o, &outcome)))
}

/// What `time` would say of an unrecorded run, on stderr.
fn write_times(o: &RunOptions, outcome: &launch::Outcome) -> Result<()> {
    let e = outcome.exit;
    let how = crate::sys::how_it_ended(&e);
    let mut err = std::io::stderr().lock();
    writeln!(
        err,
        "allocmux: `{}` under {}, nothing recorded, {how}",
        crate::units::shell_words(&o.command),
        o.allocator.name()
    )?;
    writeln!(
        err,
        "  wall {}   CPU {} (user {} + sys {})   max RSS {}",
        crate::units::Dur(outcome.wall_ns),
        crate::units::Dur(e.user_ns + e.sys_ns),
        crate::units::Dur(e.user_ns),
        crate::units::Dur(e.sys_ns),
        crate::units::Bytes(e.max_rss_bytes),
    )?;
    Ok(())
}
