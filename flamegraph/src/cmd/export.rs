//! `allocmux export`: the call stacks of saved profiles as folded stacks,
//! pprof, JSON or a flamegraph SVG (the formats are [`crate::export`]'s).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};

use super::profiles;
use crate::error::usage;
use crate::export::Format;
use crate::output::OutputFile;
use crate::stacks::Weight;
use crate::symbolize::Symbolizer;

/// What `allocmux export` is told.
#[derive(Debug)]
pub struct ExportOptions {
    /// Profile files with call stacks.
    pub profiles: Vec<PathBuf>,
    /// Output format.
    pub format: Format,
    /// The weight of folded lines, the order of JSON stacks, pprof's
    /// default sample type (bytes if `None`).
    pub weight: Option<Weight>,
    /// Output file (`-` for stdout, except for pprof and svg).
    pub output: PathBuf,
    /// Overwrite the output file if it exists.
    pub force: bool,
}

/// Writes the export.
pub fn run(o: &ExportOptions) -> Result<i32> {
    let to_stdout = o.output.as_os_str() == "-";
    match o.format {
        Format::Pprof if to_stdout => {
            return Err(usage(
                "pprof output is binary; write it to a file with -o FILE.pb.gz",
            ));
        }
        Format::Svg if to_stdout => {
            return Err(usage("write the SVG to a file with -o FILE.svg"));
        }
        _ => {}
    }
    let inputs: Vec<(&str, &std::path::Path)> = o
        .profiles
        .iter()
        .map(|p| ("profile", p.as_path()))
        .collect();
    crate::output::check_distinct(&inputs, &[("output file", Some(o.output.as_path()))])?;
    let out = if to_stdout {
        None
    } else {
        Some(OutputFile::claim(&o.output, o.force, "output file")?)
    };
    let bytes = render(o)?;
    match out {
        Some(out) => out.write(&bytes)?,
        None => std::io::stdout()
            .lock()
            .write_all(&bytes)
            .context("writing to stdout")?,
    }
    Ok(0)
}

/// The exported bytes.
fn render(o: &ExportOptions) -> Result<Vec<u8>> {
    let loaded = profiles::load(&o.profiles)?;
    let mut sym = Symbolizer::new();
    let what = profiles::paths_words(&o.profiles);
    let set = profiles::stack_set(&loaded, &mut sym, &what)?;
    let allocators = profiles::allocators(&loaded).join(",");
    if let Some(w) = o.weight {
        set.check_measures(w).map_err(anyhow::Error::msg)?;
    }
    if o.format == Format::Svg {
        let w = o.weight.unwrap_or(Weight::Bytes);
        let title = format!("{} — {allocators}", profiles::command(&loaded));
        return crate::render::flamegraph(&set.folded(w), &crate::render::labels(&set, w, title));
    }
    let comments = vec![
        format!("allocmux export of {what}"),
        format!("allocator: {allocators}"),
    ];
    crate::export::render(&set, o.format, o.weight, &comments)
}
