//! A [`Report`] as the table `run` and `report` print: the run's line,
//! a row per process, the totals, the calls, allocator time and what the
//! allocator holds.

use std::io::{self, Write};

use allocmux_format::Backend;
use allocmux_format::Func;
use allocmux_format::lifetimes::DECADE_LABELS;
use allocmux_format::profile::{AllocatorReading, ProcessProfile, StackMode, State};

use super::{
    HeapOverhead, LifetimeFigures, MIN_MEASURED_LIVE, ProcessFigures, Report, heap_overhead,
};
use crate::sys::how_it_ended;
use crate::units::{Bytes, Count, Dur, share, shell_words, truncate};

impl Report {
    /// The human summary.
    pub fn write_human(&self, w: &mut dyn Write) -> io::Result<()> {
        let t = self.total();
        match &self.run {
            Some(r) => {
                let how = how_it_ended(&r.exit);
                writeln!(
                    w,
                    "allocmux: `{}` under {} {how}",
                    shell_words(&r.command),
                    r.allocator
                )?;
                writeln!(
                    w,
                    "  wall {}   CPU {} (user {} + sys {})   max RSS {}   {} process{}",
                    Dur(r.wall_ns),
                    Dur(t.cpu_ns),
                    Dur(r.exit.user_ns),
                    Dur(r.exit.sys_ns),
                    Bytes(t.max_rss_bytes),
                    self.processes.len(),
                    if self.processes.len() == 1 { "" } else { "es" }
                )?;
            }
            None => writeln!(
                w,
                "allocmux report: {} process{} under {}",
                self.processes.len(),
                if self.processes.len() == 1 { "" } else { "es" },
                self.allocator_name()
            )?,
        }
        if self.processes.is_empty() {
            writeln!(
                w,
                "  no process left a profile (statically linked, setuid, or killed before its first write?)"
            )?;
            return Ok(());
        }
        writeln!(
            w,
            "\n  {:<8} {:<16} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>6}",
            "pid",
            "program",
            "allocs",
            "frees",
            "allocated",
            "peak live",
            "at exit",
            "alloc time",
            "share"
        )?;
        const SHOWN: usize = 12;
        let mut order: Vec<&ProcessFigures> = self.processes.iter().collect();
        if order.len() > SHOWN {
            order.sort_by_key(|p| std::cmp::Reverse(p.profile.totals.total_calls()));
        }
        // `≈` before each figure that is an estimate (the sampled level).
        let about = |estimated: bool| if estimated { "≈" } else { "" };
        for p in order.iter().take(SHOWN) {
            let tt = &p.profile.totals;
            let a = about(p.estimated());
            let mut name = p.program();
            if p.figures_unknown() {
                name.push('?');
                writeln!(
                    w,
                    "  {:<8} {:<16} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>6}",
                    p.profile.pid,
                    truncate(&name, 16),
                    "?",
                    "?",
                    "?",
                    "?",
                    "?",
                    "?",
                    "?"
                )?;
                continue;
            }
            if p.profile.state == State::Running {
                name.push('*');
            }
            writeln!(
                w,
                "  {:<8} {:<16} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>6}",
                p.profile.pid,
                truncate(&name, 16),
                format!("{a}{}", Count(tt.allocation_calls())),
                format!("{a}{}", Count(tt.calls_of(Func::Free))),
                format!("{a}{}", Bytes(tt.bytes_allocated)),
                format!("{a}{}", Bytes(tt.peak_live_bytes)),
                format!("{a}{}", Bytes(tt.live_bytes())),
                time_or_dash(p.estimated(), p.allocator_ns),
                share_or_dash(p.estimated(), p.allocator_share()),
            )?;
        }
        if order.len() > SHOWN {
            writeln!(
                w,
                "  ... and {} more processes (see --json for all)",
                order.len() - SHOWN
            )?;
        }
        let sampled = self.processes.iter().any(ProcessFigures::estimated);
        if self.processes.len() > 1 {
            let a = about(sampled);
            writeln!(
                w,
                "  {:<8} {:<16} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>6}",
                "total",
                "",
                format!("{a}{}", Count(t.totals.allocation_calls())),
                format!("{a}{}", Count(t.totals.calls_of(Func::Free))),
                format!("{a}{}", Bytes(t.totals.bytes_allocated)),
                format!("{a}{}", Bytes(t.totals.peak_live_bytes)),
                format!("{a}{}", Bytes(t.totals.live_bytes())),
                time_or_dash(sampled, t.allocator_ns),
                share_or_dash(sampled, share(t.allocator_ns, t.cpu_ns)),
            )?;
        }
        if sampled {
            let (count, bytes) = self.estimate_intervals();
            writeln!(
                w,
                "\n  sampled level: nothing counted or timed per call; ≈ figures are estimated \
                 from the allocations sampled, ≈{} allocations (95% interval {}–{}) of ≈{} \
                 requested ({}–{}); `-`: not estimated (`--record exact` counts and times)",
                Count(t.totals.allocation_calls()),
                Count(count.0),
                Count(count.1),
                Bytes(t.totals.bytes_requested),
                Bytes(bytes.0),
                Bytes(bytes.1),
            )?;
        }
        let calls: Vec<String> = Func::ALL
            .iter()
            .filter(|&&f| t.totals.calls_of(f) > 0)
            .map(|&f| format!("{} {}", f.name(), Count(t.totals.calls_of(f))))
            .collect();
        if !calls.is_empty() && !sampled {
            writeln!(w, "\n  calls: {}", calls.join(", "))?;
        }
        let all = t.totals.allocation_calls();
        if let Some(n) = t.temporary_allocations.filter(|_| all > 0) {
            writeln!(
                w,
                "  temporary: {} of {} allocations ({:.1}%) freed before their thread allocated again",
                Count(n),
                Count(all),
                100.0 * share(n, all)
            )?;
        }
        if let Some(l) = t.lifetimes.filter(|l| l.count() > 0) {
            // Sampled stacks' lifetimes are those of the sampled blocks,
            // weighted: estimates.
            let sampled_stacks = self
                .processes
                .iter()
                .any(|p| matches!(p.profile.stacks.mode, StackMode::Sample { .. }));
            let mark = if sampled_stacks { "≈" } else { "" };
            writeln!(w, "  lifetimes: {mark}{}", lifetime_line(&l))?;
        }
        if t.totals.null_frees > 0 {
            writeln!(
                w,
                "  free(NULL) calls (no-ops, not in frees): {}",
                Count(t.totals.null_frees)
            )?;
        }
        // Saturating: a damaged profile's counts may be anything.
        let timed = t.totals.timed_calls.saturating_add(t.totals.exact_calls);
        if let Some(m) = t.allocator_ns_margin.filter(|_| timed > 0 && !sampled) {
            writeln!(
                w,
                "  allocator time: {} ± {} (95% interval, from {} timed calls)",
                Dur(t.allocator_ns),
                Dur(m),
                Count(timed)
            )?;
        }
        let with_stats: Vec<&&ProcessFigures> = order
            .iter()
            .take(SHOWN)
            .filter(|p| p.profile.allocator_stats.is_some())
            .collect();
        if !with_stats.is_empty() {
            writeln!(w)?;
        }
        for p in with_stats {
            let pid = (self.processes.len() > 1).then(|| (p.profile.pid, p.program()));
            write_allocator_stats(w, &p.profile, pid)?;
        }
        // An allocator library behind the shim: what cannot be read is said.
        if order
            .iter()
            .any(|p| p.profile.allocator == Backend::Next.name())
        {
            // The run's name for it (a saved profile's report has none).
            let name = self
                .run
                .as_ref()
                .map_or("the allocator library", |r| r.allocator.as_str());
            writeln!(
                w,
                "\n  {name}'s own statistics: not read (allocmux reads glibc's, jemalloc's and \
                 mimalloc's), so no heap overhead"
            )?;
        }
        if t.totals.failed_calls > 0 {
            writeln!(
                w,
                "  failed calls (NULL or error returned): {}",
                Count(t.totals.failed_calls)
            )?;
        }
        for u in &self.unprofiled {
            writeln!(
                w,
                "  not profiled: pid {} ran {}: {}",
                u.pid,
                u.program,
                crate::target::why_unprofiled(&u.program)
            )?;
        }
        if self.processes.iter().any(ProcessFigures::figures_unknown) {
            writeln!(
                w,
                "  ? ended before its first periodic write (killed early, or its output cut off): what it allocated is unknown"
            )?;
        }
        if self
            .processes
            .iter()
            .any(|p| p.profile.state == State::Running && !p.figures_unknown())
        {
            writeln!(
                w,
                "  * still running or ended without exit handlers (killed, _exit): figures from its last periodic write"
            )?;
        }
        if self.processes.len() > 1 {
            writeln!(
                w,
                "  total peak live is the sum of per-process peaks (an upper bound)"
            )?;
        }
        Ok(())
    }
}

