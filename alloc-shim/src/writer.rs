//! The writer: what the shim knows of this process (its identity, start
//! clocks, output path, timeline, allocator readings) behind one lock,
//! and the profile or summary line written from it.
//!
//! The lock is taken by the flusher and by the `fork`, `exec` and exit
//! paths. Whoever holds it allocates page blocks of its own, never from
//! glibc's heap (see `heap`).

use core::fmt::Write as _;

use allocmux_format::AllocatorStats;
use allocmux_format::profile::{self, AllocatorReading, Header, Recording, State};
use allocmux_format::timeline::{TimelineBuffer, TimelinePoint};
use allocmux_format::{ByteSize as Size, Totals};
use allocmux_recorder::{self as recorder, ClockPair, SpinLock, process, read_clocks};

use crate::fmt::SliceWriter;
use crate::output::{self, Claim, FdWriter, PATH_MAX, Temporary};
use crate::{choice, fd, procfs, tls};

const OUT_BUF: usize = 64 * 1024;

/// Everything the writer needs, behind one lock (taken by the flusher and
/// the exit paths).
pub struct Writer {
    /// Who this process is, read at its start-up.
    pub process: Process,
    /// Where its profile goes.
    pub file: ProfileFile,
    /// A profile file was claimed: profiles are written (else the summary
    /// line is, at exit).
    pub has_output: bool,
    /// `ALLOCMUX_OUTPUT` is the null device: nothing is written, not even
    /// the summary line that stands in for a profile that cannot be.
    pub discard: bool,
    /// The exit profile was written; the flusher must not overwrite it.
    pub finished: bool,
    /// The totals the last exit profile was written with: the late exit
    /// handler rewrites it only if something was counted since.
    pub exit_totals: Option<Totals>,
    /// Buffers a profile is written through.
    pub staging: Staging,
    /// The memory timeline, sampled by the flusher thread (only kept when
    /// a profile is written: the stderr summary has no use for it).
    pub timeline: TimelineBuffer,
    /// The backend's own statistics as last read (see
    /// [`read_allocator_stats`]), written with every profile.
    pub allocator_stats: Option<AllocatorReading>,
    /// Of the readings made, the one with the most live bytes, written
    /// beside the last: the heap overhead is measured there (the last is
    /// often taken at exit, when the program has freed its heap).
    pub allocator_stats_at_peak: Option<AllocatorReading>,
}

/// The process image's identity and start, as its profile header gives them.
pub struct Process {
    /// Its pid (a `fork` child's own, once it has started).
    pub pid: u32,
    /// Its parent's pid.
    pub ppid: u32,
    /// Both clocks at start-up: times in the profile count from here.
    pub clock_start: ClockPair,
    /// `/proc/self/exe`, `exe_len` bytes of it.
    pub exe: [u8; 1024],
    /// Length of `exe`.
    pub exe_len: usize,
    /// `/proc/self/cmdline`, `cmdline_len` bytes of it.
    pub cmdline: [u8; 4096],
    /// Length of `cmdline`.
    pub cmdline_len: usize,
    /// Identity of fd 2 at start-up, to avoid writing the summary into a
    /// file the program later opened on descriptor 2.
    pub stderr_id: Option<(u64, u64)>,
    /// The address the `/debug/pprof` endpoint listens on, `http_len`
    /// bytes of it (0: not served).
    pub http: [u8; 64],
    /// Length of `http`.
    pub http_len: usize,
    /// The program an `exec` under way replaces this image with, as the
    /// call named it, `exec_len` bytes of it (0: none, or too long).
    pub exec: [u8; PATH_MAX],
    /// Length of `exec`.
    pub exec_len: usize,
}

