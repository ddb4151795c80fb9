//! The allocmux profile format: writer and reader.
//!
//! A profile is UTF-8 text, one `key value` pair per line, so it can be
//! written without allocating from inside `malloc` and read by people:
//!
//! ```text
//! allocmux-profile 2          format name and version: the first line
//! process                     one section per process; a file may hold many
//! pid 4242
//! ppid 4200
//! exe /usr/bin/python3        percent-escaped bytes (%20 for space, %25 for %)
//! argv python3 -c pass        percent-escaped arguments separated by spaces
//! allocator jemalloc          system | jemalloc | mimalloc
//! state exited                running (a periodic flush) | exited (written at exit)
//! threads 3                   threads that made an allocation call
//! clock_start 1000 500        TSC ticks and CLOCK_MONOTONIC ns at start-up
//! clock_end 3000 1500         the same when the section was written
//! cpu_ns 900                  CPU time of the process (user + system)
//! max_rss_bytes 4096000
//! time_sample_mean 256        one call in this many (on average) is timed
//! http 127.0.0.1:43117        where its live /debug/pprof endpoint listens (optional)
//! exec /usr/bin/go            the program an `exec` replaced this image with (optional)
//! recording sampled 1.2e9 3.4e15
//!                             the sampled level (optional; absent: exact): nothing below
//!                             was counted, every figure is estimated from the stack samples,
//!                             with the variances of the allocation and byte estimates
//! unprofiled_child 4243 go    a child started by vfork or posix_spawn into a program the
//!                             shim cannot reach (static, set-id); repeated, optional
//! calls malloc 10             one line per function with a non-zero count
//! failed_calls 0
//! null_frees 3                free(NULL) calls: no-ops, counted here and not in `calls free`
//! bytes_requested 800
//! bytes_allocated 960         usable sizes of blocks handed out
//! bytes_freed 960             usable sizes of blocks freed
//! peak_live_bytes 480
//! timed_calls 1               calls timed by the random sample ...
//! timed_ticks 25              ... and their durations in TSC ticks (each stands for time_sample_mean calls)
//! timed_ticks_sq 625          ... and the sum of their squares (ticks²), for the estimate's interval
//! exact_calls 2               calls always timed (large blocks, each thread's first calls) ...
//! exact_ticks 900             ... and their durations in TSC ticks (each stands for itself)
//! size_hist 7 10              request-size bucket (see `totals::SIZE_BUCKETS`) and count
//! allocator_stats 1500000000 12582912
//!                             the allocator's own statistics (optional): when they were read
//!                             (ns since `clock_start`) and the program's live bytes then
//! allocator_stat allocated 12582912   one of its figures, named as `AllocatorStats::fields`
//! allocator_stat resident 20971520    names them for the process's `allocator` (see below)
//! allocator_stats_at_peak 620000000 28835840
//!                             the reading taken with the most live bytes (optional; only
//!                             written when it is not the one above): when, and live bytes
//! allocator_stat_at_peak resident 34603008   one of that reading's figures, as above
//! stacks sample 524288        stack recording: `sample MEAN_BYTES` or `exact 1` (absent: off)
//! stacks_exact_first 200000   in `sample` mode, the allocations recorded exactly before
//!                             sampling started (their weights are 1); absent: none
//! stacks_lost 0               allocations whose stack could not be recorded
//! stacks_degraded 3           what the recorder dropped for lack of its own memory (stacks,
//!                             blocks, modules, stack lines, copies); only written when not 0
//! stacks_temporary_counted 0  exact stacks whose temporary allocations were not counted (a
//!                             version 1 profile written again); absent: counted
//! stacks_lifetimes 2400       the stacks' blocks' lifetimes were recorded, in decades measured
//!                             with this many TSC ticks a µs; absent: not recorded
//! module 5581000 5592000 1000 1000 8e1f… /usr/bin/prog
//!                             an executable mapping: start, end, file offset and load
//!                             bias (hex), build id (hex, `-` if none), path (escaped)
//! stack 3 3 96 120 1 32 1 32 2 55810a3 55810f0
//!                             one distinct call stack: samples taken, then the estimates of
//!                             allocations, bytes, allocator ticks, allocations and bytes live
//!                             at the peak, allocations and bytes live now (at exit),
//!                             temporary allocations (exact stacks only; absent in version 1),
//!                             then the return addresses (hex), the allocating call site first
//! lifetimes 3 0 0 0 0 0 0 0 0 4200
//!                             the lifetimes of the blocks of the stack just above that were
//!                             freed (see `crate::lifetimes`): how many in each decade, under
//!                             1 µs to 10 s or more, then the sum of the lifetimes in TSC
//!                             ticks; absent: none freed, or not recorded
//! timeline 10000000           memory timeline: the sampling interval (ns) when written
//! tl 0 0 2940928              one sample: ns since start-up (`clock_start`), live heap
//! tl 10023511 67239936 70361088   bytes (allocated minus freed), resident bytes (0: unknown);
//!                             in time order, the first at start-up, the last at exit
//! timeline_temporary 0 3000   temporary allocations so far at each `tl` point, in order (exact
//!                             stacks only; absent: not counted)
//! end                         closes the section; a section without it is truncated
//! ```
//!
//! A stack's figures count the allocations made from it (`malloc`,
//! `calloc`, `realloc`, the aligned functions); its ticks are the time of
//! those calls plus the time of the `free`s of the blocks they made
//! (estimated in `exact` mode from the calls the time sample timed,
//! weighted as `timed_ticks` are; timed per recorded call in `sample`
//! mode, but where the shim serves a sampled request of less than 64 KiB
//! as a larger block: that call and the `free` of its block count,
//! weighted, as one call each at the section's mean time per timed call,
//! `timed_ticks / timed_calls`, 0 if it has none). In
//! `sample` mode every allocation of `n` bytes is sampled with probability
//! `1 - exp(-n / MEAN_BYTES)` and counted with the weight `1 / p`, so each
//! estimate is unbiased (the Horvitz-Thompson form of pprof's heap-sample
//! scaling); in `exact` mode every allocation is a sample of weight 1.
//!
//! The timeline keeps at most [`crate::timeline::CAPACITY`] points: the shim
//! samples every [`crate::timeline::BASE_INTERVAL_NS`] and halves the resolution
//! (pairs merged, keeping the larger figures) whenever the buffer fills, so
//! the points span the whole run. Profiles written before timelines existed
//! have no `timeline`/`tl` lines and read back with an empty timeline.
//!
//! The `allocator_stat` names are those of [`crate::AllocatorStats`]'s
//! fields for the section's `allocator`: `allocated active resident mapped
//! retained` for jemalloc (its `stats.*` after an `epoch` advance),
//! `committed peak_committed peak_rss page_faults` for mimalloc
//! (`mi_process_info`), `in_use free arena mmapped releasable` for the
//! system allocator (glibc's `mallinfo2`). The reading may be older than
//! the section (the shim reuses its last one where reading is unsafe, as in
//! `_exit`), hence its own time and live bytes. `allocator_stats` is the
//! latest reading; `allocator_stats_at_peak`, of all the readings made, the
//! one with the most live bytes, nearest the peak: a program that frees its
//! heap before exit is read at exit with little live, where what the
//! allocator holds says more of what was freed than of the allocator.
//!
//! Readers ignore keys they do not know (later minor additions), refuse a
//! higher version number, and reject a section that does not end with `end`.
//!
//! The module is split by job: `keys.rs` lists the keys (writer, reader
//! and fuzzing take them from there), `write.rs` writes sections without
//! allocating (the shim writes from inside `malloc`), `read.rs` reads
//! them back, `escape.rs` escapes paths and arguments; the types are here.

