//! The allocmux profile format: writer and reader.
//!
//! A profile is UTF-8 text, one `key value` pair per line, so it can be
//! written without allocating from inside `malloc` and read by people:
//!
//! ```text
//! allocmux-profile 1          format name and version: the first line
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
//! bytes_requested 800
//! bytes_allocated 960         usable sizes of blocks handed out
//! bytes_freed 960             usable sizes of blocks freed
//! peak_live_bytes 480
//! timed_calls 1               calls timed by the random sample ...
//! timed_ticks 25              ... and their durations in TSC ticks (each stands for time_sample_mean calls)
//! timed_ticks_sq 625          ... and the sum of their squares (ticks²), for the estimate's interval
//! exact_calls 2               calls always timed (large blocks, each thread's first calls) ...
//! exact_ticks 900             ... and their durations in TSC ticks (each stands for itself)
//! size_hist 7 10              request-size bucket (see `stats::SIZE_BUCKETS`) and count
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
//! module 5581000 5592000 1000 1000 8e1f… /usr/bin/prog
//!                             an executable mapping: start, end, file offset and load
//!                             bias (hex), build id (hex, `-` if none), path (escaped)
//! stack 3 3 96 120 1 32 1 32 55810a3 55810f0
//!                             one distinct call stack: samples taken, then the estimates of
//!                             allocations, bytes, allocator ticks, allocations and bytes live
//!                             at the peak, allocations and bytes live now (at exit), then the
//!                             return addresses (hex), the allocating call site first
//! timeline 10000000           memory timeline: the sampling interval (ns) when written
//! tl 0 0 2940928              one sample: ns since start-up (`clock_start`), live heap
//! tl 10023511 67239936 70361088   bytes (allocated minus freed), resident bytes (0: unknown);
//!                             in time order, the first at start-up, the last at exit
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

use core::fmt::{self, Write};

use crate::AllocatorStats;
use crate::Backend;
use crate::stats::{Func, SIZE_BUCKETS, SiteCounts, Totals};
use crate::timeline::{Timeline, TimelinePoint};

pub use crate::clock::ClockPair;

/// The format version this crate writes and the highest it reads.
pub const FORMAT_VERSION: u32 = 1;
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

/// Writes that child `pid` ran `program`, which the shim could not reach
/// (statically linked, set-id), so it left no profile of its own.
pub fn write_unprofiled_child<W: Write>(w: &mut W, pid: u32, program: &[u8]) -> fmt::Result {
    write!(w, "unprofiled_child {pid} ")?;
    write_escaped(w, program)?;
    writeln!(w)
}

/// Writes the file header line.
pub fn write_magic<W: Write>(w: &mut W) -> fmt::Result {
    writeln!(w, "{MAGIC} {FORMAT_VERSION}")
}

/// Opens a process section and writes its header and counters; stack
/// lines may follow, then [`write_end`] closes it.
pub fn write_counters<W: Write>(w: &mut W, h: &Header<'_>, t: &Totals) -> fmt::Result {
    w.write_str("process\n")?;
    writeln!(w, "pid {}", h.pid)?;
    writeln!(w, "ppid {}", h.ppid)?;
    w.write_str("exe ")?;
    write_escaped(w, h.exe)?;
    w.write_str("\nargv")?;
    for arg in h.cmdline.split(|&b| b == 0).filter(|a| !a.is_empty()) {
        w.write_char(' ')?;
        write_escaped(w, arg)?;
    }
    writeln!(w)?;
    writeln!(w, "allocator {}", h.allocator)?;
    writeln!(w, "state {}", h.state.name())?;
    writeln!(w, "threads {}", h.threads)?;
    writeln!(
        w,
        "clock_start {} {}",
        h.clock_start.tsc, h.clock_start.mono_ns
    )?;
    writeln!(w, "clock_end {} {}", h.clock_end.tsc, h.clock_end.mono_ns)?;
    writeln!(w, "cpu_ns {}", h.cpu_ns)?;
    writeln!(w, "max_rss_bytes {}", h.max_rss_bytes)?;
    writeln!(w, "time_sample_mean {}", h.time_sample_mean)?;
    if !h.http.is_empty() {
        w.write_str("http ")?;
        write_escaped(w, h.http)?;
        writeln!(w)?;
    }
    if !h.exec.is_empty() {
        w.write_str("exec ")?;
        write_escaped(w, h.exec)?;
        writeln!(w)?;
    }
    if let Recording::Sampled {
        allocations_variance,
        bytes_variance,
    } = h.recording
    {
        writeln!(
            w,
            "recording sampled {allocations_variance:e} {bytes_variance:e}"
        )?;
    }
    for f in Func::ALL {
        let n = t.calls_of(f);
        if n != 0 {
            writeln!(w, "calls {} {}", f.name(), n)?;
        }
    }
    writeln!(w, "failed_calls {}", t.failed_calls)?;
    writeln!(w, "bytes_requested {}", t.bytes_requested)?;
    writeln!(w, "bytes_allocated {}", t.bytes_allocated)?;
    writeln!(w, "bytes_freed {}", t.bytes_freed)?;
    writeln!(w, "peak_live_bytes {}", t.peak_live_bytes)?;
    writeln!(w, "timed_calls {}", t.timed_calls)?;
    writeln!(w, "timed_ticks {}", t.timed_ticks)?;
    writeln!(w, "timed_ticks_sq {}", t.timed_ticks_sq)?;
    writeln!(w, "exact_calls {}", t.exact_calls)?;
    writeln!(w, "exact_ticks {}", t.exact_ticks)?;
    for (b, &n) in t.size_hist.iter().enumerate() {
        if n != 0 {
            writeln!(w, "size_hist {b} {n}")?;
        }
    }
    Ok(())
}

