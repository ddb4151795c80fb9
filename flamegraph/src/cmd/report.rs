//! `allocmux report`: the summary of saved profiles, with their top call
//! stacks, as a table or JSON, and optionally their memory timelines as a
//! chart.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use allocmux_format::profile::ProcessProfile;

use super::profiles;
use crate::json::{LeaksJson, ReportJson};
use crate::leaks::Leaks;
use crate::output::OutputFile;
use crate::report::Report;
use crate::stacks::{StackSet, Weight};
use crate::symbolize::Symbolizer;

/// What `allocmux report` is told.
#[derive(Debug)]
pub struct ReportOptions {
    /// Profile files written by `allocmux run -o` or by the shim.
    pub profiles: Vec<PathBuf>,
    /// Print JSON instead of the table.
    pub json: bool,
    /// Stacks listed per weight, when the profiles recorded stacks (0: none).
    pub top: usize,
    /// Where to draw live heap bytes and resident memory over time, per
    /// process, as an SVG chart.
    pub plot: Option<PathBuf>,
    /// Where to write the HTML report.
    pub html: Option<PathBuf>,
    /// Overwrite the `plot` and `html` files if they exist.
    pub force: bool,
    /// List the stacks of blocks live at exit.
    pub leaks: bool,
    /// Suppression files (LSan's format) for `leaks`.
    pub suppressions: Vec<PathBuf>,
    /// Leave out the runtimes' start-up blocks ([`crate::suppressions::DEFAULTS`]).
    pub default_suppressions: bool,
}

/// Prints the report (and draws the chart).
pub fn run(o: &ReportOptions) -> Result<i32> {
    // Claimed first, so a taken name fails before any work.
    let inputs: Vec<(&str, &std::path::Path)> = o
        .profiles
        .iter()
        .map(|p| ("profile", p.as_path()))
        .collect();
    crate::output::check_distinct(
        &inputs,
        &[
            ("plot", o.plot.as_deref()),
            ("HTML report", o.html.as_deref()),
        ],
    )?;
    // A bad suppression file is refused before any work too.
    let suppressions = if o.leaks {
        Some(profiles::suppressions(
            &o.suppressions,
            o.default_suppressions,
        )?)
    } else {
        None
    };
    let plot_out = OutputFile::claim_if(o.plot.as_deref(), o.force, "plot")?;
    let html_out = OutputFile::claim_if(o.html.as_deref(), o.force, "HTML report")?;
    let loaded = profiles::load(&o.profiles)?;
    let plot = match &plot_out {
        Some(_) => Some(timeline_chart(
            &loaded,
            &profiles::paths_words(&o.profiles),
        )?),
        None => None,
    };
    if let (Some(out), Some((svg, _))) = (&plot_out, &plot) {
        out.write(svg.as_bytes())?;
    }
    let report = Report::new(loaded.clone(), None);
    let mut sym = Symbolizer::new();
    let set = if o.top == 0 && html_out.is_none() && !o.leaks {
        None
    } else {
        StackSet::build(&loaded, &mut sym).ok()
    };
    let leaks = match (&suppressions, &set) {
        (None, _) => None,
        (Some(s), Some(set)) => Some(Leaks::new(set, s)),
        (Some(_), None) => bail!(
            "{} has no call stacks, so its leaks cannot be listed; record them with {}",
            profiles::paths_words(&o.profiles),
            profiles::RECORD_LEAKS
        ),
    };
    if let Some(out) = &html_out {
        let title = format!(
            "{} — {}",
            profiles::command(&loaded),
            profiles::allocators(&loaded).join(",")
        );
        let data = crate::html::profile_data(title, &loaded, &report, set.as_ref(), Weight::Bytes);
        out.write(crate::html::page(&data).as_bytes())?;
    }
    if o.json {
        let mut doc = ReportJson::from(&report);
        doc.top_stacks = set
            .as_ref()
            .filter(|_| o.top > 0)
            .map(|set| crate::top::to_json(set, o.top));
        doc.advice = set
            .as_ref()
            .and_then(crate::advice::advise)
            .map(|a| crate::json::AdviceJson::from(&a));
        doc.leaks = leaks.as_ref().map(LeaksJson::from);
        std::io::stdout()
            .lock()
            .write_all(crate::json::to_pretty(&doc).as_bytes())
            .context("writing JSON to stdout")?;
    } else {
        let mut out = std::io::stdout().lock();
        report.write_human(&mut out)?;
        if let Some(leaks) = &leaks {
            crate::leak_report::write_human(leaks, &mut out)?;
        }
        if let Some(set) = set.as_ref().filter(|_| o.top > 0) {
            crate::top::write_human(set, o.top, &mut out)?;
            if let Some(a) = crate::advice::advise(set) {
                writeln!(out, "\n  what to change: {}", a.text)?;
            }
        }
    }
    if let Some(out) = &html_out {
        let _ = writeln!(
            std::io::stderr(),
            "  HTML report written to {}",
            out.path().display()
        );
    }
    if let (Some(out), Some((_, note))) = (&plot_out, &plot) {
        let _ = writeln!(
            std::io::stderr(),
            "  {note} written to {}",
            out.path().display()
        );
    }
    Ok(0)
}

