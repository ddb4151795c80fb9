//! Flamegraph SVGs of folded stacks, through inferno: one profile, or the
//! difference between two.
//!
//! Both use inferno's memory palette, with colours derived from the
//! function name (so a function has the same colour in every graph, and
//! two graphs of the same program compare at a glance), and keep inferno's
//! JavaScript: search (Ctrl-F) and click-to-zoom work in a browser.

use std::io::BufReader;

use anyhow::{Result, bail};
use inferno::flamegraph::{self, Direction, Options, Palette, color::BasicPalette};

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
    /// Whether the values are estimates (sampled stacks, or allocator
    /// time): every frame's figure is then marked `≈`, as the title is.
    pub estimated: bool,
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
        estimated: set.estimates(w),
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
    Ok(mark_estimates(svg, labels))
}

/// Marks each frame's figure `≈` where the values are estimates. inferno
/// writes a frame's tooltip as `<title>NAME (N COUNT_NAME, P%...)</title>`
/// (the total as `all (N COUNT_NAME, 100%)`), with no option for a mark,
/// so the mark goes in after the last ` (` before ` COUNT_NAME, ` of each
/// title: the name is XML-escaped and cannot end a title early. Its
/// script shows the title's text on hover, so the mark shows there too.
fn mark_estimates(svg: Vec<u8>, labels: &Labels) -> Vec<u8> {
    if !labels.estimated {
        return svg;
    }
    let Ok(text) = String::from_utf8(svg) else {
        unreachable!("inferno writes UTF-8");
    };
    let unit = format!(" {}, ", labels.count_name);
    let mut out = String::with_capacity(text.len() + text.len() / 50);
    let mut rest = text.as_str();
    while let Some(start) = rest.find("<title>") {
        let (before, from) = rest.split_at(start + "<title>".len());
        out.push_str(before);
        let Some(end) = from.find("</title>") else {
            rest = from;
            break;
        };
        let title = &from[..end];
        // The figure: digits and separators between ` (` and the unit.
        let marked = title.rfind(&unit).and_then(|u| {
            let open = title[..u].rfind(" (")?;
            let figure = &title[open + 2..u];
            (!figure.is_empty() && figure.bytes().all(|b| b.is_ascii_digit() || b == b','))
                .then(|| format!("{} (≈{}", &title[..open], &title[open + 2..]))
        });
        out.push_str(marked.as_deref().unwrap_or(title));
        rest = &from[end..];
    }
    out.push_str(rest);
    out.into_bytes()
}

/// Renders the differential flamegraph of two folded profiles: frames are
/// as wide as in `new`, red where `new` has more than `base`, blue where
/// it has less (inferno's differential mode, after Brendan Gregg's).
/// `icicle` draws the root on top (as the HTML page's flamegraph does, so
/// the widest frames are in view without scrolling past deep stacks),
/// else at the bottom, as flamegraph SVGs are drawn.
pub fn differential(base: &str, new: &str, labels: &Labels, icicle: bool) -> Result<Vec<u8>> {
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
    let mut options = options(labels);
    if icicle {
        options.direction = Direction::Inverted;
    }
    flamegraph::from_reader(&mut options, BufReader::new(&diff[..]), &mut svg)
        .map_err(|e| anyhow::anyhow!("rendering the flamegraph: {e}"))?;
    Ok(mark_estimates(svg, labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(estimated: bool) -> Labels {
        Labels {
            title: "t".into(),
            subtitle: None,
            count_name: "allocations".into(),
            estimated,
        }
    }

    /// Every frame's tooltip, the total's too, carries the mark when the
    /// values are estimates, and none when they are counted.
    #[test]
    fn estimated_frames_are_marked_in_their_tooltips() {
        let folded = "main;a (x) 1200\nmain;b 3\n";
        let svg = String::from_utf8(flamegraph(folded, &labels(true)).unwrap()).unwrap();
        assert!(
            svg.contains("<title>all (≈1,203 allocations, 100%)</title>"),
            "{svg}"
        );
        assert!(
            svg.contains("<title>a (x) (≈1,200 allocations, 99.75%)</title>"),
            "{svg}"
        );
        assert!(svg.contains("<title>b (≈3 allocations, "), "{svg}");
        assert!(!svg.contains("(1,200 allocations"), "{svg}");
        let svg = String::from_utf8(flamegraph(folded, &labels(false)).unwrap()).unwrap();
        assert!(
            svg.contains("<title>a (x) (1,200 allocations, 99.75%)</title>"),
            "{svg}"
        );
        assert!(!svg.contains('≈'), "{svg}");
        let svg =
            String::from_utf8(differential("main;b 2\n", folded, &labels(true), true).unwrap())
                .unwrap();
        assert!(svg.contains("<title>b (≈3 allocations, "), "{svg}");
    }
}
