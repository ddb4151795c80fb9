//! Call stacks of one or many processes, symbolized, with the figures every
//! view weighs them by, merged and written as folded lines.
//!
//! A profile stores each distinct stack of return addresses once per
//! process, leaf (the allocating call site) first. [`StackSet::build`]
//! symbolizes them ([`crate::symbolize`]), trims allocation plumbing from
//! the leaf end, and converts allocator ticks to nanoseconds; the
//! per-process, per-address stacks stay available (pprof keeps addresses),
//! and [`StackSet::merged`] joins the stacks whose frames are identical,
//! across processes and addresses, for flamegraphs, tables and JSON.
//!
//! Stacks from more than one program (`cc -c` runs cc, cc1 and as) are
//! rooted at the program that made them ([`StackSet::root_by_program`]):
//! the stacks of different programs are not merged, folded lines start
//! with a `[cc1]` frame, and merged stacks name their program.

use std::cmp::Ordering;
use std::fmt::Write as _;
use std::rc::Rc;

use allocmux_format::lifetimes::DECADES;
use allocmux_format::profile::{ProcessProfile, StackMode, State};
use allocmux_format::{Lifetimes, SIZE_BUCKETS, SiteCounts, Totals, totals::bucket_floor};
use rustc_hash::FxHashMap;

use crate::report::{LifetimeFigures, program_name};
use crate::symbolize::{Frame, Resolved, Symbolizer};
use crate::units::{Bytes, Count, Dur};

/// What a stack is weighed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum Weight {
    /// Allocation calls.
    Count,
    /// Bytes allocated.
    Bytes,
    /// Time inside the allocator (the allocations and the frees of their blocks).
    Time,
    /// Bytes live when the process's live bytes peaked.
    Peak,
    /// Bytes still live at exit (live now, for a process still running).
    Leaked,
    /// Temporary allocations: blocks freed by the thread that allocated
    /// them before it allocated anything else (exact stacks only).
    Temporary,
}

impl Weight {
    /// Every weight, in the order tables list them.
    pub const ALL: [Weight; 6] = [
        Weight::Count,
        Weight::Bytes,
        Weight::Time,
        Weight::Peak,
        Weight::Leaked,
        Weight::Temporary,
    ];

    /// The name on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Weight::Count => "count",
            Weight::Bytes => "bytes",
            Weight::Time => "time",
            Weight::Peak => "peak",
            Weight::Leaked => "leaked",
            Weight::Temporary => "temporary",
        }
    }

    /// The unit of a value (`time_unit` is "ns", or "ticks" when no clock
    /// rate could be measured).
    pub fn unit(self, time_unit: &'static str) -> &'static str {
        match self {
            Weight::Count | Weight::Temporary => "allocations",
            Weight::Bytes | Weight::Peak | Weight::Leaked => "bytes",
            Weight::Time => time_unit,
        }
    }

    /// What the value means, for titles and headings.
    pub fn describe(self) -> &'static str {
        match self {
            Weight::Count => "allocations",
            Weight::Bytes => "bytes requested",
            Weight::Time => "time in the allocator",
            Weight::Peak => "requested bytes live at the peak",
            Weight::Leaked => "requested bytes live at exit",
            Weight::Temporary => "temporary allocations",
        }
    }

    /// This weight's figure of a stack.
    pub fn of(self, v: &Values) -> u64 {
        match self {
            Weight::Count => v.allocs,
            Weight::Bytes => v.bytes,
            Weight::Time => v.ns,
            Weight::Peak => v.peak_bytes,
            Weight::Leaked => v.live_bytes,
            Weight::Temporary => v.temporary,
        }
    }
}

/// The figures of one stack (estimates in sample mode, already scaled).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Values {
    /// Allocation calls.
    pub allocs: u64,
    /// Bytes requested by them.
    pub bytes: u64,
    /// Allocator time of those calls and of the frees of their blocks, in
    /// ns (in TSC ticks when [`StackSet::time_unit`] says so).
    pub ns: u64,
    /// Blocks live at the process's peak.
    pub peak_allocs: u64,
    /// Their bytes.
    pub peak_bytes: u64,
    /// Blocks live at exit (now, for a running process).
    pub live_allocs: u64,
    /// Their bytes.
    pub live_bytes: u64,
    /// Temporary allocations among them.
    pub temporary: u64,
    /// Blocks freed, by the decade of their lifetime.
    pub freed_by_decade: [u64; DECADES],
    /// The sum of their lifetimes, in TSC ticks (converted to ns only when
    /// shown: [`lifetime_figures`](Self::lifetime_figures)).
    pub lifetime_ticks: u64,
}