/// Closes a process section.
pub fn write_end<W: Write>(w: &mut W) -> fmt::Result {
    w.write_str("end\n")
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

/// Writes the allocator's statistics: the latest reading (the
/// `allocator_stats` line, then one `allocator_stat` line per figure), then
/// the one with the most live bytes (`allocator_stats_at_peak` and
/// `allocator_stat_at_peak`) unless it is the same. Goes after
/// [`write_counters`].
pub fn write_allocator_stats<W: Write>(
    w: &mut W,
    latest: Option<&AllocatorReading>,
    at_peak: Option<&AllocatorReading>,
) -> fmt::Result {
    if let Some(r) = latest {
        write_reading(w, "allocator_stats", "allocator_stat", r)?;
    }
    match at_peak {
        Some(r) if Some(r) != latest => {
            write_reading(w, "allocator_stats_at_peak", "allocator_stat_at_peak", r)
        }
        _ => Ok(()),
    }
}

/// One reading: its `HEADER T LIVE` line, then a `STAT NAME VALUE` line per
/// figure.
fn write_reading<W: Write>(
    w: &mut W,
    header: &str,
    stat: &str,
    r: &AllocatorReading,
) -> fmt::Result {
    writeln!(w, "{header} {} {}", r.t_ns, r.live_bytes)?;
    for (name, v) in r.stats.fields() {
        writeln!(w, "{stat} {name} {v}")?;
    }
    Ok(())
}

/// Writes the stack-recording mode line, the count of allocations
/// recorded exactly before sampling started (when not 0), the count of
/// lost stacks and, when not 0, the count of what was dropped for lack of
/// memory.
pub fn write_stack_mode<W: Write>(
    w: &mut W,
    mode: StackMode,
    exact_first: u64,
    lost: u64,
    degraded: u64,
) -> fmt::Result {
    match mode {
        StackMode::Off => return Ok(()),
        StackMode::Sample { mean_bytes } => writeln!(w, "stacks sample {mean_bytes}")?,
        StackMode::Exact => w.write_str("stacks exact 1\n")?,
    }
    if exact_first > 0 {
        writeln!(w, "stacks_exact_first {exact_first}")?;
    }
    writeln!(w, "stacks_lost {lost}")?;
    if degraded > 0 {
        writeln!(w, "stacks_degraded {degraded}")?;
    }
    Ok(())
}

/// Writes one module line (`build_id` as raw bytes, empty if none).
pub fn write_module<W: Write>(w: &mut W, m: &ModuleRef<'_>) -> fmt::Result {
    write!(
        w,
        "module {:x} {:x} {:x} {:x} ",
        m.start, m.end, m.file_offset, m.bias
    )?;
    if m.build_id.is_empty() {
        w.write_char('-')?;
    }
    for b in m.build_id {
        write!(w, "{b:02x}")?;
    }
    w.write_char(' ')?;
    write_escaped(w, m.path)?;
    w.write_char('\n')
}

/// Writes one stack line: its figures, then its return addresses, the
/// allocating call site first. Formats the numbers itself: the shim writes
/// every stack on every flush, and `core::fmt` costs several times more.
pub fn write_stack<W: Write>(w: &mut W, c: &SiteCounts, frames: &[u64]) -> fmt::Result {
    let mut line = LineBuf::default();
    line.push_str(w, "stack")?;
    for v in c.fields() {
        line.number::<10, _>(w, v)?;
    }
    for &f in frames {
        line.number::<16, _>(w, f)?;
    }
    line.push_str(w, "\n")?;
    line.flush(w)
}

/// Writes a memory timeline: the `timeline` line with the sampling
/// interval, then one `tl` line per point (nothing for no points). Formats
/// the numbers itself, as [`write_stack`] does: the shim writes up to
/// [`crate::timeline::CAPACITY`] points on every flush.
pub fn write_timeline<W: Write>(
    w: &mut W,
    interval_ns: u64,
    points: &[TimelinePoint],
) -> fmt::Result {
    if points.is_empty() {
        return Ok(());
    }
    let mut line = LineBuf::default();
    line.push_str(w, "timeline")?;
    line.number::<10, _>(w, interval_ns)?;
    line.push_str(w, "\n")?;
    for p in points {
        line.push_str(w, "tl")?;
        line.number::<10, _>(w, p.t_ns)?;
        line.number::<10, _>(w, p.live_bytes)?;
        line.number::<10, _>(w, p.rss_bytes)?;
        line.push_str(w, "\n")?;
    }
    line.flush(w)
}

/// A line assembled in a fixed buffer and handed to the writer in few
/// pieces (each `write_str` checks UTF-8 and dispatches dynamically).
struct LineBuf {
    buf: [u8; 512],
    len: usize,
}

impl Default for LineBuf {
    fn default() -> Self {
        LineBuf {
            buf: [0; 512],
            len: 0,
        }
    }
}

impl LineBuf {
    fn flush<W: Write>(&mut self, w: &mut W) -> fmt::Result {
        // Only ASCII was put in.
        let s = core::str::from_utf8(&self.buf[..self.len]).map_err(|_| fmt::Error)?;
        w.write_str(s)?;
        self.len = 0;
        Ok(())
    }

    fn push_str<W: Write>(&mut self, w: &mut W, s: &str) -> fmt::Result {
        if self.len + s.len() > self.buf.len() {
            self.flush(w)?;
        }
        if s.len() > self.buf.len() {
            return w.write_str(s);
        }
        self.buf[self.len..self.len + s.len()].copy_from_slice(s.as_bytes());
        self.len += s.len();
        Ok(())
    }

    /// Appends a space and `v` in base `BASE`, 10 or 16 (lowercase). The
    /// base is a constant so that each digit costs a multiply or a shift,
    /// not a division: a deep-stacked profile is mostly numbers, and the
    /// process's exit waits for it to be written.
    fn number<const BASE: u64, W: Write>(&mut self, w: &mut W, mut v: u64) -> fmt::Result {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        const { assert!(BASE == 10 || BASE == 16) };
        let mut digits = [0u8; 21];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = DIGITS[(v % BASE) as usize];
            v /= BASE;
            if v == 0 {
                break;
            }
        }
        i -= 1;
        digits[i] = b' ';
        let piece = &digits[i..];
        if self.len + piece.len() > self.buf.len() {
            self.flush(w)?;
        }
        self.buf[self.len..self.len + piece.len()].copy_from_slice(piece);
        self.len += piece.len();
        Ok(())
    }
}

