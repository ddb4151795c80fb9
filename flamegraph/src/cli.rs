//! Command-line parsing and the subcommands.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

use allocmux::profile::ProcessProfile;

use crate::export::Format;
use crate::launch::{self, Allocator, Launch};
use crate::render::Labels;
use crate::report::{Report, shell_words};
use crate::stacks::{StackSet, Weight};
use crate::symbolize::Symbolizer;

/// allocmux: how much a program allocates, how long it spends in the
/// allocator, and which allocator suits it.
#[derive(Debug, Parser)]
#[command(name = "allocmux", version, about, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run a command under the profiler and print what it allocated (on stderr, after it ends).
    Run(RunArgs),
    /// Run a command under each allocator, interleaved, and say which is faster, with intervals.
    Compare(CompareArgs),
    /// Run a command with call stacks recorded and draw where it allocated as a flamegraph SVG.
    Flame(FlameArgs),
    /// Print the summary of saved profiles, with their top call stacks.
    Report(ReportArgs),
    /// Write the call stacks of saved profiles as folded stacks, pprof or JSON.
    Export(ExportArgs),
    /// Draw a differential flamegraph of two saved profiles (red: grew, blue: shrank).
    Diff(DiffArgs),
    /// Run a bundled allocation-heavy workload under each allocator and compare.
    Demo(DemoArgs),
    /// Run a bundled workload (used by `demo` and the tests).
    #[command(hide = true, name = "__workload")]
    Workload { name: String, size: Option<u64> },
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Allocator the program runs on.
    #[arg(short, long, value_enum, default_value_t = Allocator::System)]
    allocator: Allocator,
    /// Also save the profile of every process of the run in this file (for `allocmux report`).
    #[arg(short, long, value_name = "PROFILE")]
    output: Option<PathBuf>,
    /// Write the report as JSON to FILE (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Record the call stack of allocations: none, a sample weighted by bytes, or every one.
    #[arg(long, value_enum, value_name = "MODE")]
    stacks: Option<StacksArg>,
    /// Mean bytes between two sampled stacks (implies --stacks sample).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(1..))]
    sample_bytes: Option<u64>,
    /// Overwrite the output files if they exist.
    #[arg(long)]
    force: bool,
    /// The command to run, after `--`.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<String>,
}

/// How the shim records call stacks (`ALLOCMUX_STACKS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum StacksArg {
    /// No stacks.
    Off,
    /// A sample of allocations, one per --sample-bytes allocated on average, counts scaled up.
    Sample,
    /// Every allocation's stack.
    Exact,
}

impl StacksArg {
    fn name(self) -> &'static str {
        match self {
            StacksArg::Off => "off",
            StacksArg::Sample => "sample",
            StacksArg::Exact => "exact",
        }
    }
}

/// The shim's stack settings as environment variables.
fn stack_env(stacks: StacksArg, sample_bytes: Option<u64>) -> Result<Vec<(String, String)>> {
    let mut env = vec![("ALLOCMUX_STACKS".to_string(), stacks.name().to_string())];
    if let Some(n) = sample_bytes {
        if stacks != StacksArg::Sample {
            bail!(
                "--sample-bytes applies to --stacks sample, not --stacks {}",
                stacks.name()
            );
        }
        env.push(("ALLOCMUX_SAMPLE_BYTES".to_string(), n.to_string()));
    }
    Ok(env)
}

