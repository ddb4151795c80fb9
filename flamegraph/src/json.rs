//! The JSON documents allocmux writes, as typed structs: this module is
//! their schema.
//!
//! - [`ReportJson`]: `allocmux run --json` and `allocmux report --json`;
//! - [`CompareJson`]: `allocmux compare --json` and the demo's
//!   `allocmux-demo-compare.json`;
//! - [`StackJson`] (an array of them): `allocmux export --format json`.
//!
//! Every object's keys are written in alphabetical order (see
//! [`to_pretty`]), whatever the order of the fields below. Times are in
//! nanoseconds, sizes in bytes, shares are fractions (0.25 is 25%); a value
//! that is not known is `null`.

use std::collections::BTreeMap;

use allocmux_format::lifetimes::DECADE_BOUNDS_NS;
use allocmux_format::profile::{AllocatorReading, State};
use allocmux_format::{EXACT_TIMING_BYTES, Func, SIZE_BUCKETS, Totals, totals::bucket_floor};
use serde::Serialize;

use crate::compare::{Comparison, Figure, Summary, Verdict};
use crate::leaks::Leaks;
use crate::report::{LifetimeFigures, ProcessFigures, Report, heap_overhead};
use crate::stacks::{MergedStack, StackSet, Weight};
use crate::stats::{Interval, Spread};
use crate::suppressions::Origin;
use crate::symbolize::Frame;
use crate::units::share;

/// `doc` as pretty-printed JSON with a final newline.
///
/// It goes through a [`serde_json::Value`], whose objects are ordered by
/// key, so that every object's keys are sorted: the order allocmux has
/// always written them in, which the structs' flattened parts (a process's
/// figures among its own keys) could not keep by field order alone.
pub fn to_pretty(doc: &impl Serialize) -> String {
    let value = serde_json::to_value(doc).expect("the JSON documents serialise");
    let mut text = serde_json::to_string_pretty(&value).expect("JSON values serialise");
    text.push('\n');
    text
}

/// `doc` as pretty-printed JSON with a final newline, each object's keys
/// in the order its struct declares them. For a document whose keys are
/// declared in sorted order (a list of [`StackJson`]) it is the text of
/// [`to_pretty`], without the [`serde_json::Value`] tree, which for a deep
/// profile's stacks took 700 MB.
pub fn to_pretty_declared(doc: &impl Serialize) -> String {
    let mut text = serde_json::to_string_pretty(doc).expect("the JSON documents serialise");
    text.push('\n');
    text
}

/// A report of a run or of saved profiles.
#[derive(Debug, Serialize)]
pub struct ReportJson {
    /// The schema version: 1.
    pub allocmux_report: u32,
    /// Every process, in start order.
    pub processes: Vec<ProcessJson>,
    /// Sums over all processes.
    pub total: TotalJson,
    /// How the command ran (`allocmux run` only).
    #[serde(flatten)]
    pub run: Option<RunJson>,
    /// The largest call stacks per weight (`allocmux report` of profiles
    /// with stacks, unless `--top 0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_stacks: Option<TopStacksJson>,
    /// What to change, from the stacks (`report` of profiles with stacks):
    /// the stack with the most temporary allocations, else the largest
    /// leak, else the most allocator time, when it stands out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advice: Option<AdviceJson>,
    /// The stacks of blocks live at exit (`allocmux report --leaks`).
    #[serde(flatten)]
    pub leaks: Option<LeaksJson>,
    /// Programs that processes replaced themselves with (`exec`) and that
    /// the shim could not reach (statically linked, setuid): their
    /// allocations are in no figure.
    pub unprofiled: Vec<UnprofiledJson>,
}

/// A program that left no profile, though a profiled process ran it.
#[derive(Debug, Serialize)]
pub struct UnprofiledJson {
    /// The process that ran it (`exec` keeps the pid).
    pub pid: u32,
    /// The program, as the `exec` named it.
    pub program: String,
    /// Why it could not be profiled, as far as can be told.
    pub reason: String,
}