/// At most this many processes are drawn by `report --plot` (the largest
/// by peak resident size): more lines and legend entries than this make a
/// chart that nobody can read.
const MAX_PLOTTED: usize = 10;

/// The memory timeline chart of `profiles` for `report --plot`, and a line
/// saying what it shows; an error naming the fix if no process has a
/// timeline.
fn timeline_chart(profiles: &[ProcessProfile], what: &str) -> Result<(String, String)> {
    let with: Vec<&ProcessProfile> = profiles.iter().filter(|p| !p.timeline.is_empty()).collect();
    if with.is_empty() {
        bail!(
            "{what} has no memory timeline (it was written by an allocmux older than \
             timelines); record it again with this allocmux: `allocmux run -o PROFILE -- CMD`, \
             or the shim with ALLOCMUX_OUTPUT set"
        );
    }
    let offsets = crate::plot::run_offsets(&with);
    let mut drawn: Vec<(usize, &ProcessProfile)> = with.iter().copied().enumerate().collect();
    let skipped = drawn.len().saturating_sub(MAX_PLOTTED);
    if skipped > 0 {
        drawn.sort_by_key(|(_, p)| {
            std::cmp::Reverse((p.timeline.peak_rss_bytes(), p.timeline.peak_live_bytes()))
        });
        drawn.truncate(MAX_PLOTTED);
    }
    // Legend in start order.
    drawn.sort_by_key(|&(i, p)| (offsets[i], p.clock_start.mono_ns, p.pid));
    let labels: Vec<String> = drawn
        .iter()
        .map(|(_, p)| crate::plot::process_label(p))
        .collect();
    let named: Vec<crate::plot::NamedTimeline<'_>> = drawn
        .iter()
        .zip(&labels)
        .map(|(&(i, p), name)| crate::plot::NamedTimeline {
            name,
            timeline: &p.timeline,
            offset_ns: offsets[i],
            colour: None,
        })
        .collect();
    let title = format!(
        "{} — {} — memory over time",
        profiles::command(profiles),
        profiles::allocators(profiles).join(",")
    );
    let svg = crate::plot::timelines_svg(&named, &crate::plot::PlotOptions::new(title))?;
    let n = named.len();
    let mut note = format!(
        "memory timeline of {n} process{}",
        if n == 1 { "" } else { "es" }
    );
    if skipped > 0 {
        note += &format!(" (the {n} largest by resident size; {skipped} more not drawn)");
    }
    let untimed = profiles.len() - n - skipped;
    if untimed > 0 {
        note += &format!(" ({untimed} without a timeline)");
    }
    Ok((svg, note))
}
