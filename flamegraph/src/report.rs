//! The figures of a run or of saved profiles, per process and in total, and
//! their human table (their JSON for scripts is [`crate::json::ReportJson`]).

use std::io::{self, Write};

use allocmux_format::Backend;
use allocmux_format::profile::{AllocatorReading, ProcessProfile, Recording, State};
use allocmux_format::{Func, Totals};

use crate::json::ReportJson;
use crate::sys::ChildExit;

/// One process's figures, with time converted to nanoseconds.
#[derive(Clone, Debug)]
pub struct ProcessFigures {
    /// The profile as read.
    pub profile: ProcessProfile,
    /// Estimated time inside the allocator.
    pub allocator_ns: u64,
    /// Half the width of its 95% confidence interval, if the profile
    /// carries what it needs.
    pub allocator_ns_margin: Option<u64>,
}

impl ProcessFigures {
    /// Share of the process's CPU time spent inside the allocator.
    pub fn allocator_share(&self) -> f64 {
        share(self.allocator_ns, self.profile.cpu_ns)
    }

    /// Whether its figures are estimates from the stack sample (the
    /// sampled level), not counts.
    pub fn estimated(&self) -> bool {
        matches!(self.profile.recording, Recording::Sampled { .. })
    }

    /// Short program name for tables.
    pub fn program(&self) -> String {
        program_name(&self.profile)
    }

    /// Whether nothing is known of what the process did: it ended (killed,
    /// or still running when the run ended) with only the profile the shim
    /// writes as it starts, before its first periodic write. Its zeros are
    /// not figures.
    pub fn figures_unknown(&self) -> bool {
        let p = &self.profile;
        let covered_ns = p.clock_end.mono_ns.saturating_sub(p.clock_start.mono_ns);
        p.state == State::Running
            && p.totals.total_calls() == 0
            && covered_ns < FIRST_PERIODIC_WRITE_NS
    }
}

/// A program that a profiled process replaced itself with (`exec`) and
/// that left no profile: the shim could not reach it (statically linked,
/// setuid), so its allocations are in no figure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unprofiled {
    /// The process (the same pid before and after the `exec`).
    pub pid: u32,
    /// The program, as the `exec` named it.
    pub program: String,
    /// Why it could not be profiled, as far as can be told from here.
    pub why: String,
}

/// Every program that profiled processes ran and that left no profile of
/// its own: an `exec` whose new image wrote none, and the children the
/// shim noted as out of its reach (started by `vfork` or `posix_spawn`),
/// unless one did write a profile after all.
fn unprofiled(profiles: &[ProcessProfile]) -> Vec<Unprofiled> {
    let found = |pid: u32, after_ns: u64| {
        profiles
            .iter()
            .any(|q| q.pid == pid && q.clock_start.mono_ns >= after_ns)
    };
    let execs = profiles
        .iter()
        .filter(|p| p.state == State::Exited)
        .filter_map(|p| Some((p.pid, p.exec.as_ref()?, p.clock_end.mono_ns)));
    let children = profiles.iter().flat_map(|p| {
        p.unprofiled_children
            .iter()
            .map(|(pid, program)| (*pid, program, 0))
    });
    execs
        .chain(children)
        .filter(|&(pid, _, after_ns)| !found(pid, after_ns))
        .map(|(pid, program, _)| Unprofiled {
            pid,
            program: program.clone(),
            why: why_unprofiled(program),
        })
        .collect()
}

/// Why `program` (as an `exec` named it) left no profile: what the checks
/// `allocmux` makes of its own targets find, or, when they find nothing,
/// the causes that remain.
fn why_unprofiled(program: &str) -> String {
    let checked = crate::target::resolve(program).and_then(|path| {
        crate::target::check_preloadable(&path)?;
        Ok(path)
    });
    match checked {
        Ok(path) => format!(
            "{} left no profile (its environment dropped LD_PRELOAD, or it was killed as it \
             started)",
            path.display()
        ),
        Err(e) => {
            let e = format!("{e:#}");
            e.split(" (").next().unwrap_or(&e).to_string()
        }
    }
}

