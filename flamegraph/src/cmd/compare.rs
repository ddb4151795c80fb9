//! `allocmux compare`: the command around [`crate::compare`], which runs
//! and summarises the comparison; this module claims the outputs and
//! writes the table, the chart and the JSON.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;

use crate::compare;
use crate::json::CompareJson;
use crate::output::{JsonOut, OutputFile};
use crate::report::shell_words;
use allocmux::Backend;

/// What `allocmux compare` is told.
#[derive(Debug)]
pub struct CompareOptions {
    /// The allocators; `system` (when listed) is the baseline, else the
    /// first.
    pub allocators: Vec<Backend>,
    /// Measured rounds (the most, with `stop_early`); `None` chooses from
    /// how long the first round takes.
    pub runs: Option<usize>,
    /// Unmeasured rounds first.
    pub warmup: usize,
    /// Stop once one allocator is clearly fastest.
    pub stop_early: bool,
    /// Where to write every run and the summary as JSON (`-` for stdout).
    pub json: Option<PathBuf>,
    /// Where to draw the comparison as an SVG chart.
    pub plot: Option<PathBuf>,
    /// Where to keep the programs' output (discarded otherwise).
    pub log: Option<PathBuf>,
    /// Overwrite the output files if they exist.
    pub force: bool,
    /// The command and its arguments.
    pub command: Vec<String>,
}

/// Runs the comparison and writes what it found.
pub fn run(o: &CompareOptions) -> Result<i32> {
    // The target first: a refused one leaves no output file (nor an empty log).
    let program = crate::target::resolve(&o.command[0])?;
    crate::target::check_preloadable(&program)?;
    let json = o
        .json
        .as_deref()
        .map(|p| JsonOut::claim(p, o.force))
        .transpose()?;
    let plot = o
        .plot
        .as_deref()
        .map(|p| OutputFile::claim(p, o.force, "chart"))
        .transpose()?;
    let log = match &o.log {
        Some(p) => Some(OutputFile::claim(p, o.force, "log")?.into_file()?),
        None => None,
    };
    let cmp = compare::run(compare::Options {
        command: o.command.clone(),
        allocators: o.allocators.clone(),
        rounds: o.runs,
        warmup: o.warmup,
        stop_early: o.stop_early,
        log,
        env: vec![],
    })?;
    let summary = compare::Summary::new(&cmp);
    // The table goes to stdout, unless the JSON does.
    let mut table: Box<dyn Write> = if matches!(json, Some(JsonOut::Stdout)) {
        Box::new(std::io::stderr().lock())
    } else {
        Box::new(std::io::stdout().lock())
    };
    compare::write_human(&cmp, &summary, &mut table)?;
    if let Some(p) = &plot {
        let title = format!("allocmux compare: {}", shell_words(&o.command));
        p.write(compare::plot::svg(&cmp, &summary, &title)?.as_bytes())?;
        writeln!(table, "  chart written to {}", p.path().display())?;
    }
    drop(table);
    if let Some(json) = json {
        json.write(&CompareJson::new(&cmp, &summary))?;
    }
    Ok(0)
}
