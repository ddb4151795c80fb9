//! The command line as clap parses it, and its translation into the
//! options structs the commands take ([`Command`]), so that the commands
//! themselves know nothing of clap.

use std::path::PathBuf;

use crate::allocator::Allocator;
use allocmux_format::profile::StackMode;
use allocmux_format::settings::{
    DEFAULT_SAMPLE_BYTES, Level, MAX_OTLP_INTERVAL_S, MAX_SAMPLE_BYTES,
};
use anyhow::Result;
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Parser, Subcommand};

use crate::cmd::Command;
use crate::cmd::compare::CompareOptions;
use crate::cmd::demo::DemoOptions;
use crate::cmd::diff::DiffOptions;
use crate::cmd::export::ExportOptions;
use crate::cmd::flame::FlameOptions;
use crate::cmd::preload::PreloadOptions;
use crate::cmd::report::ReportOptions;
use crate::cmd::run::RunOptions;
use crate::export::Format;
use crate::launch::StackRecording;
use crate::limits::Limit;
use crate::stacks::Weight;

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
    /// Print the environment that runs a program as `run` would (`env $(allocmux preload) CMD`).
    Preload(PreloadArgs),
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
    /// Allocator the program runs on: system, jemalloc, mimalloc, or NAME=PATH for any allocator
    /// library (as tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4).
    #[arg(short, long, value_parser = allocator_parser, default_value = "system", value_name = "ALLOCATOR")]
    allocator: Allocator,
    /// Also save the profile of every process of the run in this file (for `allocmux report`).
    #[arg(short, long, value_name = "PROFILE")]
    output: Option<PathBuf>,
    /// Write the report as JSON to FILE (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Also write one self-contained HTML report (summary, flamegraph, functions, memory over
    /// time) to FILE.
    #[arg(long, value_name = "FILE.html")]
    html: Option<PathBuf>,
    /// Record the call stack of allocations: none, a sample weighted by bytes, every one, or
    /// every one and then a sample.
    #[arg(long, value_parser = stacks_parser(), value_name = "MODE")]
    stacks: Option<StackRecording>,
    /// Mean bytes between two sampled stacks (implies --stacks sample unless auto).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(1..=MAX_SAMPLE_BYTES))]
    sample_bytes: Option<u64>,
    /// Serve live profiles on ADDR:PORT (`/debug/pprof/heap`, `/allocs`) while the program runs;
    /// port 0 picks a free one, said on stderr. Keep it on 127.0.0.1.
    #[arg(long, value_name = "ADDR:PORT", value_parser = http_parser)]
    http: Option<String>,
    /// Push OTLP profiles to an OpenTelemetry Collector every --otlp-interval seconds and at
    /// exit: to URL (http://ADDR:PORT[/PATH], numeric or localhost), or without one, where the
    /// OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT variables say
    /// (default http://localhost:4318). Records at the sampled level unless --record says.
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = "on", value_parser = otlp_parser)]
    otlp: Option<String>,
    /// Seconds between two OTLP pushes [default: 60]
    #[arg(long, value_name = "SECONDS", requires = "otlp", allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(1..=MAX_OTLP_INTERVAL_S))]
    otlp_interval: Option<u64>,
    /// How much to record: every call counted (`exact`), only a sample of stacks with every
    /// figure estimated from it (`sampled`, the default with --http or --otlp: cheap enough to leave on), or
    /// nothing (`off`: only switch the allocator; no counts, no profile, no thread) [default:
    /// exact, or sampled with --http or --otlp]
    #[arg(long, value_parser = record_parser(), value_name = "LEVEL")]
    record: Option<Level>,
    /// Fail (status 23) when the program succeeds but exceeds a limit: `allocs=N` (allocation
    /// calls), `peak=SIZE` (peak live bytes), `leaked=SIZE` (bytes live at exit, suppressions
    /// applied; records every stack). SIZE: 123, 10KiB, 5MiB, 1GiB (K, M, G are binary too).
    /// Comma-separated or repeated.
    #[arg(long, value_name = "NAME=VALUE", value_delimiter = ',', value_parser = limit_parser)]
    limit: Vec<Limit>,
    /// Leak suppressions (LeakSanitizer's `leak:PATTERN` lines) for `--limit leaked`; repeatable.
    #[arg(long, value_name = "FILE", requires = "limit")]
    suppressions: Vec<PathBuf>,
    /// Count the C and C++ runtimes' own start-up blocks in `--limit leaked` too.
    #[arg(long, requires = "limit")]
    no_default_suppressions: bool,
    /// Overwrite the output files if they exist.
    #[arg(long)]
    force: bool,
    /// The command to run, after `--`.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(Debug, clap::Args)]