impl Values {
    fn from_counts(c: &SiteCounts, l: &Lifetimes, ticks_per_ns: Option<f64>) -> Values {
        Values {
            allocs: c.allocs,
            bytes: c.bytes,
            ns: match ticks_per_ns {
                Some(r) => (c.ticks as f64 / r).round() as u64,
                None => c.ticks,
            },
            peak_allocs: c.peak_allocs,
            peak_bytes: c.peak_bytes,
            live_allocs: c.live_allocs,
            live_bytes: c.live_bytes,
            temporary: c.temporary,
            freed_by_decade: l.freed,
            lifetime_ticks: l.ticks,
        }
    }

    /// Its blocks' lifetimes, converted at `ticks_per_ns`.
    pub fn lifetime_figures(&self, ticks_per_ns: Option<f64>) -> LifetimeFigures {
        LifetimeFigures {
            freed: self.freed_by_decade,
            sum_ns: ticks_per_ns.map(|r| self.lifetime_ticks as f64 / r),
            never_freed: self.live_allocs,
        }
    }

    /// Adds another stack's figures.
    pub fn add(&mut self, o: &Values) {
        self.allocs += o.allocs;
        self.bytes += o.bytes;
        self.ns += o.ns;
        self.peak_allocs += o.peak_allocs;
        self.peak_bytes += o.peak_bytes;
        self.live_allocs += o.live_allocs;
        self.live_bytes += o.live_bytes;
        self.temporary += o.temporary;
        for (a, b) in self.freed_by_decade.iter_mut().zip(o.freed_by_decade) {
            *a += b;
        }
        self.lifetime_ticks += o.lifetime_ticks;
    }

    /// Whether every figure is zero.
    pub fn is_zero(&self) -> bool {
        *self == Values::default()
    }
}

/// One recorded stack of one process, symbolized.
#[derive(Clone, Debug)]
pub struct ProcStack {
    /// Index of the process in [`StackSet::profiles`].
    pub process: usize,
    /// The return addresses, leaf first, each with what it resolved to.
    pub locations: Vec<(u64, Resolved)>,
    /// Frames trimmed (as plumbing) from the leaf end of the flattened frames.
    pub trimmed: usize,
    /// Its figures.
    pub values: Values,
}

impl ProcStack {
    /// The frames, leaf first, plumbing trimmed.
    pub fn frames(&self) -> impl Iterator<Item = &Frame> {
        self.locations
            .iter()
            .flat_map(|(_, r)| r.iter())
            .skip(self.trimmed)
    }
}

/// A stack after merging: identical frames from any process or address
/// (of one program, when the stacks are rooted by program).
#[derive(Clone, Debug)]
pub struct MergedStack {
    /// Frames, leaf first.
    pub frames: Vec<Frame>,
    /// The program whose processes made it, when the stacks are rooted by
    /// program ([`StackSet::root_by_program`]).
    pub program: Option<String>,
    /// Summed figures.
    pub values: Values,
}

/// Why no stack view can be made of some profiles.
#[derive(Debug)]
pub struct NoStacks;

impl std::fmt::Display for NoStacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "no call stacks were recorded (ALLOCMUX_STACKS=off, or a shim without stack capture)",
        )
    }
}

impl std::error::Error for NoStacks {}

/// The symbolized stacks of a set of processes.
#[derive(Clone, Debug)]
pub struct StackSet<'a> {
    /// The processes, as given.
    pub profiles: &'a [ProcessProfile],
    /// Every recorded stack with a non-zero figure.
    pub stacks: Vec<ProcStack>,
    /// TSC ticks per ns used for `time`, if any process could measure it.
    pub ticks_per_ns: Option<f64>,
    /// Per process (as in `profiles`), the name of the program its stacks
    /// are rooted at; empty when they are not rooted.
    programs: Vec<String>,
}

