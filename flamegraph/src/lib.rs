//! The allocmux command-line tool as a library: the `allocmux` binary is a
//! thin wrapper over [`run`], and every command is callable from here with
//! its options struct ([`cmd::Command`]), without clap. What each command
//! does is in `docs/cli.md`; how a profile becomes a flamegraph in
//! `docs/architecture.md`.
//!
//! Only [`sys`] holds `unsafe` code (the process-control calls std lacks).
#![deny(unsafe_code)]

pub mod advice;
pub mod allocator;
pub mod args;
pub mod cmd;
pub mod compare;
pub mod demangle;
pub mod direct_shim;
pub mod elf;
pub mod error;
pub mod export;
pub mod html;
pub mod json;
pub mod launch;
pub mod leak_report;
pub mod leaks;
pub mod limit_report;
pub mod limits;
pub mod output;
pub mod plot;
pub mod pprof;
pub mod render;
pub mod report;
pub mod shim;
pub mod spawn_helper;
pub mod stack_line;
pub mod stacks;
pub mod stats;
pub mod suppressions;
pub mod symbolize;
pub mod sys;
pub mod target;
pub mod top;
pub mod units;

pub use error::{Error, ErrorKind};

use cmd::Command;

/// Runs one command; returns the exit status `allocmux` ends with (a run
/// command's is its program's).
pub fn run(command: Command) -> Result<i32, Error> {
    let status = match command {
        Command::Run(o) => cmd::run::run(&o),
        Command::Preload(o) => cmd::preload::run(&o),
        Command::Compare(o) => cmd::compare::run(&o),
        Command::Flame(o) => cmd::flame::run(&o),
        Command::Report(o) => cmd::report::run(&o),
        Command::Export(o) => cmd::export::run(&o),
        Command::Diff(o) => cmd::diff::run(&o),
        Command::Demo(o) => cmd::demo::run(&o),
        Command::Workload { name, size } => cmd::workload::run(&name, size),
    };
    Ok(status?)
}