/// The profile's file names.
pub struct ProfileFile {
    /// The output template from `ALLOCMUX_OUTPUT`, NUL-free.
    pub template: [u8; PATH_MAX],
    /// Length of `template`; 0 when no profile is asked for.
    pub template_len: usize,
    /// This process's claimed profile path, NUL-terminated, and its length.
    pub path: [u8; PATH_MAX],
    /// Length of `path` without its NUL.
    pub path_len: usize,
    /// The temporary file of the write under way, NUL-terminated.
    pub tmp: [u8; PATH_MAX],
    /// Temporary files are written nameless (see [`output`]).
    pub nameless: bool,
}

/// What a profile is written through, kept between writes so a write
/// allocates only when the stacks outgrow the last one's.
pub struct Staging {
    /// The header, counters and allocator statistics; then the timeline's
    /// lines, staged.
    pub buf: [u8; OUT_BUF],
    /// The stack lines and the section's end: they grow with the number
    /// of distinct stacks, so they live on the shim's own heap.
    pub tail: String,
    /// The stacks copied out of the recorder for writing.
    pub stacks: recorder::stacks::Snapshot,
    /// How long the last write took: the flusher waits at least
    /// `FLUSH_DUTY` times as long before the next, so a profile with very
    /// many stacks cannot take more than a small share of a CPU.
    pub last_write_ns: u64,
}

pub static WRITER: SpinLock<Writer> = SpinLock::new(Writer {
    process: Process {
        pid: 0,
        ppid: 0,
        clock_start: ClockPair { tsc: 0, mono_ns: 0 },
        exe: [0; 1024],
        exe_len: 0,
        cmdline: [0; 4096],
        cmdline_len: 0,
        stderr_id: None,
        http: [0; 64],
        http_len: 0,
        exec: [0; PATH_MAX],
        exec_len: 0,
    },
    file: ProfileFile {
        template: [0; PATH_MAX],
        template_len: 0,
        path: [0; PATH_MAX],
        path_len: 0,
        tmp: [0; PATH_MAX],
        nameless: false,
    },
    has_output: false,
    discard: false,
    finished: false,
    exit_totals: None,
    staging: Staging {
        buf: [0; OUT_BUF],
        tail: String::new(),
        stacks: recorder::stacks::Snapshot::new(),
        last_write_ns: 0,
    },
    timeline: TimelineBuffer::new(),
    allocator_stats: None,
    allocator_stats_at_peak: None,
});

/// Per-process part of start-up, also run in a `fork` child.
pub fn start_process(w: &mut Writer) {
    // SAFETY: getpid/getppid have no preconditions.
    (w.process.pid, w.process.ppid) = unsafe { (libc::getpid() as u32, libc::getppid() as u32) };
    crate::children::start(w.process.pid);
    w.finished = false;
    w.exit_totals = None;
    w.has_output = w.file.template_len > 0 && {
        let claim = output::claim(
            &w.file.template[..w.file.template_len],
            w.process.pid,
            &mut w.file.path,
            &mut w.file.tmp,
        );
        w.discard = claim == Claim::NullDevice;
        match claim {
            Claim::File { path_len, nameless } => {
                w.file.path_len = path_len;
                w.file.nameless = nameless;
                true
            }
            Claim::NullDevice | Claim::Unavailable => false,
        }
    };
    // A forked child starts its own timeline, at its own start-up, and
    // reads its allocator's figures afresh (never here: in a `fork` child
    // the allocator's locks may still be held by its own atfork handlers).
    w.timeline.clear();
    w.allocator_stats = None;
    w.allocator_stats_at_peak = None;
    if w.has_output {
        // The first point, so even a process that ends before the first
        // sample has a start and an end.
        sample_timeline(w);
        write_profile(w, State::Running, false);
    }
}

/// In a `fork` child, when another thread of the parent held `WRITER` at
/// the fork: the write it was making may be half done. What a write
/// changes is rebuilt; the old buffers are forgotten, not freed (their
/// heap may be as half-changed). The process's identity and file names are
/// only set at start-up, so they are whole.
pub fn rebuild_after_fork(w: &mut Writer) {
    core::mem::forget(core::mem::take(&mut w.staging.tail));
    core::mem::forget(core::mem::replace(
        &mut w.staging.stacks,
        recorder::stacks::Snapshot::new(),
    ));
    w.timeline.clear();
    w.allocator_stats = None;
    w.allocator_stats_at_peak = None;
}