impl<'a> StackSet<'a> {
    /// Symbolizes the stacks of `profiles`; fails if none recorded stacks.
    pub fn build(
        profiles: &'a [ProcessProfile],
        sym: &mut Symbolizer,
    ) -> Result<StackSet<'a>, NoStacks> {
        if !profiles
            .iter()
            .any(|p| p.stacks.mode != StackMode::Off || !p.stacks.stacks.is_empty())
        {
            return Err(NoStacks);
        }
        // As the report does: the TSC is shared by all processes, and the
        // rate is best measured over the longest-lived one.
        let ticks_per_ns = profiles
            .iter()
            .filter_map(|p| p.ticks_per_ns().map(|r| (p.wall_ns(), r)))
            .max_by_key(|&(span, _)| span)
            .map(|(_, r)| r);
        let mut stacks = Vec::new();
        for (i, p) in profiles.iter().enumerate() {
            // Each distinct address once, and each frame as the index of
            // its address: a deep profile has hundreds of thousands of
            // frames and tens of thousands of addresses, and one pass of a
            // cheap hash costs less than sorting the frames and searching.
            let mut index: FxHashMap<u64, u32> = FxHashMap::default();
            let mut addrs: Vec<u64> = Vec::new();
            let frame_index: Vec<u32> = p
                .stacks
                .stacks
                .iter()
                .flat_map(|s| s.frames.iter())
                .map(|&a| {
                    *index.entry(a).or_insert_with(|| {
                        addrs.push(a);
                        (addrs.len() - 1) as u32
                    })
                })
                .collect();
            let resolved = sym.resolve(&p.stacks.modules, &addrs);
            let mut at = 0;
            for s in &p.stacks.stacks {
                // This stack's frames' indices: the next `depth` of them.
                let indices = &frame_index[at..at + s.frames.len()];
                at += s.frames.len();
                let values = Values::from_counts(&s.counts, &s.lifetimes, ticks_per_ns);
                if values.is_zero() {
                    continue;
                }
                let locations: Vec<(u64, Resolved)> = s
                    .frames
                    .iter()
                    .zip(indices)
                    .map(|(&a, &i)| (a, resolved[i as usize].clone()))
                    .collect();
                let trimmed =
                    crate::symbolize::trim_count(locations.iter().flat_map(|(_, r)| r.iter()));
                stacks.push(ProcStack {
                    process: i,
                    locations,
                    trimmed,
                    values,
                });
            }
        }
        let mut set = StackSet {
            profiles,
            stacks,
            ticks_per_ns,
            programs: Vec::new(),
        };
        if set.has_several_programs() {
            set.root_by_program();
        }
        Ok(set)
    }

    /// Whether the stacks come from more than one program, by name (the
    /// processes of one program, forked or run again, are one).
    fn has_several_programs(&self) -> bool {
        let mut processes: Vec<usize> = self.stacks.iter().map(|s| s.process).collect();
        processes.dedup();
        let mut names = processes.iter().map(|&i| program_name(&self.profiles[i]));
        let first = names.next();
        names.any(|n| Some(n) != first)
    }

    /// Roots each stack at the program that made it, so that programs are
    /// told apart: [`StackSet::build`] does when the stacks come from more
    /// than one program; `diff` does for both profiles when either's are,
    /// so that their stacks line up.
    pub fn root_by_program(&mut self) {
        self.programs = self.profiles.iter().map(program_name).collect();
    }

    /// Whether the stacks are rooted by program.
    pub fn rooted_by_program(&self) -> bool {
        !self.programs.is_empty()
    }

    /// The unit of [`Values::ns`]: "ns", or "ticks" if no process ran long
    /// enough to measure the TSC rate.
    pub fn time_unit(&self) -> &'static str {
        if self.ticks_per_ns.is_some() {
            "ns"
        } else {
            "ticks"
        }
    }

    /// The sum of every stack's figures.
    pub fn total(&self) -> Values {
        let mut t = Values::default();
        for s in &self.stacks {
            t.add(&s.values);
        }
        t
    }

    /// Stacks with identical frames merged, largest `order` first (ties by
    /// their folded names, so the order is stable).
    ///
    /// As in [`StackSet::folded`], each location's frames are compared by
    /// value once, and stacks are merged as sequences of frame indices:
    /// a deep profile's stacks share most of their frames.
    pub fn merged(&self, order: Weight) -> Vec<MergedStack> {
        let mut frames: FrameIndex<'_, &Frame> = FrameIndex::new(|f| f);
        // When rooted, a stack's key ends (at the root) with its program,
        // as the index of the program's name in `program_names`: the
        // processes of one program share it.
        let mut program_names: Vec<&str> = Vec::new();
        let program_of: Vec<u32> = self
            .programs
            .iter()
            .map(|name| {
                let i = program_names
                    .iter()
                    .position(|p| p == name)
                    .unwrap_or_else(|| {
                        program_names.push(name);
                        program_names.len() - 1
                    });
                i as u32
            })
            .collect();
        let mut by_frames: FxHashMap<Box<[u32]>, Values> = FxHashMap::default();
        let mut key: Vec<u32> = Vec::new();
        for s in &self.stacks {
            key.clear();
            for (_, r) in &s.locations {
                key.extend_from_slice(frames.of_location(r));
            }
            key.extend(program_of.get(s.process));
            // Leaf first: the plumbing trimmed from the front.
            let key = &key[s.trimmed..];
            match by_frames.get_mut(key) {
                Some(values) => values.add(&s.values),
                None => {
                    by_frames.insert(key.into(), s.values);
                }
            }
        }
        let mut out: Vec<(String, MergedStack)> = by_frames
            .into_iter()
            .map(|(key, values)| {
                let (key, program) = match key.split_last() {
                    Some((&p, rest)) if self.rooted_by_program() => {
                        (rest, Some(program_names[p as usize].to_string()))
                    }
                    _ => (&key[..], None),
                };
                let stack: Vec<Frame> = key.iter().map(|&i| (*frames.key(i)).clone()).collect();
                (
                    folded_names(&stack),
                    MergedStack {
                        frames: stack,
                        program,
                        values,
                    },
                )
            })
            .collect();
        out.sort_by(|(a_names, a), (b_names, b)| {
            order
                .of(&b.values)
                .cmp(&order.of(&a.values))
                .then_with(|| a.program.cmp(&b.program))
                .then_with(|| a_names.cmp(b_names))
        });
        out.into_iter().map(|(_, stack)| stack).collect()
    }

    /// Folded stacks for `weight`: `root;...;leaf value` per line, root
    /// first as inferno and flamegraph.pl read them, sorted, stacks whose
    /// value is zero left out, identical lines merged.
    ///
    /// A deep-stacked profile has hundreds of thousands of frames but few
    /// distinct names: each name is escaped once ([`FrameIndex`]), stacks
    /// are merged as sequences of name indices, and only the output is
    /// written as text.
    pub fn folded(&self, weight: Weight) -> String {
        let mut names = FrameIndex::new(folded_name);
        // Per process, its program's root frame, when rooted: `[cc1]`.
        let roots: Vec<u32> = self
            .programs
            .iter()
            .map(|p| {
                let mut root = String::new();
                push_escaped(&mut root, &format!("[{p}]"));
                names.intern(root)
            })
            .collect();
        let mut lines: FxHashMap<Box<[u32]>, u64> = FxHashMap::default();
        let mut key: Vec<u32> = Vec::new();
        for s in &self.stacks {
            let v = weight.of(&s.values);
            if v == 0 {
                continue;
            }
            // Root first: the program, the locations and their inlined
            // frames reversed, then the trimmed plumbing (at the leaf end)
            // dropped.
            key.clear();
            key.extend(roots.get(s.process));
            for (_, r) in s.locations.iter().rev() {
                key.extend(names.of_location(r).iter().rev());
            }
            key.truncate(key.len() - s.trimmed);
            match lines.get_mut(key.as_slice()) {
                Some(total) => *total += v,
                None => {
                    lines.insert(key.as_slice().into(), v);
                }
            }
        }
        let mut lines: Vec<(Box<[u32]>, u64)> = lines.into_iter().collect();
        lines.sort_unstable_by(|(a, _), (b, _)| names.cmp_joined(a, b));
        // Sized once: a deep-stacked profile folds to tens of megabytes,
        // which growing by doubling would copy and fault in again.
        let digits = 20 + 2; // a u64, the space and the line break
        let len: usize = lines
            .iter()
            .map(|(k, _)| k.iter().map(|&n| names.key(n).len() + 1).sum::<usize>() + digits)
            .sum();
        let mut out = String::with_capacity(len);
        for (stack, v) in lines {
            for (i, &n) in stack.iter().enumerate() {
                if i > 0 {
                    out.push(';');
                }
                out.push_str(names.key(n));
            }
            let _ = writeln!(out, " {v}");
        }
        out
    }

    /// How the stacks were recorded, for titles: "sampled every 512.0 KiB",
    /// "every allocation", "every allocation of the first 250,000, then
    /// sampled every 512.0 KiB", or several when processes differ.
    pub fn mode_description(&self) -> String {
        let mut modes: Vec<String> = self
            .profiles
            .iter()
            .filter_map(|p| match p.stacks.mode {
                StackMode::Off => None,
                StackMode::Sample { mean_bytes } if p.stacks.exact_first > 0 => Some(format!(
                    "every allocation of the first {}, then sampled every {}",
                    Count(p.stacks.exact_first),
                    Bytes(mean_bytes)
                )),
                StackMode::Sample { mean_bytes } => {
                    Some(format!("sampled every {}", Bytes(mean_bytes)))
                }
                StackMode::Exact => Some("every allocation".into()),
            })
            .collect();
        modes.sort();
        modes.dedup();
        modes.join(", ")
    }

    /// Processes still running (or ended without exit handlers) when
    /// their profile was written: their `leaked` is "live now".
    pub fn running(&self) -> usize {
        self.profiles
            .iter()
            .filter(|p| p.state == State::Running && !p.stacks.stacks.is_empty())
            .count()
    }

    /// Allocations whose stack could not be recorded, over all processes.
    pub fn lost(&self) -> u64 {
        self.profiles
            .iter()
            .map(|p| p.stacks.lost)
            .fold(0, u64::saturating_add)
    }

    /// What the recorders dropped for lack of their own memory
    /// (`stacks_degraded`), summed over all processes, and how many
    /// processes dropped anything: when not 0, every stack figure may be
    /// short.
    pub fn degraded(&self) -> (u64, usize) {
        self.profiles
            .iter()
            .map(|p| p.stacks.degraded)
            .filter(|&d| d > 0)
            .fold((0, 0), |(sum, n), d| (sum.saturating_add(d), n + 1))
    }

    /// What a weight's values mean here, for titles: its description, and
    /// for `leaked` a note when some processes were still running.
    pub fn describe(&self, w: Weight) -> String {
        let mut d = w.describe().to_string();
        if w == Weight::Leaked && self.running() > 0 {
            let n = self.running();
            let _ = write!(
                d,
                " ({n} process{} still running: live at its last write)",
                if n == 1 { "" } else { "es" }
            );
        }
        if w == Weight::Time && self.ticks_per_ns.is_none() {
            d.push_str(" (TSC ticks: no clock rate measured)");
        }
        d
    }

    /// A value of `w` in its unit, for people, marked `≈` when it is an
    /// estimate: any figure of sampled stacks (scaled up from the
    /// samples), and allocator time always (from timed calls).
    pub fn show(&self, w: Weight, v: u64) -> String {
        let shown = show_value(w, v, self.time_unit());
        if self.estimates(w) {
            format!("≈{shown}")
        } else {
            shown
        }
    }

    /// The total of `w`, for people: marked `≈` when it is an estimate,
    /// with its 95% interval when it comes from sampled stacks
    /// (`≈3,591 allocations (95% interval 3,102–4,080)`).
    pub fn show_total(&self, w: Weight) -> String {
        let total = w.of(&self.total());
        let shown = self.show(w, total);
        match self.total_interval(w, total) {
            Some((low, high)) => format!(
                "{shown} (95% interval {}–{})",
                show_bare(w, low, self.time_unit()),
                show_bare(w, high, self.time_unit())
            ),
            None => shown,
        }
    }

    /// The 95% interval of `total`, the total of `w` (normal, from the
    /// sampling variance), for a count or bytes estimated from sampled stacks; none
    /// for exact stacks, and for the weights whose sizes are not counted
    /// (the peak, what is left at exit) or that come from timed calls
    /// rather than samples (time).
    pub fn total_interval(&self, w: Weight, total: u64) -> Option<(u64, u64)> {
        if !matches!(w, Weight::Count | Weight::Bytes) {
            return None;
        }
        let mut variance = 0.0;
        let mut sampled = false;
        for p in self.profiles {
            let StackMode::Sample { mean_bytes } = p.stacks.mode else {
                continue;
            };
            sampled = true;
            // At the sampled level the size histogram is not counted: the
            // shim summed the variance over the samples themselves.
            if let Some(m) = p.recording.margin(w == Weight::Bytes) {
                variance += (m / 1.96).powi(2);
                continue;
            }
            // The allocations recorded exactly before sampling started
            // add no variance: the rest's share of it, were their sizes
            // those of the whole run.
            let allocations = p.totals.size_hist.iter().sum::<u64>();
            let sampled_share = if allocations == 0 {
                1.0
            } else {
                allocations.saturating_sub(p.stacks.exact_first) as f64 / allocations as f64
            };
            variance += sampled_share * sampling_variance(&p.totals, mean_bytes as f64, w);
        }
        if !sampled {
            return None;
        }
        let total = total as f64;
        let half = 1.96 * variance.sqrt();
        Some((
            (total - half).max(0.0).round() as u64,
            (total + half).round() as u64,
        ))
    }

    /// Whether the profiles measure `w` at all: temporary allocations are
    /// told with exact stacks only (in sample mode a thread's unsampled
    /// allocations are not seen), so a set with a sampled process, or of
    /// profiles older than the count, has none.
    pub fn measures(&self, w: Weight) -> bool {
        w != Weight::Temporary || self.profiles.iter().all(|p| p.stacks.temporary_counted)
    }

    /// Whether every profile recorded its blocks' lifetimes.
    pub fn measures_lifetimes(&self) -> bool {
        self.profiles
            .iter()
            .all(|p| p.stacks.lifetime_ticks_per_us > 0)
    }

    /// An error saying why `w` cannot be drawn or exported, if the
    /// profiles do not measure it ([`measures`](Self::measures)).
    pub fn check_measures(&self, w: Weight) -> Result<(), String> {
        if self.measures(w) {
            Ok(())
        } else {
            Err(format!(
                "the profiles do not count {}: that needs exact stacks (`--stacks exact`, \
                 or `flame --exact`)",
                w.describe()
            ))
        }
    }

    /// Whether the figures of `w` are estimates rather than counts.
    pub fn estimates(&self, w: Weight) -> bool {
        w == Weight::Time
            || self
                .profiles
                .iter()
                .any(|p| matches!(p.stacks.mode, StackMode::Sample { .. }))
    }
}

