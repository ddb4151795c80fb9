//! The comparison chart: wall time and peak RSS per allocator, every run a
//! dot, the interquartile range a box and the median a bar, so the spread
//! is as visible as the difference; under them, when the profiles have
//! timelines, memory over time of each allocator's median run.

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use super::{Comparison, Figure, Summary};
use allocmux_format::timeline::Timeline;

use crate::plot::{NamedTimeline, PlotOptions};
use crate::units::{Bytes, Dur};
use allocmux_format::Backend;

use crate::allocator::Allocator;

/// Size of the upper part (the two panels and the verdict), in pixels.
const SIZE: (u32, u32) = (1000, 480);

/// Height of the timeline panel under it.
const TIMELINE_HEIGHT: u32 = 400;

/// The colour of an allocator, the same in every allocmux chart: the
/// built-in ones each their own, a library one of a few more chosen by
/// its name.
pub fn colour(a: &Allocator) -> RGBColor {
    const LIBRARIES: [RGBColor; 4] = [
        RGBColor(0x81, 0x72, 0xb3),
        RGBColor(0xc4, 0x4e, 0x52),
        RGBColor(0x93, 0x78, 0x60),
        RGBColor(0xda, 0x8b, 0xc3),
    ];
    match a {
        Allocator::BuiltIn(Backend::System) => RGBColor(0x4c, 0x72, 0xb0),
        Allocator::BuiltIn(Backend::Jemalloc) => RGBColor(0xdd, 0x84, 0x52),
        Allocator::BuiltIn(Backend::Mimalloc) => RGBColor(0x55, 0xa8, 0x68),
        Allocator::BuiltIn(Backend::Next) | Allocator::Library { .. } => {
            let hash = a
                .name()
                .bytes()
                .fold(0usize, |h, b| h.wrapping_mul(31) + b as usize);
            LIBRARIES[hash % LIBRARIES.len()]
        }
    }
}

/// Draws the comparison as an SVG document.
pub fn svg(cmp: &Comparison, s: &Summary, title: &str) -> Result<String> {
    let timelines = median_timelines(cmp);
    let height = SIZE.1
        + if timelines.is_empty() {
            0
        } else {
            TIMELINE_HEIGHT
        };
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (SIZE.0, height)).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| anyhow!("drawing the comparison chart: {e}"))?;
        let (upper, lower) = root.split_vertically(SIZE.1);
        draw(&upper, cmp, s, title).map_err(|e| anyhow!("drawing the comparison chart: {e}"))?;
        if !timelines.is_empty() {
            let named: Vec<NamedTimeline<'_>> = timelines
                .iter()
                .map(|&(a, t)| NamedTimeline {
                    name: a.name(),
                    timeline: t,
                    offset_ns: 0,
                    colour: Some(colour(a)),
                })
                .collect();
            let o = PlotOptions::new("memory over time, the median run of each allocator");
            crate::plot::draw_on(&lower, &named, &o)?;
        }
        root.present()
            .map_err(|e| anyhow!("drawing the comparison chart: {e}"))?;
    }
    Ok(out)
}

/// Per allocator, the timeline of the main process of its median recorded
/// run by wall time (the lower middle one for an even count): a typical
/// run, not the luckiest or the unluckiest.
fn median_timelines(cmp: &Comparison) -> Vec<(&Allocator, &Timeline)> {
    cmp.allocators
        .iter()
        .filter_map(|a| {
            let mut runs: Vec<_> = cmp
                .runs
                .iter()
                .filter(|r| !r.warmup && r.recorded && r.allocator == *a)
                .collect();
            runs.sort_by_key(|r| r.wall_ns);
            let run = runs.get(runs.len().saturating_sub(1) / 2)?;
            // Profiles are in start order: the first is the command itself.
            let main = run.profiles.first()?;
            (!main.timeline.is_empty()).then_some((a, &main.timeline))
        })
        .collect()
}

type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;

fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    cmp: &Comparison,
    s: &Summary,
    title: &str,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let root = area.titled(title, ("sans-serif", 20))?;
    let (body, footer) = root.split_vertically(SIZE.1 - 70);
    footer.draw(&Text::new(
        format!("verdict: {}", s.verdict_line(cmp.level)),
        (20, 8),
        ("sans-serif", 14),
    ))?;
    footer.draw(&Text::new(
        format!(
            "{} rounds after {} warm-up, allocators interleaved; dots: runs, box: interquartile range, bar: median",
            s.rounds, cmp.warmup
        ),
        (20, 30),
        ("sans-serif", 12).into_font().color(&RGBColor(0x60, 0x60, 0x60)),
    ))?;
    let panels = body.split_evenly((1, 2));
    panel(&panels[0], cmp, Figure::Wall, "wall time", &|v| {
        Dur(v as u64).to_string()
    })?;
    panel(&panels[1], cmp, Figure::MaxRss, "peak RSS", &|v| {
        Bytes(v as u64).to_string()
    })?;
    Ok(())
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    cmp: &Comparison,
    figure: Figure,
    name: &str,
    fmt: &dyn Fn(f64) -> String,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let measured = || cmp.runs.iter().filter(|r| !r.warmup && r.gives(figure));
    let values: Vec<f64> = measured().map(|r| r.figure(figure)).collect();
    let max = values.iter().copied().fold(0.0, f64::max).max(1.0);
    // Ticks fall on round numbers of a unit that fits the data.
    let (scale, unit) = axis_unit(figure, max);
    let top = max * 1.08 / scale;
    let n = cmp.allocators.len();
    let names: Vec<&str> = cmp.allocators.iter().map(|a| a.name()).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(name, ("sans-serif", 16))
        .margin(12)
        .margin_right(70)
        .x_label_area_size(30)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                names.get(i as usize).copied().unwrap_or("").to_string()
            } else {
                String::new()
            }
        })
        .y_labels(6)
        .y_label_formatter(&|y| format!("{y} {unit}"))
        .label_style(("sans-serif", 13))
        .light_line_style(WHITE)
        .draw()?;
    for (i, a) in cmp.allocators.iter().enumerate() {
        let x = i as f64;
        let c = colour(a);
        let mut v: Vec<f64> = measured()
            .filter(|r| r.allocator == *a)
            .map(|r| r.figure(figure))
            .collect();
        if v.is_empty() {
            continue;
        }
        let label = fmt(crate::stats::median(&v));
        for y in &mut v {
            *y /= scale;
        }
        let sp = crate::stats::Spread::of(&v);
        chart.draw_series(std::iter::once(Rectangle::new(
            [(x - 0.25, sp.q1), (x + 0.25, sp.q3)],
            c.mix(0.25).filled(),
        )))?;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x, sp.min), (x, sp.max)],
            c.stroke_width(1),
        )))?;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x - 0.3, sp.median), (x + 0.3, sp.median)],
            c.stroke_width(3),
        )))?;
        // Spread the dots sideways by rank so equal values stay visible.
        v.sort_by(f64::total_cmp);
        let k = v.len().max(2) as f64 - 1.0;
        chart.draw_series(v.iter().enumerate().map(|(j, &y)| {
            let dx = -0.18 + 0.36 * j as f64 / k;
            Circle::new((x + dx, y), 3, c.filled())
        }))?;
        chart.draw_series(std::iter::once(Text::new(
            label.clone(),
            (x + 0.32, sp.median),
            ("sans-serif", 12),
        )))?;
    }
    Ok(())
}

/// The unit of a chart axis for values up to `max`: its size and name.
fn axis_unit(figure: Figure, max: f64) -> (f64, &'static str) {
    let units: &[(f64, &str)] = match figure {
        Figure::MaxRss => &[(1024.0, "KiB"), (1048576.0, "MiB"), (1073741824.0, "GiB")],
        _ => &[(1e3, "µs"), (1e6, "ms"), (1e9, "s")],
    };
    units
        .iter()
        .rev()
        .find(|(size, _)| max >= *size)
        .copied()
        .unwrap_or(units[0])
}