/// Writes bytes with everything but printable ASCII (and `%`) as `%XX`.
fn write_escaped<W: Write>(w: &mut W, bytes: &[u8]) -> fmt::Result {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        if b.is_ascii_graphic() && b != b'%' {
            w.write_char(b as char)?;
        } else {
            w.write_char('%')?;
            w.write_char(HEX[(b >> 4) as usize] as char)?;
            w.write_char(HEX[(b & 15) as usize] as char)?;
        }
    }
    Ok(())
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    // Digits only: `from_str_radix` would also take a sign ("+5").
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn unescape(s: &str) -> Result<Vec<u8>, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let byte = s
                .get(i + 1..i + 3)
                .and_then(decode_hex)
                .ok_or_else(|| format!("bad escape in {s:?}"))?[0];
            // A path or an argument is a C string: it cannot hold a NUL.
            if byte == 0 {
                return Err(format!("a NUL byte in {s:?}"));
            }
            out.push(byte);
            i += 3;
        } else if b[i].is_ascii_graphic() {
            out.push(b[i]);
            i += 1;
        } else {
            // The writer escapes every other byte.
            return Err(format!("an unescaped byte {:#04x} in {s:?}", b[i]));
        }
    }
    Ok(out)
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

    /// Writes this process back as a profile section.
    pub fn write<W: Write>(&self, w: &mut W) -> fmt::Result {
        let mut cmdline = Vec::new();
        for a in &self.argv {
            cmdline.extend_from_slice(a.as_bytes());
            cmdline.push(0);
        }
        let h = Header {
            pid: self.pid,
            ppid: self.ppid,
            exe: self.exe.as_bytes(),
            cmdline: &cmdline,
            allocator: &self.allocator,
            state: self.state,
            threads: self.threads,
            clock_start: self.clock_start,
            clock_end: self.clock_end,
            cpu_ns: self.cpu_ns,
            max_rss_bytes: self.max_rss_bytes,
            time_sample_mean: self.time_sample_mean,
            http: self.http.as_deref().unwrap_or("").as_bytes(),
            exec: self.exec.as_deref().unwrap_or("").as_bytes(),
            recording: self.recording,
        };
        write_counters(w, &h, &self.totals)?;
        write_allocator_stats(
            w,
            self.allocator_stats.as_ref(),
            self.allocator_stats_at_peak.as_ref(),
        )?;
        for (child, program) in &self.unprofiled_children {
            write_unprofiled_child(w, *child, program.as_bytes())?;
        }
        write_timeline(w, self.timeline.interval_ns, &self.timeline.points)?;
        let st = &self.stacks;
        write_stack_mode(w, st.mode, st.exact_first, st.lost, st.degraded)?;
        for m in &st.modules {
            let build_id = decode_hex(&m.build_id).unwrap_or_default();
            write_module(
                w,
                &ModuleRef {
                    start: m.start,
                    end: m.end,
                    file_offset: m.file_offset,
                    bias: m.bias,
                    build_id: &build_id,
                    path: m.path.as_bytes(),
                },
            )?;
        }
        for s in &st.stacks {
            write_stack(w, &s.counts, &s.frames)?;
        }
        write_end(w)
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

/// Serialises processes as one profile file.
pub fn to_string(procs: &[ProcessProfile]) -> String {
    let mut s = String::new();
    // Writing into a String cannot fail.
    let _ = write_magic(&mut s);
    for p in procs {
        let _ = p.write(&mut s);
    }
    s
}

/// Reads a profile file: one or more process sections.
pub fn parse(text: &str) -> Result<Vec<ProcessProfile>, ParseError> {
    parse_sections(text).map_err(|e| {
        // A file cut in the middle of its last line (a copy or a download
        // cut short; the shim itself only ever renames complete files)
        // fails on that line: say what happened rather than what the half
        // line lacks.
        if e.line > 1 && !text.ends_with('\n') && e.line == text.lines().count() {
            ParseError {
                line: e.line,
                message: format!(
                    "the profile is truncated: its last line is cut short ({})",
                    e.message
                ),
            }
        } else {
            e
        }
    })
}

/// What each byte is to [`hex_words`]: a hex digit's value, [`SPACE`] or
/// [`NOT_HEX`].
const HEX_DIGITS: [u8; 256] = {
    let mut t = [NOT_HEX; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = match b as u8 {
            c @ b'0'..=b'9' => c - b'0',
            c @ b'a'..=b'f' => c - b'a' + 10,
            c @ b'A'..=b'F' => c - b'A' + 10,
            b' ' => SPACE,
            _ => NOT_HEX,
        };
        b += 1;
    }
    t
};
const SPACE: u8 = 16;
const NOT_HEX: u8 = 17;

/// The hex numbers of `s`, separated by spaces (a stack's addresses), or
/// the first word that is not one (at most 16 hex digits). A byte loop
/// over a table rather than `split` and `from_str_radix`: a deep-stacked
/// profile is mostly addresses, and reading them was the most of parsing
/// it.
fn hex_words(s: &str) -> Result<Vec<u64>, &str> {
    let bytes = s.as_bytes();
    // The writer writes 12 digits and a space for most addresses.
    let mut out = Vec::with_capacity(bytes.len() / 13 + 1);
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        let mut v: u64 = 0;
        while i < bytes.len() {
            let d = HEX_DIGITS[usize::from(bytes[i])];
            if d >= SPACE {
                if d == NOT_HEX {
                    let end = s[start..].find(' ').map_or(s.len(), |e| start + e);
                    return Err(&s[start..end]);
                }
                break;
            }
            v = v << 4 | u64::from(d);
            i += 1;
        }
        match i - start {
            0 => {}
            1..=16 => out.push(v),
            _ => return Err(&s[start..i]),
        }
        i += 1; // the space, or past the end
    }
    Ok(out)
}