/// The variance of a sampled process's estimate of the total of `w`
/// (count or bytes; none for the others).
///
/// An allocation of `n` bytes is sampled with probability
/// `p = 1 - exp(-n/mean)` and weighs `1/p` (docs/recording.md), so the
/// estimate of a count has variance `Σ (1 - p)/p` over all the process's
/// allocations, and of bytes `Σ n² (1 - p)/p`. The process's request-size
/// histogram (counted, not sampled) gives the allocations, each taken at
/// the middle of its power-of-two bucket: the variance of the sampling
/// itself, which holds for sites that were sampled rarely or never, where
/// a variance estimated from the samples alone would say nothing.
fn sampling_variance(totals: &Totals, mean_bytes: f64, w: Weight) -> f64 {
    if !matches!(w, Weight::Count | Weight::Bytes) || mean_bytes <= 0.0 {
        return 0.0;
    }
    (1..SIZE_BUCKETS)
        .map(|b| {
            let n = totals.size_hist[b] as f64;
            let size = 1.5 * bucket_floor(b) as f64;
            let p = -(-size / mean_bytes).exp_m1();
            let y = if w == Weight::Count { 1.0 } else { size };
            if n == 0.0 || p <= 0.0 {
                0.0
            } else {
                n * (1.0 - p) / p * y * y
            }
        })
        .sum()
}

