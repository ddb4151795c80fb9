//! The preload runtime: choosing the backend, start-up, `fork`, the periodic
//! writer thread (which also samples the memory timeline), and the profile
//! or summary at exit.
//!
//! Nothing here runs on the allocation hot path except [`backend`], which is
//! one relaxed load once the choice is made.

use core::ffi::{c_char, c_int, c_void};
use core::fmt::Write as _;
use core::sync::atomic::{
    AtomicBool, AtomicU8, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};

use allocmux::AllocatorStats;
use allocmux::profile::{self, AllocatorReading, Header, StackMode, State};
use allocmux::recorder::{self, ClockPair, SpinLock};
use allocmux::stats::ByteSize as Size;
use allocmux::timeline::{TimelineBuffer, TimelinePoint};

use crate::backend::{Backend, Jemalloc, Mimalloc, System};
use crate::{config, tls};

/// The backend serving this process; never changes once chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Choice {
    /// glibc, recorded.
    System = 1,
    /// jemalloc, recorded.
    Jemalloc = 2,
    /// mimalloc, recorded.
    Mimalloc = 3,
    /// glibc, not recorded: secure execution (setuid/setgid/capabilities).
    Unrecorded = 4,
}

static BACKEND: AtomicU8 = AtomicU8::new(0);

/// The process's backend, chosen at the first call (which may come before
/// the shim's constructor: other libraries' constructors allocate too).
/// The allocation path does not call this: it jumps through the hook table
/// that the choice installs.
#[inline]
pub fn backend() -> Choice {
    match BACKEND.load(Acquire) {
        1 => Choice::System,
        2 => Choice::Jemalloc,
        3 => Choice::Mimalloc,
        4 => Choice::Unrecorded,
        _ => choose_backend(),
    }
}

#[cold]
#[inline(never)]
fn choose_backend() -> Choice {
    let choice = if config::secure_execution() {
        Choice::Unrecorded
    } else {
        match config::allocator() {
            config::Allocator::Jemalloc => Choice::Jemalloc,
            config::Allocator::Mimalloc => Choice::Mimalloc,
            config::Allocator::System => Choice::System,
        }
    };
    // Install first, publish last: a first call that finds the choice made
    // (`FIRST_CALL` trampolines read `backend()` and then jump through the
    // table) must find the table in place, or it would jump to itself.
    // Threads racing here read the same environment and make the same
    // choice, and installing is idempotent, so no lock is needed.
    let mode = config::stack_mode();
    let stacks = choice != Choice::Unrecorded && mode != StackMode::Off;
    if stacks {
        recorder::stacks::configure(mode, true);
    }
    crate::hooks::install(choice, stacks);
    BACKEND.store(choice as u8, Release);
    choice
}

fn backend_name(c: Choice) -> &'static str {
    match c {
        Choice::System | Choice::Unrecorded => System::NAME,
        Choice::Jemalloc => Jemalloc::NAME,
        Choice::Mimalloc => Mimalloc::NAME,
    }
}

/// Periodic flush interval: a process killed by SIGKILL loses at most this
/// much of its recording.
const FLUSH_INTERVAL_MS: u64 = 500;
/// The flusher sleeps at least this many times as long as its last write
/// took (a write of tens of thousands of stacks takes tens of ms).
const FLUSH_DUTY: u64 = 20;
/// The next timeline sample waits at least this many times as long as the
/// last samples took, so sampling stays under 1% of a CPU even where it is
/// slow (the walk of the thread registry in a program with many thousands
/// of threads); normally it waits the timeline's interval, 10 ms or more,
/// and a sample takes some microseconds. The shorter of the last two
/// durations counts: a sample whose thread was preempted (in a busy
/// program) took long without costing anything, and must not open a hole
/// in the timeline, while a slow registry makes every sample slow. (The
/// thread's CPU clock would tell the two apart directly, but its two
/// reads are system calls that add about a tenth to a sample's cost.)
const SAMPLE_DUTY: u64 = 100;
/// A flush reads the allocator's statistics only once this many times as
/// long as the last read took has passed since it: a jemalloc read takes
/// 11–16 µs (every flush), but glibc's `mallinfo2` walks the free lists
/// under each arena's lock, 0.5–2 ms with 50 000 free small blocks
/// (`cargo bench -p allocmux --bench allocator_stats`), so such a glibc
/// heap is read every 0.5–2 s, and its allocating threads wait on the read
/// at most 0.1% of the time. The exit profile always reads.
const STATS_DUTY: u64 = 1000;
const PATH_MAX: usize = 4096;
const OUT_BUF: usize = 64 * 1024;