/// How `allocmux run` ran the command.
#[derive(Debug, Serialize)]
pub struct RunJson {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Exit code of the main process, if it exited.
    pub exit_code: Option<i32>,
    /// Signal number that killed it, if one did.
    pub signal: Option<i32>,
    /// The status a shell would report (the code, or 128 + signal), which
    /// `allocmux run` exits with.
    pub exit_status: i32,
    /// User CPU time of the process tree (the kernel's accounting).
    pub user_ns: u64,
    /// System CPU time of the process tree.
    pub sys_ns: u64,
}

/// The counters of a process, or summed over processes.
#[derive(Debug, Serialize)]
pub struct FiguresJson {
    /// Calls per function (`malloc`, `free`, ...).
    pub calls: BTreeMap<&'static str, u64>,
    /// Calls that allocate (malloc, calloc, realloc, ...).
    pub allocation_calls: u64,
    /// Calls that returned no memory.
    pub failed_calls: u64,
    /// `free(NULL)` calls, which free nothing: not in `calls.free`.
    pub null_frees: u64,
    /// Bytes the program asked for.
    pub bytes_requested: u64,
    /// Bytes the allocator handed out (usable sizes).
    pub bytes_allocated: u64,
    /// Bytes freed.
    pub bytes_freed: u64,
    /// Peak live bytes (for a total: the sum of the processes' peaks).
    pub peak_live_bytes: u64,
    /// Live bytes when the process ended (or the profile was written).
    pub live_bytes_at_exit: u64,
    /// Calls whose time was measured (a sample).
    pub timed_calls: u64,
    /// Timed calls measured exactly rather than sampled.
    pub exact_timed_calls: u64,
    /// Request sizes, the non-empty buckets only, smallest first.
    pub size_histogram: Vec<SizeBucketJson>,
}

/// One bucket of the request-size histogram.
#[derive(Debug, Serialize)]
pub struct SizeBucketJson {
    /// Smallest size in the bucket.
    pub min_bytes: u64,
    /// Largest size in the bucket.
    pub max_bytes: u64,
    /// Requests in the bucket.
    pub count: u64,
    /// Whether `count` is an estimate: requests under 64 KiB are counted
    /// at the timed calls, a sample; larger ones one by one.
    pub estimated: bool,
}

/// One process of a report.
#[derive(Debug, Serialize)]
pub struct ProcessJson {
    /// Its counters.
    #[serde(flatten)]
    pub figures: FiguresJson,
    /// Process id.
    pub pid: u32,
    /// Parent's process id.
    pub ppid: u32,
    /// Executable path.
    pub exe: String,
    /// Arguments.
    pub argv: Vec<String>,
    /// The allocator it ran on.
    pub allocator: String,
    /// `exited`, or `running` when the profile was written before the end.
    pub state: &'static str,
    /// False when the process ended before the shim's first periodic
    /// write, so its zero counters are not figures (killed early).
    pub figures_known: bool,
    /// `exact`: every call counted; `sampled`: the sampled level, where
    /// every figure is estimated from the stack sample (allocations under
    /// `calls.malloc`, frees under `calls.free`, requested bytes as
    /// `bytes_allocated`), with `estimate_intervals`.
    pub recording: &'static str,
    /// At the sampled level, the 95% intervals of the estimated
    /// allocations and requested bytes; `null` for counts.
    pub estimate_intervals: Option<EstimateIntervalsJson>,
    /// Estimated time inside the allocator (null at the sampled level,
    /// which does not estimate it).
    pub allocator_ns: Option<u64>,
    /// Half the width of its 95% confidence interval (null for a profile
    /// written without what it needs).
    pub allocator_ns_margin: Option<u64>,
    /// `allocator_ns` over `cpu_ns` (null at the sampled level).
    pub allocator_time_share: Option<f64>,
    /// CPU time.
    pub cpu_ns: u64,
    /// Wall time.
    pub wall_ns: u64,
    /// Peak resident set size.
    pub max_rss_bytes: u64,
    /// Threads it ran.
    pub threads: u64,
    /// Temporary allocations: blocks freed by the thread that allocated
    /// them before it allocated anything else (null unless exact stacks
    /// were recorded).
    pub temporary_allocations: Option<u64>,
    /// How long its freed blocks lived, summed over its stacks (null
    /// unless stacks were recorded with lifetimes).
    pub lifetimes: Option<LifetimesJson>,
    /// Mean calls between two timed calls.
    pub time_sample_mean: u32,
    /// The allocator's own statistics as last read (at the end, for a
    /// normal exit), or `null`.
    pub allocator_stats: Option<AllocatorStatsJson>,
    /// Of the readings of the allocator's statistics, the one taken with
    /// the most live bytes (nearest the peak), in the same shape: the
    /// same reading as `allocator_stats` when no earlier one had more;
    /// `null` when there is none.
    pub allocator_stats_at_peak: Option<AllocatorStatsJson>,
    /// What the allocator held per live byte, as the report states it:
    /// `allocator_stats_at_peak`'s `overhead`, or `null` when it is not
    /// measured (no reading, mimalloc, or a reading under half of
    /// `peak_live_bytes`, whose ratio would measure what the program freed).
    pub heap_overhead: Option<f64>,
}