/// A value of `w` without its unit word for counts ("3,102"), as an
/// interval's ends follow the value that named it.
fn show_bare(w: Weight, v: u64, time_unit: &str) -> String {
    match w {
        Weight::Count | Weight::Temporary => Count(v).to_string(),
        _ => show_value(w, v, time_unit),
    }
}

/// A value of `w`, for people ("1.5 MiB", "1,024 allocations", "3.20 ms").
pub fn show_value(w: Weight, v: u64, time_unit: &str) -> String {
    match w {
        Weight::Count | Weight::Temporary if v == 1 => "1 allocation".to_string(),
        Weight::Count | Weight::Temporary => format!("{} allocations", Count(v)),
        Weight::Bytes | Weight::Peak | Weight::Leaked => Bytes(v).to_string(),
        Weight::Time if time_unit == "ns" => Dur(v).to_string(),
        Weight::Time => format!("{} ticks", Count(v)),
    }
}

/// Appends a frame's name as a folded line shows it ([`push_escaped`]),
/// with inferno's `_[i]` on inlined frames.
fn push_folded_name(out: &mut String, f: &Frame) {
    push_escaped(out, &f.function);
    if f.inlined {
        out.push_str("_[i]");
    }
}

/// Appends a name as a folded line holds it: `;` (the separator) as `:`,
/// line breaks as spaces. Most names need no escaping and are copied
/// whole: a profile of deep stacks has hundreds of thousands of frames to
/// fold.
fn push_escaped(out: &mut String, name: &str) {
    if name.bytes().any(|b| matches!(b, b';' | b'\n' | b'\r')) {
        out.extend(name.chars().map(|c| match c {
            ';' => ':',
            '\n' | '\r' => ' ',
            c => c,
        }));
    } else {
        out.push_str(name);
    }
}