/// Everything the writer needs, behind one lock (taken by the flusher
/// thread, the exit handler and `fork`; never on the allocation path).
struct Writer {
    pid: u32,
    ppid: u32,
    clock_start: ClockPair,
    exe: [u8; 1024],
    exe_len: usize,
    cmdline: [u8; 4096],
    cmdline_len: usize,
    /// The output template from `ALLOCMUX_OUTPUT`, NUL-free.
    template: [u8; PATH_MAX],
    template_len: usize,
    /// This process's claimed profile path, NUL-terminated, and its length.
    path: [u8; PATH_MAX],
    path_len: usize,
    /// The temporary file of the write under way, NUL-terminated.
    tmp: [u8; PATH_MAX],
    has_output: bool,
    /// `ALLOCMUX_OUTPUT` is the null device: nothing is written, not even
    /// the summary line that stands in for a profile that cannot be.
    discard: bool,
    /// The exit profile was written; the flusher must not overwrite it.
    finished: bool,
    /// Identity of fd 2 at start-up, to avoid writing the summary into a
    /// file the program later opened on descriptor 2.
    stderr_id: Option<(u64, u64)>,
    buf: [u8; OUT_BUF],
    /// The stack lines and the section's end: they grow with the number
    /// of distinct stacks, so they live on the shim's own heap.
    tail: String,
    /// The stacks copied out of the recorder for writing.
    stacks: recorder::stacks::Snapshot,
    /// How long the last write took: the flusher waits at least
    /// `FLUSH_DUTY` times as long before the next, so a profile with very
    /// many stacks cannot take more than a small share of a CPU.
    last_write_ns: u64,
    /// The memory timeline, sampled by the flusher thread (only kept when
    /// a profile is written: the stderr summary has no use for it).
    timeline: TimelineBuffer,
    /// Bytes per page, for the resident size in `/proc/self/statm`.
    page_size: u64,
    /// The backend's own statistics as last read (see
    /// [`read_allocator_stats`]), written with every profile.
    allocator_stats: Option<AllocatorReading>,
}

static WRITER: SpinLock<Writer> = SpinLock::new(Writer {
    pid: 0,
    ppid: 0,
    clock_start: ClockPair { tsc: 0, mono_ns: 0 },
    exe: [0; 1024],
    exe_len: 0,
    cmdline: [0; 4096],
    cmdline_len: 0,
    template: [0; PATH_MAX],
    template_len: 0,
    path: [0; PATH_MAX],
    path_len: 0,
    tmp: [0; PATH_MAX],
    has_output: false,
    discard: false,
    finished: false,
    stderr_id: None,
    buf: [0; OUT_BUF],
    tail: String::new(),
    stacks: recorder::stacks::Snapshot::new(),
    last_write_ns: 0,
    timeline: TimelineBuffer::new(),
    page_size: 4096,
    allocator_stats: None,
});
static STARTED: AtomicBool = AtomicBool::new(false);
static FLUSHER_STOP: AtomicBool = AtomicBool::new(false);

/// Start-up, from `.init_array` after libc is initialised.
pub fn init(envp: *const *const c_char) {
    if backend() == Choice::Unrecorded || STARTED.swap(true, Relaxed) {
        return;
    }
    let cfg = config::read(envp);
    recorder::set_time_sample_mean(cfg.time_sample_mean);
    recorder::prepare_thread_key();
    {
        let mut w = WRITER.lock();
        w.clock_start = ClockPair::now();
        w.page_size = page_size();
        w.stderr_id = fd_identity(2);
        w.exe_len = read_link(c"/proc/self/exe", &mut w.exe);
        let mut cmdline = [0u8; 4096];
        let n = read_file(c"/proc/self/cmdline", &mut cmdline);
        w.cmdline[..n].copy_from_slice(&cmdline[..n]);
        w.cmdline_len = n;
        if let Some(t) = cfg.output {
            w.template[..t.len()].copy_from_slice(t);
            w.template_len = t.len();
        }
        start_process(&mut w);
    }
    // SAFETY: the handlers are allocation-free functions of this library.
    unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) };
    if WRITER.lock().has_output {
        start_flusher();
    }
}