struct PreloadArgs {
    /// Allocator the program runs on: system, jemalloc, mimalloc, or NAME=PATH for any allocator
    /// library, preloaded after the shim.
    #[arg(short, long, value_parser = allocator_parser, default_value = "system", value_name = "ALLOCATOR")]
    allocator: Allocator,
    /// Serve live profiles on ADDR:PORT (`/debug/pprof/heap`, `/allocs`); port 0 picks a free
    /// one, said on the program's stderr. Keep it on 127.0.0.1.
    #[arg(long, value_name = "ADDR:PORT", value_parser = http_parser)]
    http: Option<String>,
    /// Push OTLP profiles to an OpenTelemetry Collector every --otlp-interval seconds and at
    /// exit: to URL (http://ADDR:PORT[/PATH], numeric or localhost), or without one, where the
    /// OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT variables say
    /// (default http://localhost:4318). Records at the sampled level unless --record says.
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = "on", value_parser = otlp_parser)]
    otlp: Option<String>,
    /// Seconds between two OTLP pushes [default: 60]
    #[arg(long, value_name = "SECONDS", requires = "otlp", allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(1..=MAX_OTLP_INTERVAL_S))]
    otlp_interval: Option<u64>,
    /// Record the call stack of allocations: none, a sample weighted by bytes, every one, or
    /// every one and then a sample [default: off, or sample with --http or --otlp].
    #[arg(long, value_parser = stacks_parser(), value_name = "MODE")]
    stacks: Option<StackRecording>,
    /// Mean bytes between two sampled stacks (implies --stacks sample unless auto).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(1..=MAX_SAMPLE_BYTES))]
    sample_bytes: Option<u64>,
    /// Write each process's profile to PROFILE (`%p`: its pid; an existing file is never
    /// overwritten), for `allocmux report`.
    #[arg(short, long, value_name = "PROFILE")]
    output: Option<PathBuf>,
    /// How much to record, as for `run` [default: exact, or sampled with --http or --otlp]
    #[arg(long, value_parser = record_parser(), value_name = "LEVEL")]
    record: Option<Level>,
}

#[derive(Debug, clap::Args)]
struct CompareArgs {
    /// Allocators to compare, comma-separated: system, jemalloc, mimalloc, or NAME=PATH for any
    /// allocator library; `system` (when listed) is the baseline of the ratios, else the first.
    #[arg(
        short,
        long = "allocators",
        value_parser = allocator_parser,
        value_delimiter = ',',
        default_value = "system,jemalloc,mimalloc",
        value_name = "ALLOCATORS"
    )]
    allocators: Vec<Allocator>,
    /// Measured rounds (each runs every allocator once), at least 6, the fewest that give a 95%
    /// interval; the most with --stop-early [default: as many as fit in about a minute, from 6
    /// to 10]
    #[arg(short = 'n', long, value_name = "RUNS",
          allow_negative_numbers = true, value_parser = rounds_parser)]
    runs: Option<usize>,
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
    /// Also write the comparison (table, verdict, chart with the memory timelines) as one
    /// self-contained HTML file.
    #[arg(long, value_name = "FILE.html")]
    html: Option<PathBuf>,
    /// Keep the programs' output (hidden otherwise) in FILE.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Feed FILE to every run as its stdin (`-`: read stdin once and feed that); without it
    /// every run reads an empty stdin.
    #[arg(long, value_name = "FILE")]
    input: Option<PathBuf>,
    /// Overwrite the output files if they exist.
    #[arg(long)]
    force: bool,
    /// The command to run, after `--`.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(Debug, clap::Args)]
