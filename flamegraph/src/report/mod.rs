//! The figures of a run or of saved profiles, per process and in total:
//! figures only, no input or output. They are rendered as the human table
//! ([`text`]), as JSON for scripts ([`crate::json::ReportJson`]) and in the
//! HTML page ([`crate::html`]).

mod text;

use allocmux_format::lifetimes::{DECADES, SHORT_LIVED_DECADES};
use allocmux_format::profile::{AllocatorReading, ProcessProfile, Recording, State};
use allocmux_format::{Lifetimes, Totals};

use crate::sys::ChildExit;
use crate::units::share;

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
    /// TSC ticks per ns its times were converted with, if known.
    pub ticks_per_ns: Option<f64>,
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

    /// Its temporary allocations (blocks freed by their thread before it
    /// allocated anything else), summed over its stacks: counted with
    /// exact stacks only, `None` otherwise.
    pub fn temporary_allocations(&self) -> Option<u64> {
        let stacks = &self.profile.stacks;
        stacks
            .temporary_counted
            .then(|| stacks.stacks.iter().map(|s| s.counts.temporary).sum())
    }

    /// The lifetimes of its freed blocks, summed over its stacks: `None`
    /// when they were not recorded.
    pub fn lifetimes(&self) -> Option<LifetimeFigures> {
        let stacks = &self.profile.stacks;
        if stacks.lifetime_ticks_per_us == 0 {
            return None;
        }
        let mut sum = Lifetimes::default();
        for s in &stacks.stacks {
            sum.add(&s.lifetimes);
        }
        Some(LifetimeFigures {
            freed: sum.freed,
            sum_ns: self.ticks_per_ns.map(|r| sum.ticks as f64 / r),
            never_freed: stacks.stacks.iter().map(|s| s.counts.live_allocs).sum(),
        })
    }
}

/// How long freed blocks lived (see [`allocmux_format::lifetimes`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LifetimeFigures {
    /// Blocks freed in each decade, under 1 µs to 10 s or more.
    pub freed: [u64; DECADES],
    /// The sum of their lifetimes in ns (`None`: the TSC's rate is unknown).
    pub sum_ns: Option<f64>,
    /// Blocks never freed: live at exit (or when a running process's
    /// profile was written).
    pub never_freed: u64,
}

impl LifetimeFigures {
    /// Freed blocks counted.
    pub fn count(&self) -> u64 {
        self.freed.iter().sum()
    }

    /// Those that lived under 1 ms.
    pub fn short_lived(&self) -> u64 {
        self.freed[..SHORT_LIVED_DECADES].iter().sum()
    }

    /// Their mean lifetime in ns, if any was counted and the rate is known.
    pub fn mean_ns(&self) -> Option<f64> {
        let n = self.count();
        self.sum_ns.filter(|_| n > 0).map(|s| s / n as f64)
    }