#[derive(Debug, clap::Args)]
struct CompareArgs {
    /// Allocators to compare, comma-separated; `system` (when listed) is the baseline of the
    /// ratios, else the first.
    #[arg(
        short,
        long = "allocators",
        value_enum,
        value_delimiter = ',',
        default_value = "system,jemalloc,mimalloc"
    )]
    allocators: Vec<Allocator>,
    /// Measured rounds (each runs every allocator once); the most with --stop-early
    /// [default: as many as fit in about a minute, from 6 to 10]
    #[arg(short = 'n', long, value_name = "RUNS",
          allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(1..=1000))]
    runs: Option<u64>,
    /// Unmeasured rounds first (page cache, CPU frequency, the shim's cache).
    #[arg(long, value_name = "N", default_value_t = 1,
          allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(0..=100))]
    warmup: u64,
    /// Stop before RUNS rounds once one allocator is clearly fastest (the intervals are then
    /// adjusted for the repeated looks).
    #[arg(long)]
    stop_early: bool,
    /// Write every run and the summary as JSON to FILE (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Draw the comparison (time and peak memory per allocator) as an SVG chart.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Keep the programs' output (hidden otherwise) in FILE.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Overwrite the output files if they exist.
    #[arg(long)]
    force: bool,
    /// The command to run, after `--`.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(Debug, clap::Args)]
struct FlameArgs {
    /// Allocator the program runs on.
    #[arg(short, long, value_enum, default_value_t = Allocator::System)]
    allocator: Allocator,
    /// What the width of a frame shows.
    #[arg(long, value_enum, default_value_t = Weight::Bytes)]
    weight: Weight,
    /// Record every allocation's stack (same as --stacks exact).
    #[arg(long, conflicts_with = "stacks")]
    exact: bool,
    /// How to record stacks: a sample weighted by bytes (cheap, scaled estimates) or every allocation.
    #[arg(long, value_enum, value_name = "MODE")]
    stacks: Option<FlameStacks>,
    /// Mean bytes between two sampled stacks (the shim's default is 512 KiB).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(1..))]
    sample_bytes: Option<u64>,
    /// The SVG to write.
    #[arg(short, long, value_name = "FILE.svg", default_value = "allocmux.svg")]
    output: PathBuf,
    /// Overwrite the output file if it exists.
    #[arg(long)]
    force: bool,
    /// The command to run, after `--`.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Stack recording for `flame` (off would leave nothing to draw).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum FlameStacks {
    /// A sample of allocations, one per --sample-bytes allocated on average, counts scaled up.
    Sample,
    /// Every allocation's stack.
    Exact,
}

#[derive(Debug, clap::Args)]
struct ReportArgs {
    /// Profile files written by `allocmux run -o` or by the shim (ALLOCMUX_OUTPUT).
    #[arg(required = true, value_name = "PROFILE")]
    profiles: Vec<PathBuf>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Stacks listed per weight, when the profiles recorded stacks (0: none).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 5,
        allow_negative_numbers = true
    )]
    top: usize,
    /// Also draw live heap bytes and resident memory over time, per process, as an SVG chart.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Overwrite the --plot file if it exists.
    #[arg(long, requires = "plot")]
    force: bool,
}

#[derive(Debug, clap::Args)]
struct ExportArgs {
    /// Profile files with call stacks.
    #[arg(required = true, value_name = "PROFILE")]
    profiles: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum)]
    format: Format,
    /// The weight of folded lines, the order of JSON stacks, pprof's default sample type
    /// [default: bytes].
    #[arg(long, value_enum)]
    weight: Option<Weight>,
    /// Output file (`-` for stdout, except for pprof and svg).
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// Overwrite the output file if it exists.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, clap::Args)]
struct DiffArgs {
    /// The profile to compare against.
    #[arg(value_name = "BASE_PROFILE")]
    base: PathBuf,
    /// The profile compared: frames are as wide as here.
    #[arg(value_name = "NEW_PROFILE")]
    new: PathBuf,
    /// What is compared.
    #[arg(long, value_enum, default_value_t = Weight::Bytes)]
    weight: Weight,
    /// The SVG to write.
    #[arg(short, long, value_name = "FILE.svg")]
    output: PathBuf,
    /// Overwrite the output file if it exists.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, clap::Args)]
struct DemoArgs {
    /// Directory for the demo's profiles and reports.
    #[arg(short, long, value_name = "DIR", default_value = ".")]
    output: PathBuf,
    /// Workload size (word pairs of the edit-distance workload).
    #[arg(long, hide = true)]
    size: Option<u64>,
    /// Rounds of the comparison.
    #[arg(long, hide = true, allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(1..=1000))]
    rounds: Option<u64>,
}

/// Runs the parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Cmd::Run(a) => cmd_run(a),
        Cmd::Compare(a) => cmd_compare(a),
        Cmd::Flame(a) => cmd_flame(a),
        Cmd::Report(a) => cmd_report(a),
        Cmd::Export(a) => cmd_export(a),
        Cmd::Diff(a) => cmd_diff(a),
        Cmd::Demo(a) => crate::demo::run(
            &a.output,
            &crate::demo::DemoOptions {
                size: a.size,
                rounds: a.rounds.map(|r| r as usize),
            },
        ),
        Cmd::Workload { name, size } => {
            let Some(w) = allocmux_workloads::find(&name) else {
                let names: Vec<&str> = allocmux_workloads::ALL.iter().map(|w| w.name).collect();
                bail!("unknown workload {name:?} (known: {})", names.join(", "));
            };
            println!("{} {}", w.name, (w.run)(size.unwrap_or(w.default_size)));
            Ok(0)
        }
    }
}