/// Per-process part of start-up, also run in a `fork` child.
fn start_process(w: &mut Writer) {
    // SAFETY: getpid/getppid have no preconditions.
    (w.pid, w.ppid) = unsafe { (libc::getpid() as u32, libc::getppid() as u32) };
    w.finished = false;
    w.has_output = w.template_len > 0 && claim_output(w);
    // A forked child starts its own timeline, at its own start-up, and
    // reads its allocator's figures afresh (never here: in a `fork` child
    // the allocator's locks may still be held by its own atfork handlers).
    w.timeline.clear();
    w.allocator_stats = None;
    if w.has_output {
        // The first point, so even a process that ends before the first
        // sample has a start and an end.
        sample_timeline(w);
        write_profile(w, State::Running, false);
    }
}

/// Adds a point to the timeline: the time, the live bytes summed over the
/// recorder's threads, the resident size.
fn sample_timeline(w: &mut Writer) {
    let t_ns = recorder::monotonic_ns().saturating_sub(w.clock_start.mono_ns);
    let live_bytes = recorder::live_bytes();
    let rss_bytes = rss_bytes(w.page_size);
    w.timeline.push(TimelinePoint {
        t_ns,
        live_bytes,
        rss_bytes,
    });
}

/// A reading of the backend's own statistics (jemalloc's `stats.*`,
/// mimalloc's process info, glibc's `mallinfo2`): the monotonic time, the
/// program's live bytes then, the figures.
///
/// The read takes the allocator's locks (jemalloc's `ctl` and arena
/// mutexes, glibc's arena mutexes), so it is only made where no lock can
/// be held against it: by the writer thread, and at a normal exit, each
/// *before* taking `WRITER`, because a `fork` in another thread takes
/// `WRITER` in the shim's atfork handler and jemalloc's locks in jemalloc's
/// (in an order that depends on which was registered first). Never from
/// `before_exit`, which `_exit` may reach from a signal handler that
/// interrupted the allocator: the last reading is written there instead.
/// It allocates nothing through the hooks: jemalloc's control interface
/// uses jemalloc's internal metadata, the other two fill plain values.
fn read_allocator_stats() -> Option<(u64, u64, AllocatorStats)> {
    let backend = match backend() {
        Choice::System => allocmux::Backend::System,
        Choice::Jemalloc => allocmux::Backend::Jemalloc,
        Choice::Mimalloc => allocmux::Backend::Mimalloc,
        Choice::Unrecorded => return None,
    };
    let stats = AllocatorStats::read(backend)?;
    Some((recorder::monotonic_ns(), recorder::live_bytes(), stats))
}

/// Keeps a reading from [`read_allocator_stats`] for the profiles to come.
fn keep_allocator_stats(w: &mut Writer, reading: Option<(u64, u64, AllocatorStats)>) {
    if let Some((mono_ns, live_bytes, stats)) = reading {
        let t_ns = mono_ns.saturating_sub(w.clock_start.mono_ns);
        w.allocator_stats = Some(AllocatorReading::new(t_ns, live_bytes, stats));
    }
}