/// When the shim's first periodic write comes, after its start-up one
/// (the flusher's interval, `alloc-shim/src/flusher.rs`).
const FIRST_PERIODIC_WRITE_NS: u64 = 500_000_000;

/// A process's short program name: the last part of `argv[0]`, or of the
/// executable's path when there are no arguments.
pub fn program_name(p: &ProcessProfile) -> String {
    let name = p
        .argv
        .first()
        .map(String::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or(&p.exe);
    name.rsplit('/').next().unwrap_or(name).to_string()
}

/// A sum that stops at `u64::MAX` (a corrupt profile can hold anything).
fn sum(values: impl Iterator<Item = u64>) -> u64 {
    values.fold(0, u64::saturating_add)
}

/// `part / whole`, or 0 for nothing to share.
pub(crate) fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// How the command ran, when the report comes from `allocmux run`.
#[derive(Clone, Debug)]
pub struct RunInfo {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// The backend requested.
    pub allocator: String,
    /// How the main process ended, with the kernel's accounting.
    pub exit: ChildExit,
    /// Wall time measured around the whole run.
    pub wall_ns: u64,
}

/// A whole report.
#[derive(Clone, Debug)]
pub struct Report {
    /// Set for `allocmux run`.
    pub run: Option<RunInfo>,
    /// Every process, in start order.
    pub processes: Vec<ProcessFigures>,
    /// Programs the processes ran that left no profile, found once (the
    /// reason reads the program's file).
    pub unprofiled: Vec<Unprofiled>,
}

/// Sums over all processes.
#[derive(Clone, Debug)]
pub struct TotalFigures {
    /// Counters summed (the peak is the sum of per-process peaks: an upper
    /// bound of the combined peak, as processes peak at different times).
    pub totals: Totals,
    /// Allocator time summed.
    pub allocator_ns: u64,
    /// Half the width of its 95% confidence interval: the processes'
    /// margins combined as independent estimates (root of the sum of
    /// squares); `None` if one is unknown.
    pub allocator_ns_margin: Option<u64>,
    /// CPU time: the kernel's for a run (all waited-for processes), else summed.
    pub cpu_ns: u64,
    /// Wall time: measured around a run, else the longest process.
    pub wall_ns: u64,
    /// Peak RSS of the largest process.
    pub max_rss_bytes: u64,
    /// Threads summed.
    pub threads: u64,
}

impl Report {
    /// Builds the figures from profiles. TSC ticks are converted with the
    /// rate measured over the longest-lived process (the TSC is invariant
    /// and shared by all processes on the machine).
    pub fn new(mut profiles: Vec<ProcessProfile>, run: Option<RunInfo>) -> Report {
        profiles.sort_by_key(|p| (p.clock_start.mono_ns, p.pid));
        // A forked child that execs at once leaves a profile with no calls,
        // followed by its new image's profile under the same pid: drop it.
        let superseded = |i: usize, p: &ProcessProfile| {
            p.state == State::Running
                && p.totals.total_calls() == 0
                && profiles[i + 1..].iter().any(|q| q.pid == p.pid)
        };
        let keep: Vec<bool> = profiles
            .iter()
            .enumerate()
            .map(|(i, p)| !superseded(i, p))
            .collect();
        let mut keep = keep.into_iter();
        profiles.retain(|_| keep.next().unwrap_or(true));
        let unprofiled = unprofiled(&profiles);
        let rate = profiles
            .iter()
            .filter_map(|p| p.ticks_per_ns().map(|r| (p.wall_ns(), r)))
            .max_by_key(|&(span, _)| span)
            .map(|(_, r)| r);
        let processes = profiles
            .into_iter()
            .map(|p| {
                let rate = rate.or_else(|| p.ticks_per_ns());
                let allocator_ns = rate.map_or(0, |r| p.allocator_ns(r));
                let allocator_ns_margin = rate.and_then(|r| p.allocator_ns_margin(r));
                ProcessFigures {
                    profile: p,
                    allocator_ns,
                    allocator_ns_margin,
                }
            })
            .collect();
        Report {
            run,
            processes,
            unprofiled,
        }
    }

    /// The totals row.
    pub fn total(&self) -> TotalFigures {
        let mut totals = Totals::default();
        for p in &self.processes {
            totals.add(&p.profile.totals);
        }
        let procs = || self.processes.iter();
        TotalFigures {
            totals,
            allocator_ns: sum(procs().map(|p| p.allocator_ns)),
            allocator_ns_margin: procs()
                .map(|p| p.allocator_ns_margin.map(|m| (m as f64).powi(2)))
                .sum::<Option<f64>>()
                .map(|v| v.sqrt() as u64),
            cpu_ns: match &self.run {
                Some(r) => r.exit.user_ns + r.exit.sys_ns,
                None => sum(procs().map(|p| p.profile.cpu_ns)),
            },
            wall_ns: match &self.run {
                Some(r) => r.wall_ns,
                None => procs().map(|p| p.profile.wall_ns()).max().unwrap_or(0),
            },
            max_rss_bytes: match &self.run {
                Some(r) => r.exit.max_rss_bytes,
                None => procs().map(|p| p.profile.max_rss_bytes).max().unwrap_or(0),
            },
            threads: sum(procs().map(|p| p.profile.threads)),
        }
    }

    /// The JSON report (see [`ReportJson`] for the keys).
    pub fn to_json(&self) -> ReportJson {
        ReportJson::from(self)
    }

    /// The allocator: the one asked for, else every one the profiles name.
    pub(crate) fn allocator_name(&self) -> String {
        if let Some(r) = &self.run {
            return r.allocator.clone();
        }
        let mut names: Vec<&str> = self
            .processes
            .iter()
            .map(|p| p.profile.allocator.as_str())
            .collect();
        names.sort_unstable();
        names.dedup();
        names.join(",")
    }

    /// The 95% intervals of the total allocations and requested bytes, the
    /// processes at the sampled level contributing the variance of their
    /// estimates (the others are counted: none).
    pub fn estimate_intervals(&self) -> ((u64, u64), (u64, u64)) {
        let t = self.total();
        let (mut var_count, mut var_bytes) = (0.0, 0.0);
        for p in &self.processes {
            if let Some(m) = p.profile.recording.margin(false) {
                var_count += (m / 1.96).powi(2);
            }
            if let Some(m) = p.profile.recording.margin(true) {
                var_bytes += (m / 1.96).powi(2);
            }
        }
        let around = |x: u64, var: f64| {
            let half = 1.96 * var.sqrt();
            (
                (x as f64 - half).max(0.0).round() as u64,
                (x as f64 + half).round() as u64,
            )
        };
        (
            around(t.totals.allocation_calls(), var_count),
            around(t.totals.bytes_requested, var_bytes),
        )
    }

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
                u.pid, u.program, u.why
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

/// What the allocator held per live byte of the program, as the report
/// states it: from the reading taken with the most live bytes (see
/// [`ProcessProfile::reading_nearest_peak`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum HeapOverhead<'a> {
    /// Measured: `held` bytes for the reading's live bytes, `ratio` the
    /// quotient; `at_peak` when the reading is not the latest one (whose
    /// figures the statistics line shows).
    Measured {
        /// The reading it comes from.
        reading: &'a AllocatorReading,
        /// What the allocator held for the heap then.
        held: u64,
        /// `held` over the reading's live bytes.
        ratio: f64,
        /// The reading is the one kept nearest the peak, not the latest.
        at_peak: bool,
    },
    /// Every reading found under half the peak of live bytes (as one at
    /// exit, after the program freed most of its heap): the ratio would
    /// measure what the program gave back, not the allocator.
    FarFromPeak(&'a AllocatorReading),
    /// The allocator says nothing of what it holds for the heap (mimalloc).
    Unknown(&'a AllocatorReading),
}

/// The process's heap overhead, if the allocator was read at all.
pub fn heap_overhead(p: &ProcessProfile) -> Option<HeapOverhead<'_>> {
    let r = p.reading_nearest_peak()?;
    Some(match (r.stats.held_bytes(), r.overhead()) {
        // Nothing live at all (0 B at exit) is as far from the peak.
        (Some(_), _) if r.live_bytes < p.totals.peak_live_bytes / 2 => HeapOverhead::FarFromPeak(r),
        (Some(held), Some(ratio)) => HeapOverhead::Measured {
            reading: r,
            held,
            ratio,
            at_peak: Some(r) != p.allocator_stats.as_ref(),
        },
        _ => HeapOverhead::Unknown(r),
    })
}

impl HeapOverhead<'_> {
    /// The ratio, if measured.
    pub fn ratio(&self) -> Option<f64> {
        match self {
            HeapOverhead::Measured { ratio, .. } => Some(*ratio),
            _ => None,
        }
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

/// A command line shown the way a shell would take it back.
pub fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if !a.is_empty()
                && a.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).chain(['…']).collect()
    }
}