/// One allocator reading's lines as parsed so far: its header line's time
/// and live bytes, and its figures by name.
#[derive(Default)]
struct ReadingLines {
    at: Option<(u64, u64)>,
    fields: Vec<(String, u64)>,
}

impl ReadingLines {
    /// The reading, if its header line was there and `backend` is one this
    /// version knows (else its figures cannot be named).
    fn reading(&self, backend: Option<Backend>) -> Option<AllocatorReading> {
        let ((t_ns, live_bytes), backend) = self.at.zip(backend)?;
        Some(AllocatorReading {
            t_ns,
            live_bytes,
            stats: AllocatorStats::from_fields(
                backend,
                self.fields.iter().map(|(k, v)| (k.as_str(), *v)),
            )?,
        })
    }
}

fn parse_sections(text: &str) -> Result<Vec<ProcessProfile>, ParseError> {
    let err = |line: usize, message: String| ParseError { line, message };
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let Some((_, first)) = lines.next() else {
        return Err(err(
            0,
            "the file is empty (the process may have died before its first flush)".into(),
        ));
    };
    let mut words = first.split_whitespace();
    if words.next() != Some(MAGIC) {
        return Err(err(
            1,
            "not an allocmux profile (no `allocmux-profile` header)".into(),
        ));
    }
    let version: u32 = words
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| err(1, "the header has no version number".into()))?;
    if version > FORMAT_VERSION {
        return Err(err(
            1,
            format!(
                "profile format version {version} is newer than this allocmux reads ({FORMAT_VERSION}); upgrade allocmux"
            ),
        ));
    }
    let mut procs = Vec::new();
    let mut cur: Option<ProcessProfile> = None;
    // The open section's readings, the latest (`allocator_stats`) and the
    // one nearest the peak (`allocator_stats_at_peak`), each made into an
    // `AllocatorReading` at its `end` (when its `allocator` is known).
    let mut latest = ReadingLines::default();
    let mut at_peak = ReadingLines::default();
    for (n, line) in lines {
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
        let Some(p) = cur.as_mut() else {
            if key == "process" {
                cur = Some(empty_process());
                latest = ReadingLines::default();
                at_peak = ReadingLines::default();
                continue;
            }
            return Err(err(n, format!("expected `process`, found {key:?}")));
        };
        let pid = |s: &str| -> Result<u32, ParseError> {
            s.trim()
                .parse::<u32>()
                .map_err(|_| err(n, format!("`{key}` needs a process id, found {s:?}")))
        };
        let num = |s: &str| -> Result<u64, ParseError> {
            s.trim()
                .parse::<u64>()
                .map_err(|_| err(n, format!("`{key}` needs a number, found {s:?}")))
        };
        let pair = |s: &str| -> Result<ClockPair, ParseError> {
            let (a, b) = s
                .split_once(' ')
                .ok_or_else(|| err(n, format!("`{key}` needs two numbers")))?;
            Ok(ClockPair {
                tsc: num(a)?,
                mono_ns: num(b)?,
            })
        };
        if matches!(
            key,
            "stacks_lost" | "stacks_degraded" | "stacks_exact_first" | "module" | "stack"
        ) && p.stacks.mode == StackMode::Off
        {
            return Err(err(n, format!("a `{key}` line before the `stacks` line")));
        }
        let t = &mut p.totals;
        match key {
            "end" => {
                let mut p = cur.take().expect("section is open");
                if p.timeline.points.is_empty() {
                    // A `timeline` line without points is no timeline (the
                    // writer writes none): read it as such.
                    p.timeline = Timeline::default();
                }
                let backend = Backend::from_name(p.allocator.as_bytes());
                p.allocator_stats = latest.reading(backend);
                p.allocator_stats_at_peak = at_peak.reading(backend);
                procs.push(p);
            }
            "allocator_stats" | "allocator_stats_at_peak" => {
                let r = pair(rest)?;
                let lines = if key == "allocator_stats" {
                    &mut latest
                } else {
                    &mut at_peak
                };
                lines.at = Some((r.tsc, r.mono_ns));
            }
            "allocator_stat" | "allocator_stat_at_peak" => {
                let (lines, header) = if key == "allocator_stat" {
                    (&mut latest, "allocator_stats")
                } else {
                    (&mut at_peak, "allocator_stats_at_peak")
                };
                if lines.at.is_none() {
                    return Err(err(n, format!("`{key}` comes before its `{header}` line")));
                }
                let (name, v) = rest
                    .split_once(' ')
                    .ok_or_else(|| err(n, format!("`{key}` needs a name and a number")))?;
                lines.fields.push((name.to_string(), num(v)?));
            }
            "process" => return Err(err(n, "a process section is missing its `end` line".into())),
            "pid" => p.pid = pid(rest)?,
            "ppid" => p.ppid = pid(rest)?,
            "unprofiled_child" => {
                let (child, program) = rest
                    .split_once(' ')
                    .ok_or_else(|| err(n, "`unprofiled_child` needs a pid and a program".into()))?;
                let program = String::from_utf8_lossy(&unescape(program).map_err(|m| err(n, m))?)
                    .into_owned();
                p.unprofiled_children.push((pid(child)?, program));
            }
            "exec" => {
                p.exec = Some(
                    String::from_utf8_lossy(&unescape(rest).map_err(|m| err(n, m))?).into_owned(),
                )
            }
            "recording" => {
                let f: Vec<&str> = rest.split(' ').collect();
                let variance = |v: &str| {
                    v.parse::<f64>()
                        .ok()
                        .filter(|x| x.is_finite() && *x >= 0.0)
                        .ok_or_else(|| err(n, format!("bad variance {v:?}")))
                };
                p.recording = match f[..] {
                    ["exact"] => Recording::Exact,
                    ["sampled", a, b] => Recording::Sampled {
                        allocations_variance: variance(a)?,
                        bytes_variance: variance(b)?,
                    },
                    _ => return Err(err(n, format!("bad recording line {rest:?}"))),
                };
            }
            "http" => {
                p.http = Some(
                    String::from_utf8_lossy(&unescape(rest).map_err(|m| err(n, m))?).into_owned(),
                )
            }
            "exe" => {
                p.exe =
                    String::from_utf8_lossy(&unescape(rest).map_err(|m| err(n, m))?).into_owned()
            }
            "argv" => {
                p.argv = rest
                    .split(' ')
                    .filter(|a| !a.is_empty())
                    .map(|a| unescape(a).map(|b| String::from_utf8_lossy(&b).into_owned()))
                    .collect::<Result<_, _>>()
                    .map_err(|m| err(n, m))?
            }
            "allocator" => p.allocator = rest.to_string(),
            "state" => {
                p.state = match rest {
                    "running" => State::Running,
                    "exited" => State::Exited,
                    other => return Err(err(n, format!("unknown state {other:?}"))),
                }
            }
            "threads" => p.threads = num(rest)?,
            "clock_start" => p.clock_start = pair(rest)?,
            "clock_end" => p.clock_end = pair(rest)?,
            "cpu_ns" => p.cpu_ns = num(rest)?,
            "max_rss_bytes" => p.max_rss_bytes = num(rest)?,
            "time_sample_mean" => p.time_sample_mean = num(rest)?.clamp(1, u32::MAX as u64) as u32,
            "calls" => {
                let (name, v) = rest
                    .split_once(' ')
                    .ok_or_else(|| err(n, "`calls` needs a name and a number".into()))?;
                // A function this version does not know is skipped, like any unknown key.
                if let Some(f) = Func::from_name(name) {
                    t.calls[f as usize] = num(v)?;
                }
            }
            "failed_calls" => t.failed_calls = num(rest)?,
            "bytes_requested" => t.bytes_requested = num(rest)?,
            "bytes_allocated" => t.bytes_allocated = num(rest)?,
            "bytes_freed" => t.bytes_freed = num(rest)?,
            "peak_live_bytes" => t.peak_live_bytes = num(rest)?,
            "timed_calls" => t.timed_calls = num(rest)?,
            "timed_ticks" => t.timed_ticks = num(rest)?,
            "timed_ticks_sq" => t.timed_ticks_sq = num(rest)?,
            "exact_calls" => t.exact_calls = num(rest)?,
            "exact_ticks" => t.exact_ticks = num(rest)?,
            "size_hist" => {
                let (b, v) = rest
                    .split_once(' ')
                    .ok_or_else(|| err(n, "`size_hist` needs a bucket and a number".into()))?;
                let b = num(b)? as usize;
                if b >= SIZE_BUCKETS {
                    return Err(err(n, format!("size bucket {b} out of range")));
                }
                t.size_hist[b] = num(v)?;
            }
            "stacks" => {
                let (mode, v) = rest.split_once(' ').unwrap_or((rest, ""));
                p.stacks.mode = match mode {
                    "sample" => StackMode::Sample {
                        mean_bytes: num(v)?.max(1),
                    },
                    "exact" => StackMode::Exact,
                    "off" => StackMode::Off,
                    other => return Err(err(n, format!("unknown stack mode {other:?}"))),
                }
            }
            "stacks_lost" => p.stacks.lost = num(rest)?,
            "stacks_exact_first" => p.stacks.exact_first = num(rest)?,
            "stacks_degraded" => p.stacks.degraded = num(rest)?,
            "module" => {
                let f: Vec<&str> = rest.splitn(6, ' ').collect();
                let [start, end, off, bias, id, path] = f[..] else {
                    return Err(err(n, "`module` needs six fields".into()));
                };
                let hex = |s: &str| {
                    u64::from_str_radix(s, 16)
                        .map_err(|_| err(n, format!("`module` needs hex numbers, found {s:?}")))
                };
                // Lower case, as written, so a profile reads back the same.
                let build_id = if id == "-" {
                    String::new()
                } else {
                    id.to_ascii_lowercase()
                };
                if decode_hex(&build_id).is_none() {
                    return Err(err(n, format!("bad build id {id:?}")));
                }
                p.stacks.modules.push(Module {
                    start: hex(start)?,
                    end: hex(end)?,
                    file_offset: hex(off)?,
                    bias: hex(bias)?,
                    build_id,
                    path: String::from_utf8_lossy(&unescape(path).map_err(|m| err(n, m))?)
                        .into_owned(),
                });
            }
            "stack" => {
                let mut c = [0u64; SiteCounts::FIELDS];
                let mut words = rest;
                for v in &mut c {
                    words = words.trim_start_matches(' ');
                    let (word, after) = words.split_once(' ').unwrap_or((words, ""));
                    if word.is_empty() {
                        return Err(err(
                            n,
                            "`stack` needs eight figures and its addresses".into(),
                        ));
                    }
                    *v = num(word)?;
                    words = after;
                }
                let frames =
                    hex_words(words).map_err(|a| err(n, format!("bad stack address {a:?}")))?;
                if frames.is_empty() {
                    return Err(err(n, "a `stack` has no addresses".into()));
                }
                p.stacks.stacks.push(Stack {
                    frames,
                    counts: SiteCounts::from_fields(c),
                });
            }
            "timeline" => p.timeline.interval_ns = num(rest)?,
            "tl" => {
                let mut f = rest.split(' ').filter(|w| !w.is_empty());
                let mut v = [0u64; 3];
                for x in &mut v {
                    *x = num(f.next().ok_or_else(|| {
                        err(
                            n,
                            "`tl` needs three numbers: ns since start-up, live bytes, resident bytes"
                                .into(),
                        )
                    })?)?;
                }
                if f.next().is_some() {
                    return Err(err(
                        n,
                        "`tl` needs three numbers: ns since start-up, live bytes, resident bytes"
                            .into(),
                    ));
                }
                let [t_ns, live_bytes, rss_bytes] = v;
                if p.timeline.points.last().is_some_and(|l| l.t_ns > t_ns) {
                    return Err(err(
                        n,
                        format!("timeline point at {t_ns} ns comes after a later one"),
                    ));
                }
                p.timeline.points.push(TimelinePoint {
                    t_ns,
                    live_bytes,
                    rss_bytes,
                });
            }
            _ => {} // a key from a later minor revision
        }
    }
    if cur.is_some() {
        return Err(err(
            0,
            "the profile is truncated: its last process section has no `end` line".into(),
        ));
    }
    if procs.is_empty() {
        return Err(err(0, "the profile holds no process section".into()));
    }
    Ok(procs)
}