/// The 95% intervals of a sampled process's estimates, each `[low, high]`.
#[derive(Debug, Serialize)]
pub struct EstimateIntervalsJson {
    /// Of the allocations.
    pub allocations: [u64; 2],
    /// Of the requested bytes.
    pub bytes: [u64; 2],
}

/// One reading of the allocator's own statistics.
#[derive(Debug, Serialize)]
pub struct AllocatorStatsJson {
    /// `system`, `jemalloc` or `mimalloc`.
    pub backend: &'static str,
    /// When they were read, in ns since the process started.
    pub read_at_ns: u64,
    /// The program's live bytes then.
    pub live_bytes: u64,
    /// Bytes the allocator held from the system, where it says.
    pub held_bytes: Option<u64>,
    /// `held_bytes` over `live_bytes`.
    pub overhead: Option<f64>,
    /// The allocator's figures, by its own names.
    pub figures: BTreeMap<&'static str, u64>,
}

/// A report's total row.
#[derive(Debug, Serialize)]
pub struct TotalJson {
    /// Counters summed over the processes.
    #[serde(flatten)]
    pub figures: FiguresJson,
    /// The allocator (the one asked for, or every one the profiles name,
    /// comma-separated).
    pub allocator: String,
    /// Processes in the report.
    pub processes: usize,
    /// Allocator time summed.
    pub allocator_ns: u64,
    /// Half the width of its 95% confidence interval (the processes'
    /// margins combined as independent; null if one is unknown).
    pub allocator_ns_margin: Option<u64>,
    /// `allocator_ns` over `cpu_ns`.
    pub allocator_time_share: f64,
    /// CPU time: the kernel's for a run, else summed.
    pub cpu_ns: u64,
    /// Wall time: measured around a run, else the longest process.
    pub wall_ns: u64,
    /// Peak resident set size of the largest process.
    pub max_rss_bytes: u64,
    /// Threads summed.
    pub threads: u64,
    /// Temporary allocations summed (null unless every process recorded
    /// exact stacks).
    pub temporary_allocations: Option<u64>,
    /// Lifetimes summed (null unless every process recorded them).
    pub lifetimes: Option<LifetimesJson>,
}