/// An allocator time for the table, `-` where it is not estimated (the
/// sampled level).
fn time_or_dash(sampled: bool, ns: u64) -> String {
    if sampled {
        "-".into()
    } else {
        Dur(ns).to_string()
    }
}

/// An allocator time share for the table, `-` where it is not estimated.
fn share_or_dash(sampled: bool, share: f64) -> String {
    if sampled {
        "-".into()
    } else {
        format!("{:.1}%", 100.0 * share)
    }
}

/// The allocator's own figures (its latest reading), one line, then what
/// it holds per live byte of the program: `jemalloc: 12.0 MiB allocated,
/// ...` and `heap overhead 1.67x: ...` (prefixed with the process for a
/// report of several).
fn write_allocator_stats(
    w: &mut dyn Write,
    p: &ProcessProfile,
    pid: Option<(u32, String)>,
) -> io::Result<()> {
    let (Some(latest), Some(overhead)) = (&p.allocator_stats, heap_overhead(p)) else {
        return Ok(());
    };
    let (prefix, indent) = match pid {
        Some((pid, name)) => (format!("pid {pid} {name}: "), "    "),
        None => (String::new(), ""),
    };
    writeln!(w, "  {prefix}{}", latest.stats)?;
    let peak = p.totals.peak_live_bytes;
    // Only readings with a held figure are measured or far from the peak.
    let what = |r: &AllocatorReading| r.stats.held_name().unwrap_or("held");
    match overhead {
        HeapOverhead::FarFromPeak(r) => writeln!(
            w,
            "  {indent}heap overhead: not measured: the allocator was read with {} live at most (at {}), \
             under half the peak of {} (it is read as the heap grows, every 0.5 s and at exit: \
             a peak held for less than about 20 ms can fall between readings)",
            Bytes(r.live_bytes),
            Dur(r.t_ns),
            Bytes(peak)
        ),
        HeapOverhead::SmallHeap(r) => writeln!(
            w,
            "  {indent}heap overhead: not measured: the heap peaked at {} live, too small for a \
             ratio (under {}, what the allocator holds is mostly its fixed start-up cost)",
            Bytes(r.live_bytes.max(peak)),
            Bytes(MIN_MEASURED_LIVE)
        ),
        HeapOverhead::Measured {
            reading: r,
            held,
            ratio,
            at_peak: false,
        } => writeln!(
            w,
            "  {indent}heap overhead {ratio:.2}x: the allocator holds {} ({}) for {} live (at {})",
            Bytes(held),
            what(r),
            Bytes(r.live_bytes),
            Dur(r.t_ns)
        ),
        HeapOverhead::Measured {
            reading: r,
            held,
            ratio,
            at_peak: true,
        } => writeln!(
            w,
            "  {indent}heap overhead {ratio:.2}x near the peak: the allocator held {} ({}) for {} live \
             (at {}; peak live {})",
            Bytes(held),
            what(r),
            Bytes(r.live_bytes),
            Dur(r.t_ns),
            Bytes(peak)
        ),
        HeapOverhead::Unknown(_) if latest.stats.backend() == Backend::Mimalloc => writeln!(
            w,
            "  {indent}heap overhead: not measured (mimalloc commits what it reserves whole, untouched pages too; {} live at {})",
            Bytes(latest.live_bytes),
            Dur(latest.t_ns)
        ),
        HeapOverhead::Unknown(_) => Ok(()),
    }
}

/// How long freed blocks lived, in one line: how many, the share under
/// 1 ms, the mean, and the decades that hold any.
pub(crate) fn lifetime_line(l: &LifetimeFigures) -> String {
    let n = l.count();
    let mean = l.mean_ns().map_or(String::new(), |m| {
        format!(", mean {}", Dur(m.round() as u64))
    });
    let decades: Vec<String> = DECADE_LABELS
        .iter()
        .zip(l.freed)
        .filter(|&(_, c)| c > 0)
        .map(|(label, c)| format!("{label} {}", Count(c)))
        .collect();
    format!(
        "{} blocks freed, {:.1}% within 1 ms{mean} ({})",
        Count(n),
        100.0 * share(l.short_lived(), n),
        decades.join(" · ")
    )
}