/// Creates this process's profile file without following symlinks or
/// replacing anything: `%p` in the template becomes the pid, and if that
/// name is taken (an `exec` in the same process, or a fixed name shared by
/// several processes) `.1`, `.2`, ... are tried.
fn claim_output(w: &mut Writer) -> bool {
    let mut base = [0u8; PATH_MAX];
    let Some(len) = config::expand_template(&w.template[..w.template_len], w.pid, &mut base) else {
        config::warn(format_args!(
            "ALLOCMUX_OUTPUT is too long; no profile will be written"
        ));
        return false;
    };
    w.discard = is_null_device(&base[..len]);
    if w.discard {
        return false;
    }
    for attempt in 0..100u32 {
        let mut path = PathBuf::new(&mut w.path);
        let _ = path.push(&base[..len]);
        if attempt > 0 {
            let _ = write!(path, ".{attempt}");
        }
        let Some(plen) = path.finish() else { break };
        // SAFETY: `w.path` is NUL-terminated by `finish`.
        let fd = unsafe {
            libc::open(
                w.path.as_ptr().cast(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o644,
            )
        };
        if fd >= 0 {
            // SAFETY: fd is ours.
            unsafe { libc::close(fd) };
            w.path_len = plen;
            return true;
        }
        if errno() != libc::EEXIST {
            config::warn(format_args!(
                "cannot create the profile {}: {}; nothing will be written",
                Bytes(&w.path[..plen]),
                Errno(errno())
            ));
            return false;
        }
    }
    config::warn(format_args!(
        "no free profile name for ALLOCMUX_OUTPUT; nothing will be written"
    ));
    false
}

/// Writes the profile through a temporary file and a rename, so a reader
/// (or a SIGKILL mid-write) never sees half a file.
fn write_profile(w: &mut Writer, state: State, exiting_thread: bool) {
    if !w.has_output || w.finished {
        return;
    }
    let current = exiting_thread.then(|| &tls::current().state);
    let totals = recorder::snapshot(current);
    let clock_end = ClockPair::now();
    if state == State::Exited {
        // The last point, with the live bytes of the exit profile itself.
        w.timeline.push(TimelinePoint {
            t_ns: clock_end.mono_ns.saturating_sub(w.clock_start.mono_ns),
            live_bytes: totals.live_bytes(),
            rss_bytes: rss_bytes(w.page_size),
        });
    }
    let header = Header {
        pid: w.pid,
        ppid: w.ppid,
        exe: &w.exe[..w.exe_len],
        cmdline: &w.cmdline[..w.cmdline_len],
        allocator: backend_name(backend()),
        state,
        threads: recorder::threads_seen(),
        clock_start: w.clock_start,
        clock_end,
        cpu_ns: allocmux_cpu_ns(),
        max_rss_bytes: max_rss_bytes(),
        time_sample_mean: recorder::time_sample_mean(),
    };
    let started = recorder::monotonic_ns();
    let Writer {
        buf,
        tail,
        stacks,
        last_write_ns,
        tmp,
        path,
        path_len,
        timeline,
        allocator_stats,
        ..
    } = w;
    let mut out = SliceWriter { buf, len: 0 };
    if profile::write_magic(&mut out)
        .and_then(|_| profile::write_counters(&mut out, &header, &totals))
        .and_then(|_| match allocator_stats {
            Some(r) => profile::write_allocator_stats(&mut out, r),
            None => Ok(()),
        })
        .is_err()
    {
        return; // larger than the buffer: keep the previous complete file
    }
    let len = out.len;
    tail.clear();
    stacks.take();
    // Writing into a String cannot fail.
    let _ = stacks.write(tail).and_then(|_| profile::write_end(tail));
    let Some(fd) = create_temporary(&path[..*path_len], tmp) else {
        return;
    };
    let file = Temporary {
        fd,
        id: fd_identity(fd),
    };
    // The timeline goes between the counters and the stacks, staged
    // through `buf` once the counters are out: up to ~80 KiB of points
    // need no buffer of their own.
    let ok = file.write(&buf[..len])
        && write_timeline(&file, buf, timeline)
        && file.write(tail.as_bytes());
    // A descriptor the program replaced meanwhile (closed and reopened,
    // or `dup2`'d over) is the program's: neither written nor closed.
    let ours = file.is_ours();
    // SAFETY: fd is ours (checked); tmp and path are NUL-terminated.
    unsafe {
        if ours {
            libc::close(fd);
        }
        if ok && ours {
            libc::rename(tmp.as_ptr().cast(), path.as_ptr().cast());
        } else {
            libc::unlink(tmp.as_ptr().cast());
        }
    }
    *last_write_ns = recorder::monotonic_ns().saturating_sub(started);
    if state == State::Exited {
        w.finished = true;
    }
}

/// The temporary file of a write under way, with the identity (device and
/// inode) it had when created. A program may close every descriptor it
/// does not know (daemons, `closefrom`) or `dup2` one of its own over any
/// number, from another thread while the writer writes: each write first
/// checks that the descriptor is still the file the shim created, so the
/// shim never writes into (nor closes) a file of the program's. What is
/// left is the window between that check and the write.
struct Temporary {
    fd: c_int,
    id: Option<(u64, u64)>,
}

impl Temporary {
    fn is_ours(&self) -> bool {
        self.id.is_some() && fd_identity(self.fd) == self.id
    }
    fn write(&self, bytes: &[u8]) -> bool {
        self.is_ours() && write_all(self.fd, bytes)
    }
}

/// Writes the timeline's lines to `file`, staged through `buf`.
fn write_timeline(file: &Temporary, buf: &mut [u8], t: &TimelineBuffer) -> bool {
    let mut out = FdWriter { file, buf, len: 0 };
    profile::write_timeline(&mut out, t.interval_ns(), t.points()).is_ok() && out.flush()
}

/// `fmt::Write` to the temporary file through a fixed buffer.
struct FdWriter<'a> {
    file: &'a Temporary,
    buf: &'a mut [u8],
    len: usize,
}

impl FdWriter<'_> {
    fn flush(&mut self) -> bool {
        let ok = self.file.write(&self.buf[..self.len]);
        self.len = 0;
        ok
    }
}