impl From<&Report> for ReportJson {
    fn from(r: &Report) -> ReportJson {
        let t = r.total();
        ReportJson {
            allocmux_report: 1,
            processes: r.processes.iter().map(ProcessJson::from).collect(),
            total: TotalJson {
                figures: FiguresJson::from(&t.totals),
                allocator: r.allocator_name(),
                processes: r.processes.len(),
                allocator_ns: t.allocator_ns,
                allocator_ns_margin: t.allocator_ns_margin,
                allocator_time_share: share(t.allocator_ns, t.cpu_ns),
                cpu_ns: t.cpu_ns,
                wall_ns: t.wall_ns,
                max_rss_bytes: t.max_rss_bytes,
                threads: t.threads,
                temporary_allocations: t.temporary_allocations,
                lifetimes: t.lifetimes.as_ref().map(LifetimesJson::from),
            },
            run: r.run.as_ref().map(|run| RunJson {
                command: run.command.clone(),
                exit_code: run.exit.code,
                signal: run.exit.signal,
                exit_status: run.exit.shell_status(),
                user_ns: run.exit.user_ns,
                sys_ns: run.exit.sys_ns,
            }),
            top_stacks: None,
            advice: None,
            leaks: None,
            unprofiled: r
                .unprofiled
                .iter()
                .map(|u| UnprofiledJson {
                    pid: u.pid,
                    program: u.program.clone(),
                    reason: crate::target::why_unprofiled(&u.program),
                })
                .collect(),
        }
    }
}

impl From<&Totals> for FiguresJson {
    fn from(t: &Totals) -> FiguresJson {
        FiguresJson {
            calls: Func::ALL
                .iter()
                .map(|&f| (f.name(), t.calls_of(f)))
                .collect(),
            allocation_calls: t.allocation_calls(),
            failed_calls: t.failed_calls,
            null_frees: t.null_frees,
            bytes_requested: t.bytes_requested,
            bytes_allocated: t.bytes_allocated,
            bytes_freed: t.bytes_freed,
            peak_live_bytes: t.peak_live_bytes,
            live_bytes_at_exit: t.live_bytes(),
            timed_calls: t.timed_calls,
            exact_timed_calls: t.exact_calls,
            size_histogram: (0..SIZE_BUCKETS)
                .filter(|&b| t.size_hist[b] > 0)
                .map(|b| SizeBucketJson {
                    min_bytes: bucket_floor(b),
                    max_bytes: bucket_floor(b + 1).saturating_sub(1).max(bucket_floor(b)),
                    count: t.size_hist[b],
                    estimated: bucket_floor(b) < EXACT_TIMING_BYTES as u64,
                })
                .collect(),
        }
    }
}

impl From<&ProcessFigures> for ProcessJson {
    fn from(p: &ProcessFigures) -> ProcessJson {
        let pr = &p.profile;
        ProcessJson {
            figures: FiguresJson::from(&pr.totals),
            pid: pr.pid,
            ppid: pr.ppid,
            exe: pr.exe.clone(),
            argv: pr.argv.clone(),
            allocator: pr.allocator.clone(),
            state: if pr.state == State::Exited {
                "exited"
            } else {
                "running"
            },
            figures_known: !p.figures_unknown(),
            recording: if p.estimated() { "sampled" } else { "exact" },
            estimate_intervals: p.estimated().then(|| {
                let around = |x: u64, bytes: bool| {
                    let half = pr.recording.margin(bytes).unwrap_or(0.0);
                    [
                        (x as f64 - half).max(0.0).round() as u64,
                        (x as f64 + half).round() as u64,
                    ]
                };
                EstimateIntervalsJson {
                    allocations: around(pr.totals.allocation_calls(), false),
                    bytes: around(pr.totals.bytes_requested, true),
                }
            }),
            allocator_ns: (!p.estimated()).then_some(p.allocator_ns),
            allocator_ns_margin: p.allocator_ns_margin.filter(|_| !p.estimated()),
            allocator_time_share: (!p.estimated()).then(|| p.allocator_share()),
            cpu_ns: pr.cpu_ns,
            wall_ns: pr.wall_ns(),
            max_rss_bytes: pr.max_rss_bytes,
            threads: pr.threads,
            temporary_allocations: p.temporary_allocations(),
            lifetimes: p.lifetimes().as_ref().map(LifetimesJson::from),
            time_sample_mean: pr.time_sample_mean,
            allocator_stats: pr.allocator_stats.as_ref().map(allocator_stats),
            allocator_stats_at_peak: pr.reading_nearest_peak().map(allocator_stats),
            heap_overhead: heap_overhead(pr).and_then(|o| o.ratio()),
        }
    }
}