/// An output file that is checked (and created) before the program runs, so
/// a bad path fails fast and nothing existing is overwritten unasked.
///
/// A regular file is written whole or not at all: through a new temporary
/// file in the same directory (created exclusively, never following a
/// symlink) and a rename. A character device, FIFO or socket that already
/// exists (`/dev/stdout`, `/dev/null`, a pipe) holds nothing to lose, so it
/// is written in place without `--force`. Dropped without a
/// [`write`](Self::write), the claim removes the file it created, so an
/// error (a refused target, a failed run) leaves no empty file behind to
/// block the next attempt.
#[derive(Debug)]
pub struct OutputFile {
    path: PathBuf,
    /// Whether `claim` created the file (so dropping the claim unwritten
    /// removes it).
    created: bool,
    /// An existing device, FIFO or socket, written in place.
    stream: bool,
    /// Whether anything was written (then the file stays).
    written: std::cell::Cell<bool>,
}

impl OutputFile {
    /// Claims `path`: refuses an existing file unless `force`, a
    /// directory always, and a path whose directory cannot take the
    /// temporary file the write goes through.
    pub fn claim(path: &Path, force: bool, what: &str) -> Result<OutputFile> {
        match fs::metadata(path) {
            Ok(m) if m.is_dir() => bail!(
                "the {what} {} is a directory; name a file in it instead",
                path.display()
            ),
            Ok(m) if !m.is_file() => {
                return Ok(OutputFile {
                    path: path.to_path_buf(),
                    created: false,
                    stream: true,
                    written: false.into(),
                });
            }
            _ => {}
        }
        let existed = fs::symlink_metadata(path).is_ok();
        let mut opts = fs::OpenOptions::new();
        opts.write(true);
        if force {
            opts.create(true).truncate(false);
        } else {
            opts.create_new(true);
        }
        match opts.open(path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                bail!(
                    "{what} {} already exists; choose another name or pass --force to overwrite it",
                    path.display()
                )
            }
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("cannot write the {what} {}", path.display()));
            }
        }
        let out = OutputFile {
            path: path.to_path_buf(),
            created: !existed,
            stream: false,
            written: false.into(),
        };
        // An existing file (with --force) in a directory that is not
        // writable would fail only at the end, after the program ran.
        if existed {
            out.temporary().with_context(|| {
                format!(
                    "cannot write the {what} {}: its directory does not take new files",
                    path.display()
                )
            })?;
        }
        Ok(out)
    }

    /// A new, empty temporary file beside the output.
    fn temporary(&self) -> std::io::Result<tempfile::NamedTempFile> {
        use std::os::unix::fs::PermissionsExt;
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        tempfile::Builder::new()
            .prefix(".allocmux-")
            .suffix(".tmp")
            // As `fs::write` creates files: 0666 less the umask.
            .permissions(fs::Permissions::from_mode(0o666))
            .tempfile_in(dir)
    }

    /// Where the output goes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Gives the claim up when nothing will be written: removes the file
    /// if `claim` created it (an existing file, claimed with `--force`,
    /// keeps its contents). Dropping the claim does the same.
    pub fn discard(self) {}

    /// Replaces the file's contents (writes to a device or FIFO).
    pub fn write(&self, bytes: &[u8]) -> Result<()> {
        if self.stream {
            self.written.set(true);
            return fs::OpenOptions::new()
                .write(true)
                .open(&self.path)
                .and_then(|mut f| f.write_all(bytes))
                .with_context(|| format!("writing {}", self.path.display()));
        }
        let mut tmp = self
            .temporary()
            .with_context(|| format!("writing {}", self.path.display()))?;
        tmp.write_all(bytes)
            .with_context(|| format!("writing {}", tmp.path().display()))?;
        tmp.persist(&self.path)
            .with_context(|| format!("writing {}", self.path.display()))?;
        self.written.set(true);
        Ok(())
    }

    /// The file opened for writing from its start (for output that is
    /// streamed, such as `compare --log`); the claim is then kept.
    pub fn into_file(self) -> Result<fs::File> {
        self.written.set(true);
        fs::OpenOptions::new()
            .write(true)
            .truncate(!self.stream)
            .open(&self.path)
            .with_context(|| format!("opening {}", self.path.display()))
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if self.created && !self.written.get() {
            let _ = fs::remove_file(&self.path);
        }
    }
}

