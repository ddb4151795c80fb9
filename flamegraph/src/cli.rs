//! Command-line parsing and the subcommands.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

use crate::launch::{self, Allocator, Launch};
use crate::report::{Report, RunInfo};

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
    /// Print the summary of saved profiles.
    Report(ReportArgs),
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
    /// Overwrite the output files if they exist.
    #[arg(long)]
    force: bool,
    /// The command to run, after `--`.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    command: Vec<String>,
}

#[derive(Debug, clap::Args)]
struct ReportArgs {
    /// Profile files written by `allocmux run -o` or by the shim (ALLOCMUX_OUTPUT).
    #[arg(required = true, value_name = "PROFILE")]
    profiles: Vec<PathBuf>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct DemoArgs {
    /// Directory for the demo's profiles and reports.
    #[arg(short, long, value_name = "DIR", default_value = ".")]
    output: PathBuf,
    /// Workload size (word pairs of the edit-distance workload).
    #[arg(long, hide = true)]
    size: Option<u64>,
}

/// Runs the parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Cmd::Run(a) => cmd_run(a),
        Cmd::Report(a) => cmd_report(a),
        Cmd::Demo(a) => crate::demo::run(&a.output, a.size),
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
#[derive(Debug)]
pub struct OutputFile {
    path: PathBuf,
}

impl OutputFile {
    /// Claims `path`: refuses an existing file unless `force`.
    pub fn claim(path: &Path, force: bool, what: &str) -> Result<OutputFile> {
        let mut opts = fs::OpenOptions::new();
        opts.write(true);
        if force {
            opts.create(true).truncate(false);
        } else {
            opts.create_new(true);
        }
        match opts.open(path) {
            Ok(_) => Ok(OutputFile {
                path: path.to_path_buf(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                bail!(
                    "{what} {} already exists; choose another name or pass --force to overwrite it",
                    path.display()
                )
            }
            Err(e) => Err(e).with_context(|| format!("cannot write the {what} {}", path.display())),
        }
    }

    /// Replaces the file's contents.
    pub fn write(&self, bytes: &[u8]) -> Result<()> {
        let tmp = self.path.with_extension("allocmux-tmp");
        fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
        fs::rename(&tmp, &self.path).with_context(|| format!("writing {}", self.path.display()))
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
    let outcome = launch::launch(&Launch {
        command: &a.command,
        allocator: a.allocator,
        quiet: false,
        env: vec![],
    })?;
    for (path, why) in &outcome.unreadable {
        eprintln!(
            "allocmux: skipped unreadable profile {}: {why}",
            path.display()
        );
    }
    if let Some(out) = &profile_out {
        out.write(allocmux::profile::to_string(&outcome.profiles).as_bytes())?;
    }
    let info = RunInfo {
        command: a.command.clone(),
        allocator: a.allocator.name().to_string(),
        exit: outcome.exit,
        wall_ns: outcome.wall_ns,
    };
    let report = Report::new(outcome.profiles, Some(info));
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
    let Some(json) = json else { return Ok(()) };
    let mut text = serde_json::to_string_pretty(&report.to_json()).expect("JSON values serialise");
    text.push('\n');
    match json {
        JsonOut::Stdout => std::io::stdout()
            .lock()
            .write_all(text.as_bytes())
            .context("writing JSON to stdout"),
        JsonOut::File(f) => f.write(text.as_bytes()),
    }
}

fn cmd_report(a: ReportArgs) -> Result<i32> {
    let mut profiles = Vec::new();
    for path in &a.profiles {
        let text =
            fs::read(path).with_context(|| format!("cannot read profile {}", path.display()))?;
        let text = String::from_utf8(text).map_err(|_| {
            anyhow::anyhow!("{} is not an allocmux profile (not text)", path.display())
        })?;
        let mut p = allocmux::profile::parse(&text)
            .with_context(|| format!("cannot read profile {}", path.display()))?;
        profiles.append(&mut p);
    }
    let report = Report::new(profiles, None);
    if a.json {
        write_json(Some(JsonOut::Stdout), &report)?;
    } else {
        report.write_human(&mut std::io::stdout().lock())?;
    }
    Ok(0)
}