fn allocator_stats(r: &AllocatorReading) -> AllocatorStatsJson {
    AllocatorStatsJson {
        backend: r.stats.backend().name(),
        read_at_ns: r.t_ns,
        live_bytes: r.live_bytes,
        held_bytes: r.stats.held_bytes(),
        overhead: r.overhead(),
        figures: r.stats.fields().collect(),
    }
}

/// How long blocks lived: per decade of lifetime, how many were freed.
/// Keys in sorted order (see [`to_pretty_declared`]).
#[derive(Debug, Serialize)]
pub struct LifetimesJson {
    /// The decades, shortest first: each with its upper bound in ns
    /// (`null` for the last, 10 s or more) and the blocks freed in it.
    pub decades: Vec<DecadeJson>,
    /// Blocks freed.
    pub freed: u64,
    /// Their mean lifetime in ns (null when none was freed, or the TSC's
    /// rate is unknown).
    pub mean_ns: Option<f64>,
    /// Blocks never freed (live at exit).
    pub never_freed: u64,
    /// Blocks freed within 1 ms.
    pub short_lived: u64,
}

/// One decade of [`LifetimesJson`].
#[derive(Debug, Serialize)]
pub struct DecadeJson {
    /// Lifetimes below this many ns (and at least the previous decade's
    /// bound); `null` for the last decade.
    pub below_ns: Option<u64>,
    /// Blocks freed after such a lifetime.
    pub freed: u64,
}

impl From<&LifetimeFigures> for LifetimesJson {
    fn from(l: &LifetimeFigures) -> LifetimesJson {
        LifetimesJson {
            decades: l
                .freed
                .iter()
                .enumerate()
                .map(|(i, &freed)| DecadeJson {
                    below_ns: DECADE_BOUNDS_NS.get(i).copied(),
                    freed,
                })
                .collect(),
            freed: l.count(),
            mean_ns: l.mean_ns(),
            never_freed: l.never_freed,
            short_lived: l.short_lived(),
        }
    }
}

/// A call stack: its frames, leaf (the allocating call site) first, and
/// its value for every weight. Its keys and [`Frame`]'s are declared in
/// sorted order (see [`to_pretty_declared`]).
#[derive(Debug, Serialize)]
pub struct StackJson {
    /// The weights whose values are estimates rather than counts: `time`
    /// always (from timed calls), and every weight of sampled stacks.
    pub estimated: Vec<&'static str>,
    /// Frames, leaf first (see [`Frame`] for the keys).
    pub frames: Vec<Frame>,
    /// How long its freed blocks lived (absent when the profiles did not
    /// record lifetimes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifetimes: Option<LifetimesJson>,
    /// The program that made the stack, when the stacks come from several
    /// (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// Per weight name (`count`, `bytes`, `time`, `peak`, `leaked`,
    /// `temporary`), the stack's value, in allocations, bytes, ns, bytes,
    /// bytes, allocations; a weight the profiles do not measure
    /// (`temporary` without exact stacks) is left out.
    pub values: BTreeMap<&'static str, u64>,
}

impl StackJson {
    /// Stack `s` of `set`.
    pub fn new(s: &MergedStack, set: &StackSet<'_>) -> StackJson {
        StackJson {
            estimated: Weight::ALL
                .iter()
                .filter(|&&w| set.measures(w) && set.estimates(w))
                .map(|w| w.name())
                .collect(),
            frames: s.frames.clone(),
            lifetimes: set
                .measures_lifetimes()
                .then(|| LifetimesJson::from(&s.values.lifetime_figures(set.ticks_per_ns))),
            program: s.program.clone(),
            values: Weight::ALL
                .iter()
                .filter(|&&w| set.measures(w))
                .map(|w| (w.name(), w.of(&s.values)))
                .collect(),
        }
    }
}