fn empty_process() -> ProcessProfile {
    ProcessProfile {
        pid: 0,
        ppid: 0,
        exe: String::new(),
        argv: Vec::new(),
        allocator: String::new(),
        state: State::Running,
        threads: 0,
        clock_start: Default::default(),
        clock_end: Default::default(),
        cpu_ns: 0,
        max_rss_bytes: 0,
        time_sample_mean: 1,
        http: None,
        exec: None,
        unprofiled_children: Vec::new(),
        recording: Recording::Exact,
        totals: Totals::default(),
        stacks: Stacks::default(),
        timeline: Timeline::default(),
        allocator_stats: None,
        allocator_stats_at_peak: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ClockPair;

    fn sample() -> ProcessProfile {
        let mut t = Totals::default();
        t.calls[Func::Malloc as usize] = 10;
        t.calls[Func::Free as usize] = 9;
        t.bytes_requested = 800;
        t.bytes_allocated = 960;
        t.bytes_freed = 864;
        t.peak_live_bytes = 480;
        t.timed_calls = 2;
        t.timed_ticks = 50;
        t.timed_ticks_sq = 1300;
        t.exact_calls = 1;
        t.exact_ticks = 300;
        t.size_hist[7] = 10;
        ProcessProfile {
            pid: 42,
            ppid: 1,
            exe: "/usr/bin/my prog".into(),
            argv: vec!["my prog".into(), "-x".into(), "100%".into()],
            allocator: "jemalloc".into(),
            state: State::Exited,
            threads: 2,
            clock_start: ClockPair {
                tsc: 1000,
                mono_ns: 0,
            },
            clock_end: ClockPair {
                tsc: 3_001_000,
                mono_ns: 1_000_000,
            },
            cpu_ns: 900_000,
            max_rss_bytes: 4 << 20,
            time_sample_mean: 256,
            http: None,
            exec: Some("/usr/bin/my next prog".into()),
            unprofiled_children: vec![(43, "static go".into())],
            recording: Recording::Sampled {
                allocations_variance: 1.5e9,
                bytes_variance: 2.25e16,
            },
            totals: t,
            stacks: Stacks::default(),
            timeline: Timeline::default(),
            allocator_stats: None,
            allocator_stats_at_peak: None,
        }
    }

    fn with_stacks() -> ProcessProfile {
        let mut p = sample();
        p.stacks = Stacks {
            mode: StackMode::Sample { mean_bytes: 4096 },
            exact_first: 1000,
            lost: 2,
            degraded: 5,
            modules: vec![Module {
                start: 0x5581_0000,
                end: 0x5592_0000,
                file_offset: 0x1000,
                bias: 0x5580_f000,
                build_id: "8e1f00aa".into(),
                path: "/usr/bin/my prog".into(),
            }],
            stacks: vec![Stack {
                frames: vec![0x5581_00a3, 0x5581_00f0],
                counts: SiteCounts {
                    samples: 3,
                    allocs: 30,
                    bytes: 960,
                    ticks: 1200,
                    peak_allocs: 10,
                    peak_bytes: 320,
                    live_allocs: 1,
                    live_bytes: 32,
                },
            }],
        };
        p
    }

    #[test]
    fn stacks_round_trip() {
        let p = with_stacks();
        let text = to_string(std::slice::from_ref(&p));
        assert!(
            text.contains("stacks sample 4096\nstacks_exact_first 1000\nstacks_lost 2\nstacks_degraded 5\nmodule "),
            "{text}"
        );
        assert!(
            text.contains("module 55810000 55920000 1000 5580f000 8e1f00aa /usr/bin/my%20prog\n")
        );
        assert!(text.contains("stack 3 30 960 1200 10 320 1 32 558100a3 558100f0\nend\n"));
        let back = parse(&text).unwrap();
        assert_eq!(back, vec![p.clone()]);
        assert_eq!(
            back[0].stacks.module_of(0x5581_00a3),
            Some(&p.stacks.modules[0])
        );
        assert_eq!(back[0].stacks.module_of(0x10), None);
        // Whole recording writes no `stacks_degraded` line, and a profile
        // without one (all those written before it existed) reads as 0.
        let mut whole = p.clone();
        whole.stacks.degraded = 0;
        let text = to_string(std::slice::from_ref(&whole));
        assert!(text.contains("stacks_lost 2\nmodule "), "{text}");
        assert_eq!(parse(&text).unwrap(), vec![whole]);
    }

    #[test]
    fn reads_stack_addresses() {
        assert_eq!(hex_words(""), Ok(vec![]));
        assert_eq!(
            hex_words("  558100a3 FFFFffffFFFFffff  0 "),
            Ok(vec![0x5581_00a3, u64::MAX, 0])
        );
        assert_eq!(hex_words("12 g 34"), Err("g"));
        assert_eq!(hex_words("12 1é 34"), Err("1é"));
        assert_eq!(hex_words("12 3x4 5"), Err("3x4"));
        // Seventeen digits do not fit a u64.
        assert_eq!(hex_words("1 10000000000000000 2"), Err("10000000000000000"));
        assert_eq!(hex_words("1 1000000000000000x"), Err("1000000000000000x"));
    }

    #[test]
    fn rejects_bad_stack_lines() {
        let base = "allocmux-profile 1\nprocess\nstacks exact 1\n";
        let cases = [
            ("stacks sometimes 3", "unknown stack mode"),
            ("module 1 2 3", "six fields"),
            ("module 1 2 3 zz - /x", "hex numbers"),
            ("module 1 2 3 4 abc /x", "bad build id"),
            ("stack 1 2 3", "eight figures"),
            ("stack 1 2 3 4 5 6 7 8", "no addresses"),
            ("stack 1 2 3 4 5 6 7 8 xyz", "bad stack address"),
            ("stack 1 2 3 4 5 6 7 8 10 +1f", "bad stack address \"+1f\""),
            ("stack 1 2 3 4 5 6 7 8 10 -1", "bad stack address \"-1\""),
            (
                "stack 1 2 3 4 5 6 7 8 10 10000000000000000 20",
                "bad stack address \"10000000000000000\"",
            ),
            ("stacks_degraded many", "needs a number"),
        ];
        for line in ["stack 1 2 3 4 5 6 7 8 9", "stacks_degraded 1"] {
            let unstacked = parse(&format!("allocmux-profile 1\nprocess\n{line}\nend\n"));
            assert!(
                unstacked
                    .unwrap_err()
                    .to_string()
                    .contains("before the `stacks` line"),
                "{line}: stack lines without a mode are refused"
            );
        }
        for (line, want) in cases {
            let e = parse(&format!("{base}{line}\nend\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{line:?}: {e}");
        }
    }

    fn with_timeline() -> ProcessProfile {
        let mut p = with_stacks();
        let pt = |t_ns, live_bytes, rss_bytes| TimelinePoint {
            t_ns,
            live_bytes,
            rss_bytes,
        };
        p.timeline = Timeline {
            interval_ns: 20_000_000,
            points: vec![
                pt(0, 0, 2_940_928),
                pt(20_000_000, 67_239_936, 70_361_088),
                pt(20_000_000, 67_239_936, 0),
                pt(u64::MAX, 96, u64::MAX),
            ],
        };
        p
    }

    #[test]
    fn timeline_round_trip() {
        let p = with_timeline();
        let text = to_string(&[p.clone(), sample()]);
        assert!(
            text.contains(
                "timeline 20000000\ntl 0 0 2940928\ntl 20000000 67239936 70361088\n\
                 tl 20000000 67239936 0\ntl 18446744073709551615 96 18446744073709551615\n"
            ),
            "{text}"
        );
        // The timeline comes before the stacks, inside the section.
        let at = |needle: &str| text.find(needle).unwrap();
        assert!(at("size_hist") < at("timeline") && at("timeline") < at("stacks sample"));
        let back = parse(&text).unwrap();
        assert_eq!(back, vec![p, sample()]);
        assert!(back[1].timeline.is_empty());
    }

    /// A profile as written before timelines existed reads back with an
    /// empty timeline, everything else intact.
    #[test]
    fn profiles_without_a_timeline_still_read() {
        let text = "allocmux-profile 1\nprocess\npid 7\ncalls malloc 3\nend\n";
        let p = &parse(text).unwrap()[0];
        assert_eq!((p.pid, p.totals.calls_of(Func::Malloc)), (7, 3));
        assert_eq!(p.timeline, Timeline::default());
    }

    #[test]
    fn rejects_bad_timeline_lines() {
        let base = "allocmux-profile 1\nprocess\n";
        let cases = [
            ("timeline soon", "`timeline` needs a number"),
            ("tl 1 2", "`tl` needs three numbers"),
            ("tl", "`tl` needs three numbers"),
            ("tl 1 2 3 4", "`tl` needs three numbers"),
            ("tl 1 -2 3", "`tl` needs a number, found \"-2\""),
            ("tl 1 2 0x3", "`tl` needs a number"),
            (
                "tl 9 1 1\ntl 8 1 1",
                "timeline point at 8 ns comes after a later one",
            ),
        ];
        for (lines, want) in cases {
            let e = parse(&format!("{base}{lines}\nend\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{lines:?}: {e}");
            assert!(
                e.starts_with("line "),
                "{lines:?}: the error names the line: {e}"
            );
        }
    }

    #[test]
    fn allocator_stats_round_trip() {
        use crate::{GlibcStats, JemallocStats, MimallocStats};
        let readings = [
            (
                "jemalloc",
                AllocatorStats::Jemalloc(JemallocStats {
                    allocated: 12 << 20,
                    active: 13 << 20,
                    resident: 20 << 20,
                    mapped: 32 << 20,
                    retained: 7,
                }),
            ),
            (
                "mimalloc",
                AllocatorStats::Mimalloc(MimallocStats {
                    committed: 5 << 20,
                    peak_committed: 6 << 20,
                    peak_rss: 9 << 20,
                    page_faults: 3,
                }),
            ),
            (
                "system",
                AllocatorStats::System(GlibcStats {
                    in_use: 1,
                    free: 2,
                    arena: 3,
                    mmapped: 4,
                    releasable: 5,
                }),
            ),
        ];
        let procs: Vec<_> = readings
            .iter()
            .map(|&(name, stats)| {
                let mut p = with_timeline();
                p.allocator = name.into();
                p.allocator_stats = Some(AllocatorReading::new(900_000, 10 << 20, stats));
                p
            })
            .collect();
        let text = to_string(&procs);
        assert!(
            text.contains(
                "size_hist 7 10\nallocator_stats 900000 10485760\nallocator_stat allocated 12582912\n\
                 allocator_stat active 13631488\nallocator_stat resident 20971520\n\
                 allocator_stat mapped 33554432\nallocator_stat retained 7\n\
                 unprofiled_child 43 static%20go\ntimeline "
            ),
            "{text}"
        );
        assert!(text.contains("allocator_stat page_faults 3\n"));
        assert!(text.contains("allocator_stat releasable 5\n"));
        assert!(!text.contains("_at_peak"), "{text}");
        let back = parse(&text).unwrap();
        assert_eq!(back, procs);
        assert_eq!(back[0].allocator_stats.unwrap().overhead(), Some(2.0));
        // Without the lines: none, as in profiles written before them.
        assert_eq!(
            parse(&to_string(&[sample()])).unwrap()[0].allocator_stats,
            None
        );
        // A reading nearer the peak than the latest: written after it,
        // under its own keys, and read back as the one nearest the peak.
        let mut p = procs[0].clone();
        let AllocatorStats::Jemalloc(j) = readings[0].1 else {
            unreachable!()
        };
        let at_peak = AllocatorReading::new(
            620_000_000,
            27 << 20,
            AllocatorStats::Jemalloc(crate::JemallocStats {
                resident: 33 << 20,
                ..j
            }),
        );
        p.allocator_stats_at_peak = Some(at_peak);
        let text = to_string(std::slice::from_ref(&p));
        assert!(
            text.contains(
                "allocator_stat retained 7\nallocator_stats_at_peak 620000000 28311552\n\
                 allocator_stat_at_peak allocated 12582912\nallocator_stat_at_peak active 13631488\n\
                 allocator_stat_at_peak resident 34603008\nallocator_stat_at_peak mapped 33554432\n\
                 allocator_stat_at_peak retained 7\nunprofiled_child "
            ),
            "{text}"
        );
        let back = parse(&text).unwrap().remove(0);
        assert_eq!(back, p);
        assert_eq!(back.reading_nearest_peak(), Some(&at_peak));
        // The latest reading with more live bytes is the one nearest the peak.
        p.allocator_stats_at_peak = Some(AllocatorReading::new(1, 1 << 20, readings[0].1));
        assert_eq!(p.reading_nearest_peak(), p.allocator_stats.as_ref());
        // The same reading twice is written once.
        p.allocator_stats_at_peak = p.allocator_stats;
        assert!(!to_string(&[p]).contains("_at_peak"));
    }

    /// A later version's figure is skipped; a figure without its
    /// `allocator_stats` line, or without a number, is an error.
    #[test]
    fn allocator_stat_lines_are_checked() {
        let base = "allocmux-profile 1\nprocess\nallocator jemalloc\n";
        let text = format!(
            "{base}allocator_stats 5 100\nallocator_stat active 300\nallocator_stat dirty 9\nend\n"
        );
        let r = parse(&text).unwrap()[0].allocator_stats.unwrap();
        assert_eq!(
            (r.t_ns, r.live_bytes, r.stats.held_bytes()),
            (5, 100, Some(0))
        );
        assert_eq!(r.stats.fields().nth(1), Some(("active", 300)));
        let cases = [
            (
                "allocator_stat active 3",
                "comes before its `allocator_stats`",
            ),
            ("allocator_stats 5", "needs two numbers"),
            (
                "allocator_stats 5 100\nallocator_stat active",
                "a name and a number",
            ),
            (
                "allocator_stats 5 100\nallocator_stat active x",
                "needs a number",
            ),
            (
                "allocator_stat_at_peak active 3",
                "`allocator_stat_at_peak` comes before its `allocator_stats_at_peak`",
            ),
            // The latest reading's header does not open the other's figures.
            (
                "allocator_stats 5 100\nallocator_stat_at_peak active 3",
                "comes before its `allocator_stats_at_peak`",
            ),
            ("allocator_stats_at_peak 5", "needs two numbers"),
            (
                "allocator_stats_at_peak 5 100\nallocator_stat_at_peak active",
                "`allocator_stat_at_peak` needs a name and a number",
            ),
            (
                "allocator_stats_at_peak 5 100\nallocator_stat_at_peak active x",
                "needs a number",
            ),
        ];
        for (lines, want) in cases {
            let e = parse(&format!("{base}{lines}\nend\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{lines:?}: {e}");
        }
        // The reading nearest the peak alone (a profile cut to it): read as such.
        let text = format!(
            "{base}allocator_stats_at_peak 7 200\nallocator_stat_at_peak resident 500\nend\n"
        );
        let p = parse(&text).unwrap().remove(0);
        assert_eq!(p.allocator_stats, None);
        let r = p.allocator_stats_at_peak.unwrap();
        assert_eq!((r.t_ns, r.live_bytes, r.overhead()), (7, 200, Some(2.5)));
        assert_eq!(p.reading_nearest_peak(), Some(&r));
        // An allocator this version does not know: the figures are skipped.
        let text = "allocmux-profile 1\nprocess\nallocator tcmalloc\nallocator_stats 1 2\nallocator_stat x 3\n\
                    allocator_stats_at_peak 1 2\nallocator_stat_at_peak x 3\nend\n";
        let p = parse(text).unwrap().remove(0);
        assert_eq!((p.allocator_stats, p.allocator_stats_at_peak), (None, None));
    }

    #[test]
    fn round_trips() {
        let p = sample();
        let text = to_string(&[p.clone(), p.clone()]);
        assert!(text.starts_with("allocmux-profile 1\nprocess\npid 42\n"));
        assert!(text.contains("exe /usr/bin/my%20prog\nargv my%20prog -x 100%25\n"));
        assert_eq!(parse(&text).unwrap(), vec![p.clone(), p]);
    }

    #[test]
    fn derived_figures() {
        let p = sample();
        assert_eq!(p.wall_ns(), 1_000_000);
        assert_eq!(p.ticks_per_ns(), Some(3.0));
        assert_eq!(p.allocator_ns(3.0), (300 + 50 * 256) / 3);
        assert_eq!(p.totals.live_bytes(), 96);
    }

    #[test]
    fn rejects_bad_input_with_reasons() {
        let full = to_string(&[sample()]);
        let cases = [
            ("", "empty"),
            ("hello\n", "not an allocmux profile"),
            ("allocmux-profile 2\n", "newer"),
            ("allocmux-profile\n", "no version"),
            (&full[..full.len() - 4], "truncated"),
            ("allocmux-profile 1\n", "no process section"),
            (
                "allocmux-profile 1\nprocess\npid x\nend\n",
                "`pid` needs a process id",
            ),
            (
                "allocmux-profile 1\nprocess\nsize_hist 99 1\nend\n",
                "out of range",
            ),
            ("allocmux-profile 1\npid 3\n", "expected `process`"),
        ];
        for (text, want) in cases {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn ignores_unknown_keys_and_functions() {
        let text = to_string(&[sample()])
            .replace("threads 2\n", "threads 2\nfuture_key 7\ncalls mmap 3\n");
        assert_eq!(parse(&text).unwrap(), vec![sample()]);
    }
}
