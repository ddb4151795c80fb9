//! A comparison as the table `compare` prints: per allocator the medians
//! and spreads, the intervals against the baseline, and the verdict with
//! the pairs it rests on.

use std::io::{self, Write};

use super::Comparison;
use super::summary::{Figure, Summary, percent};
use crate::stats::Interval;
use crate::units::{Bytes, Count, Dur, shell_words};

/// A speed ratio in words: "1.16× faster (1.14–1.18)" or "1.10× slower (...)".
fn speed_words(iv: &Interval) -> String {
    if iv.estimate >= 1.0 {
        format!("{:.2}× faster ({:.2}–{:.2})", iv.estimate, iv.low, iv.high)
    } else {
        let slower = iv.recip();
        format!(
            "{:.2}× slower ({:.2}–{:.2})",
            slower.estimate, slower.low, slower.high
        )
    }
}

/// The human report.
pub fn write_human(cmp: &Comparison, s: &Summary, w: &mut dyn Write) -> io::Result<()> {
    writeln!(w, "allocmux compare: `{}`", shell_words(&cmp.command))?;
    let stopped = if cmp.stopped_early {
        format!(
            " (stopped early of {}: the verdict was clear)",
            cmp.rounds_planned
        )
    } else {
        String::new()
    };
    writeln!(
        w,
        "  {} round{}{stopped} after {} warm-up round{}, the allocators interleaved in each; \
         medians, wall time with its interquartile range",
        s.rounds,
        if s.rounds == 1 { "" } else { "s" },
        cmp.warmup,
        if cmp.warmup == 1 { "" } else { "s" },
    )?;
    let recorded = s.per_allocator.first().map_or(0, |a| a.recorded_runs);
    match &cmp.unrecorded {
        Some(why) => writeln!(
            w,
            "  wall, user, sys, max RSS: runs that record nothing; allocations, alloc time, \
             share: not measured ({why})\n"
        )?,
        None => writeln!(
            w,
            "  wall, user, sys, max RSS: runs that record nothing; allocations, alloc time \
             (with its range), share: {recorded} recorded run{} of each (1 round in {})\n",
            if recorded == 1 { "" } else { "s" },
            super::RECORD_EVERY,
        )?,
    }
    writeln!(
        w,
        "  {:<9} {:>26} {:>10} {:>10} {:>10} {:>12} {:>26} {:>6}",
        "allocator",
        "wall (IQR)",
        "user",
        "sys",
        "max RSS",
        "allocations",
        "alloc time (range)",
        "share"
    )?;
    for a in &s.per_allocator {
        if a.figures.is_empty() {
            continue;
        }
        let wall = a.spread(Figure::Wall);
        let m = |f: Figure| a.spread(f).median as u64;
        // Figures of recorded runs, `?` when there were none.
        let recorded = |f: Figure, show: &dyn Fn(f64) -> String| {
            a.figure(f).map_or("?".to_string(), |s| show(s.median))
        };
        // Allocator time varies from run to run far more than the counts
        // (a preempted timed call stands for many): its few recorded runs'
        // range, so a median of two is not read as a measurement.
        let alloc_time = a
            .figure(Figure::AllocatorTime)
            .map_or("?".to_string(), |s| {
                if a.recorded_runs > 1 {
                    time_with_range(s.median, s.min, s.max)
                } else {
                    Dur(s.median as u64).to_string()
                }
            });
        writeln!(
            w,
            "  {:<9} {:>26} {:>10} {:>10} {:>10} {:>12} {:>26} {:>6}",
            a.allocator.name(),
            time_with_range(wall.median, wall.q1, wall.q3),
            Dur(m(Figure::User)),
            Dur(m(Figure::Sys)),
            Bytes(m(Figure::MaxRss)),
            recorded(Figure::AllocationCalls, &|v| Count(v as u64).to_string()),
            alloc_time,
            recorded(Figure::AllocatorShare, &|v| format!("{:.1}%", 100.0 * v)),
        )?;
    }
    let base = cmp.allocators[0].name();
    if s.per_allocator.iter().any(|a| a.speedup.is_some()) {
        writeln!(
            w,
            "\n  against {base}: Hodges–Lehmann estimates with {} signed-rank intervals over the \
             paired rounds",
            percent(cmp.level)
        )?;
        writeln!(w, "  {:<9} {:<32} max RSS", "allocator", "speed")?;
        for a in s.per_allocator.iter().skip(1) {
            let (Some(sp), Some(mem)) = (a.speedup, a.memory) else {
                continue;
            };
            writeln!(
                w,
                "  {:<9} {:<32} {:.2}× ({:.2}–{:.2})",
                a.allocator.name(),
                speed_words(&sp),
                mem.estimate,
                mem.low,
                mem.high
            )?;
        }
    }
    writeln!(w, "\n  verdict: {}", s.verdict_line(cmp.level))?;
    if !s.verdict_pairs().is_empty() {
        writeln!(
            w,
            "  the pairs it rests on: wall time, {} intervals as above",
            percent(cmp.level)
        )?;
        for p in s.verdict_pairs() {
            writeln!(
                w,
                "    {:<21} {}",
                format!("{} vs {}", p.a.name(), p.b.name()),
                speed_words(&p.speedup)
            )?;
        }
    }
    for warning in &s.warnings {
        writeln!(w, "  warning: {warning}")?;
    }
    Ok(())
}

/// "721.4 ms (660.4–820.1)": a time and a range in the same unit.
fn time_with_range(t: f64, lo: f64, hi: f64) -> String {
    let (div, unit) = [(1e9, "s"), (1e6, "ms"), (1e3, "µs")]
        .into_iter()
        .find(|&(d, _)| t >= d)
        .unwrap_or((1.0, "ns"));
    let d = if t / div >= 100.0 { 1 } else { 2 };
    format!("{:.d$} {unit} ({:.d$}–{:.d$})", t / div, lo / div, hi / div)
}