struct FlameArgs {
    /// Allocator the program runs on: system, jemalloc, mimalloc, or NAME=PATH for any allocator
    /// library.
    #[arg(short, long, value_parser = allocator_parser, default_value = "system", value_name = "ALLOCATOR")]
    allocator: Allocator,
    /// What the width of a frame shows.
    #[arg(long, value_enum, default_value_t = Weight::Bytes)]
    weight: Weight,
    /// Record every allocation's stack (same as --stacks exact).
    #[arg(long, conflicts_with = "stacks")]
    exact: bool,
    /// How to record stacks [default: auto].
    #[arg(long, value_enum, value_name = "MODE")]
    stacks: Option<FlameStacks>,
    /// Mean bytes between two sampled stacks (the shim's default is 512 KiB).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(1..=MAX_SAMPLE_BYTES))]
    sample_bytes: Option<u64>,
    /// The SVG to write [default: allocmux.svg, unless --html is given].
    #[arg(short, long, value_name = "FILE.svg")]
    output: Option<PathBuf>,
    /// Write one self-contained HTML report (summary, flamegraph with every weight and an
    /// inverted view, functions with callers and callees, memory over time) to FILE.
    #[arg(long, value_name = "FILE.html")]
    html: Option<PathBuf>,
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
    /// Every stack of the first 250,000 allocations, then a sample: a short program's are all
    /// drawn, a long one's cost what sampling costs.
    Auto,
    /// A sample of allocations, one per --sample-bytes requested on average, counts scaled up.
    Sample,
    /// Every allocation's stack.
    Exact,
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("outputs").args(["plot", "html"]).multiple(true)))]
struct ReportArgs {
    /// Profile files written by `allocmux run -o` or by the shim (ALLOCMUX_OUTPUT).
    #[arg(required = true, value_name = "PROFILE")]
    profiles: Vec<PathBuf>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Stacks listed per weight, when the profiles recorded stacks (0: none) [default: 5, or 0
    /// with --leaks]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    top: Option<usize>,
    /// List the stacks of blocks live at exit, with their bytes and blocks, largest first (the C
    /// and C++ runtimes' start-up blocks left out).
    #[arg(long)]
    leaks: bool,
    /// Leave out the leaks matching this file's `leak:PATTERN` lines (LeakSanitizer's format);
    /// repeatable.
    #[arg(long, value_name = "FILE", requires = "leaks")]
    suppressions: Vec<PathBuf>,
    /// List the C and C++ runtimes' own start-up blocks too.
    #[arg(long, requires = "leaks")]
    no_default_suppressions: bool,
    /// Also draw live heap bytes and resident memory over time, per process, as an SVG chart.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Also write one self-contained HTML report (summary, flamegraph with every weight and an
    /// inverted view, functions with callers and callees, memory over time) to FILE.
    #[arg(long, value_name = "FILE.html")]
    html: Option<PathBuf>,
    /// Overwrite the --plot and --html files if they exist.
    #[arg(long, requires = "outputs")]
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
#[command(group(clap::ArgGroup::new("outputs").args(["output", "html"]).multiple(true).required(true)))]
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
    output: Option<PathBuf>,
    /// Write the differential flamegraph in one self-contained HTML file, with both profiles'
    /// summaries.
    #[arg(long, value_name = "FILE.html")]
    html: Option<PathBuf>,
    /// Overwrite the output files if they exist.
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
    #[arg(long, hide = true, allow_negative_numbers = true, value_parser = rounds_parser)]
    rounds: Option<usize>,
}

/// `-a` of `run`, `flame`, `preload` and (each of its list) `compare`:
/// [`Allocator::parse`].
fn allocator_parser(arg: &str) -> Result<Allocator, String> {
    Allocator::parse(arg)
}

/// `compare -n` and `demo --rounds`: a count of rounds `compare` takes
/// ([`crate::compare::check_rounds`]).
fn rounds_parser(arg: &str) -> Result<usize, String> {
    let rounds = arg.parse::<usize>().map_err(|e| e.to_string())?;
    crate::compare::check_rounds(rounds)?;
    Ok(rounds)
}

/// `run --stacks`' values, the modes of `ALLOCMUX_STACKS`; sampling starts at
/// the shim's mean, which `--sample-bytes` replaces.
fn record_parser() -> impl TypedValueParser<Value = Level> {
    let values = [
        PossibleValue::new("exact")
            .alias("on")
            .help("Count, time and profile every allocator call"),
        PossibleValue::new("sampled")
            .help("Only a sample of stacks: every figure an estimate, at a fraction of the cost"),
        PossibleValue::new("off").help("Forward to the allocator only"),
    ];
    PossibleValuesParser::new(values).map(|name| {
        allocmux_format::settings::parse_record(name.as_bytes()).expect("a listed level")
    })
}

/// One item of `run --limit`: [`Limit::parse`].
fn limit_parser(arg: &str) -> Result<Limit, String> {
    Limit::parse(arg)
}

/// `run --limit`'s items, each figure limited once.
fn checked_limits(limits: Vec<Limit>) -> Result<Vec<Limit>> {
    for (i, l) in limits.iter().enumerate() {
        if limits[..i].iter().any(|m| m.key == l.key) {
            return Err(crate::error::usage(format_args!(
                "--limit gives {} twice: give each figure one limit",
                l.key.name()
            )));
        }
    }
    Ok(limits)
}

/// `--otlp`'s value: `on` (where the OTEL_* variables say) or a URL the
/// shim can push to (plain http, a numeric address or localhost).
fn otlp_parser(value: &str) -> Result<String, String> {
    if value == "on" {
        return Ok(value.to_string());
    }
    let authority = value
        .strip_prefix("http://")
        .ok_or("expected an http:// URL (the shim speaks no TLS), such as http://127.0.0.1:4318")?
        .split('/')
        .next()
        .unwrap_or("");
    let with_port = if authority
        .rsplit_once(':')
        .is_some_and(|(h, _)| !h.is_empty() && (!h.starts_with('[') || h.ends_with(']')))
    {
        authority.to_string()
    } else {
        format!("{authority}:4318")
    };
    match allocmux_format::settings::parse_http_address(with_port.as_bytes()) {
        Some(_) => Ok(value.to_string()),
        None => Err(
            "expected http://ADDR[:PORT][/PATH] with a numeric address or localhost (the shim \
             looks up no names), such as http://127.0.0.1:4318"
                .into(),
        ),
    }
}

/// `--http`'s value: an address the shim can serve on.
fn http_parser(value: &str) -> Result<String, String> {
    match allocmux_format::settings::parse_http_address(value.as_bytes()) {
        Some(_) => Ok(value.to_string()),
        None => Err("expected ADDR:PORT, such as 127.0.0.1:6060, [::1]:6060 or localhost:0".into()),
    }
}

fn stacks_parser() -> impl TypedValueParser<Value = StackRecording> {
    let values = [
        PossibleValue::new("off").help("No stacks"),
        PossibleValue::new("sample").help(
            "A sample of allocations, one per --sample-bytes requested on average, counts scaled up",
        ),
        PossibleValue::new("exact").help("Every allocation's stack"),
        PossibleValue::new("auto")
            .help("Every stack of the first 250,000 allocations, then a sample"),
    ];
    PossibleValuesParser::new(values).map(|name| {
        if name == "auto" {
            return StackRecording::auto(DEFAULT_SAMPLE_BYTES);
        }
        StackRecording::only(
            StackMode::from_env_value(name.as_bytes(), DEFAULT_SAMPLE_BYTES)
                .expect("a listed mode"),
        )
    })
}

/// The stack recording of `--stacks` (if given) with `--sample-bytes` (if
/// given, which implies sampling and applies to nothing else).
fn with_sample_bytes(
    stacks: Option<StackRecording>,
    sample_bytes: Option<u64>,
) -> Result<Option<StackRecording>> {
    let Some(mean_bytes) = sample_bytes else {
        return Ok(stacks);
    };
    match stacks {
        None => Ok(Some(StackRecording::only(StackMode::Sample { mean_bytes }))),
        Some(
            s @ StackRecording {
                mode: StackMode::Sample { .. },
                ..
            },
        ) => Ok(Some(StackRecording {
            mode: StackMode::Sample { mean_bytes },
            ..s
        })),
        Some(other) => Err(crate::error::usage(format_args!(
            "--sample-bytes applies to --stacks sample or auto, not --stacks {}",
            other.mode.env_value()
        ))),
    }
}

impl Cli {
    /// The usage error clap would give for `run --record off` with an
    /// option that records (clap's conflicts cannot depend on a value).
    pub fn check(&self) -> Result<(), clap::Error> {
        use clap::CommandFactory;
        let Cmd::Run(a) = &self.command else {
            return Ok(());
        };
        if a.record != Some(Level::Off) {
            return Ok(());
        }
        let given = [
            (a.output.is_some(), "--output <PROFILE>"),
            (a.json.is_some(), "--json <FILE>"),
            (a.html.is_some(), "--html <FILE.html>"),
            (a.stacks.is_some(), "--stacks <MODE>"),
            (a.sample_bytes.is_some(), "--sample-bytes <N>"),
            (a.http.is_some(), "--http <ADDR:PORT>"),
            (a.otlp.is_some(), "--otlp [<URL>]"),
            (!a.limit.is_empty(), "--limit <NAME=VALUE>"),
        ];
        match given.iter().find(|(g, _)| *g) {
            None => Ok(()),
            Some((_, other)) => Err(Cli::command().error(
                clap::error::ErrorKind::ArgumentConflict,
                format!("the argument '--record off' cannot be used with '{other}'"),
            )),
        }
    }

