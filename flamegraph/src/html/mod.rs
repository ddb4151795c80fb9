//! The HTML report (`--html FILE`): one self-contained page with the
//! summary, a flamegraph whose weight and direction switch in place, the
//! functions with their callers and callees, memory over time, and for
//! `compare` and `diff` their charts.
//!
//! The page is a template (`assets/report.html`) into which go one JSON
//! blob of the data ([`PageData`]: the report's own JSON structs, the call
//! tree of [`tree`], the timelines' points), d3 and d3-flame-graph
//! (vendored, see docs/dependencies.md) and our script
//! (`assets/report.js`), which draws the views from the blob. Nothing is
//! fetched: a Content-Security-Policy forbids it, so the file works from
//! `file://`, offline, as a CI artifact.

pub mod tree;

use allocmux_format::profile::{ProcessProfile, Recording, StackMode};
use serde::Serialize;

use crate::json::{CompareJson, ReportJson};
use crate::report::Report;
use crate::stacks::{StackSet, Weight};

pub use tree::FlameTree;

const TEMPLATE: &str = include_str!("../../assets/report.html");
const D3_JS: &str = include_str!("../../assets/d3.min.js");
const FLAMEGRAPH_JS: &str = include_str!("../../assets/d3-flamegraph.min.js");
const REPORT_JS: &str = include_str!("../../assets/report.js");
const REPORT_CSS: &str = include_str!("../../assets/report.css");

/// Everything a page shows; the views present are those whose data is.
#[derive(Debug, Serialize)]
pub struct PageData {
    /// The heading: command, allocators.
    pub title: String,
    /// Lines said above the summary (how stacks were recorded, estimates,
    /// pruning).
    pub notes: Vec<String>,
    /// The summary, as `--json` writes it.
    pub report: Option<ReportJson>,
    /// The flamegraph and functions views.
    pub flame: Option<FlameData>,
    /// Memory over time, per process.
    pub timelines: Vec<TimelineData>,
    /// `compare`'s results.
    pub compare: Option<CompareData>,
    /// `diff`'s differential flamegraph.
    pub diff: Option<DiffData>,
}

/// The call tree and what its weights mean.
#[derive(Debug, Serialize)]
pub struct FlameData {
    /// The tree.
    pub tree: FlameTree,
    /// Per weight, in [`Weight::ALL`]'s order (the tree's value order).
    pub weights: Vec<WeightData>,
    /// The weight the page opens with, as an index into `weights`.
    pub initial: usize,
    /// Whether the tree's `lifetimes` were recorded (every profile's).
    pub lifetimes_measured: bool,
    /// TSC ticks per ns, for the lifetimes' sums (null: unknown).
    pub ticks_per_ns: Option<f64>,
}

/// One weight of the flamegraph.
#[derive(Debug, Serialize)]
pub struct WeightData {
    /// `count`, `bytes`, ...
    pub name: &'static str,
    /// What it means here (with a note for still-running processes).
    pub describe: String,
    /// Its unit (`allocations`, `bytes`, `ns` or `ticks`).
    pub unit: &'static str,
    /// Whether its figures are estimates (shown with `≈`).
    pub estimated: bool,
    /// Whether the profiles measure it (temporary allocations need exact
    /// stacks): the page offers it only then.
    pub measured: bool,
    /// The total as the text report shows it, with any interval.
    pub total_shown: String,
}

/// One process's memory over time.
#[derive(Debug, Serialize)]
pub struct TimelineData {
    /// `pid 4242 python3`.
    pub label: String,
    /// `[ns since the run's start, live bytes, resident bytes, temporary
    /// allocations so far]`.
    pub points: Vec<[u64; 4]>,
    /// Whether the points count temporary allocations (exact stacks).
    pub temporary_counted: bool,
}

/// `compare`'s results for the page.
#[derive(Debug, Serialize)]
pub struct CompareData {
    /// The verdict line.
    pub verdict: String,
    /// Every run and the summary, as `compare --json` writes them.
    pub summary: CompareJson,
    /// The table `compare` prints, intervals and all.
    pub table: String,
    /// The chart of `compare --plot` (times, peak RSS, the median runs'
    /// timelines overlaid).
    pub chart_svg: String,
}

/// `diff`'s differential flamegraph for the page.
#[derive(Debug, Serialize)]
pub struct DiffData {
    /// Its title.
    pub title: String,
    /// What the colours mean.
    pub subtitle: String,
    /// inferno's differential SVG, shown in a frame of its own so that its
    /// search and zoom script runs as in the SVG file.
    pub svg: String,
    /// The base profile's summary, then the new one's.
    pub sides: [DiffSide; 2],
}

/// One profile of a diff: its path and its summary.
#[derive(Debug, Serialize)]
pub struct DiffSide {
    /// The profile as named on the command line.
    pub profile: String,
    /// Its summary, as `report --json` writes it.
    pub report: ReportJson,
}

