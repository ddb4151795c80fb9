//! Charts of memory over time: the timelines the shim records (live heap
//! bytes and resident memory), drawn as SVG with plotters.
//!
//! [`timelines_svg`] draws any number of named timelines on one chart, one
//! colour each, live bytes as a solid line and the resident size as a
//! dashed one (the legend names each timeline by its colour, then the two
//! line styles): the processes of a run (`report --plot`), or one program
//! under several allocators. [`run_offsets`] puts the processes of one run
//! on a shared time axis; [`process_label`] names a process for a legend.

use anyhow::{Result, anyhow, bail};
use plotters::chart::SeriesAnno;
use plotters::coord::Shift;
use plotters::prelude::*;

use allocmux_format::profile::ProcessProfile;
use allocmux_format::timeline::{Timeline, TimelinePoint};

/// Default sizes and fonts, shared by [`PlotOptions::new`] and callers.
pub mod defaults {
    /// Width of the chart in pixels.
    pub const WIDTH: u32 = 1200;
    /// Height of the chart in pixels.
    pub const HEIGHT: u32 = 640;
    /// Font family of every text (SVG viewers substitute their own).
    pub const FONT: &str = "sans-serif";
}

/// One timeline to draw.
#[derive(Clone, Copy, Debug)]
pub struct NamedTimeline<'a> {
    /// Its name in the legend ("pid 4242 python3", "jemalloc").
    pub name: &'a str,
    /// The points.
    pub timeline: &'a Timeline,
    /// Added to every point's time, in ns: where this timeline starts on
    /// the shared axis (see [`run_offsets`]; 0 starts it at the origin).
    pub offset_ns: u64,
    /// Its colour; `None` takes the next of the palette.
    pub colour: Option<RGBColor>,
}

/// What a chart shows and how large it is.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PlotOptions {
    /// The title above the chart (the command, the allocator).
    pub title: String,
    /// Draw live heap bytes (solid lines).
    pub live: bool,
    /// Draw the resident set size (dashed lines).
    pub rss: bool,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
}

impl PlotOptions {
    /// Both figures, at the default size.
    pub fn new(title: impl Into<String>) -> Self {
        PlotOptions {
            title: title.into(),
            live: true,
            rss: true,
            width: defaults::WIDTH,
            height: defaults::HEIGHT,
        }
    }
}

/// Colours of successive timelines: Tableau 10, distinct to most colour
/// vision deficiencies and readable on white.
const PALETTE: [RGBColor; 10] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xff, 0x9d, 0xa7),
    RGBColor(0x9c, 0x75, 0x5f),
    RGBColor(0xba, 0xb0, 0xac),
];

/// Dashes of the resident-size lines: length and gap, in pixels.
const DASH: i32 = 7;
/// See [`DASH`].
const GAP: i32 = 4;

/// The legend's words for the two figures.
pub const LIVE_LABEL: &str = "live heap";
/// See [`LIVE_LABEL`].
pub const RSS_LABEL: &str = "resident (RSS)";

/// Draws the timelines on one chart and returns the SVG: seconds on the x
/// axis, bytes in binary units on the y axis, a legend naming each line.
/// Empty timelines are left out; an error if none is left or if the
/// options select neither figure.
pub fn timelines_svg(timelines: &[NamedTimeline<'_>], o: &PlotOptions) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (o.width, o.height)).into_drawing_area();
        draw_on(&root, timelines, o)?;
        root.present()
            .map_err(|e| anyhow!("drawing the memory timeline: {e}"))?;
    }
    Ok(svg)
}

/// Draws the timelines into `area`, part of a larger chart (the size in
/// `o` is not used). Errors as [`timelines_svg`].
pub fn draw_on<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    timelines: &[NamedTimeline<'_>],
    o: &PlotOptions,
) -> Result<()> {
    let drawn: Vec<&NamedTimeline<'_>> = timelines
        .iter()
        .filter(|t| !t.timeline.is_empty())
        .collect();
    if drawn.is_empty() {
        bail!("no timeline to draw: every one given is empty");
    }
    if !o.live && !o.rss {
        bail!("nothing to draw: neither live bytes nor the resident size is selected");
    }
    draw(area, &drawn, o).map_err(|e| anyhow!("drawing the memory timeline: {e}"))
}