impl core::fmt::Write for FdWriter<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        if self.len + s.len() > self.buf.len() && !self.flush() {
            return Err(core::fmt::Error);
        }
        if s.len() > self.buf.len() {
            return self
                .file
                .write(s.as_bytes())
                .then_some(())
                .ok_or(core::fmt::Error);
        }
        self.buf[self.len..self.len + s.len()].copy_from_slice(s.as_bytes());
        self.len += s.len();
        Ok(())
    }
}

/// Creates a new temporary file next to the profile, `PATH.tmp` or, if that
/// name is taken, `PATH.tmp1` ... : exclusively and without following a
/// symlink, so an existing file there is never truncated, and one planted
/// there does not stop the profile from being written. Leaves the name,
/// NUL-terminated, in `tmp`.
fn create_temporary(path: &[u8], tmp: &mut [u8; PATH_MAX]) -> Option<c_int> {
    for attempt in 0..16u32 {
        let mut name = PathBuf::new(tmp);
        name.push(path)?;
        name.push(b".tmp")?;
        if attempt > 0 {
            write!(name, "{attempt}").ok()?;
        }
        name.finish()?;
        // SAFETY: `tmp` is NUL-terminated by `finish`.
        let fd = unsafe {
            libc::open(
                tmp.as_ptr().cast(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o644,
            )
        };
        if fd >= 0 {
            return Some(fd);
        }
        if errno() != libc::EEXIST {
            return None;
        }
    }
    None
}

/// At exit (`.fini_array`, after the program's `atexit` handlers): the
/// final profile, or the one-line summary on stderr when no output is set.
///
/// The libraries initialised before the shim (the program's own shared
/// libraries among them) run their destructors after this, and may still
/// allocate and free. So the profile is written here, in case one of
/// them crashes, and once more from an exit handler registered now: glibc
/// runs a handler registered while the exit handlers run (`_dl_fini`, which
/// calls every `.fini_array`, is one) after the one that registered it, so
/// that write comes after every library's destructors. The summary line
/// waits for it.
pub fn finish() {
    if backend() == Choice::Unrecorded || !STARTED.load(Relaxed) {
        return;
    }
    FLUSHER_STOP.store(true, Relaxed);
    let last_word = !LAST_WORD.swap(true, Relaxed)
        // SAFETY: a plain function of this library that never unwinds; no
        // DSO handle, so no `dlclose` runs it early. Registering may
        // allocate (a new block of handlers) through the hooks: not under
        // any lock of the shim's.
        && unsafe { __cxa_atexit(last_word, core::ptr::null_mut(), core::ptr::null_mut()) } == 0;
    // Before taking `WRITER`: see `read_allocator_stats`.
    let reading = read_allocator_stats();
    let mut w = WRITER.lock();
    if w.has_output {
        keep_allocator_stats(&mut w, reading);
        write_profile(&mut w, State::Exited, true);
    } else if !w.finished && !last_word {
        summary(&mut w);
    }
}

/// Set once the late exit handler is registered (once per process image).
static LAST_WORD: AtomicBool = AtomicBool::new(false);

unsafe extern "C" {
    fn __cxa_atexit(f: extern "C" fn(*mut c_void), arg: *mut c_void, dso: *mut c_void) -> c_int;
}

/// The exit handler `finish` registers: the exit profile (or summary)
/// again, now with what other libraries' destructors did. The allocator's
/// statistics are those read in `finish`.
extern "C" fn last_word(_: *mut c_void) {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let mut w = WRITER.lock();
    if w.pid != pid {
        return; // a forked child that exits inherited the registration
    }
    if w.has_output {
        if w.finished {
            w.finished = false;
            write_profile(&mut w, State::Exited, true);
        }
    } else if !w.finished {
        summary(&mut w);
    }
}

/// The summary line on stderr, if it is still the stderr of start-up.
fn summary(w: &mut Writer) {
    w.finished = true;
    if w.discard {
        return;
    }
    let same_stderr = w.stderr_id.is_some() && fd_identity(2) == w.stderr_id;
    if same_stderr {
        summary_line(w);
    }
}

/// From the `_exit` hook: the exit profile, for processes that leave
/// without exit handlers (dash, forked children). Skipped in a `vfork` child,
/// which shares the parent's memory (its pid is not the one recorded: vfork
/// runs no atfork handler), and if the writer stays busy, as when `_exit`
/// comes from a signal handler that interrupted a write on this thread.
/// The allocator's statistics are the writer thread's last reading: `_exit`
/// may come from a signal handler that interrupted the allocator.
pub fn before_exit() {
    if backend() == Choice::Unrecorded || !STARTED.load(Relaxed) {
        return;
    }
    for _ in 0..1000 {
        if let Some(mut w) = WRITER.try_lock() {
            // SAFETY: getpid has no preconditions.
            if w.pid == unsafe { libc::getpid() } as u32 {
                FLUSHER_STOP.store(true, Relaxed);
                write_profile(&mut w, State::Exited, true);
            }
            return;
        }
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
}

/// From the `exec` hooks, before the system call: the exit profile of the
/// image about to be replaced (an `exec` runs no exit handler, and the new
/// image starts its own profile, so without this the old one would keep
/// only its last periodic flush). Returns whether it was written, for
/// [`after_failed_exec`]. Skipped, as in [`before_exit`], in a `vfork`
/// child and when the writer stays busy; the allocator's statistics are
/// the last reading (`exec` is async-signal-safe and may come from a
/// signal handler).
pub fn before_exec() -> bool {
    if backend() == Choice::Unrecorded || !STARTED.load(Relaxed) {
        return false;
    }
    for _ in 0..1000 {
        if let Some(mut w) = WRITER.try_lock() {
            // SAFETY: getpid has no preconditions.
            if w.pid != unsafe { libc::getpid() } as u32 || w.finished || !w.has_output {
                return false;
            }
            write_profile(&mut w, State::Exited, true);
            return w.finished;
        }
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
    false
}

/// The `exec` failed and this image goes on: the profile is a running
/// one again, and the writer thread (which waits while it is finished)
/// goes on rewriting it.
pub fn after_failed_exec(written: bool) {
    if written {
        let mut w = WRITER.lock();
        w.finished = false;
        write_profile(&mut w, State::Running, false);
    }
}

fn summary_line(w: &mut Writer) {
    let t = recorder::snapshot(Some(&tls::current().state));
    let now = ClockPair::now();
    let dt = now.tsc.saturating_sub(w.clock_start.tsc) as f64;
    let dns = now.mono_ns.saturating_sub(w.clock_start.mono_ns) as f64;
    let alloc_ns = if dns > 0.0 && dt > 0.0 {
        (t.exact_ticks as f64 + t.timed_ticks as f64 * recorder::time_sample_mean() as f64)
            / (dt / dns)
    } else {
        0.0
    };
    let cpu = allocmux_cpu_ns() as f64;
    let share = if cpu > 0.0 {
        100.0 * alloc_ns / cpu
    } else {
        0.0
    };
    let pid = w.pid;
    let mut out = SliceWriter {
        buf: &mut w.buf,
        len: 0,
    };
    let r = writeln!(
        out,
        "allocmux: pid {pid} ({}): {} allocations, {} frees, {} allocated, peak {} live, {} live at exit, {:.2} ms in the allocator ({share:.1}% of CPU)",
        backend_name(backend()),
        t.allocation_calls(),
        t.calls_of(allocmux::Func::Free),
        Size(t.bytes_allocated),
        Size(t.peak_live_bytes),
        Size(t.live_bytes()),
        alloc_ns / 1e6,
    );
    if r.is_ok() {
        let len = out.len;
        write_all(2, &w.buf[..len]);
    }
}

fn start_flusher() {
    FLUSHER_STOP.store(false, Relaxed);
    // SAFETY: plain pthread calls with valid, initialised arguments. All
    // signals are blocked around the creation so the new thread inherits a
    // full mask and never takes a signal meant for the program.
    unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
        libc::pthread_attr_setstacksize(&mut attr, 64 * 1024);
        let mut all: libc::sigset_t = core::mem::zeroed();
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let mut tid: libc::pthread_t = 0;
        libc::pthread_create(&mut tid, &attr, flusher_main, core::ptr::null_mut());
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut());
        libc::pthread_attr_destroy(&mut attr);
    }
}

/// The writer thread: samples the timeline at its interval (10 ms, doubling
/// as the buffer fills) and rewrites the profile every `FLUSH_INTERVAL_MS`
/// or so, whichever is due first. It sleeps until an absolute deadline, so
/// the time it spends working does not stretch the intervals.
extern "C" fn flusher_main(_: *mut c_void) -> *mut c_void {
    // Its allocator calls (glibc's, on its behalf: the frees at its exit)
    // are not the program's; uncounted, the profiles of identical
    // processes agree whether or not the writer exited before the last.
    tls::current().state.ignore();
    // SAFETY: prctl with a NUL-terminated name.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"allocmux-flush".as_ptr()) };
    let start = recorder::monotonic_ns();
    let mut next_flush = start + FLUSH_INTERVAL_MS * 1_000_000;
    let mut next_sample = start + allocmux::timeline::BASE_INTERVAL_NS;
    let mut last_took = 0;
    let mut next_stats = start;
    loop {
        sleep_until(next_flush.min(next_sample));
        if FLUSHER_STOP.load(Relaxed) {
            break;
        }
        // Before taking `WRITER`: see `read_allocator_stats`.
        let t0 = recorder::monotonic_ns();
        let reading = if t0 >= next_flush && t0 >= next_stats {
            let r = read_allocator_stats();
            next_stats = t0 + recorder::monotonic_ns().saturating_sub(t0) * STATS_DUTY;
            r
        } else {
            None
        };
        let mut w = WRITER.lock();
        if w.finished {
            // The exit profile, or an `exec`'s, which comes back to a
            // running one if the `exec` fails: wait for that or the stop.
            next_flush = recorder::monotonic_ns() + FLUSH_INTERVAL_MS * 1_000_000;
            next_sample = next_flush;
            continue;
        }
        let now = recorder::monotonic_ns();
        if now >= next_sample {
            sample_timeline(&mut w);
            let took = recorder::monotonic_ns().saturating_sub(now);
            let cost = took.min(last_took);
            last_took = took;
            next_sample = now + w.timeline.interval_ns().max(cost * SAMPLE_DUTY);
        }
        if now >= next_flush {
            keep_allocator_stats(&mut w, reading);
            write_profile(&mut w, State::Running, false);
            next_flush = recorder::monotonic_ns()
                + (FLUSH_INTERVAL_MS * 1_000_000).max(w.last_write_ns * FLUSH_DUTY);
        }
    }
    core::ptr::null_mut()
}

/// Sleeps until `CLOCK_MONOTONIC` reaches `deadline_ns` (or a signal
/// interrupts: the caller then just works early).
fn sleep_until(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as i64,
        tv_nsec: (deadline_ns % 1_000_000_000) as i64,
    };
    // SAFETY: valid timespec; a null remainder is allowed with TIMER_ABSTIME.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            core::ptr::null_mut(),
        )
    };
}

