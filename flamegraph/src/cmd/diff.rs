//! `allocmux diff`: a differential flamegraph of two saved profiles.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;

use super::profiles;
use crate::html::DiffSide;
use crate::json::ReportJson;
use crate::output::OutputFile;
use crate::render::Labels;
use crate::report::Report;
use crate::stacks::Weight;
use crate::symbolize::Symbolizer;
use allocmux_format::profile::ProcessProfile;

/// What `allocmux diff` is told.
#[derive(Debug)]
pub struct DiffOptions {
    /// The profile compared against.
    pub base: PathBuf,
    /// The profile compared: frames are as wide as here.
    pub new: PathBuf,
    /// What is compared.
    pub weight: Weight,
    /// The SVG to write, if any.
    pub output: Option<PathBuf>,
    /// The HTML page to write, if any.
    pub html: Option<PathBuf>,
    /// Overwrite the output file if it exists.
    pub force: bool,
}

/// Draws the differential flamegraph.
pub fn run(o: &DiffOptions) -> Result<i32> {
    crate::output::check_distinct(
        &[("profile", o.base.as_path()), ("profile", o.new.as_path())],
        &[
            ("flamegraph", o.output.as_deref()),
            ("HTML report", o.html.as_deref()),
        ],
    )?;
    let out = OutputFile::claim_if(o.output.as_deref(), o.force, "flamegraph")?;
    let html = OutputFile::claim_if(o.html.as_deref(), o.force, "HTML report")?;
    let base = profiles::load(std::slice::from_ref(&o.base))?;
    let new = profiles::load(std::slice::from_ref(&o.new))?;
    let mut sym = Symbolizer::new();
    let mut base_set = profiles::stack_set(&base, &mut sym, &o.base.display().to_string())?;
    let mut new_set = profiles::stack_set(&new, &mut sym, &o.new.display().to_string())?;
    // Stacks compare only when rooted alike: if either profile's come from
    // several programs, both are rooted by program; two profiles of one
    // program (renamed or not) are compared function by function.
    if base_set.rooted_by_program() || new_set.rooted_by_program() {
        base_set.root_by_program();
        new_set.root_by_program();
    }
    let w = o.weight;
    for set in [&base_set, &new_set] {
        set.check_measures(w).map_err(anyhow::Error::msg)?;
    }
    let title = format!(
        "{} → {} — {} — total {} → {}",
        o.base.display(),
        o.new.display(),
        new_set.describe(w),
        base_set.show(w, w.of(&base_set.total())),
        new_set.show(w, w.of(&new_set.total())),
    );
    let subtitle = "widths as in the new profile; red: grew, blue: shrank against the base; a \
                    frame's ±% is its change (new − base) as a share of the new total, not its \
                    own growth";
    let labels = Labels {
        title: title.clone(),
        subtitle: Some(subtitle.into()),
        count_name: w.unit(new_set.time_unit()).to_string(),
        estimated: base_set.estimates(w) || new_set.estimates(w),
    };
    let (base_folded, new_folded) = (base_set.folded(w), new_set.folded(w));
    if let Some(out) = &out {
        out.write(&crate::render::differential(
            &base_folded,
            &new_folded,
            &labels,
            false,
        )?)?;
    }
    if let Some(html) = &html {
        let svg = crate::render::differential(&base_folded, &new_folded, &labels, true)?;
        let summary = |path: &std::path::Path, loaded: &[ProcessProfile]| DiffSide {
            profile: path.display().to_string(),
            report: ReportJson::from(&Report::new(loaded.to_vec(), None)),
        };
        let data = crate::html::diff_data(
            title,
            subtitle.into(),
            String::from_utf8_lossy(&svg).into_owned(),
            [summary(&o.base, &base), summary(&o.new, &new)],
        );
        html.write(crate::html::page(&data).as_bytes())?;
        let _ = writeln!(
            std::io::stderr(),
            "  HTML report written to {}",
            html.path().display()
        );
    }
    Ok(0)
}