/// Seconds on the shared axis.
fn seconds(t: &NamedTimeline<'_>, p: &TimelinePoint) -> f64 {
    t.offset_ns.saturating_add(p.t_ns) as f64 / 1e9
}

/// The figures a chart draws of a point.
fn figures(p: &TimelinePoint, o: &PlotOptions) -> impl Iterator<Item = u64> {
    [(o.live, p.live_bytes), (o.rss, p.rss_bytes)]
        .into_iter()
        .filter_map(|(on, v)| on.then_some(v))
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    drawn: &[&NamedTimeline<'_>],
    o: &PlotOptions,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let font = defaults::FONT;
    let points = || {
        drawn
            .iter()
            .flat_map(|t| t.timeline.points.iter().map(move |p| (seconds(t, p), p)))
    };
    // Time starts at 0: offsets and times are never negative.
    let x_end = points().map(|(x, _)| x).fold(0.0, f64::max).max(1e-3);
    let y_peak = points().flat_map(|(_, p)| figures(p, o)).max().unwrap_or(0);
    let unit = BinaryUnit::for_bytes(y_peak);
    // Headroom above the highest line for the legend.
    let y_end = (unit.scale(y_peak) * 1.25).max(1.0);

    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(root)
        .caption(&o.title, (font, 20).into_font().color(&BLACK.mix(0.85)))
        .margin(16)
        .margin_right(32)
        .x_label_area_size(52)
        .y_label_area_size(88)
        .build_cartesian_2d(0.0..x_end, 0.0..y_end)?;
    let x_decimals = decimals_for(x_end);
    let x_label = |v: &f64| format!("{v:.x_decimals$}");
    let y_decimals = decimals_for(y_end);
    let y_label = |v: &f64| {
        if *v == 0.0 {
            "0".to_string()
        } else {
            format!("{v:.y_decimals$} {}", unit.name)
        }
    };
    let y_desc = match (o.live, o.rss) {
        (true, true) => "memory: live heap (solid), resident (dashed)",
        (true, false) => "live heap",
        _ => "resident memory (RSS)",
    };
    chart
        .configure_mesh()
        .x_desc("seconds since start")
        .y_desc(y_desc)
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .x_labels(12)
        .y_labels(8)
        .label_style((font, 13).into_font().color(&BLACK.mix(0.75)))
        .axis_desc_style((font, 15).into_font().color(&BLACK.mix(0.85)))
        .axis_style(BLACK.mix(0.6))
        .bold_line_style(BLACK.mix(0.12))
        .light_line_style(BLACK.mix(0.04))
        .max_light_lines(4)
        .draw()?;

    // The legend names each timeline once, by its colour, then says which
    // line style is which figure: N + 2 entries rather than 2N.
    for (i, t) in drawn.iter().enumerate() {
        let color = t.colour.unwrap_or(PALETTE[i % PALETTE.len()]);
        let line = color.stroke_width(2);
        let xy = |v: u64, p: &TimelinePoint| (seconds(t, p), unit.scale(v));
        let mut named = false;
        let mut name = |anno: &mut SeriesAnno<'_, DB>| {
            if !std::mem::replace(&mut named, true) {
                anno.label(t.name).legend(move |(x, y)| {
                    Rectangle::new([(x + 2, y - 5), (x + 22, y + 5)], color.filled())
                });
            }
        };
        if o.live {
            let pts: Vec<(f64, f64)> = t
                .timeline
                .points
                .iter()
                .map(|p| xy(p.live_bytes, p))
                .collect();
            name(chart.draw_series(LineSeries::new(pts, line))?);
        }
        if o.rss {
            // 0 means the resident size could not be read: left out, not
            // drawn as a drop.
            let pts: Vec<(f64, f64)> = t
                .timeline
                .points
                .iter()
                .filter(|p| p.rss_bytes > 0)
                .map(|p| xy(p.rss_bytes, p))
                .collect();
            if !pts.is_empty() {
                name(chart.draw_series(DashedLineSeries::new(pts, DASH, GAP, line))?);
            }
        }
    }
    let key = BLACK.mix(0.6).stroke_width(2);
    let no_points = std::iter::empty::<PathElement<(f64, f64)>>;
    if o.live {
        chart
            .draw_series(no_points())?
            .label(LIVE_LABEL)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], key));
    }
    if o.rss {
        chart
            .draw_series(no_points())?
            .label(RSS_LABEL)
            .legend(move |(x, y)| {
                EmptyElement::at((x, y))
                    + PathElement::new(vec![(0, 0), (DASH, 0)], key)
                    + PathElement::new(vec![(DASH + GAP, 0), (2 * DASH + GAP, 0)], key)
                    + PathElement::new(vec![(2 * (DASH + GAP), 0), (24, 0)], key)
            });
    }
    chart
        .configure_series_labels()
        .position(legend_position(drawn, o, x_end))
        .margin(12)
        .label_font((font, 13).into_font().color(&BLACK.mix(0.85)))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    Ok(())
}

