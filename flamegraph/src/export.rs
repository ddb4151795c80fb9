//! `allocmux export`: symbolized stacks in formats other tools read.
//!
//! - `folded`: `root;...;leaf value` lines for one weight (inferno,
//!   flamegraph.pl, speedscope).
//! - `pprof`: gzip-compressed profile.proto with every weight as a sample
//!   type (see [`crate::pprof`]).
//! - `json`: an array of stacks, largest first by the chosen weight, each
//!   a [`StackJson`](crate::json::StackJson): frames leaf (the allocating
//!   call site) first and every weight's value. Stacks whose values are
//!   all zero are left out.
//! - `svg`: the flamegraph `allocmux flame` draws, of saved profiles
//!   ([`crate::render`]).

use crate::stacks::{StackSet, Weight};

/// An export format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Folded stacks, one `root;...;leaf value` line per stack.
    Folded,
    /// Gzip-compressed pprof profile.proto.
    Pprof,
    /// JSON array of stacks with their frames and every weight's value.
    Json,
    /// A flamegraph SVG, as `allocmux flame` draws (of saved profiles).
    Svg,
}

/// Renders the stacks in `format`; `comments` describe the source (pprof).
pub fn render(
    set: &StackSet<'_>,
    format: Format,
    weight: Option<Weight>,
    comments: &[String],
) -> anyhow::Result<Vec<u8>> {
    Ok(match format {
        Format::Folded => set.folded(weight.unwrap_or(Weight::Bytes)).into_bytes(),
        Format::Json => crate::json::to_pretty_declared(&crate::json::stacks(
            set,
            weight.unwrap_or(Weight::Bytes),
        ))
        .into_bytes(),
        Format::Pprof => crate::pprof::encode(set, weight, comments)?,
        Format::Svg => anyhow::bail!("SVG is drawn by crate::render, not exported here"),
    })
}