use core::fmt;

use crate::AllocatorStats;
use crate::lifetimes::Lifetimes;
use crate::site_counts::SiteCounts;
use crate::timeline::Timeline;
use crate::totals::Totals;

pub use crate::clock::ClockPair;

mod escape;
pub(crate) mod keys;
mod read;
#[cfg(test)]
mod tests;
mod write;

pub use keys::{KEYS, Key};
pub use read::parse;
pub use write::{
    to_string, write_allocator_stats, write_counters, write_end, write_magic, write_module,
    write_stack, write_stack_mode, write_timeline, write_unprofiled_child,
};

/// The format version this crate writes and the highest it reads.
///
/// Version 2 added a ninth figure to `stack` lines (temporary
/// allocations); version 1 profiles read with it 0.
pub const FORMAT_VERSION: u32 = 2;
/// The first word of every profile.
pub const MAGIC: &str = "allocmux-profile";

/// Whether a process section was written while the process ran or at its exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// A periodic flush: the process was still running (or died without
    /// reaching its exit handlers, e.g. by SIGKILL, SIGSEGV or `abort`).
    Running,
    /// Written at exit (the exit handlers, `_exit`, or an `exec` replacing
    /// the image): complete.
    Exited,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Exited => "exited",
        }
    }
}

/// The non-counter facts of a process section, borrowed so the shim can
/// write them from static buffers.
#[derive(Clone, Copy, Debug)]
pub struct Header<'a> {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Path of the executable (bytes, as the kernel reports it).
    pub exe: &'a [u8],
    /// The arguments, each terminated by NUL, as in `/proc/self/cmdline`.
    pub cmdline: &'a [u8],
    /// Backend name.
    pub allocator: &'a str,
    /// Running or exited.
    pub state: State,
    /// Threads that made an allocation call.
    pub threads: u64,
    /// TSC and monotonic clock at start-up.
    pub clock_start: ClockPair,
    /// TSC and monotonic clock when written.
    pub clock_end: ClockPair,
    /// CPU time used by the process so far.
    pub cpu_ns: u64,
    /// Peak resident set size so far.
    pub max_rss_bytes: u64,
    /// Mean calls per timed call.
    pub time_sample_mean: u32,
    /// The address its `/debug/pprof` endpoint listens on (empty: none).
    pub http: &'a [u8],
    /// The program this image was replacing itself with when the section
    /// was written (`exec`), as the call named it (empty: none).
    pub exec: &'a [u8],
    /// How the counts were taken.
    pub recording: Recording,
}

