//! The allocmux command-line tool as a library: the `allocmux` binary is a
//! thin wrapper over [`cli::run`]. What each command does is in
//! `docs/cli.md`; how a profile becomes a flamegraph in `docs/architecture.md`.
#![forbid(unsafe_code)]

pub mod cli;
pub mod compare;
pub mod demo;
pub mod elf;
pub mod export;
pub mod launch;
pub mod plot;
pub mod pprof;
pub mod render;
pub mod report;
pub mod shim;
pub mod stacks;
pub mod stats;
pub mod symbolize;
pub mod target;
pub mod top;