/// The export: merged stacks, largest `order` first, those whose values
/// are all zero left out.
pub fn stacks(set: &StackSet<'_>, order: Weight) -> Vec<StackJson> {
    set.merged(order)
        .iter()
        .map(|s| StackJson::new(s, set))
        .collect()
}

/// What `report --leaks` adds to the report: four keys.
#[derive(Debug, Serialize)]
pub struct LeaksJson {
    /// The stacks of blocks live at exit, suppressed ones left out, most
    /// bytes first.
    pub leaks: Vec<LeakJson>,
    /// Per list of suppressions in use (the defaults first, unless turned
    /// off, then each `--suppressions` file), what it left out.
    pub leaks_suppressed: Vec<SuppressedJson>,
    /// Processes still running (or ended without exit handlers) at their
    /// last write: when not 0, `leaks` holds what was live then, not
    /// necessarily at exit.
    pub leaks_still_running: usize,
    /// Allocations whose stack could not be recorded: their blocks are in
    /// no figure of `leaks`.
    pub leaks_without_stack: u64,
}

/// A stack of blocks live at exit.
#[derive(Debug, Serialize)]
pub struct LeakJson {
    /// Blocks from it live at exit.
    pub blocks: u64,
    /// Their requested bytes.
    pub bytes: u64,
    /// Whether `blocks` and `bytes` are estimates (sampled stacks).
    pub estimated: bool,
    /// Frames, leaf first (see [`Frame`] for the keys).
    pub frames: Vec<Frame>,
    /// The program that made the stack, when the stacks come from several
    /// (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
}

/// What one list of suppressions left out.
#[derive(Debug, Serialize)]
pub struct SuppressedJson {
    /// The file, as named on the command line; `null` for the defaults.
    pub file: Option<String>,
    /// Stacks left out.
    pub stacks: u64,
    /// Their blocks live at exit.
    pub blocks: u64,
    /// Their requested bytes.
    pub bytes: u64,
}

impl From<&Leaks> for LeaksJson {
    fn from(l: &Leaks) -> LeaksJson {
        LeaksJson {
            leaks: l
                .leaks
                .iter()
                .map(|leak| LeakJson {
                    blocks: leak.blocks,
                    bytes: leak.bytes,
                    estimated: l.estimated,
                    frames: leak.stack.frames.clone(),
                    program: leak.stack.program.clone(),
                })
                .collect(),
            leaks_suppressed: l
                .suppressed
                .iter()
                .map(|s| SuppressedJson {
                    file: match &s.origin {
                        Origin::Defaults => None,
                        Origin::File(name) => Some(name.clone()),
                    },
                    stacks: s.stacks,
                    blocks: s.blocks,
                    bytes: s.bytes,
                })
                .collect(),
            leaks_still_running: l.still_running,
            leaks_without_stack: l.lost,
        }
    }
}

/// A report's `top_stacks`: per weight name, the largest stacks by it.
pub type TopStacksJson = BTreeMap<&'static str, Vec<TopStackJson>>;

/// One of the largest stacks by a weight.
#[derive(Debug, Serialize)]
pub struct TopStackJson {
    /// Its value of the weight.
    pub value: u64,
    /// That value over the weight's total.
    pub share: f64,
    /// The stack and every weight's value.
    #[serde(flatten)]
    pub stack: StackJson,
}

