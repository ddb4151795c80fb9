//! The allocmux command-line tool as a library: the `allocmux` binary is a
//! thin wrapper over [`cli::run`].
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
