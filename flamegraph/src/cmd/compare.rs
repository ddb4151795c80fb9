//! `allocmux compare`: the command around [`crate::compare`], which runs
//! and summarises the comparison; this module claims the outputs and
//! writes the table, the chart and the JSON.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::allocator::Allocator;
use crate::compare;
use crate::json::CompareJson;
use crate::output::{JsonOut, OutputFile};
use crate::units::shell_words;

/// What `allocmux compare` is told.
#[derive(Debug)]
pub struct CompareOptions {
    /// The allocators; `system` (when listed) is the baseline, else the
    /// first.
    pub allocators: Vec<Allocator>,
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
    /// Where to write the comparison as an HTML page.
    pub html: Option<PathBuf>,
    /// Where to keep the programs' output (discarded otherwise).
    pub log: Option<PathBuf>,
    /// The file every run reads as its stdin (`-`: this process's stdin,
    /// read once and fed to every run).
    pub input: Option<PathBuf>,
    /// Overwrite the output files if they exist.
    pub force: bool,
    /// The command and its arguments.
    pub command: Vec<String>,
}

/// Runs the comparison and writes what it found.
pub fn run(o: &CompareOptions) -> Result<i32> {
    // The target first: a refused one leaves no output file (nor an empty log).
    let program = crate::target::resolve(&o.command[0])?;
    let inspected = crate::target::inspect(&program)?;
    let in_code = inspected.as_ref().map(|p| p.in_code).unwrap_or_default();
    if let Some(p) = &inspected
        && !in_code.switchable
    {
        crate::target::check_dynamic(p)?;
    }
    // A program that switches in code without counting is timed alone.
    let unrecorded = in_code
        .unrecordable(&program)
        .map(|why| format!("{why} (allocmux::Counting around it would)"));
    crate::output::check_distinct(
        &o.input
            .iter()
            .map(|p| ("input", p.as_path()))
            .collect::<Vec<_>>(),
        &[
            ("JSON report", o.json.as_deref()),
            ("chart", o.plot.as_deref()),
            ("HTML report", o.html.as_deref()),
            ("log", o.log.as_deref()),
        ],
    )?;
    let json = o
        .json
        .as_deref()
        .map(|p| JsonOut::claim(p, o.force))
        .transpose()?;
    let plot = OutputFile::claim_if(o.plot.as_deref(), o.force, "chart")?;
    let html = OutputFile::claim_if(o.html.as_deref(), o.force, "HTML report")?;
    let input = Input::choose(o.input.as_deref())?;
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
        input: input.path(),
        env: vec![],
        unrecorded,
    })?;
    let summary = compare::Summary::new(&cmp);
    // The table goes to stdout, unless the JSON does.
    let mut table: Box<dyn Write> = if matches!(json, Some(JsonOut::Stdout)) {
        Box::new(std::io::stderr().lock())
    } else {
        Box::new(std::io::stdout().lock())
    };
    compare::write_human(&cmp, &summary, &mut table)?;
    let title = format!("allocmux compare: {}", shell_words(&o.command));
    if let Some(p) = &plot {
        p.write(compare::plot::svg(&cmp, &summary, &title)?.as_bytes())?;
        writeln!(table, "  chart written to {}", p.path().display())?;
    }
    if let Some(p) = &html {
        let mut text = Vec::new();
        compare::write_human(&cmp, &summary, &mut text)?;
        let data = crate::html::compare_data(
            title.clone(),
            summary.verdict_line(cmp.level),
            CompareJson::new(&cmp, &summary),
            String::from_utf8_lossy(&text).into_owned(),
            compare::plot::svg(&cmp, &summary, &title)?,
        );
        p.write(crate::html::page(&data).as_bytes())?;
        writeln!(table, "  HTML report written to {}", p.path().display())?;
    }
    drop(table);
    if let Some(json) = json {
        json.write(&CompareJson::new(&cmp, &summary))?;
    }
    Ok(0)
}

/// What every run of the comparison reads as its stdin.
enum Input {
    /// Nothing (`/dev/null`).
    Empty,
    /// A file named by `--input`.
    File(PathBuf),
    /// This process's stdin, read once into a temporary file (`--input -`).
    Saved(tempfile::NamedTempFile),
}

impl Input {
    /// The input `--input` names; without one, refuses a regular file on
    /// stdin (`compare -- sort < nums.txt`, whose runs would all read
    /// nothing) and warns of a pipe, which may be an empty one a CI
    /// runner gives.
    fn choose(input: Option<&Path>) -> Result<Input> {
        match input {
            Some(p) if p == Path::new("-") => {
                let mut saved = tempfile::NamedTempFile::with_prefix("allocmux-input-")
                    .context("creating a temporary file for stdin")?;
                std::io::copy(&mut std::io::stdin().lock(), saved.as_file_mut())
                    .context("reading stdin for --input -")?;
                Ok(Input::Saved(saved))
            }
            Some(p) => {
                let m = std::fs::metadata(p)
                    .with_context(|| format!("cannot read the input {}", p.display()))?;
                if m.is_dir() {
                    bail!("the input {} is a directory; name a file", p.display());
                }
                std::fs::File::open(p)
                    .with_context(|| format!("cannot read the input {}", p.display()))?;
                Ok(Input::File(p.to_path_buf()))
            }
            None => {
                match crate::sys::stdin_kind() {
                    crate::sys::StdinKind::File { len } if len > 0 => bail!(
                        "stdin is a file, which compare does not pass on (every run reads an \
                         empty stdin); pass it with --input FILE"
                    ),
                    crate::sys::StdinKind::Pipe => crate::error::say(
                        "warning: stdin is a pipe, which compare does not pass on: every run \
                         reads an empty stdin (pass --input - to feed what it holds to every run)",
                    ),
                    _ => {}
                }
                Ok(Input::Empty)
            }
        }
    }

    /// The file the runs read, if any.
    fn path(&self) -> Option<PathBuf> {
        match self {
            Input::Empty => None,
            Input::File(p) => Some(p.clone()),
            Input::Saved(f) => Some(f.path().to_path_buf()),
        }
    }
}
