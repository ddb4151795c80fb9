//! `allocmux flame`: runs a command with call stacks recorded and draws
//! where it allocated as a flamegraph SVG.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;

use crate::allocator::Allocator;
use allocmux_format::profile::StackMode;

use crate::launch::{self, StackRecording};
use crate::output::OutputFile;
use crate::report::ProcessFigures;
use crate::stacks::{StackSet, Weight};
use crate::symbolize::Symbolizer;
use crate::units::shell_words;

/// What `allocmux flame` is told.
#[derive(Debug)]
pub struct FlameOptions {
    /// Allocator the program runs on.
    pub allocator: Allocator,
    /// What the width of a frame shows.
    pub weight: Weight,
    /// How stacks are recorded: sampled, exact, or exact then sampled (off
    /// leaves nothing to draw).
    pub stacks: StackRecording,
    /// The SVG to write, if any.
    pub output: Option<PathBuf>,
    /// The HTML report to write, if any.
    pub html: Option<PathBuf>,
    /// Overwrite the output file if it exists.
    pub force: bool,
    /// The command and its arguments.
    pub command: Vec<String>,
}

/// Runs the command and draws the flamegraph; returns the command's exit
/// status, as a shell would report it.
pub fn run(o: &FlameOptions) -> Result<i32> {
    crate::output::check_distinct(
        &[],
        &[
            ("flamegraph", o.output.as_deref()),
            ("HTML report", o.html.as_deref()),
        ],
    )?;
    let out = OutputFile::claim_if(o.output.as_deref(), o.force, "flamegraph")?;
    let html_out = OutputFile::claim_if(o.html.as_deref(), o.force, "HTML report")?;
    let outcome = launch::in_foreground(
        &o.command,
        o.allocator.clone(),
        o.stacks.env(),
        launch::Output::Inherit,
    )?;
    if let Err(e) = outcome.check_recorded() {
        if outcome.profiles.is_empty() {
            return Err(e.context("cannot draw a flamegraph"));
        }
        crate::error::say(format_args!("{e:#}"));
    }
    let report = outcome.report(&o.command, o.allocator.name());
    // A stderr that cannot take the summary is no reason not to draw.
    let _ = report.write_human(&mut std::io::stderr().lock());
    let mut sym = Symbolizer::new();
    let set = StackSet::build(&outcome.profiles, &mut sym)
        .map_err(|e| anyhow::anyhow!("cannot draw a flamegraph: {e}"))?;
    set.check_measures(o.weight)
        .map_err(|e| anyhow::anyhow!("nothing to draw: {e}"))?;
    let folded = set.folded(o.weight);
    let allocations: u64 = outcome
        .profiles
        .iter()
        .map(|p| p.totals.allocation_calls())
        .sum();
    let unknown = report.processes.iter().any(ProcessFigures::figures_unknown);
    if folded.trim().is_empty() && allocations == 0 && unknown {
        anyhow::bail!(
            "nothing to draw: what `{}` allocated is unknown, not none: it ended before \
             its first periodic write (killed early, or its output cut off)",
            shell_words(&o.command)
        );
    }
    if folded.trim().is_empty() && allocations == 0 {
        anyhow::bail!(
            "nothing to draw: `{}` made no allocation",
            shell_words(&o.command)
        );
    }
    let sampled_only =
        o.stacks.exact_first == 0 && matches!(o.stacks.mode, StackMode::Sample { .. });
    if folded.trim().is_empty() && sampled_only {
        anyhow::bail!(
            "nothing to draw: no allocation was sampled (about one is taken per \
             --sample-bytes bytes requested, 512 KiB unless set); record every \
             allocation with --exact, or sample more often with --sample-bytes N"
        );
    }
    let title = format!("{} — {}", shell_words(&o.command), o.allocator.name());
    if let Some(out) = &out {
        let labels = crate::render::labels(&set, o.weight, title.clone());
        out.write(&crate::render::flamegraph(&folded, &labels)?)?;
    }
    if let Some(html) = &html_out {
        let data =
            crate::html::profile_data(title, &outcome.profiles, &report, Some(&set), o.weight);
        html.write(crate::html::page(&data).as_bytes())?;
    }
    let estimates = if set.estimates(o.weight) {
        ": figures marked ≈ are estimates"
    } else {
        ""
    };
    let mut said = Ok(());
    if let Some(out) = &out {
        said = said.and(writeln!(
            std::io::stderr(),
            "  flamegraph of {} written to {}",
            o.weight.describe(),
            out.path().display(),
        ));
    }
    if let Some(html) = &html_out {
        said = said.and(writeln!(
            std::io::stderr(),
            "  HTML report written to {}",
            html.path().display(),
        ));
    }
    let said = said.and(writeln!(
        std::io::stderr(),
        "  stacks recorded: {}{estimates}",
        set.mode_description(),
    ));
    Ok(crate::error::after_run(
        outcome.exit.shell_status(),
        said.map_err(Into::into),
    ))
}