/// How a process's counts were taken.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Recording {
    /// Every call counted (the default level).
    #[default]
    Exact,
    /// The sampled level (live profiles): nothing counted per call; the
    /// totals are estimates from the stack samples (allocations under
    /// `calls malloc`, frees under `calls free`, requested bytes as both
    /// `bytes_requested` and `bytes_allocated`), no allocator time (the
    /// stacks keep their share of the sampled calls' time), no
    /// request-size histogram.
    Sampled {
        /// Variance of the estimated count of allocations.
        allocations_variance: f64,
        /// Variance of the estimated bytes allocated.
        bytes_variance: f64,
    },
}

impl Recording {
    /// Half the width of the 95% interval of an estimated count (`bytes`
    /// false) or byte total; none for exact counts.
    pub fn margin(self, bytes: bool) -> Option<f64> {
        match self {
            Recording::Exact => None,
            Recording::Sampled {
                allocations_variance,
                bytes_variance,
            } => {
                let v = if bytes {
                    bytes_variance
                } else {
                    allocations_variance
                };
                Some(1.96 * v.max(0.0).sqrt())
            }
        }
    }
}

/// One reading of the allocator's own statistics, as a profile records it.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct AllocatorReading {
    /// When it was read, in ns since the process's `clock_start`.
    pub t_ns: u64,
    /// The program's live bytes at the reading (allocated minus freed), the
    /// figure to compare the allocator's with.
    pub live_bytes: u64,
    /// The figures.
    pub stats: AllocatorStats,
}

impl AllocatorReading {
    /// A reading taken `t_ns` after start-up while the program had
    /// `live_bytes` live.
    pub fn new(t_ns: u64, live_bytes: u64, stats: AllocatorStats) -> Self {
        AllocatorReading {
            t_ns,
            live_bytes,
            stats,
        }
    }