enum JsonOut {
    Stdout,
    File(OutputFile),
}

fn cmd_run(a: RunArgs) -> Result<i32> {
    let json = match &a.json {
        Some(p) if p.as_os_str() == "-" => Some(JsonOut::Stdout),
        Some(p) => Some(JsonOut::File(OutputFile::claim(p, a.force, "JSON report")?)),
        None => None,
    };
    let profile_out = a
        .output
        .as_deref()
        .map(|p| OutputFile::claim(p, a.force, "profile"))
        .transpose()?;
    let env = match (a.stacks, a.sample_bytes) {
        (None, None) => vec![],
        (stacks, n) => stack_env(stacks.unwrap_or(StacksArg::Sample), n)?,
    };
    let outcome = launch::launch(&Launch {
        command: &a.command,
        allocator: a.allocator,
        output: launch::Output::Inherit,
        env,
    })?;
    for (path, why) in &outcome.unreadable {
        eprintln!(
            "allocmux: skipped unreadable profile {}: {why}",
            path.display()
        );
    }
    // The program ran, so `run` still exits as it did (as `time` would);
    // but an empty report or profile would pass for a program that does
    // not allocate, so none is written.
    if let Err(e) = outcome.check_recorded() {
        eprintln!("allocmux: {e:#}");
        if outcome.profiles.is_empty() {
            if let Some(JsonOut::File(f)) = json {
                f.discard();
            }
            if let Some(out) = profile_out {
                out.discard();
            }
            return Ok(outcome.exit.shell_status());
        }
    }
    if let Some(out) = &profile_out {
        out.write(allocmux::profile::to_string(&outcome.profiles).as_bytes())?;
    }
    let report = outcome.report(&a.command, a.allocator.name());
    let mut err = std::io::stderr().lock();
    report
        .write_human(&mut err)
        .context("writing the summary")?;
    if let Some(out) = &profile_out {
        writeln!(err, "  profile saved to {}", out.path.display())?;
    }
    write_json(json, &report)?;
    Ok(outcome.exit.shell_status())
}

fn write_json(json: Option<JsonOut>, report: &Report) -> Result<()> {
    write_json_value(json, &report.to_json())
}