extern "C" fn fork_prepare() {
    WRITER.lock_and_forget();
    recorder::before_fork();
    recorder::stacks::before_fork();
}

extern "C" fn fork_parent() {
    recorder::stacks::after_fork_parent();
    recorder::after_fork_parent();
    // SAFETY: fork_prepare took the lock in this thread and forgot the guard.
    unsafe { WRITER.force_unlock() };
}

extern "C" fn fork_child() {
    recorder::stacks::after_fork_child();
    recorder::after_fork_child(&tls::current().state);
    // SAFETY: fork_prepare took the lock; the child has no other thread.
    unsafe { WRITER.force_unlock() };
    let has_output = {
        let mut w = WRITER.lock();
        w.clock_start = ClockPair::now();
        start_process(&mut w);
        w.has_output
    };
    // The parent's writer thread does not exist in the child.
    if has_output {
        start_flusher();
    }
}

fn allocmux_cpu_ns() -> u64 {
    allocmux::recorder::clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn max_rss_bytes() -> u64 {
    // SAFETY: valid out-pointer.
    unsafe {
        let mut ru: libc::rusage = core::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru.ru_maxrss as u64 * 1024
    }
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions; glibc answers the page size
    // from the auxiliary vector without allocating.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as u64 } else { 4096 }
}

/// The resident set size now, from `/proc/self/statm` (its second field,
/// in pages), or 0 if it cannot be read. Opened and closed each time: a
/// descriptor kept open could be closed or reused by the program (shells
/// and daemons close every descriptor they do not know).
fn rss_bytes(page_size: u64) -> u64 {
    // Seven numbers: 128 bytes hold them whole, and the kernel produces
    // them in one read, so one read (not a loop to end of file, whose
    // second, empty read is a system call on every sample) is enough.
    let mut buf = [0u8; 128];
    // SAFETY: NUL-terminated path, valid buffer, fd closed after use.
    let n = unsafe {
        let fd = libc::open(
            c"/proc/self/statm".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return 0;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n.max(0) as usize
    };
    let pages = buf[..n]
        .split(|&b| b == b' ')
        .nth(1)
        .and_then(|f| core::str::from_utf8(f).ok()?.parse::<u64>().ok());
    pages.unwrap_or(0).saturating_mul(page_size)
}

fn errno() -> c_int {
    // SAFETY: reads this thread's errno.
    unsafe { *libc::__errno_location() }
}

fn fd_identity(fd: c_int) -> Option<(u64, u64)> {
    // SAFETY: valid out-pointer.
    unsafe {
        let mut st: libc::stat = core::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0).then_some((st.st_dev, st.st_ino))
    }
}

/// Whether `path` names the null device itself (character device 1:3, not
/// a link to it): `ALLOCMUX_OUTPUT=/dev/null` asks for nothing to be kept,
/// where any other existing path gets the next free name beside it (which
/// for `/dev/null` would create `/dev/null.1` as root).
fn is_null_device(path: &[u8]) -> bool {
    let mut z = [0u8; PATH_MAX];
    if path.len() >= z.len() {
        return false;
    }
    z[..path.len()].copy_from_slice(path);
    // SAFETY: `z` is NUL-terminated; valid out-pointer.
    unsafe {
        let mut st: libc::stat = core::mem::zeroed();
        libc::lstat(z.as_ptr().cast(), &mut st) == 0
            && st.st_mode & libc::S_IFMT == libc::S_IFCHR
            && st.st_rdev == libc::makedev(1, 3)
    }
}

fn read_link(path: &core::ffi::CStr, buf: &mut [u8]) -> usize {
    // SAFETY: NUL-terminated path, valid buffer.
    let n = unsafe { libc::readlink(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    n.max(0) as usize
}

fn read_file(path: &core::ffi::CStr, buf: &mut [u8]) -> usize {
    // SAFETY: NUL-terminated path, valid buffer, fd closed after use.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return 0;
        }
        let mut len = 0;
        while len < buf.len() {
            let n = libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len);
            if n <= 0 {
                break;
            }
            len += n as usize;
        }
        libc::close(fd);
        len
    }
}