/// The process's totals, how they were taken, and the mean calls per
/// timed call they were timed at: counted, with `current` the exiting
/// thread's state if it is one; at the sampled level, estimated from the
/// stack sample (every call of it timed: a mean of 1).
fn process_totals(current: Option<&recorder::ThreadState>) -> (Totals, Recording, u32) {
    if choice::current().sampled_level {
        let (t, r) = recorder::stacks::estimated_totals().unwrap_or((
            Totals::default(),
            Recording::Sampled {
                allocations_variance: 0.0,
                bytes_variance: 0.0,
            },
        ));
        return (t, r, 1);
    }
    (
        recorder::snapshot(current),
        Recording::Exact,
        recorder::time_sample_mean(),
    )
}

/// The program's live bytes and their highest value so far: summed over
/// the recorder's threads, or at the sampled level estimated.
fn live_and_peak() -> (u64, u64) {
    if choice::current().sampled_level {
        let (t, _, _) = process_totals(None);
        (t.live_bytes(), t.peak_live_bytes)
    } else {
        (recorder::live_bytes(), recorder::peak_live_bytes())
    }
}

/// Adds a point to the timeline: the time, the live bytes summed over the
/// recorder's threads, the resident size. Returns the live bytes.
pub fn sample_timeline(w: &mut Writer) -> u64 {
    let t_ns = recorder::monotonic_ns().saturating_sub(w.process.clock_start.mono_ns);
    let (live_bytes, peak) = live_and_peak();
    let rss_bytes = procfs::rss_bytes();
    let temporary = recorder::stacks::temporaries_so_far().unwrap_or(0);
    w.timeline.push_sample(
        TimelinePoint {
            t_ns,
            live_bytes,
            rss_bytes,
            temporary,
        },
        peak,
    );
    live_bytes
}

/// A reading of the backend's own statistics (jemalloc's `stats.*`,
/// mimalloc's process info, glibc's `mallinfo2`): the monotonic time, the
/// program's live bytes then, the figures.
///
/// The read takes the allocator's locks (jemalloc's `ctl` and arena
/// mutexes, glibc's arena mutexes), so it is only made where no lock can
/// be held against it: by the flusher (after a call, when the allocator
/// is between calls: before a periodic write, and when the live bytes have
/// grown well past the reading nearest the peak so far); by a program
/// thread the flusher asks where it may not read itself, after that
/// thread's own call returned (`flusher::read_on_program_thread`); and at
/// a normal exit. Each is made *before* taking `WRITER` (the program
/// thread only ever tries it), so no lock of the shim's is held while it
/// waits. Never from
/// `before_exit`, which `_exit` may reach from a signal handler that
/// interrupted the allocator: the last reading is written there instead.
/// It allocates nothing through the hooks: jemalloc's control interface
/// uses jemalloc's internal metadata, the other two fill plain values.
pub fn read_allocator_stats() -> Option<(u64, u64, AllocatorStats)> {
    let choice = choice::current();
    if !choice.recorded {
        return None;
    }
    let mut stats = recorder::allocator_stats::read(choice.backend)?;
    // The shim's own small blocks in glibc's heap are not the program's
    // (its large ones are mappings of their own: `heap`). An `if let`:
    // `AllocatorStats` is `#[non_exhaustive]`, so a `match` would need a
    // catch-all.
    if let AllocatorStats::System(g) = stats {
        let (arena, mmapped) = crate::heap::glibc_blocks();
        stats = AllocatorStats::System(g.without(arena, mmapped));
    }
    Some((recorder::monotonic_ns(), live_and_peak().0, stats))
}