fn write_json_value(json: Option<JsonOut>, value: &serde_json::Value) -> Result<()> {
    let Some(json) = json else { return Ok(()) };
    let mut text = serde_json::to_string_pretty(value).expect("JSON values serialise");
    text.push('\n');
    match json {
        JsonOut::Stdout => std::io::stdout()
            .lock()
            .write_all(text.as_bytes())
            .context("writing JSON to stdout"),
        JsonOut::File(f) => f.write(text.as_bytes()),
    }
}

fn cmd_compare(a: CompareArgs) -> Result<i32> {
    use crate::compare;
    // The target first: a refused one leaves no output file (nor an empty log).
    let program = crate::target::resolve(&a.command[0])?;
    crate::target::check_preloadable(&program)?;
    let json = match &a.json {
        Some(p) if p.as_os_str() == "-" => Some(JsonOut::Stdout),
        Some(p) => Some(JsonOut::File(OutputFile::claim(p, a.force, "JSON report")?)),
        None => None,
    };
    let plot = a
        .plot
        .as_deref()
        .map(|p| OutputFile::claim(p, a.force, "chart"))
        .transpose()?;
    let log = match &a.log {
        Some(p) => Some(OutputFile::claim(p, a.force, "log")?.into_file()?),
        None => None,
    };
    let cmp = compare::run(compare::Options {
        command: a.command.clone(),
        allocators: a.allocators,
        rounds: a.runs.map(|n| n as usize),
        warmup: a.warmup as usize,
        stop_early: a.stop_early,
        log,
        env: vec![],
    });
    let cmp = match cmp {
        Ok(c) => c,
        Err(e) => {
            if let Some(JsonOut::File(f)) = json {
                f.discard();
            }
            if let Some(p) = plot {
                p.discard();
            }
            return Err(e);
        }
    };
    let summary = compare::Summary::new(&cmp);
    // The table goes to stdout, unless the JSON does.
    let mut table: Box<dyn Write> = if matches!(json, Some(JsonOut::Stdout)) {
        Box::new(std::io::stderr().lock())
    } else {
        Box::new(std::io::stdout().lock())
    };
    compare::write_human(&cmp, &summary, &mut table)?;
    if let Some(p) = &plot {
        let title = format!("allocmux compare: {}", shell_words(&a.command));
        p.write(compare::plot::svg(&cmp, &summary, &title)?.as_bytes())?;
        writeln!(table, "  chart written to {}", p.path().display())?;
    }
    drop(table);
    write_json_value(json, &compare::to_json(&cmp, &summary))?;
    Ok(0)
}

/// Reads profile files, every process of each.
fn load_profiles(paths: &[PathBuf]) -> Result<Vec<ProcessProfile>> {
    let mut profiles = Vec::new();
    for path in paths {
        let text =
            fs::read(path).with_context(|| format!("cannot read profile {}", path.display()))?;
        let text = String::from_utf8(text).map_err(|_| {
            anyhow::anyhow!("{} is not an allocmux profile (not text)", path.display())
        })?;
        let mut p = allocmux::profile::parse(&text)
            .with_context(|| format!("cannot read profile {}", path.display()))?;
        profiles.append(&mut p);
    }
    Ok(profiles)
}

/// Symbolized stacks of `profiles`, or an error naming `what` if none
/// recorded stacks.
fn stack_set<'a>(
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
fn profiles_command(profiles: &[ProcessProfile]) -> String {
    profiles
        .iter()
        .min_by_key(|p| (p.clock_start.mono_ns, p.pid))
        .filter(|p| !p.argv.is_empty())
        .map_or_else(|| "allocmux profile".to_string(), |p| shell_words(&p.argv))
}

fn paths_words(paths: &[PathBuf]) -> String {
    let words: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    shell_words(&words)
}

/// At most this many processes are drawn by `report --plot` (the largest
/// by peak resident size): more lines and legend entries than this make a
/// chart that nobody can read.
const MAX_PLOTTED: usize = 10;