pub(crate) fn write_all(fd: c_int, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: valid buffer.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
}

/// `fmt::Write` into a fixed buffer; fails instead of truncating.
pub(crate) struct SliceWriter<'a> {
    pub buf: &'a mut [u8],
    pub len: usize,
}

impl core::fmt::Write for SliceWriter<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self
            .len
            .checked_add(s.len())
            .filter(|&e| e <= self.buf.len())
            .ok_or(core::fmt::Error)?;
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Builds a NUL-terminated path in a fixed buffer.
struct PathBuf<'a>(SliceWriter<'a>);

impl<'a> PathBuf<'a> {
    fn new(buf: &'a mut [u8]) -> Self {
        PathBuf(SliceWriter { buf, len: 0 })
    }
    fn push(&mut self, bytes: &[u8]) -> Option<()> {
        let end = self
            .0
            .len
            .checked_add(bytes.len())
            .filter(|&e| e < self.0.buf.len())?;
        self.0.buf[self.0.len..end].copy_from_slice(bytes);
        self.0.len = end;
        Some(())
    }
    /// NUL-terminates; returns the length without the NUL.
    fn finish(self) -> Option<usize> {
        let len = self.0.len;
        *self.0.buf.get_mut(len)? = 0;
        Some(len)
    }
}

impl core::fmt::Write for PathBuf<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.push(s.as_bytes()).ok_or(core::fmt::Error)
    }
}

/// Bytes shown lossily.
pub(crate) struct Bytes<'a>(pub &'a [u8]);
impl<'a> Bytes<'a> {
    /// The valid UTF-8 prefix (for quoting a bad value in a warning).
    pub fn to_str_lossy(&self) -> &'a str {
        self.0.utf8_chunks().next().map_or("", |c| c.valid())
    }
}
impl core::fmt::Display for Bytes<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for chunk in self.0.utf8_chunks() {
            f.write_str(chunk.valid())?;
            if !chunk.invalid().is_empty() {
                f.write_str("\u{FFFD}")?;
            }
        }
        Ok(())
    }
}

/// An errno shown as text.
struct Errno(c_int);
impl core::fmt::Display for Errno {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut buf = [0u8; 128];
        // SAFETY: the XSI strerror_r writes a NUL-terminated message into buf.
        let ok = unsafe { libc::strerror_r(self.0, buf.as_mut_ptr().cast(), buf.len()) } == 0;
        let len = buf.iter().position(|&b| b == 0).unwrap_or(0);
        if ok && len > 0 {
            Bytes(&buf[..len]).fmt(f)
        } else {
            write!(f, "error {}", self.0)
        }
    }
}