/// Keeps a reading from [`read_allocator_stats`] for the profiles to come:
/// as the last one, and as the one nearest the peak if no reading so far
/// had as many live bytes. Returns the live bytes of the one nearest the
/// peak (0: none yet).
pub fn keep_allocator_stats(w: &mut Writer, reading: Option<(u64, u64, AllocatorStats)>) -> u64 {
    if let Some((mono_ns, live_bytes, stats)) = reading {
        let t_ns = mono_ns.saturating_sub(w.process.clock_start.mono_ns);
        let r = AllocatorReading::new(t_ns, live_bytes, stats);
        w.allocator_stats = Some(r);
        if w.allocator_stats_at_peak
            .is_none_or(|p| live_bytes >= p.live_bytes)
        {
            w.allocator_stats_at_peak = Some(r);
        }
    }
    w.allocator_stats_at_peak.map_or(0, |r| r.live_bytes)
}

/// Writes the profile (unless there is none, or the exit profile is
/// written): the counters and the allocator's statistics into `buf`, the
/// stacks into `tail`, then the file replaced whole (see
/// [`output::replace`]).
pub fn write_profile(w: &mut Writer, state: State, exiting_thread: bool) {
    // SAFETY: getpid has no preconditions.
    if !w.has_output || w.finished || w.process.pid != unsafe { libc::getpid() } as u32 {
        // No output, the exit profile written, or a `fork` child whose
        // writer was busy in the frame its signal handler interrupted
        // (see `lifecycle::fork_child`): that child writes nothing.
        return;
    }
    let current = exiting_thread.then(|| &tls::current().state);
    let (totals, recording, time_sample_mean) = process_totals(current);
    let clock_end = read_clocks();
    if state == State::Exited {
        // The last point, with the live bytes of the exit profile itself.
        w.timeline.push_sample(
            TimelinePoint {
                t_ns: clock_end
                    .mono_ns
                    .saturating_sub(w.process.clock_start.mono_ns),
                live_bytes: totals.live_bytes(),
                rss_bytes: procfs::rss_bytes(),
                temporary: recorder::stacks::temporaries_so_far().unwrap_or(0),
            },
            totals.peak_live_bytes,
        );
    }
    let header = Header {
        pid: w.process.pid,
        ppid: w.process.ppid,
        exe: &w.process.exe[..w.process.exe_len],
        cmdline: &w.process.cmdline[..w.process.cmdline_len],
        allocator: choice::current().backend.name(),
        state,
        threads: recorder::threads_seen(),
        clock_start: w.process.clock_start,
        clock_end,
        cpu_ns: cpu_ns(),
        max_rss_bytes: process::max_rss_bytes(),
        time_sample_mean,
        http: &w.process.http[..w.process.http_len],
        exec: &w.process.exec[..w.process.exec_len],
        recording,
    };
    let started = recorder::monotonic_ns();
    let Writer {
        staging:
            Staging {
                buf,
                tail,
                stacks,
                last_write_ns,
            },
        file:
            ProfileFile {
                tmp,
                path,
                path_len,
                nameless,
                ..
            },
        timeline,
        allocator_stats,
        allocator_stats_at_peak,
        ..
    } = w;
    let mut out = SliceWriter { buf, len: 0 };
    if profile::write_magic(&mut out)
        .and_then(|_| profile::write_counters(&mut out, &header, &totals))
        .and_then(|_| {
            profile::write_allocator_stats(
                &mut out,
                allocator_stats.as_ref(),
                allocator_stats_at_peak.as_ref(),
            )
        })
        .and_then(|_| {
            let mut r = Ok(());
            crate::children::for_each(|pid, name| {
                r = r.and_then(|_| profile::write_unprofiled_child(&mut out, pid, name));
            });
            r
        })
        .is_err()
    {
        return; // larger than the buffer: keep the previous complete file
    }
    let len = out.len;
    tail.clear();
    stacks.take(&totals);
    // Writing into a String cannot fail.
    let _ = stacks.write(tail).and_then(|_| profile::write_end(tail));
    // The timeline goes between the counters and the stacks, staged
    // through `buf` once the counters are out: up to ~80 KiB of points
    // need no buffer of their own.
    let replaced = output::replace(path, *path_len, nameless, tmp, |file| {
        file.write(&buf[..len])
            && write_timeline(file, buf, timeline)
            && file.write(tail.as_bytes())
    });
    if replaced.is_none() {
        return;
    }
    *last_write_ns = recorder::monotonic_ns().saturating_sub(started);
    if state == State::Exited {
        w.finished = true;
        w.exit_totals = Some(totals);
    }
}