/// The page data of profiles: the summary, the flamegraph when they have
/// stacks (opening on `weight`), and their timelines.
pub fn profile_data(
    title: String,
    profiles: &[ProcessProfile],
    report: &Report,
    set: Option<&StackSet<'_>>,
    weight: Weight,
) -> PageData {
    let mut notes = Vec::new();
    let flame = set.map(|set| {
        let tree = FlameTree::build(set);
        let mode = set.mode_description();
        if !mode.is_empty() {
            notes.push(format!("stacks recorded: {mode}"));
        }
        if profiles
            .iter()
            .any(|p| matches!(p.stacks.mode, StackMode::Sample { .. }))
        {
            notes.push(
                "the stacks are sampled: their figures are estimates, marked ≈ (small \
                 allocations are rarely sampled; record every stack for exact counts)"
                    .into(),
            );
        }
        if let Some(p) = &tree.pruned {
            notes.push(format!(
                "pruned: the call tree had {} frames; those whose figures are all below \
                 {}% of their weight's total are merged into a [below threshold] frame \
                 under their caller ({} frames kept); figures and totals are unchanged",
                crate::units::Count(p.nodes_before as u64),
                p.threshold * 100.0,
                crate::units::Count(p.nodes_after as u64),
            ));
        }
        if set.lost() > 0 {
            notes.push(format!(
                "{} allocations have no stack and are in no frame",
                crate::units::Count(set.lost())
            ));
        }
        let weights = Weight::ALL
            .iter()
            .map(|&w| WeightData {
                name: w.name(),
                describe: set.describe(w),
                unit: w.unit(set.time_unit()),
                estimated: set.estimates(w),
                measured: set.measures(w),
                total_shown: set.show_total(w),
            })
            .collect();
        let initial = Weight::ALL
            .iter()
            .position(|&w| w == weight)
            .expect("every weight is listed");
        FlameData {
            tree,
            weights,
            initial,
            lifetimes_measured: set.measures_lifetimes(),
            ticks_per_ns: set.ticks_per_ns,
        }
    });
    if profiles
        .iter()
        .any(|p| matches!(p.recording, Recording::Sampled { .. }))
    {
        notes.push(
            "recorded at the sampled level: every figure is an estimate, marked ≈, and \
             allocator time is not estimated (-)"
                .into(),
        );
    }
    PageData {
        title,
        notes,
        report: Some(ReportJson::from(report)),
        flame,
        timelines: timelines(profiles),
        compare: None,
        diff: None,
    }
}

/// The processes' timelines on one clock, in start order.
fn timelines(profiles: &[ProcessProfile]) -> Vec<TimelineData> {
    let with: Vec<&ProcessProfile> = profiles.iter().filter(|p| !p.timeline.is_empty()).collect();
    let offsets = crate::plot::run_offsets(&with);
    let mut out: Vec<(u64, TimelineData)> = with
        .iter()
        .zip(offsets)
        .map(|(p, offset)| {
            (
                offset,
                TimelineData {
                    label: crate::plot::process_label(p),
                    points: p
                        .timeline
                        .points
                        .iter()
                        .map(|q| [q.t_ns + offset, q.live_bytes, q.rss_bytes, q.temporary])
                        .collect(),
                    temporary_counted: p.timeline.temporary_counted,
                },
            )
        })
        .collect();
    out.sort_by_key(|(offset, _)| *offset);
    out.into_iter().map(|(_, t)| t).collect()
}

/// The page of `data`: the template with the data and the scripts in it.
pub fn page(data: &PageData) -> String {
    // No `<` at all in the data's script element: `</script>` would end it
    // early, and `<!--` with `<script` would change how the browser scans
    // it. `<` appears in JSON only inside strings, where `\u003c` reads
    // back as `<`.
    let json = serde_json::to_string(data)
        .expect("the page data serialises")
        .replace('<', "\\u003c");
    let mut out = String::with_capacity(TEMPLATE.len() + json.len() + D3_JS.len() + 64 * 1024);
    let mut rest = TEMPLATE;
    // Filled in one pass, so that nothing inserted is searched again.
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let end = start
            + rest[start..]
                .find("}}")
                .expect("the template's markers close");
        out.push_str(match &rest[start + 2..end] {
            "VERSION" => env!("CARGO_PKG_VERSION"),
            "DATA" => &json,
            "D3" => D3_JS,
            "FLAMEGRAPH_JS" => FLAMEGRAPH_JS,
            "REPORT_JS" => REPORT_JS,
            "REPORT_CSS" => REPORT_CSS,
            other => panic!("unknown template marker {other}"),
        });
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    out
}

/// The page of a comparison: its table, verdict and chart.
pub fn compare_data(
    title: String,
    verdict: String,
    summary: CompareJson,
    table: String,
    chart_svg: String,
) -> PageData {
    PageData {
        title,
        notes: Vec::new(),
        report: None,
        flame: None,
        timelines: Vec::new(),
        compare: Some(CompareData {
            verdict,
            summary,
            table,
            chart_svg,
        }),
        diff: None,
    }
}

/// The page of a differential flamegraph, with both profiles' summaries.
pub fn diff_data(title: String, subtitle: String, svg: String, sides: [DiffSide; 2]) -> PageData {
    PageData {
        title: title.clone(),
        notes: Vec::new(),
        report: None,
        flame: None,
        timelines: Vec::new(),
        compare: None,
        diff: Some(DiffData {
            title,
            subtitle,
            svg,
            sides,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_cannot_close_its_script_element() {
        let data = PageData {
            title: "</script><script>alert(1)</script>".into(),
            notes: vec![],
            report: None,
            flame: None,
            timelines: vec![],
            compare: None,
            diff: None,
        };
        let html = page(&data);
        let start = html.find("id=\"allocmux-data\">").unwrap();
        let end = start + html[start..].find("</script>").unwrap();
        let blob = &html[start + "id=\"allocmux-data\">".len()..end];
        let back: serde_json::Value = serde_json::from_str(blob).unwrap();
        assert_eq!(back["title"], "</script><script>alert(1)</script>");
        assert!(!html.contains("{{"), "every marker is filled");
    }

    #[test]
    fn the_page_fetches_nothing() {
        let html = page(&PageData {
            title: String::new(),
            notes: vec![],
            report: None,
            flame: None,
            timelines: vec![],
            compare: None,
            diff: None,
        });
        assert!(html.contains("default-src 'none'"));
        assert!(!html.contains("<script src"));
        assert!(!html.contains("<link "));
    }
}