/// `root;...;leaf` of frames listed leaf first.
fn folded_names<'f>(frames: impl IntoIterator<Item = &'f Frame>) -> String {
    let frames: Vec<&Frame> = frames.into_iter().collect();
    let mut out = String::new();
    for (i, f) in frames.iter().rev().enumerate() {
        if i > 0 {
            out.push(';');
        }
        push_folded_name(&mut out, f);
    }
    out
}

/// How many leading names `a` and `b` share. Sorting a deep profile's
/// lines compares shared roots of tens of names many times: whole chunks
/// compare first, in vector registers.
fn shared_len(a: &[u32], b: &[u32]) -> usize {
    const CHUNK: usize = 8;
    let whole = a
        .chunks_exact(CHUNK)
        .zip(b.chunks_exact(CHUNK))
        .take_while(|(x, y)| x == y)
        .count()
        * CHUNK;
    whole
        + a[whole..]
            .iter()
            .zip(&b[whole..])
            .take_while(|(x, y)| x == y)
            .count()
}

/// Each location's frames as indices of their distinct keys (the name a
/// folded line shows, or the frame itself for merged stacks), worked out
/// once per location: the stack set shares one resolution between every
/// stack through an address, and a deep profile's stacks share most of
/// their frames. Distinct indices are distinct keys, so stacks are merged
/// by comparing index sequences.
struct FrameIndex<'s, K> {
    /// Distinct keys, by index.
    keys: Vec<K>,
    /// Key → index.
    index: FxHashMap<K, u32>,
    /// A location's frames (innermost first) as indices, keyed by the
    /// address of its resolved frames.
    locations: FxHashMap<*const Frame, Box<[u32]>>,
    key_of: fn(&'s Frame) -> K,
}