/// Whether nothing was counted since the exit profile was written (no
/// allocator call of any thread), so that writing it again would change
/// only its end time.
pub fn unchanged_since_exit_profile(w: &Writer) -> bool {
    w.exit_totals
        .is_some_and(|t| t == recorder::snapshot(Some(&tls::current().state)))
}

/// Writes the timeline's lines to `file`, staged through `buf`.
fn write_timeline(file: &Temporary, buf: &mut [u8], t: &TimelineBuffer) -> bool {
    let mut out = FdWriter { file, buf, len: 0 };
    let temporary_counted = recorder::stacks::temporaries_so_far().is_some();
    profile::write_timeline(&mut out, t.interval_ns(), t.points(), temporary_counted).is_ok()
        && out.flush()
}

/// The summary line on stderr, if it is still the stderr of start-up.
pub fn summary(w: &mut Writer) {
    w.finished = true;
    if w.discard {
        return;
    }
    let same_stderr = w.process.stderr_id.is_some() && fd::fd_identity(2) == w.process.stderr_id;
    if same_stderr {
        summary_line(w);
    }
}

/// The one-line summary on stderr that stands in for a profile.
fn summary_line(w: &mut Writer) {
    let (t, recording, time_sample_mean) = process_totals(Some(&tls::current().state));
    let now = read_clocks();
    let alloc_ns = match now.ticks_per_ns_since(w.process.clock_start) {
        Some(ticks_per_ns) => t.estimated_allocator_ticks(time_sample_mean) / ticks_per_ns,
        None => 0.0,
    };
    // At the sampled level every figure is an estimate, and the time is
    // not estimated at all.
    let about = match recording {
        Recording::Exact => "",
        Recording::Sampled { .. } => "≈",
    };
    let measured = about.is_empty();
    let cpu = cpu_ns() as f64;
    let share = if cpu > 0.0 {
        100.0 * alloc_ns / cpu
    } else {
        0.0
    };
    let pid = w.process.pid;
    let mut out = SliceWriter {
        buf: &mut w.staging.buf,
        len: 0,
    };
    let r = writeln!(
        out,
        "allocmux: pid {pid} ({}{}): {about}{} allocations, {about}{} frees, {about}{} allocated, peak {about}{} live, {about}{} live at exit, {}",
        choice::current().backend.name(),
        if about.is_empty() { "" } else { ", sampled" },
        t.allocation_calls(),
        t.calls_of(allocmux_format::Func::Free),
        Size(t.bytes_allocated),
        Size(t.peak_live_bytes),
        Size(t.live_bytes()),
        TimeShare {
            measured,
            ms: alloc_ns / 1e6,
            share,
        },
    );
    if r.is_ok() {
        let len = out.len;
        fd::write_all(2, &w.staging.buf[..len]);
    }
}

/// The summary's allocator time: `1.23 ms in the allocator (4.5% of CPU)`,
/// or that it is not measured (the sampled level).
struct TimeShare {
    measured: bool,
    ms: f64,
    share: f64,
}

impl core::fmt::Display for TimeShare {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.measured {
            write!(
                f,
                "{:.2} ms in the allocator ({:.1}% of CPU)",
                self.ms, self.share
            )
        } else {
            f.write_str("allocator time not measured")
        }
    }
}

/// The process's CPU time so far.
fn cpu_ns() -> u64 {
    allocmux_recorder::clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}
