//! `allocmux export`: symbolized stacks in formats other tools read.
//!
//! - `folded`: `root;...;leaf value` lines for one weight (inferno,
//!   flamegraph.pl, speedscope).
//! - `pprof`: gzip-compressed profile.proto with every weight as a sample
//!   type (see [`crate::pprof`]).
//! - `json`: an array of stacks, largest first by the chosen weight, each
//!   `{"frames": [{"function", "file", "line", "module", "inlined"}, ...],
//!   "values": {"count", "bytes", "time", "peak", "leaked"}}`: frames leaf
//!   (the allocating call site) first, `file`, `line` and `module` `null`
//!   when unknown, `inlined` true for a function inlined into the next
//!   frame; values in allocations, bytes, ns, bytes, bytes (the weights of
//!   [`Weight`]). Stacks whose values are all zero are left out.
//! - `svg`: the flamegraph `allocmux flame` draws, of saved profiles
//!   ([`crate::render`]).

use serde_json::{Value, json};

use crate::stacks::{MergedStack, StackSet, Weight};
use crate::symbolize::Frame;

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

/// One frame as JSON.
pub fn frame_json(f: &Frame) -> Value {
    json!({
        "function": f.function,
        "file": f.file,
        "line": f.line,
        "module": f.module,
        "inlined": f.inlined,
    })
}

/// Every weight's value of a merged stack, keyed by weight name.
pub fn values_json(s: &MergedStack) -> Value {
    Value::Object(
        Weight::ALL
            .iter()
            .map(|w| (w.name().to_string(), json!(w.of(&s.values))))
            .collect(),
    )
}

/// The JSON export: merged stacks, largest `order` first.
pub fn json(set: &StackSet<'_>, order: Weight) -> Value {
    Value::Array(
        set.merged(order)
            .iter()
            .map(|s| {
                json!({
                    "frames": s.frames.iter().map(frame_json).collect::<Vec<_>>(),
                    "values": values_json(s),
                })
            })
            .collect(),
    )
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
        Format::Json => {
            let mut s = serde_json::to_string_pretty(&json(set, weight.unwrap_or(Weight::Bytes)))
                .expect("JSON values serialise");
            s.push('\n');
            s.into_bytes()
        }
        Format::Pprof => crate::pprof::encode(set, weight, comments)?,
        Format::Svg => anyhow::bail!("SVG is drawn by crate::render, not exported here"),
    })
}
