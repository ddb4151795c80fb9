//! Flamegraph SVGs of folded stacks, through inferno: one profile, or the
//! difference between two.
//!
//! Both use inferno's memory palette, with colours derived from the
//! function name (so a function has the same colour in every graph, and
//! two graphs of the same program compare at a glance), and keep inferno's
//! JavaScript: search (Ctrl-F) and click-to-zoom work in a browser.

use std::io::BufReader;

use anyhow::{Result, bail};
use inferno::flamegraph::{self, Options, Palette, color::BasicPalette};

use crate::stacks::{StackSet, Weight};

/// What a flamegraph says about itself.
#[derive(Clone, Debug)]
pub struct Labels {
    /// The title: command, allocator, weight, total.
    pub title: String,
    /// A second line under the title (how stacks were recorded, caveats).
    pub subtitle: Option<String>,
    /// The unit of the values ("bytes", "allocations", "ns").
    pub count_name: String,
}

/// Labels for a flamegraph of `set` weighed by `w`: the title is
/// `what — weight (how recorded) — total` (`what` names the command and
/// allocator), the subtitle counts processes, stacks and lost stacks, and
/// says when the recorder ran short of memory.
pub fn labels(set: &StackSet<'_>, w: Weight, what: String) -> Labels {
    let mode = set.mode_description();
    let total = set.show_total(w);
    let title = if mode.is_empty() {
        format!("{what} — {} — total {total}", set.describe(w))
    } else {
        format!("{what} — {} ({mode}) — total {total}", set.describe(w))
    };
    let n = set.profiles.len();
    let mut subtitle = format!(
        "{n} process{}, {} recorded stacks",
        if n == 1 { "" } else { "es" },
        set.stacks.len()
    );
    if set.lost() > 0 {
        subtitle += &format!(", {} allocations without a stack", set.lost());
    }
    if set.degraded().0 > 0 {
        subtitle += ", incomplete: the recorder ran short of memory";
    }
    Labels {
        title,
        subtitle: Some(subtitle),
        count_name: w.unit(set.time_unit()).to_string(),
    }
}

fn options(l: &Labels) -> Options<'static> {
    let mut o = Options::default();
    o.colors = Palette::Basic(BasicPalette::Mem);
    o.hash = true;
    o.title = l.title.clone();
    o.subtitle = l.subtitle.clone();
    o.count_name = l.count_name.clone();
    o
}

/// Renders folded stacks (`root;...;leaf value` lines) as an SVG.
pub fn flamegraph(folded: &str, labels: &Labels) -> Result<Vec<u8>> {
    if folded.trim().is_empty() {
        bail!("nothing to draw: no stack has a non-zero value");
    }
    let mut svg = Vec::new();
    flamegraph::from_reader(
        &mut options(labels),
        BufReader::new(folded.as_bytes()),
        &mut svg,
    )
    .map_err(|e| anyhow::anyhow!("rendering the flamegraph: {e}"))?;
    Ok(svg)
}

/// Renders the differential flamegraph of two folded profiles: frames are
/// as wide as in `new`, red where `new` has more than `base`, blue where
/// it has less (inferno's differential mode, after Brendan Gregg's).
pub fn differential(base: &str, new: &str, labels: &Labels) -> Result<Vec<u8>> {
    if base.trim().is_empty() && new.trim().is_empty() {
        bail!("nothing to draw: neither profile has a stack with a non-zero value");
    }
    let mut diff = Vec::new();
    inferno::differential::from_readers(
        inferno::differential::Options::default(),
        BufReader::new(base.as_bytes()),
        BufReader::new(new.as_bytes()),
        &mut diff,
    )
    .map_err(|e| anyhow::anyhow!("comparing the profiles: {e}"))?;
    let mut svg = Vec::new();
    flamegraph::from_reader(&mut options(labels), BufReader::new(&diff[..]), &mut svg)
        .map_err(|e| anyhow::anyhow!("rendering the flamegraph: {e}"))?;
    Ok(svg)
}