    /// Adds `o`'s.
    pub fn add(&mut self, o: &LifetimeFigures) {
        for (a, b) in self.freed.iter_mut().zip(o.freed) {
            *a += b;
        }
        self.sum_ns = self.sum_ns.zip(o.sum_ns).map(|(a, b)| a + b);
        self.never_freed += o.never_freed;
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
        })
        .collect()
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
    /// Programs the processes ran that left no profile (why, as far as the
    /// machine tells: [`crate::target::why_unprofiled`]).
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
    /// Temporary allocations summed, if every process counted them.
    pub temporary_allocations: Option<u64>,
    /// Freed blocks' lifetimes summed, if every process recorded them.
    pub lifetimes: Option<LifetimeFigures>,
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
                    ticks_per_ns: rate,
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
            temporary_allocations: procs()
                .map(ProcessFigures::temporary_allocations)
                .sum::<Option<u64>>(),
            lifetimes: procs().map(ProcessFigures::lifetimes).try_fold(
                LifetimeFigures {
                    sum_ns: Some(0.0),
                    ..LifetimeFigures::default()
                },
                |mut sum, l| {
                    sum.add(&l?);
                    Some(sum)
                },
            ),
        }
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
    /// The heap was never as large as [`MIN_MEASURED_LIVE`]: what the
    /// allocator holds is then its fixed start-up cost (glibc's first
    /// 132 KiB arena, jemalloc's MiBs of metadata), not overhead per live
    /// byte, and the ratio would be in the thousands.
    SmallHeap(&'a AllocatorReading),
    /// The allocator says nothing of what it holds for the heap (mimalloc).
    Unknown(&'a AllocatorReading),
}

/// The least live heap a heap overhead is stated for: below it, the
/// allocator's fixed cost is most of what it holds.
pub const MIN_MEASURED_LIVE: u64 = 1 << 20;

/// The process's heap overhead, if the allocator was read at all.
pub fn heap_overhead(p: &ProcessProfile) -> Option<HeapOverhead<'_>> {
    let r = p.reading_nearest_peak()?;
    let small = p.totals.peak_live_bytes.max(r.live_bytes) < MIN_MEASURED_LIVE;
    Some(match (r.stats.held_bytes(), r.overhead()) {
        (Some(_), _) if small => HeapOverhead::SmallHeap(r),
        // Nothing live at all (0 B at exit) is as far from the peak.
        (Some(_), _) if r.live_bytes < p.totals.peak_live_bytes / 2 => HeapOverhead::FarFromPeak(r),
        (Some(_), _) if r.live_bytes < MIN_MEASURED_LIVE => HeapOverhead::SmallHeap(r),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::ReportJson;
    use allocmux_format::Func;

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
        let v = serde_json::to_value(ReportJson::from(&r)).unwrap();
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
        let v = serde_json::to_value(ReportJson::from(&Report::new(vec![p], None))).unwrap();
        let j = &v["processes"][0];
        assert_eq!(j["allocator_stats"]["live_bytes"], 552);
        assert_eq!(j["allocator_stats_at_peak"]["live_bytes"], 53_000_000);
        assert_eq!(j["allocator_stats_at_peak"]["read_at_ns"], 620_000_000);
        assert_eq!(j["allocator_stats_at_peak"]["held_bytes"], 64_000_000);
        assert!((j["heap_overhead"].as_f64().unwrap() - 64.0 / 53.0).abs() < 1e-9);
        // Not measured: no ratio in the JSON either, though the reading has one.
        let v = serde_json::to_value(ReportJson::from(&Report::new(
            vec![freed_before_exit("")],
            None,
        )))
        .unwrap();
        assert!(
            v["processes"][0]["allocator_stats"]["overhead"].is_f64(),
            "{v}"
        );
        assert!(v["processes"][0]["heap_overhead"].is_null(), "{v}");
    }

    /// A heap that never reached 1 MiB gets no ratio (one `malloc(16)`
    /// under glibc's first 132 KiB arena would be 5632x), in the text or
    /// the JSON, whichever reading is nearest its peak.
    #[test]
    fn a_small_heap_has_no_overhead_ratio() {
        let text = "allocmux-profile 1\nprocess\npid 7\nallocator system\nstate exited\n\
                    bytes_allocated 24\nbytes_freed 0\npeak_live_bytes 24\n\
                    allocator_stats 2630000 24\nallocator_stat in_use 688\nallocator_stat free 134451\n\
                    allocator_stat arena 135168\nallocator_stat mmapped 0\nallocator_stat releasable 134451\nend\n";
        let p = allocmux_format::profile::parse(text).unwrap().remove(0);
        assert!(matches!(
            heap_overhead(&p),
            Some(HeapOverhead::SmallHeap(_))
        ));
        let out = human(p.clone());
        assert!(
            out.contains(
                "heap overhead: not measured: the heap peaked at 24 B live, too small for a ratio"
            ),
            "{out}"
        );
        assert!(!out.contains("5632"), "{out}");
        let v = serde_json::to_value(ReportJson::from(&Report::new(vec![p], None))).unwrap();
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
}
