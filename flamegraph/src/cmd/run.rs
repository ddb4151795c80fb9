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
use crate::leaks::Leaks;
use crate::limits::{EXCEEDED_STATUS, Limit, LimitKey};
use crate::output::{JsonOut, OutputFile};
use crate::suppressions::Suppressions;

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
    /// Push OTLP profiles: the URL (or `on`), and the seconds between
    /// pushes if given.
    pub otlp: Option<(String, Option<u64>)>,
    /// How much to record (`None`: the shim's default, exact, or sampled
    /// when serving); at `Off` the program only runs under the allocator
    /// (its forwarder), and `run` says how long it took.
    pub record: Option<Level>,
    /// Overwrite the output files if they exist.
    pub force: bool,
    /// Limits on the run's figures (`--limit`): when the program succeeds
    /// and one is exceeded, `run` exits with
    /// [`EXCEEDED_STATUS`](crate::limits::EXCEEDED_STATUS).
    pub limits: Vec<Limit>,
    /// Suppression files for the `leaked` limit.
    pub suppressions: Vec<PathBuf>,
    /// Leave out the runtimes' start-up blocks from `leaked`.
    pub default_suppressions: bool,
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
    let (stacks, record) = with_limits(o)?;
    // Read before the program runs, so that a bad file stops it.
    let suppressions = if o.limits.is_empty() {
        None
    } else {
        Some(super::profiles::suppressions(
            &o.suppressions,
            o.default_suppressions,
        )?)
    };
    let json = o
        .json
        .as_deref()
        .map(|p| JsonOut::claim(p, o.force))
        .transpose()?;
    let profile_out = OutputFile::claim_if(o.profile.as_deref(), o.force, "profile")?;
    let html_out = OutputFile::claim_if(o.html.as_deref(), o.force, "HTML report")?;
    if o.stacks.is_some_and(|s| s.mode != StackMode::Off)
        && o.profile.is_none()
        && o.html.is_none()
        && o.limits.is_empty()
        && o.http.is_none()
        && o.otlp.is_none()
    {
        crate::error::say(
            "warning: call stacks are recorded but thrown away: pass -o PROFILE to keep \
             them (for report, export and diff), or draw them with `allocmux flame`",
        );
    }
    let mut env = stacks.map(StackRecording::env).unwrap_or_default();
    if let Some(http) = &o.http {
        env.push((env::HTTP.to_string(), http.clone()));
    }
    env.extend(otlp_env(o.otlp.as_ref()));
    if let Some(level) = record {
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
    // whatever becomes of the report, unless it succeeded and a limit
    // says otherwise.
    let written = write_report(o, &outcome, json, profile_out, html_out);
    let Some(suppressions) = suppressions else {
        return Ok(crate::error::after_run(status, written));
    };
    if status != 0 {
        crate::error::say(format_args!(
            "limits not judged: the program failed ({})",
            crate::sys::how_it_ended(&outcome.exit)
        ));
        return Ok(crate::error::after_run(status, written));
    }
    // The report's own trouble is said, and the verdict decides.
    let _ = crate::error::after_run(status, written);
    match judge_limits(o, &outcome, &suppressions) {
        Ok(judged) => Ok(judged),
        Err(e) => {
            crate::error::say(format_args!("{e:#}"));
            Ok(1)
        }
    }
}

/// The stack recording and level a run with `o.limits` needs: every
/// stack when `leaked` is limited (unless `--stacks` says how), and exact
/// counts; a usage error for options that cannot judge them.
fn with_limits(o: &RunOptions) -> Result<(Option<StackRecording>, Option<Level>)> {
    if o.limits.is_empty() {
        return Ok((o.stacks, o.record));
    }
    if o.record == Some(Level::Sampled) {
        return Err(crate::error::usage(
            "--limit judges counted figures, not the estimates of --record sampled: \
             leave --record out, or use --record exact",
        ));
    }
    let mut stacks = o.stacks;
    if o.limits.iter().any(|l| l.key.needs_exact_stacks()) {
        match stacks.map(|s| (s.mode, s.exact_first)) {
            None => stacks = Some(StackRecording::only(StackMode::Exact)),
            Some((StackMode::Exact, _)) => {}
            Some(_) => {
                return Err(crate::error::usage(
                    "--limit leaked needs every stack, to apply the suppressions to each \
                     block (a sample would judge an estimate): leave --stacks out (every \
                     stack is then recorded) or use --stacks exact",
                ));
            }
        }
    }
    // Exact counts even with --http, whose default level is sampled.
    Ok((stacks, Some(Level::Exact)))
}

/// The run's figures against `o.limits`, said on stderr; the status `run`
/// ends with: 0 within them, [`EXCEEDED_STATUS`] over any.
fn judge_limits(
    o: &RunOptions,
    outcome: &launch::Outcome,
    suppressions: &Suppressions,
) -> Result<i32> {
    outcome.check_recorded().context("limits not judged")?;
    let report = outcome.report(&o.command, o.allocator.name());
    let total = report.total();
    let needs_stacks = o.limits.iter().any(|l| l.key == LimitKey::Leaked);
    let mut sym = crate::symbolize::Symbolizer::new();
    let mut set = if needs_stacks {
        crate::stacks::StackSet::build(&outcome.profiles, &mut sym).ok()
    } else {
        None
    };
    let leaks = set.as_ref().map(|set| Leaks::new(set, suppressions));
    let judged = crate::limits::judge(&o.limits, &total, leaks.as_ref())?;
    let exceeded = judged.iter().any(|j| j.exceeded());
    if exceeded && set.is_none() {
        set = crate::stacks::StackSet::build(&outcome.profiles, &mut sym).ok();
    }
    let mut err = std::io::stderr().lock();
    // A closed stderr changes nothing of the verdict.
    let _ = crate::limit_report::write_human(&judged, set.as_ref(), leaks.as_ref(), &mut err);
    Ok(if exceeded { EXCEEDED_STATUS } else { 0 })
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

/// The shim's variables for `--otlp` and `--otlp-interval`.
pub fn otlp_env(otlp: Option<&(String, Option<u64>)>) -> Vec<(String, String)> {
    let Some((url, interval)) = otlp else {
        return Vec::new();
    };
    let mut vars = vec![(env::OTLP.to_string(), url.clone())];
    if let Some(s) = interval {
        vars.push((env::OTLP_INTERVAL.to_string(), s.to_string()));
    }
    vars
}