/// The memory timeline chart of `profiles` for `report --plot`, and a line
/// saying what it shows; an error naming the fix if no process has a
/// timeline.
fn plot_profiles(profiles: &[ProcessProfile], what: &str) -> Result<(String, String)> {
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
    let mut allocators: Vec<&str> = profiles.iter().map(|p| p.allocator.as_str()).collect();
    allocators.sort_unstable();
    allocators.dedup();
    let title = format!(
        "{} — {} — memory over time",
        profiles_command(profiles),
        allocators.join(",")
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

fn cmd_report(a: ReportArgs) -> Result<i32> {
    // Claimed first, so a taken name fails before any work.
    let plot_out = a
        .plot
        .as_deref()
        .map(|p| OutputFile::claim(p, a.force, "plot"))
        .transpose()?;
    let loaded = load_profiles(&a.profiles).and_then(|profiles| {
        let plot = match &plot_out {
            Some(_) => Some(plot_profiles(&profiles, &paths_words(&a.profiles))?),
            None => None,
        };
        Ok((profiles, plot))
    });
    let (profiles, plot) = match loaded {
        Ok(x) => x,
        Err(e) => {
            if let Some(out) = plot_out {
                out.discard();
            }
            return Err(e);
        }
    };
    if let (Some(out), Some((svg, _))) = (&plot_out, &plot) {
        out.write(svg.as_bytes())?;
    }
    let report = Report::new(profiles.clone(), None);
    let mut sym = Symbolizer::new();
    let set = if a.top == 0 {
        None
    } else {
        StackSet::build(&profiles, &mut sym).ok()
    };
    if a.json {
        let mut v = report.to_json();
        if let Some(set) = &set {
            v.as_object_mut()
                .expect("an object")
                .insert("top_stacks".into(), crate::top::to_json(set, a.top));
        }
        let mut text = serde_json::to_string_pretty(&v).expect("JSON values serialise");
        text.push('\n');
        std::io::stdout()
            .lock()
            .write_all(text.as_bytes())
            .context("writing JSON to stdout")?;
    } else {
        let mut out = std::io::stdout().lock();
        report.write_human(&mut out)?;
        if let Some(set) = &set {
            crate::top::write_human(set, a.top, &mut out)?;
        }
    }
    if let (Some(out), Some((_, note))) = (&plot_out, &plot) {
        eprintln!("  {note} written to {}", out.path().display());
    }
    Ok(0)
}

fn cmd_flame(a: FlameArgs) -> Result<i32> {
    let stacks = match (a.exact, a.stacks) {
        (true, _) | (false, Some(FlameStacks::Exact)) => StacksArg::Exact,
        _ => StacksArg::Sample,
    };
    let env = stack_env(stacks, a.sample_bytes)?;
    let out = OutputFile::claim(&a.output, a.force, "flamegraph")?;
    let outcome = match launch::launch(&Launch {
        command: &a.command,
        allocator: a.allocator,
        output: launch::Output::Inherit,
        env,
    }) {
        Ok(o) => o,
        Err(e) => {
            out.discard();
            return Err(e);
        }
    };
    for (path, why) in &outcome.unreadable {
        eprintln!(
            "allocmux: skipped unreadable profile {}: {why}",
            path.display()
        );
    }
    if let Err(e) = outcome.check_recorded() {
        if outcome.profiles.is_empty() {
            out.discard();
            return Err(e.context("cannot draw a flamegraph"));
        }
        eprintln!("allocmux: {e:#}");
    }
    let report = outcome.report(&a.command, a.allocator.name());
    let mut err = std::io::stderr().lock();
    report
        .write_human(&mut err)
        .context("writing the summary")?;
    let mut sym = Symbolizer::new();
    let svg = StackSet::build(&outcome.profiles, &mut sym)
        .map_err(|e| anyhow::anyhow!("cannot draw a flamegraph: {e}"))
        .and_then(|set| {
            let folded = set.folded(a.weight);
            if folded.trim().is_empty() && matches!(stacks, StacksArg::Sample) {
                anyhow::bail!(
                    "nothing to draw: no allocation was sampled (about one is taken per \
                     --sample-bytes bytes allocated, 512 KiB unless set); record every \
                     allocation with --exact, or sample more often with --sample-bytes N"
                );
            }
            let title = format!("{} — {}", shell_words(&a.command), a.allocator.name());
            crate::render::flamegraph(&folded, &crate::render::labels(&set, a.weight, title))
        });
    match svg {
        Ok(svg) => {
            out.write(&svg)?;
            writeln!(
                err,
                "  flamegraph of {} written to {}",
                a.weight.describe(),
                out.path().display()
            )?;
            Ok(outcome.exit.shell_status())
        }
        Err(e) => {
            out.discard();
            Err(e)
        }
    }
}

fn cmd_export(a: ExportArgs) -> Result<i32> {
    let to_stdout = a.output.as_os_str() == "-";
    match a.format {
        Format::Pprof if to_stdout => {
            bail!("pprof output is binary; write it to a file with -o FILE.pb.gz")
        }
        Format::Svg if to_stdout => bail!("write the SVG to a file with -o FILE.svg"),
        _ => {}
    }
    let out = if to_stdout {
        None
    } else {
        Some(OutputFile::claim(&a.output, a.force, "output file")?)
    };
    let result = (|| {
        let profiles = load_profiles(&a.profiles)?;
        let mut sym = Symbolizer::new();
        let set = stack_set(&profiles, &mut sym, &paths_words(&a.profiles))?;
        let mut comments = vec![format!("allocmux export of {}", paths_words(&a.profiles))];
        let mut allocators: Vec<&str> = profiles.iter().map(|p| p.allocator.as_str()).collect();
        allocators.sort_unstable();
        allocators.dedup();
        comments.push(format!("allocator: {}", allocators.join(",")));
        if a.format == Format::Svg {
            let w = a.weight.unwrap_or(Weight::Bytes);
            let title = format!("{} — {}", profiles_command(&profiles), allocators.join(","));
            return crate::render::flamegraph(
                &set.folded(w),
                &crate::render::labels(&set, w, title),
            );
        }
        crate::export::render(&set, a.format, a.weight, &comments)
    })();
    match (result, out) {
        (Ok(bytes), Some(out)) => out.write(&bytes)?,
        (Ok(bytes), None) => std::io::stdout()
            .lock()
            .write_all(&bytes)
            .context("writing to stdout")?,
        (Err(e), out) => {
            if let Some(out) = out {
                out.discard();
            }
            return Err(e);
        }
    }
    Ok(0)
}

fn cmd_diff(a: DiffArgs) -> Result<i32> {
    let out = OutputFile::claim(&a.output, a.force, "flamegraph")?;
    let result = (|| {
        let base = load_profiles(std::slice::from_ref(&a.base))?;
        let new = load_profiles(std::slice::from_ref(&a.new))?;
        let mut sym = Symbolizer::new();
        let base_set = stack_set(&base, &mut sym, &a.base.display().to_string())?;
        let new_set = stack_set(&new, &mut sym, &a.new.display().to_string())?;
        let w = a.weight;
        let title = format!(
            "{} → {} — {} — total {} → {}",
            a.base.display(),
            a.new.display(),
            new_set.describe(w),
            base_set.show(w, w.of(&base_set.total())),
            new_set.show(w, w.of(&new_set.total())),
        );
        let labels = Labels {
            title,
            subtitle: Some(
                "widths as in the new profile; red: grew, blue: shrank against the base".into(),
            ),
            count_name: w.unit(new_set.time_unit()).to_string(),
        };
        crate::render::differential(&base_set.folded(w), &new_set.folded(w), &labels)
    })();
    match result {
        Ok(svg) => {
            out.write(&svg)?;
            Ok(0)
        }
        Err(e) => {
            out.discard();
            Err(e)
        }
    }
}