/// How a program ended, as `run` says it: "exited with status 3", "was
/// killed by signal 9 (SIGKILL)".
pub fn how_it_ended(exit: &ChildExit) -> String {
    match (exit.code, exit.signal) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("was killed by signal {s} ({})", signal_name(s)),
        _ => "ended".to_string(),
    }
}

/// The usual name of a signal number.
pub fn signal_name(s: i32) -> &'static str {
    match s {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => "signal",
    }
}

/// A count with thousands separators.
#[derive(Debug)]
pub struct Count(pub u64);
impl std::fmt::Display for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.0.to_string();
        let mut out = String::with_capacity(s.len() + s.len() / 3);
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        f.pad(&out)
    }
}

/// A byte count in binary units (the shared, allocation-free formatter).
pub use allocmux_format::ByteSize as Bytes;

/// A duration in ns, shown with a fitting unit.
#[derive(Debug)]
pub struct Dur(pub u64);
impl std::fmt::Display for Dur {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ns = self.0 as f64;
        let s = if ns >= 1e9 {
            format!("{:.2} s", ns / 1e9)
        } else if ns >= 1e6 {
            format!("{:.2} ms", ns / 1e6)
        } else if ns >= 1e3 {
            format!("{:.1} µs", ns / 1e3)
        } else {
            format!("{} ns", self.0)
        };
        f.pad(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formats() {
        assert_eq!(Count(0).to_string(), "0");
        assert_eq!(Count(1234567).to_string(), "1,234,567");
        assert_eq!(Count(123).to_string(), "123");
        assert_eq!(Dur(1_500_000).to_string(), "1.50 ms");
        assert_eq!(format!("{:>6}", Count(1000)), " 1,000");
    }

    fn profile(pid: u32, start: u64, calls: u64, state: State) -> ProcessProfile {
        let mut text = String::from("allocmux-profile 1\nprocess\n");
        text += &format!(
            "pid {pid}\nstate {}\nclock_start {start} {start}\n",
            if state == State::Exited {
                "exited"
            } else {
                "running"
            }
        );
        if calls > 0 {
            text += &format!("calls malloc {calls}\n");
        }
        text += "end\n";
        allocmux_format::profile::parse(&text).unwrap().remove(0)
    }

    #[test]
    fn drops_empty_images_replaced_by_exec() {
        let r = Report::new(
            vec![
                profile(10, 1, 5, State::Exited),
                profile(11, 2, 0, State::Running), // forked, then exec'd
                profile(11, 3, 7, State::Exited),  // the new image
                profile(12, 4, 0, State::Running), // killed early: kept
            ],
            None,
        );
        let pids: Vec<(u32, u64)> = r
            .processes
            .iter()
            .map(|p| (p.profile.pid, p.profile.totals.total_calls()))
            .collect();
        assert_eq!(pids, vec![(10, 5), (11, 7), (12, 0)]);
        assert_eq!(r.total().totals.calls_of(Func::Malloc), 12);
    }

    #[test]
    fn allocator_statistics_line_and_json() {
        let mut text =
            String::from("allocmux-profile 1\nprocess\npid 7\nallocator jemalloc\nstate exited\n");
        text += "allocator_stats 1500000000 12582912\nallocator_stat allocated 12582912\n\
                 allocator_stat active 13736345\nallocator_stat resident 20971520\n\
                 allocator_stat mapped 33554432\nallocator_stat retained 0\nend\n";
        let p = allocmux_format::profile::parse(&text).unwrap().remove(0);
        let r = Report::new(vec![p.clone()], None);
        let mut out = Vec::new();
        r.write_human(&mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.contains(
                "\n  jemalloc: 12.0 MiB allocated, 13.1 MiB active, 20.0 MiB resident, 32.0 MiB mapped, 0 B retained\n\
                 \x20 heap overhead 1.67x: the allocator holds 20.0 MiB (resident) for 12.0 MiB live (at 1.50 s)\n"
            ),
            "{out}"
        );
        let v = serde_json::to_value(r.to_json()).unwrap();
        let j = &v["processes"][0]["allocator_stats"];
        assert_eq!(j["backend"], "jemalloc");
        assert_eq!(j["figures"]["active"], 13736345);
        assert_eq!(j["held_bytes"], 20971520);
        assert_eq!(j["read_at_ns"], 1_500_000_000u64);
        assert!((j["overhead"].as_f64().unwrap() - 20.0 / 12.0).abs() < 1e-9);
        // The one reading is also the one nearest the peak, and the ratio.
        assert_eq!(v["processes"][0]["allocator_stats_at_peak"], *j);
        assert_eq!(v["processes"][0]["heap_overhead"], j["overhead"]);
        // Two processes: each line names its process; none without figures.
        let mut q = p.clone();
        q.pid = 8;
        q.allocator_stats = None;
        let mut out = Vec::new();
        Report::new(vec![p, q], None).write_human(&mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.contains("\n  pid 7 : jemalloc: 12.0 MiB allocated"),
            "{out}"
        );
        assert!(out.contains("\n      heap overhead 1.67x"), "{out}");
        assert!(!out.contains("pid 8 :"), "{out}");
    }

    /// A jemalloc process that peaked at 51.1 MiB live and freed all but
    /// 552 B before its exit reading, with `at_peak` lines after it.
    fn freed_before_exit(at_peak: &str) -> ProcessProfile {
        let text = format!(
            "allocmux-profile 1\nprocess\npid 7\nallocator jemalloc\nstate exited\n\
             bytes_allocated 60000000\nbytes_freed 59999448\npeak_live_bytes 53582912\n\
             allocator_stats 1120000000 552\nallocator_stat allocated 552\n\
             allocator_stat active 4096\nallocator_stat resident 2035712\n\
             allocator_stat mapped 33554432\nallocator_stat retained 0\n{at_peak}end\n"
        );
        allocmux_format::profile::parse(&text).unwrap().remove(0)
    }

    fn human(p: ProcessProfile) -> String {
        let mut out = Vec::new();
        Report::new(vec![p], None).write_human(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// Read at exit with little left live, and at no moment nearer the
    /// peak, the ratio is not shown: it would say more of what the program
    /// freed than of the allocator.
    #[test]
    fn heap_overhead_far_from_the_peak_is_not_shown() {
        let p = freed_before_exit("");
        assert_eq!(
            heap_overhead(&p),
            Some(HeapOverhead::FarFromPeak(
                p.allocator_stats.as_ref().unwrap()
            ))
        );
        let out = human(p.clone());
        assert!(!out.contains("heap overhead 3"), "{out}");
        assert!(
            out.contains(
                "heap overhead: not measured: the allocator was read with 552 B live at most (at 1.12 s), \
                 under half the peak of 51.1 MiB (it is read as the heap grows"
            ),
            "{out}"
        );
        // Nothing live at all: as far from the peak.
        let mut p = freed_before_exit("");
        p.allocator_stats.as_mut().unwrap().live_bytes = 0;
        assert!(human(p).contains("read with 0 B live at most"));
        // A reading with more live bytes, but still under half the peak:
        // that one is named.
        let p = freed_before_exit(
            "allocator_stats_at_peak 300000000 20000000\nallocator_stat_at_peak resident 30000000\n",
        );
        let out = human(p);
        assert!(
            out.contains("not measured: the allocator was read with 19.1 MiB live at most (at 300.00 ms), under half"),
            "{out}"
        );
    }

    /// A reading near the peak gives the ratio, with its moment and the
    /// peak; the statistics line stays the latest reading's, and the JSON
    /// has both readings and the ratio.
    #[test]
    fn heap_overhead_is_measured_near_the_peak() {
        let p = freed_before_exit(
            "allocator_stats_at_peak 620000000 53000000\nallocator_stat_at_peak allocated 53000000\n\
             allocator_stat_at_peak active 54000000\nallocator_stat_at_peak resident 64000000\n\
             allocator_stat_at_peak mapped 70000000\nallocator_stat_at_peak retained 0\n",
        );
        let out = human(p.clone());
        assert!(
            out.contains(
                "\n  jemalloc: 552 B allocated, 4.0 KiB active, 1.9 MiB resident, 32.0 MiB mapped, 0 B retained\n\
                 \x20 heap overhead 1.21x near the peak: the allocator held 61.0 MiB (resident) for 50.5 MiB live \
                 (at 620.00 ms; peak live 51.1 MiB)\n"
            ),
            "{out}"
        );
        let v = serde_json::to_value(Report::new(vec![p], None).to_json()).unwrap();
        let j = &v["processes"][0];
        assert_eq!(j["allocator_stats"]["live_bytes"], 552);
        assert_eq!(j["allocator_stats_at_peak"]["live_bytes"], 53_000_000);
        assert_eq!(j["allocator_stats_at_peak"]["read_at_ns"], 620_000_000);
        assert_eq!(j["allocator_stats_at_peak"]["held_bytes"], 64_000_000);
        assert!((j["heap_overhead"].as_f64().unwrap() - 64.0 / 53.0).abs() < 1e-9);
        // Not measured: no ratio in the JSON either, though the reading has one.
        let v =
            serde_json::to_value(Report::new(vec![freed_before_exit("")], None).to_json()).unwrap();
        assert!(
            v["processes"][0]["allocator_stats"]["overhead"].is_f64(),
            "{v}"
        );
        assert!(v["processes"][0]["heap_overhead"].is_null(), "{v}");
    }

    /// mimalloc says nothing of what it holds for the heap: its line
    /// stays, with the latest reading, whatever reading is nearest the peak.
    #[test]
    fn mimalloc_heap_overhead_is_not_measured() {
        let text = "allocmux-profile 1\nprocess\npid 7\nallocator mimalloc\nstate exited\n\
                    bytes_allocated 60000000\nbytes_freed 59999448\npeak_live_bytes 53582912\n\
                    allocator_stats 1120000000 552\nallocator_stat committed 33554432\n\
                    allocator_stats_at_peak 620000000 53000000\nallocator_stat_at_peak committed 67108864\nend\n";
        let p = allocmux_format::profile::parse(text).unwrap().remove(0);
        let out = human(p);
        assert!(
            out.contains(
                "heap overhead: not measured (mimalloc commits what it reserves whole, untouched pages too; \
                 552 B live at 1.12 s)"
            ),
            "{out}"
        );
    }

    #[test]
    fn shell_quoting() {
        let a = ["python3", "-c", "print('hi')", ""].map(String::from);
        assert_eq!(shell_words(&a), r#"python3 -c 'print('\''hi'\'')' ''"#);
    }
}