    /// What the allocator held per live byte of the program then (see
    /// [`AllocatorStats::overhead`]).
    pub fn overhead(&self) -> Option<f64> {
        self.stats.overhead(self.live_bytes)
    }
}

/// How a process recorded call stacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StackMode {
    /// No stacks (`ALLOCMUX_STACKS=off`).
    #[default]
    Off,
    /// A Poisson sample over allocated bytes with this mean gap.
    Sample {
        /// Mean bytes between two sampled allocations.
        mean_bytes: u64,
    },
    /// Every allocation's stack.
    Exact,
}

/// An executable mapping of the process, borrowed for writing.
#[derive(Clone, Copy, Debug)]
pub struct ModuleRef<'a> {
    /// First address of the mapping.
    pub start: u64,
    /// One past its last address.
    pub end: u64,
    /// File offset of `start`.
    pub file_offset: u64,
    /// Load bias: the ELF virtual address of `addr` is `addr - bias`.
    pub bias: u64,
    /// GNU build id, empty if the file has none.
    pub build_id: &'a [u8],
    /// Path of the file.
    pub path: &'a [u8],
}

/// An executable mapping of the process, as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// First address of the mapping.
    pub start: u64,
    /// One past its last address.
    pub end: u64,
    /// File offset of `start`.
    pub file_offset: u64,
    /// Load bias: the ELF virtual address of `addr` is `addr - bias`.
    pub bias: u64,
    /// GNU build id as lowercase hex, empty if none.
    pub build_id: String,
    /// Path of the file (lossily decoded).
    pub path: String,
}

impl Module {
    /// Whether `addr` lies in this mapping.
    pub fn contains(&self, addr: u64) -> bool {
        (self.start..self.end).contains(&addr)
    }
}

/// One distinct call stack and the allocations made from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    /// Return addresses, the allocating call site first.
    pub frames: Vec<u64>,
    /// What the allocations from this stack did (estimates in `sample` mode).
    pub counts: SiteCounts,
    /// How long its freed blocks lived (empty when not recorded).
    pub lifetimes: Lifetimes,
}

/// The call stacks of one process.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Stacks {
    /// How they were recorded.
    pub mode: StackMode,
    /// In sample mode, the allocations recorded exactly before sampling
    /// started (0: none).
    pub exact_first: u64,
    /// Allocations whose stack could not be recorded.
    pub lost: u64,
    /// What the recorder dropped for lack of its own memory (stacks not
    /// stored or not taken, blocks not tracked, modules or stack lines
    /// left out, copies not refreshed); 0 when recording was whole. Any
    /// figure of the stacks may then be short.
    pub degraded: u64,
    /// Executable mappings, to symbolize the addresses.
    pub modules: Vec<Module>,
    /// The stacks, each once.
    pub stacks: Vec<Stack>,
    /// Whether the stacks' temporary allocations were counted: with exact
    /// stacks, in a profile of format version 2 or later, unless a
    /// `stacks_temporary_counted 0` line says not (a version 1 profile
    /// written again).
    pub temporary_counted: bool,
    /// The TSC ticks a µs the stacks' lifetimes were measured with; 0 when
    /// lifetimes were not recorded (a profile written before they were).
    pub lifetime_ticks_per_us: u64,
}

impl Stacks {
    /// The module holding `addr`, if any.
    pub fn module_of(&self, addr: u64) -> Option<&Module> {
        self.modules.iter().find(|m| m.contains(addr))
    }
}

