//! The flusher thread: samples the memory timeline and rewrites the
//! running profile periodically, so a process killed by SIGKILL still
//! leaves most of its recording.
//!
//! It is started only when a profile is written. Its existence makes the
//! process multi-threaded, and glibc's `fork` then takes its allocator's
//! locks, so a single-threaded program whose signal handler forks while
//! `malloc` runs on glibc's heap hangs under it (see `docs/guarantees.md`):
//! avoiding that needs the periodic flush to run outside the process.

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};

use allocmux::Backend;
use allocmux::profile::State;
use allocmux::recorder::{self, SpinLock};

use crate::writer::{self, WRITER};
use crate::{choice, tls};

/// Periodic flush interval: a process killed by SIGKILL loses at most this
/// much of its recording (see the module's note on single-threaded
/// programs).
const FLUSH_INTERVAL_MS: u64 = 500;
/// The next flush waits at least this many times as long as the last write
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

/// When each part of the periodic work is next due (monotonic ns), and
/// what the last took.
struct Schedule {
    next_flush: u64,
    next_sample: u64,
    next_stats: u64,
    last_took: u64,
}

impl Schedule {
    const fn starting_at(now: u64) -> Schedule {
        Schedule {
            next_flush: now + FLUSH_INTERVAL_MS * 1_000_000,
            next_sample: now + allocmux::timeline::BASE_INTERVAL_NS,
            next_stats: now,
            last_took: 0,
        }
    }

    fn next_due(&self) -> u64 {
        self.next_flush.min(self.next_sample)
    }
}

static SCHEDULE: SpinLock<Schedule> = SpinLock::new(Schedule::starting_at(0));
static STOP: AtomicBool = AtomicBool::new(false);
/// The flusher thread runs (or is starting).
static THREAD: AtomicBool = AtomicBool::new(false);
/// This process image is a `fork` child (see [`first_call_at_start`]).
static IN_FORK_CHILD: AtomicBool = AtomicBool::new(false);

/// Starts the flusher thread for this process image (at start-up, and in
/// a `fork` child: the parent's does not exist there).
pub fn start() {
    STOP.store(false, Relaxed);
    let now = recorder::monotonic_ns();
    // Held here only in a `fork` child of a signal handler that
    // interrupted the flusher's work on this thread: none is started.
    let Some(mut s) = SCHEDULE.lock_unless_held_here() else {
        return;
    };
    *s = Schedule::starting_at(now);
    drop(s);
    start_thread();
}

/// Asks the flusher thread to stop (at its next wake-up).
pub fn stop() {
    STOP.store(true, Relaxed);
}

/// In a `fork` child, before [`start`]: the parent's thread does not exist
/// here, and the schedule may have been taken by it at the fork.
pub fn after_fork_child() {
    IN_FORK_CHILD.store(true, Relaxed);
    THREAD.store(false, Relaxed);
    // SAFETY: this is the child of a fork, still with one thread; the
    // schedule is plain numbers, whole whoever held it.
    unsafe { SCHEDULE.after_fork_in_child() };
}

/// Samples the timeline and rewrites the profile, whichever is due.
fn work(s: &mut Schedule) {
    // Before taking `WRITER`: see `writer::read_allocator_stats`.
    let t0 = recorder::monotonic_ns();
    let reading = if t0 >= s.next_flush && t0 >= s.next_stats {
        let r = writer::read_allocator_stats();
        s.next_stats = t0 + recorder::monotonic_ns().saturating_sub(t0) * STATS_DUTY;
        r
    } else {
        None
    };
    let mut w = WRITER.lock();
    if w.finished {
        // The exit profile, or an `exec`'s, which comes back to a running
        // one if the `exec` fails: wait for that or the stop.
        s.next_flush = recorder::monotonic_ns() + FLUSH_INTERVAL_MS * 1_000_000;
        s.next_sample = s.next_flush;
        return;
    }
    let now = recorder::monotonic_ns();
    if now >= s.next_sample {
        writer::sample_timeline(&mut w);
        let took = recorder::monotonic_ns().saturating_sub(now);
        let cost = took.min(s.last_took);
        s.last_took = took;
        s.next_sample = now + w.timeline.interval_ns().max(cost * SAMPLE_DUTY);
    }
    if now >= s.next_flush {
        writer::keep_allocator_stats(&mut w, reading);
        writer::write_profile(&mut w, State::Running, false);
        s.next_flush = recorder::monotonic_ns()
            + (FLUSH_INTERVAL_MS * 1_000_000).max(w.staging.last_write_ns * FLUSH_DUTY);
    }
}

/// Starts the flusher thread, once per process image.
fn start_thread() {
    if THREAD.swap(true, Relaxed) {
        return;
    }
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
        FIRST_CALL_MADE.store(false, Relaxed);
        if libc::pthread_create(&mut tid, &attr, thread_main, core::ptr::null_mut()) != 0 {
            THREAD.store(false, Relaxed);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut());
        libc::pthread_attr_destroy(&mut attr);
    }
    // Under jemalloc, the thread's first call into it must come before the
    // program may have used up memory (see `thread_main`): wait for it, a
    // few tens of microseconds, boundedly.
    if first_call_at_start() {
        for _ in 0..10_000 {
            if FIRST_CALL_MADE.load(Acquire) || !THREAD.load(Relaxed) {
                break;
            }
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
    }
}

/// Whether the flusher thread makes its first call into the allocator as
/// it starts: under jemalloc, which sets up a thread's own data (its
/// cache, an arena) at the thread's first call and crashes if there is no
/// memory for them (`tcache_arena_associate` with no arena), so that call
/// must not wait for the first flush, by when the program may have used
/// up its memory. Not in a `fork` child, where jemalloc's locks may still
/// be held by its own handlers.
fn first_call_at_start() -> bool {
    !IN_FORK_CHILD.load(Relaxed) && choice::current().backend == Backend::Jemalloc
}

/// Set by the flusher thread once it made its first allocator call.
static FIRST_CALL_MADE: AtomicBool = AtomicBool::new(false);

/// The flusher thread: runs [`work`] whenever the next part of it is due.
/// It sleeps until an absolute deadline, so the time it spends working
/// does not stretch the intervals.
extern "C" fn thread_main(_: *mut c_void) -> *mut c_void {
    // Its allocator calls (glibc's, on its behalf: the frees at its exit)
    // are not the program's; uncounted, the profiles of identical
    // processes agree whether or not the writer exited before the last.
    tls::current().state.ignore();
    // SAFETY: prctl with a NUL-terminated name.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"allocmux-flush".as_ptr()) };
    if first_call_at_start() {
        let _ = writer::read_allocator_stats();
        FIRST_CALL_MADE.store(true, Release);
    }
    loop {
        let due = SCHEDULE.lock().next_due();
        sleep_until(due);
        if STOP.load(Relaxed) {
            break;
        }
        work(&mut SCHEDULE.lock());
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