/// A comparison: every run, the summary per allocator and per pair of
/// allocators, and the verdict.
#[derive(Debug, Serialize)]
pub struct CompareJson {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// The allocator the ratios are against.
    pub baseline: String,
    /// Measured rounds.
    pub rounds: usize,
    /// Measured rounds planned (more than `rounds` when stopped early).
    pub rounds_planned: usize,
    /// Unmeasured rounds run first.
    pub warmup_rounds: usize,
    /// Whether `--stop-early` ended the comparison before `rounds_planned`.
    pub stopped_early: bool,
    /// The confidence level of the intervals.
    pub confidence_level: f64,
    /// How the intervals are computed.
    pub method: &'static str,
    /// Every run, warm-up runs included, in the order they ran.
    pub runs: Vec<CompareRunJson>,
    /// Per allocator, baseline first.
    pub allocators: Vec<AllocatorSummaryJson>,
    /// Every two allocators' wall times compared, the intervals the verdict
    /// reads (those with the baseline are also each allocator's
    /// `speedup_vs_baseline`); empty with fewer than two rounds.
    pub pairs: Vec<PairJson>,
    /// Which allocator is fastest, as far as the runs can tell.
    pub verdict: VerdictJson,
    /// What makes the figures less trustworthy (noise, too few rounds).
    pub warnings: Vec<String>,
}

/// One run of the command under one allocator.
#[derive(Debug, Serialize)]
pub struct CompareRunJson {
    /// Round number, from 1 (warm-up rounds have their own numbers).
    pub round: usize,
    /// Whether it was a warm-up run (not in the statistics).
    pub warmup: bool,
    /// Whether it was recorded: a recorded run gives the counts and the
    /// allocator's time (and its times are here, but in no statistic); a
    /// timing run records nothing and gives the times and max RSS.
    pub recorded: bool,
    /// The allocator.
    pub allocator: String,
    /// Every figure the run measured, by its key (`wall_ns`,
    /// `max_rss_bytes`, ...).
    #[serde(flatten)]
    pub figures: BTreeMap<&'static str, FigureValue>,
}

/// The value of a figure: a count of ns, bytes or calls, or a share.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum FigureValue {
    /// Nanoseconds, bytes or calls.
    Count(u64),
    /// A fraction.
    Share(f64),
}

/// One allocator's summary.
#[derive(Debug, Serialize)]
pub struct AllocatorSummaryJson {
    /// The allocator.
    pub allocator: String,
    /// Measured timing runs (which give wall, user, sys and max RSS).
    pub runs: usize,
    /// Measured recorded runs (which give the other figures).
    pub recorded_runs: usize,
    /// Median and spread of every figure, by its key, over the runs that
    /// give it.
    pub figures: BTreeMap<&'static str, Spread>,
    /// How many times faster than the baseline (wall time); `null` for the
    /// baseline or with too few rounds.
    pub speedup_vs_baseline: Option<Interval>,
    /// Peak RSS over the baseline's.
    pub max_rss_vs_baseline: Option<Interval>,
}

/// Two allocators compared over the paired rounds.
#[derive(Debug, Serialize)]
pub struct PairJson {
    /// The later of the two in `allocators` (never the baseline).
    pub a: String,
    /// The earlier one.
    pub b: String,
    /// The figure compared, by its key: `wall_ns`, the one the verdict
    /// reads.
    pub figure: &'static str,
    /// How many times faster `a` is than `b` (`b`'s figure over `a`'s, as
    /// `speedup_vs_baseline`): the Hodges–Lehmann estimate.
    pub ratio: f64,
    /// The lower end of its interval.
    pub low: f64,
    /// The upper end.
    pub high: f64,
    /// The interval's coverage (at least `confidence_level`).
    pub confidence: f64,
    /// Whether the interval excludes 1, so that the verdict counts one of
    /// the two clearly faster.
    pub clear: bool,
}

/// The verdict of a comparison.
#[derive(Debug, Serialize)]
pub struct VerdictJson {
    /// The clear winner, or `null`.
    pub winner: Option<String>,
    /// The allocators no other one clearly beats (the winner alone when
    /// there is one).
    pub leaders: Vec<String>,
    /// The verdict as the table says it.
    pub text: String,
}