    /// The command asked for, with its options; an error for option
    /// combinations clap cannot check.
    pub fn into_command(self) -> Result<Command> {
        Ok(match self.command {
            Cmd::Run(a) => Command::Run(RunOptions {
                allocator: a.allocator,
                profile: a.output,
                json: a.json,
                html: a.html,
                stacks: with_sample_bytes(a.stacks, a.sample_bytes)?,
                http: a.http,
                otlp: a.otlp.map(|url| (url, a.otlp_interval)),
                record: a.record,
                force: a.force,
                limits: checked_limits(a.limit)?,
                suppressions: a.suppressions,
                default_suppressions: !a.no_default_suppressions,
                command: a.command,
            }),
            Cmd::Preload(a) => Command::Preload(PreloadOptions {
                allocator: a.allocator,
                http: a.http,
                otlp: a.otlp.map(|url| (url, a.otlp_interval)),
                stacks: with_sample_bytes(a.stacks, a.sample_bytes)?,
                profile: a.output,
                record: a.record,
            }),
            Cmd::Compare(a) => Command::Compare(CompareOptions {
                allocators: a.allocators,
                runs: a.runs,
                warmup: a.warmup as usize,
                stop_early: a.stop_early,
                json: a.json,
                plot: a.plot,
                html: a.html,
                log: a.log,
                input: a.input,
                force: a.force,
                command: a.command,
            }),
            Cmd::Flame(a) => Command::Flame(FlameOptions {
                allocator: a.allocator,
                weight: a.weight,
                stacks: with_sample_bytes(
                    Some(match (a.exact, a.stacks) {
                        (true, _) | (false, Some(FlameStacks::Exact)) => {
                            StackRecording::only(StackMode::Exact)
                        }
                        (false, Some(FlameStacks::Sample)) => {
                            StackRecording::only(StackMode::Sample {
                                mean_bytes: DEFAULT_SAMPLE_BYTES,
                            })
                        }
                        (false, Some(FlameStacks::Auto) | None) => {
                            StackRecording::auto(DEFAULT_SAMPLE_BYTES)
                        }
                    }),
                    a.sample_bytes,
                )?
                .expect("flame always records stacks"),
                // The SVG by default; with --html, only if asked for.
                output: match (a.output, &a.html) {
                    (Some(o), _) => Some(o),
                    (None, None) => Some(PathBuf::from("allocmux.svg")),
                    (None, Some(_)) => None,
                },
                html: a.html,
                force: a.force,
                command: a.command,
            }),
            Cmd::Report(a) => Command::Report(ReportOptions {
                profiles: a.profiles,
                json: a.json,
                top: a.top.unwrap_or(if a.leaks { 0 } else { 5 }),
                plot: a.plot,
                html: a.html,
                force: a.force,
                leaks: a.leaks,
                suppressions: a.suppressions,
                default_suppressions: !a.no_default_suppressions,
            }),
            Cmd::Export(a) => Command::Export(ExportOptions {
                profiles: a.profiles,
                format: a.format,
                weight: a.weight,
                output: a.output,
                force: a.force,
            }),
            Cmd::Diff(a) => Command::Diff(DiffOptions {
                base: a.base,
                new: a.new,
                weight: a.weight,
                output: a.output,
                html: a.html,
                force: a.force,
            }),
            Cmd::Demo(a) => Command::Demo(DemoOptions {
                dir: a.output,
                size: a.size,
                rounds: a.rounds,
            }),
            Cmd::Workload { name, size } => Command::Workload { name, size },
        })
    }
}

/// The one line a refused command line is reported as: clap's message
/// ("error: WHAT", details indented on the next lines) without its usage
/// block, naming the `--help` of the subcommand `first_arg` names, if it
/// names one.
pub fn usage_line(e: &clap::Error, first_arg: Option<&str>) -> String {
    use clap::CommandFactory;
    let rendered = e.render().to_string();
    let mut parts = Vec::new();
    for line in rendered.lines() {
        let line = line.trim();
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        if !line.is_empty() {
            parts.push(line.strip_prefix("error:").unwrap_or(line).trim());
        }
    }
    let sub = first_arg.filter(|a| Cli::command().find_subcommand(a).is_some());
    let help = match sub {
        Some(s) => format!("allocmux {s} --help"),
        None => "allocmux --help".to_string(),
    };
    format!("allocmux: {} (see `{help}`)", parts.join(" "))
}