/// The upper corner over the lower lines: memory often peaks early (a
/// load phase) or late (a leak), and the legend should hide neither.
fn legend_position(
    drawn: &[&NamedTimeline<'_>],
    o: &PlotOptions,
    x_end: f64,
) -> SeriesLabelPosition {
    let third = x_end / 3.0;
    let high_in = |from: f64, to: f64| {
        drawn
            .iter()
            .flat_map(|t| t.timeline.points.iter().map(move |p| (seconds(t, p), p)))
            .filter(|(x, _)| (from..=to).contains(x))
            .flat_map(|(_, p)| figures(p, o))
            .max()
            .unwrap_or(0)
    };
    if high_in(0.0, third) < high_in(x_end - third, x_end) {
        SeriesLabelPosition::UpperLeft
    } else {
        SeriesLabelPosition::UpperRight
    }
}

/// Decimals that tell neighbouring ticks of an axis spanning `range` apart.
fn decimals_for(range: f64) -> usize {
    match range {
        r if r >= 20.0 => 0,
        r if r >= 2.0 => 1,
        r if r >= 0.2 => 2,
        _ => 3,
    }
}

/// The binary unit a byte axis is labelled in.
#[derive(Clone, Copy, Debug, PartialEq)]
struct BinaryUnit {
    name: &'static str,
    bytes: f64,
}

impl BinaryUnit {
    /// The largest unit that `peak` reaches (so ticks read "48 MiB", not
    /// "50331648" or "0.05 GiB").
    fn for_bytes(peak: u64) -> BinaryUnit {
        let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
        let mut i = 0;
        while i + 1 < units.len() && peak >= 1u64 << (10 * (i + 1)) {
            i += 1;
        }
        BinaryUnit {
            name: units[i],
            bytes: (1u64 << (10 * i)) as f64,
        }
    }

    fn scale(self, bytes: u64) -> f64 {
        bytes as f64 / self.bytes
    }
}

/// Offsets (ns) that put the processes of one run on a shared time axis,
/// one per profile: processes whose lifetimes overlap or follow each other
/// within a run (a shell and its children, a parent and its fork children)
/// share their run's start as the origin (all are on the same
/// `CLOCK_MONOTONIC`); a process that starts after all earlier ones ended
/// (another run, profiles of separate commands) starts a new run at 0.
pub fn run_offsets(profiles: &[&ProcessProfile]) -> Vec<u64> {
    let mut order: Vec<usize> = (0..profiles.len()).collect();
    order.sort_by_key(|&i| profiles[i].clock_start.mono_ns);
    let mut offsets = vec![0; profiles.len()];
    let (mut run_start, mut run_end) = (0u64, None::<u64>);
    for i in order {
        let p = profiles[i];
        let start = p.clock_start.mono_ns;
        let end = start
            .saturating_add(p.timeline.duration_ns())
            .max(p.clock_end.mono_ns);
        match run_end {
            Some(e) if start <= e => run_end = Some(e.max(end)),
            _ => (run_start, run_end) = (start, Some(end)),
        }
        offsets[i] = start - run_start;
    }
    offsets
}

/// A process's name in a legend: `pid 4242 python3`.
pub fn process_label(p: &ProcessProfile) -> String {
    format!("pid {} {}", p.pid, crate::report::program_name(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeline(points: &[(u64, u64, u64)]) -> Timeline {
        Timeline {
            interval_ns: 10_000_000,
            points: points
                .iter()
                .map(|&(t_ns, live_bytes, rss_bytes)| TimelinePoint {
                    t_ns,
                    live_bytes,
                    rss_bytes,
                    temporary: 0,
                })
                .collect(),
            temporary_counted: false,
        }
    }

    #[test]
    fn units_are_the_largest_the_peak_reaches() {
        assert_eq!(BinaryUnit::for_bytes(0).name, "B");
        assert_eq!(BinaryUnit::for_bytes(1023).name, "B");
        assert_eq!(BinaryUnit::for_bytes(1024).name, "KiB");
        let mib = BinaryUnit::for_bytes(70 << 20);
        assert_eq!((mib.name, mib.scale(64 << 20)), ("MiB", 64.0));
        assert_eq!(BinaryUnit::for_bytes(u64::MAX).name, "PiB");
    }

    #[test]
    fn draws_each_timeline_in_its_colour_with_a_legend() {
        let a = timeline(&[(0, 0, 4 << 20), (500_000_000, 64 << 20, 70 << 20)]);
        let b = timeline(&[(0, 1 << 20, 0), (250_000_000, 2 << 20, 0)]);
        let empty = Timeline::default();
        let named = [
            NamedTimeline {
                name: "pid 1 a&b",
                timeline: &a,
                offset_ns: 0,
                colour: None,
            },
            NamedTimeline {
                name: "pid 2 child",
                timeline: &b,
                offset_ns: 100_000_000,
                colour: None,
            },
            NamedTimeline {
                name: "pid 3 nothing",
                timeline: &empty,
                offset_ns: 0,
                colour: None,
            },
        ];
        let svg = timelines_svg(&named, &PlotOptions::new("memory of a <test>")).unwrap();
        let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
        let texts: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text())
            .map(str::trim)
            .collect();
        for want in [
            "memory of a <test>",
            "pid 1 a&b",
            "pid 2 child",
            LIVE_LABEL,
            RSS_LABEL,
            "seconds since start",
            "60 MiB",
        ] {
            assert!(texts.contains(&want), "no text {want:?} in {texts:?}");
        }
        // The empty timeline is left out.
        assert!(!texts.iter().any(|t| t.contains("pid 3")));
        // Each timeline in its own colour: a's live line (a vertex per
        // point) and its dashes; b's live line only, its resident size
        // never read. (Legend swatches are rectangles.)
        let lines_in = |color: &str| -> Vec<usize> {
            doc.descendants()
                .filter(|n| n.has_tag_name("polyline") && n.attribute("stroke") == Some(color))
                .map(|n| n.attribute("points").unwrap().split_whitespace().count())
                .collect()
        };
        let (a_lines, b_lines) = (lines_in("#4E79A7"), lines_in("#F28E2B"));
        assert!(a_lines.len() > 2 && a_lines.contains(&2), "{a_lines:?}");
        assert_eq!(b_lines, [2], "b: its live line only");

        let err = timelines_svg(&named[2..], &PlotOptions::new("x")).unwrap_err();
        assert!(err.to_string().contains("no timeline"), "{err}");
        let mut neither = PlotOptions::new("x");
        (neither.live, neither.rss) = (false, false);
        assert!(timelines_svg(&named, &neither).is_err());
    }

    #[test]
    fn processes_of_one_run_share_an_axis_and_separate_runs_start_at_zero() {
        let proc = |start: u64, end: u64| {
            let mut p = allocmux_format::profile::parse(
                "allocmux-profile 1\nprocess\npid 1\nclock_start 0 0\nend\n",
            )
            .unwrap()
            .pop()
            .unwrap();
            p.clock_start.mono_ns = start;
            p.clock_end.mono_ns = end;
            p
        };
        // A parent, its child, a grandchild; then, later, another run.
        let ps = [
            proc(1_000, 9_000),
            proc(3_000, 4_000),
            proc(8_500, 9_500),
            proc(50_000, 60_000),
            proc(55_000, 56_000),
        ];
        let refs: Vec<&ProcessProfile> = ps.iter().collect();
        assert_eq!(run_offsets(&refs), [0, 2_000, 7_500, 0, 5_000]);
    }
}