impl<'s, K: Clone + Eq + std::hash::Hash> FrameIndex<'s, K> {
    fn new(key_of: fn(&'s Frame) -> K) -> Self {
        FrameIndex {
            keys: Vec::new(),
            index: FxHashMap::default(),
            locations: FxHashMap::default(),
            key_of,
        }
    }

    /// The indices of `r`'s frames, innermost first.
    fn of_location(&mut self, r: &'s Resolved) -> &[u32] {
        let Self {
            keys,
            index,
            locations,
            key_of,
        } = self;
        locations
            .entry(Rc::as_ptr(r).cast::<Frame>())
            .or_insert_with(|| r.iter().map(|f| intern(keys, index, key_of(f))).collect())
    }

    /// The index of a key that no location gives (a program's root frame).
    fn intern(&mut self, key: K) -> u32 {
        intern(&mut self.keys, &mut self.index, key)
    }

    fn key(&self, i: u32) -> &K {
        &self.keys[i as usize]
    }
}

/// The index of `key` in `keys`, which `index` maps; added if new.
fn intern<K: Clone + Eq + std::hash::Hash>(
    keys: &mut Vec<K>,
    index: &mut FxHashMap<K, u32>,
    key: K,
) -> u32 {
    *index.entry(key).or_insert_with_key(|k| {
        keys.push(k.clone());
        (keys.len() - 1) as u32
    })
}

/// A frame's name as a folded line shows it ([`push_folded_name`]): the
/// key of [`FrameIndex`] for folding, so that names that read alike once
/// escaped (`a;b`, `a:b`) are one.
fn folded_name(f: &Frame) -> String {
    let mut text = String::new();
    push_folded_name(&mut text, f);
    text
}

impl FrameIndex<'_, String> {
    /// Orders two stacks of name indices as their folded lines sort,
    /// bytewise. Up to the first name they do not share the lines are the
    /// same; there, the names decide, or where one name begins the other,
    /// what follows the shorter: `;` if its stack goes on, else the end of
    /// the line. (No name holds a `;`, so that byte differs.)
    fn cmp_joined(&self, a: &[u32], b: &[u32]) -> Ordering {
        let shared = shared_len(a, b);
        match (a.get(shared), b.get(shared)) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
            (Some(&x), Some(&y)) => {
                let (tx, ty) = (self.key(x).as_bytes(), self.key(y).as_bytes());
                let n = tx.len().min(ty.len());
                tx[..n].cmp(&ty[..n]).then_with(|| {
                    let next = |t: &[u8], k: &[u32]| {
                        t.get(n).copied().or((k.len() > shared + 1).then_some(b';'))
                    };
                    next(tx, a).cmp(&next(ty, b))
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn folded_names_are_root_first_and_escaped() {
        let f = |name: &str, inlined| Frame {
            function: name.into(),
            file: None,
            line: None,
            module: None,
            inlined,
        };
        let leaf_first = [
            f("leaf", true),
            f("a;b", false),
            f("c\nd\re", false),
            f("main", false),
        ];
        assert_eq!(folded_names(&leaf_first), "main;c d e;a:b;leaf_[i]");
    }

    /// Folding as it was done one stack at a time: each stack's line
    /// built as text, merged and sorted as strings.
    fn folded_by_text(set: &StackSet<'_>, weight: Weight) -> String {
        let mut lines: std::collections::BTreeMap<String, u64> = Default::default();
        for s in &set.stacks {
            let v = weight.of(&s.values);
            if v > 0 {
                *lines.entry(folded_names(s.frames())).or_default() += v;
            }
        }
        lines
            .into_iter()
            .map(|(k, v)| format!("{k} {v}\n"))
            .collect()
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            failure_persistence: None,
            ..Default::default()
        })]

        /// Folding by name indices writes what folding by text wrote:
        /// names that read alike once escaped (`a;b`, `a:b`) merge, and
        /// names that begin others (`a`, `a:b`, `a b`, `ab`) sort bytewise.
        /// Merging by frame indices sums what merging frames did.
        #[test]
        fn folded_and_merged_stacks_are_the_text_and_frame_merges(
            stacks in proptest::collection::vec(
                (
                    proptest::collection::vec(
                        (
                            proptest::collection::vec((0usize..8, proptest::bool::ANY), 1..3),
                            0u8..2,
                        ),
                        1..6,
                    ),
                    0usize..4,
                    0u64..3,
                ),
                0..40,
            )
        ) {
            const NAMES: [&str; 8] = ["a", "a:b", "a;b", "a b", "ab", "b", "a\nb", "a!"];
            // One resolution shared by every stack through an address, as
            // the stack set shares one; two addresses (the `u8`) may
            // resolve to the same frames.
            let mut shared: HashMap<(Vec<(usize, bool)>, u8), Resolved> = HashMap::new();
            let stacks: Vec<ProcStack> = stacks
                .into_iter()
                .map(|(locations, trim, allocs)| {
                    let locations: Vec<(u64, Resolved)> = locations
                        .into_iter()
                        .map(|(frames, address)| {
                            let r = shared.entry((frames.clone(), address)).or_insert_with(|| {
                                frames
                                    .iter()
                                    .map(|&(n, inlined)| Frame {
                                        function: NAMES[n].into(),
                                        file: None,
                                        line: None,
                                        module: None,
                                        inlined,
                                    })
                                    .collect()
                            });
                            (0, r.clone())
                        })
                        .collect();
                    let frames: usize = locations.iter().map(|(_, r)| r.len()).sum();
                    ProcStack {
                        process: 0,
                        locations,
                        trimmed: trim.min(frames - 1),
                        values: Values { allocs, ..Values::default() },
                    }
                })
                .collect();
            let set = StackSet { profiles: &[], stacks, ticks_per_ns: None, programs: Vec::new() };
            proptest::prop_assert_eq!(set.folded(Weight::Count), folded_by_text(&set, Weight::Count));

            // Merged by frames: the same sums as merging clones of every
            // stack's frames, largest first, ties by their folded names.
            let merged = set.merged(Weight::Count);
            let order = |m: &MergedStack| (std::cmp::Reverse(m.values.allocs), folded_names(&m.frames));
            proptest::prop_assert!(merged.windows(2).all(|w| order(&w[0]) <= order(&w[1])));
            let got: HashMap<Vec<Frame>, u64> =
                merged.into_iter().map(|m| (m.frames, m.values.allocs)).collect();
            let mut want: HashMap<Vec<Frame>, u64> = HashMap::new();
            for s in &set.stacks {
                *want.entry(s.frames().cloned().collect()).or_default() += s.values.allocs;
            }
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn weights_pick_their_figure() {
        let v = Values {
            allocs: 1,
            bytes: 2,
            ns: 3,
            peak_allocs: 4,
            peak_bytes: 5,
            live_allocs: 6,
            live_bytes: 7,
            temporary: 8,
            freed_by_decade: [9; DECADES],
            lifetime_ticks: 10,
        };
        let got: Vec<u64> = Weight::ALL.iter().map(|w| w.of(&v)).collect();
        assert_eq!(got, [1, 2, 3, 5, 7, 8]);
        assert_eq!(show_value(Weight::Count, 1234, "ns"), "1,234 allocations");
        assert_eq!(show_value(Weight::Time, 1_500_000, "ns"), "1.50 ms");
    }

    /// The interval of a sampled total holds the true total in about 95%
    /// of simulated runs: allocations from 24 B to 64 KiB, sampled as the
    /// recorder does (probability 1 - exp(-n/mean), weight 1/p), with the
    /// counted size histogram giving the variance.
    #[test]
    fn sampled_totals_intervals_cover_the_true_totals() {
        use allocmux_format::totals::size_bucket;
        let mut rng: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng >> 11) as f64 / (1u64 << 53) as f64
        };
        let mean = 64.0 * 1024.0;
        let sizes: Vec<f64> = (0..12)
            .flat_map(|i| {
                let base = 24.0 * 2f64.powi(i);
                (0..(20_000 >> (i / 2)))
                    .map(move |k| (base * (0.75 + (k % 50) as f64 / 100.0)).round())
            })
            .collect();
        let mut totals = Totals::default();
        for &s in &sizes {
            totals.size_hist[size_bucket(s as usize)] += 1;
        }
        let truth = [sizes.len() as f64, sizes.iter().sum::<f64>()];
        let weights = [Weight::Count, Weight::Bytes];
        let sd = weights.map(|w| sampling_variance(&totals, mean, w).sqrt());
        let trials = 400;
        let mut hits = [0u32; 2];
        for _ in 0..trials {
            let mut estimate = [0.0f64; 2];
            for &size in &sizes {
                let p = -(-size / mean).exp_m1();
                if next() < p {
                    estimate[0] += 1.0 / p;
                    estimate[1] += size / p;
                }
            }
            for k in 0..2 {
                hits[k] += ((estimate[k] - truth[k]).abs() <= 1.96 * sd[k]) as u32;
            }
        }
        for (what, h) in ["count", "bytes"].into_iter().zip(hits) {
            let rate = h as f64 / trials as f64;
            assert!(
                (0.90..=0.99).contains(&rate),
                "{what}: {rate} of intervals hold the truth"
            );
        }
    }
}