/// One process, as read back from a profile.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ProcessProfile {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Executable path (lossily decoded).
    pub exe: String,
    /// Arguments (lossily decoded).
    pub argv: Vec<String>,
    /// Backend name.
    pub allocator: String,
    /// Running or exited.
    pub state: State,
    /// Threads that made an allocation call.
    pub threads: u64,
    /// Clocks at start-up.
    pub clock_start: ClockPair,
    /// Clocks when written.
    pub clock_end: ClockPair,
    /// CPU time so far.
    pub cpu_ns: u64,
    /// Peak RSS so far.
    pub max_rss_bytes: u64,
    /// Mean calls per timed call.
    pub time_sample_mean: u32,
    /// The address of its live `/debug/pprof` endpoint (`ALLOCMUX_HTTP`),
    /// if it served one.
    pub http: Option<String>,
    /// The program the process replaced this image with (`exec`), as the
    /// call named it (a path, or a name `execvp` looked up in `PATH`).
    pub exec: Option<String>,
    /// Children it started by `vfork` or `posix_spawn` into programs the
    /// shim could not reach (statically linked, set-id): pid and program.
    pub unprofiled_children: Vec<(u32, String)>,
    /// How the counts were taken: exactly, or estimated from samples.
    pub recording: Recording,
    /// The counters.
    pub totals: Totals,
    /// Call stacks, if recorded.
    pub stacks: Stacks,
    /// Live and resident bytes over time (empty in profiles written before
    /// timelines existed).
    pub timeline: Timeline,
    /// The allocator's own statistics, if they were read: the latest reading.
    pub allocator_stats: Option<AllocatorReading>,
    /// Of the readings made, the one with the most live bytes, when it is
    /// not [`allocator_stats`](Self::allocator_stats) (see
    /// [`reading_nearest_peak`](Self::reading_nearest_peak)).
    pub allocator_stats_at_peak: Option<AllocatorReading>,
}

impl ProcessProfile {
    /// Wall time from the shim's start-up in the process to the last write.
    pub fn wall_ns(&self) -> u64 {
        self.clock_end
            .mono_ns
            .saturating_sub(self.clock_start.mono_ns)
    }

    /// TSC ticks per nanosecond over this process's lifetime, if measurable.
    pub fn ticks_per_ns(&self) -> Option<f64> {
        let dns = self
            .clock_end
            .mono_ns
            .checked_sub(self.clock_start.mono_ns)?;
        if dns < 100_000 {
            return None;
        }
        self.clock_end.ticks_per_ns_since(self.clock_start)
    }

    /// Estimated time spent inside the allocator, in ns: the always-timed
    /// calls' ticks plus the sampled calls' ticks scaled by the sampling
    /// rate (a stratified, unbiased estimate), converted with `ticks_per_ns`
    /// (pass a rate measured over a longer span when one is known).
    pub fn allocator_ns(&self, ticks_per_ns: f64) -> u64 {
        if ticks_per_ns <= 0.0 {
            return 0;
        }
        let ticks = self.totals.estimated_allocator_ticks(self.time_sample_mean);
        (ticks / ticks_per_ns) as u64
    }

    /// Half the width of a 95% interval of [`allocator_ns`](Self::allocator_ns),
    /// in ns (see [`Totals::allocator_ticks_margin`]); `None` for a profile
    /// that does not carry what it needs.
    pub fn allocator_ns_margin(&self, ticks_per_ns: f64) -> Option<u64> {
        if ticks_per_ns <= 0.0 {
            return None;
        }
        let ticks = self.totals.allocator_ticks_margin(self.time_sample_mean)?;
        Some((ticks / ticks_per_ns) as u64)
    }

    /// Of the allocator readings the profile carries, the one taken with
    /// the most live bytes: where what the allocator holds per live byte
    /// (its heap overhead) describes the allocator rather than what the
    /// program freed before a reading (the latest is often taken at exit,
    /// with most of the heap freed). The latest on a tie.
    pub fn reading_nearest_peak(&self) -> Option<&AllocatorReading> {
        match (&self.allocator_stats, &self.allocator_stats_at_peak) {
            (Some(latest), Some(peak)) if peak.live_bytes > latest.live_bytes => Some(peak),
            (None, peak) => peak.as_ref(),
            (latest, _) => latest.as_ref(),
        }
    }
}

/// Why a profile could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number, 0 for the file as a whole.
    pub line: usize,
    /// What is wrong, in words.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            f.write_str(&self.message)
        } else {
            write!(f, "line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for ParseError {}
