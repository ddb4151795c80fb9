//! The commands, one module each. Each takes a plain options struct (built
//! by [`crate::args`] from the command line, or by a caller of the library)
//! and returns the exit status of `allocmux`.

pub mod compare;
pub mod demo;
pub mod diff;
pub mod export;
pub mod flame;
pub mod preload;
mod profiles;
pub mod report;
pub mod run;
pub mod workload;

/// A command with its options.
#[derive(Debug)]
pub enum Command {
    /// `allocmux run`.
    Run(run::RunOptions),
    /// `allocmux preload`.
    Preload(preload::PreloadOptions),
    /// `allocmux compare`.
    Compare(compare::CompareOptions),
    /// `allocmux flame`.
    Flame(flame::FlameOptions),
    /// `allocmux report`.
    Report(report::ReportOptions),
    /// `allocmux export`.
    Export(export::ExportOptions),
    /// `allocmux diff`.
    Diff(diff::DiffOptions),
    /// `allocmux demo`.
    Demo(demo::DemoOptions),
    /// `allocmux __workload`: a bundled workload (used by `demo` and the
    /// tests).
    Workload {
        /// The workload's name.
        name: String,
        /// Its size, else its default.
        size: Option<u64>,
    },
}