impl CompareJson {
    /// The document of a comparison and its summary.
    pub fn new(cmp: &Comparison, s: &Summary) -> CompareJson {
        let runs = cmp
            .runs
            .iter()
            .map(|r| CompareRunJson {
                round: r.round,
                warmup: r.warmup,
                recorded: r.recorded,
                allocator: r.allocator.name().to_string(),
                figures: Figure::ALL
                    .into_iter()
                    .filter(|&f| r.recorded || !f.from_recorded_runs())
                    .map(|f| {
                        let x = r.figure(f);
                        let v = if f == Figure::AllocatorShare {
                            FigureValue::Share(x)
                        } else {
                            FigureValue::Count(x as u64)
                        };
                        (f.key(), v)
                    })
                    .collect(),
            })
            .collect();
        let allocators = s
            .per_allocator
            .iter()
            .map(|a| AllocatorSummaryJson {
                allocator: a.allocator.name().to_string(),
                runs: a.runs,
                recorded_runs: a.recorded_runs,
                figures: a.figures.iter().map(|&(f, sp)| (f.key(), sp)).collect(),
                speedup_vs_baseline: a.speedup,
                max_rss_vs_baseline: a.memory,
            })
            .collect();
        let (winner, leaders) = match &s.verdict {
            Verdict::Winner { winner, .. } => (
                Some(winner.name().to_string()),
                vec![winner.name().to_string()],
            ),
            Verdict::NoClearWinner { leaders, .. } => {
                (None, leaders.iter().map(|a| a.name().to_string()).collect())
            }
            Verdict::Alone | Verdict::TooFewRounds => (None, vec![]),
        };
        CompareJson {
            command: cmp.command.clone(),
            baseline: cmp.allocators[0].name().to_string(),
            rounds: s.rounds,
            rounds_planned: cmp.rounds_planned,
            warmup_rounds: cmp.warmup,
            stopped_early: cmp.stopped_early,
            confidence_level: cmp.level,
            method: "Hodges-Lehmann estimate of the paired log ratio per round, \
                     exact Wilcoxon signed-rank confidence interval",
            runs,
            allocators,
            pairs: s
                .pairs
                .iter()
                .map(|p| PairJson {
                    a: p.a.name().to_string(),
                    b: p.b.name().to_string(),
                    figure: Figure::Wall.key(),
                    ratio: p.speedup.estimate,
                    low: p.speedup.low,
                    high: p.speedup.high,
                    confidence: p.speedup.confidence,
                    clear: p.clear(cmp.level),
                })
                .collect(),
            verdict: VerdictJson {
                winner,
                leaders,
                text: s.verdict_line(cmp.level),
            },
            warnings: s.warnings.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stack exports skip the sorting `Value` tree: their keys must be
    /// declared in sorted order for the text to be the same.
    #[test]
    fn stacks_keys_are_declared_sorted() {
        let doc = vec![StackJson {
            estimated: vec!["time"],
            frames: vec![Frame {
                file: Some("a.c".into()),
                function: "f".into(),
                inlined: true,
                line: Some(3),
                module: Some("/lib/m.so".into()),
            }],
            lifetimes: Some(LifetimesJson::from(&LifetimeFigures {
                freed: [1; 9],
                sum_ns: Some(5.0),
                never_freed: 2,
            })),
            program: Some("cc1".into()),
            values: Weight::ALL.iter().map(|w| (w.name(), 1)).collect(),
        }];
        assert_eq!(to_pretty_declared(&doc), to_pretty(&doc));
    }
}

/// `advice`: what the profile says to change.
#[derive(Debug, Serialize)]
pub struct AdviceJson {
    /// The weight it reads (`temporary`, `leaked` or `time`).
    pub weight: &'static str,
    /// The stack's figure of that weight.
    pub value: u64,
    /// Its share (of all allocations, for temporaries; else of the
    /// weight's total).
    pub share: f64,
    /// The stack on one line, leaf first.
    pub stack: String,
    /// The advice in words.
    pub text: String,
}

impl From<&crate::advice::Advice> for AdviceJson {
    fn from(a: &crate::advice::Advice) -> AdviceJson {
        AdviceJson {
            weight: a.weight.name(),
            value: a.value,
            share: a.share,
            stack: a.stack.clone(),
            text: a.text.clone(),
        }
    }
}
