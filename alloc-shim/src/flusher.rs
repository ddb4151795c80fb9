//! The flusher thread: samples the memory timeline and rewrites the
//! running profile periodically, so a process killed by SIGKILL still
//! leaves most of its recording.
//!
//! It is started only when a profile is written, the `/debug/pprof`
//! endpoint is open (`endpoint`), which it serves between its writes (it
//! sleeps in `poll` on the endpoint's socket then), or OTLP profiles are
//! pushed (`otlp`), which it pushes when due. Under every backend
//! it is a thread glibc does not know of (`raw_thread`), so a program that
//! starts no thread of its own stays single-threaded to glibc, whose `fork`
//! then takes neither `atfork_lock` nor an allocator lock: a signal handler
//! may fork while `malloc`, or the program's own `fork`, runs.
//!
//! Such a thread has no thread-local storage but the shim's own, zeroed,
//! so it never calls into jemalloc or mimalloc (each keeps its per-thread
//! heap in TLS it would find empty): its memory is the shim's page blocks
//! (`heap`), a block of theirs it would free is left in place, and of the
//! backends' statistics it reads mimalloc's (atomic loads and `getrusage`)
//! and glibc's (once the program has threads, when glibc locks its arenas),
//! never jemalloc's: under jemalloc the periodic profiles carry none, the
//! exit profile reads them on the exiting thread. Where no such thread can
//! be made (not x86-64, or `clone` refused) it is a `pthread`.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
    Ordering::SeqCst,
};

use allocmux_format::Backend;
use allocmux_format::profile::State;
use allocmux_recorder as recorder;

use crate::writer::{self, WRITER};
use crate::{choice, endpoint, otlp, procfs, raw_thread, threading, tls};

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
/// long as the last read took has passed since it: a mimalloc read takes
/// 1 µs (every flush), but glibc's `mallinfo2` walks the free lists
/// under each arena's lock, 0.5–2 ms with 50 000 free small blocks
/// (`cargo bench -p allocmux --bench allocator_stats`), so such a glibc
/// heap is read every 0.5–2 s, and its allocating threads wait on the read
/// at most 0.1% of the time. The exit profile always reads. Reads made on
/// the heap's growth (below) wait by the same rule. As for the samples,
/// the shorter of the last two reads counts: a read preempted on a busy
/// machine took long without costing the program anything, and must not
/// hold the next one off for a second.
const STATS_DUTY: u64 = 1000;
/// Besides the periodic reads, the allocator's statistics are read when a
/// timeline sample finds the live bytes at this many quarters of those of
/// the reading nearest the peak so far (and of the last read made for
/// growth), so that one reading is taken near the peak of a heap that is
/// freed before exit, within a quarter of it where reading is fast enough:
/// a heap that grows to 1 GiB from the floor below is read some 31 times.
const GROWTH_QUARTERS: u64 = 5;
/// No read for growth below this many live bytes: a start-up heap of some
/// KiB would be read at every 25% of growth, and the overhead of a heap
/// this small is the allocator's fixed metadata more than its behaviour.
const GROWTH_FLOOR: u64 = 1 << 20;

static STOP: AtomicBool = AtomicBool::new(false);
/// Whether the thread being started makes its first call into jemalloc at
/// once (see [`thread_main`]), and whether it has.
static FIRST_CALL_AT_START: AtomicBool = AtomicBool::new(false);
static FIRST_CALL_MADE: AtomicBool = AtomicBool::new(false);
/// A writer thread was started in this process image before: a `fork`
/// child inherits it set.
static STARTED_BEFORE: AtomicBool = AtomicBool::new(false);
/// The flusher runs on a thread glibc does not know of (`raw_thread`).
static RAW: AtomicBool = AtomicBool::new(false);
/// Asks that thread to end for a change of credentials (see
/// [`pause_for_credentials`]).
static PAUSE: AtomicBool = AtomicBool::new(false);
/// Bumped to wake the flusher early: it sleeps on this word.
static WAKE: AtomicU32 = AtomicU32::new(0);
/// How long a change of credentials waits for the flusher to end (it may
/// be in the middle of a write).
const PAUSE_WAIT_MS: u64 = 2000;

/// Asks the flusher thread to stop (at its next wake-up).
pub fn stop() {
    STOP.store(true, Relaxed);
}

/// Before a change of the process's credentials (`setuid` and the like,
/// which glibc applies to every thread it knows): ends the flusher if it
/// runs on a thread glibc does not know of, which would keep the old
/// credentials (a root thread in a daemon that gave up root). Whether it
/// was running; if so, [`resume_after_credentials`] starts it again, with
/// the new ones.
pub fn pause_for_credentials() -> bool {
    if !RAW.load(Relaxed) || !raw_thread::runs_here() {
        return false;
    }
    PAUSE.store(true, SeqCst);
    wake();
    raw_thread::wait_for_end(PAUSE_WAIT_MS);
    true
}

/// After the change: the flusher again, on a thread with the credentials
/// the change left (a thread takes its creator's), unless the process is
/// exiting or the old thread has not ended (it was mid-write for longer
/// than `PAUSE_WAIT_MS`; then the periodic writes stop, and the exit
/// profile is written as always).
pub fn resume_after_credentials() {
    if STOP.load(Relaxed) || !raw_thread::wait_for_end(0) {
        return;
    }
    PAUSE.store(false, SeqCst);
    if !raw_thread::spawn(raw_thread_main, true) {
        RAW.store(false, Relaxed);
    }
}

/// Wakes the flusher from its sleep.
fn wake() {
    endpoint::wake();
    WAKE.fetch_add(1, SeqCst);
    // SAFETY: wakes the waiters on a word of this process.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            WAKE.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        )
    };
}

/// Starts the flusher thread (in a `fork` child too: the parent's does
/// not exist there).
pub fn start() {
    recorder::program_read::set_reader(read_on_program_thread);
    STOP.store(false, Relaxed);
    PAUSE.store(false, Relaxed);
    let in_fork_child = STARTED_BEFORE.swap(true, Relaxed);
    if !in_fork_child {
        raw_thread::prepare();
    }
    RAW.store(true, Relaxed);
    if raw_thread::spawn(raw_thread_main, in_fork_child) {
        return;
    }
    // A `pthread`, which may call into the backend. Under jemalloc its
    // first call is made at once, but not in a `fork` child: its handler
    // runs before jemalloc's own child handler, with jemalloc's locks
    // still held, so a call into jemalloc from the new thread would wait
    // on them, and be broken when they are reset. There the first call
    // stays at the first flush.
    RAW.store(false, Relaxed);
    let backend = choice::current().backend;
    let first_call_at_start = !in_fork_child && backend == Backend::Jemalloc;
    FIRST_CALL_AT_START.store(first_call_at_start, Relaxed);
    FIRST_CALL_MADE.store(false, Relaxed);
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
        // glibc allocates the new thread's TLS block (its DTV) here,
        // through the hooks: allocmux's memory, not the program's.
        crate::tls::current().unrecorded(|| {
            libc::pthread_create(&mut tid, &attr, thread_main, core::ptr::null_mut())
        });
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut());
        libc::pthread_attr_destroy(&mut attr);
    }
    // Under jemalloc, the thread's first call into it must come before the
    // program can use up memory (see `thread_main`): wait for it, a few
    // tens of microseconds, boundedly.
    if first_call_at_start {
        for _ in 0..10_000 {
            if FIRST_CALL_MADE.load(Acquire) {
                break;
            }
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
    }
}

/// [`thread_main`] on the thread `raw_thread` starts.
extern "C" fn raw_thread_main(_: *mut c_void) -> c_int {
    thread_main(core::ptr::null_mut());
    0
}

/// The writer thread: samples the timeline at its interval (10 ms, doubling
/// as the buffer fills) and rewrites the profile every `FLUSH_INTERVAL_MS`
/// or so, whichever is due first. It sleeps until an absolute deadline, so
/// the time it spends working does not stretch the intervals.
extern "C" fn thread_main(_: *mut c_void) -> *mut c_void {
    // Its allocator calls (glibc's, on its behalf: the frees at its exit)
    // are not the program's; uncounted, the profiles of identical
    // processes agree whether or not the writer exited before the last.
    tls::current().state.ignore();
    // SAFETY: prctl with a NUL-terminated name.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"allocmux-flush".as_ptr()) };
    // jemalloc sets up a thread's own data (its cache, an arena) at the
    // thread's first call into it, and crashes if there is no memory for
    // them (`tcache_arena_associate` with no arena). So at start-up that
    // call is made now, while `start` waits, not at the first flush, when
    // the program may have used up its memory.
    if FIRST_CALL_AT_START.load(Relaxed) {
        let _ = writer::read_allocator_stats();
        FIRST_CALL_MADE.store(true, Release);
    }
    let (clock_start, has_output) = {
        let w = WRITER.lock();
        (w.process.clock_start, w.has_output)
    };
    let ticks_per_ns = || recorder::read_clocks().ticks_per_ns_since(clock_start);
    let mut server = endpoint::server();
    let start = recorder::monotonic_ns();
    let mut next_flush = start + FLUSH_INTERVAL_MS * 1_000_000;
    // Serving only, without a profile to write: no timeline either, and
    // the periodic wake-ups only check that the program still runs.
    let mut next_sample = if has_output {
        start + allocmux_format::timeline::BASE_INTERVAL_NS
    } else {
        u64::MAX
    };
    let mut last_took = 0;
    let mut next_stats = start;
    let mut last_read_took = 0;
    // The live bytes of the last timeline sample, and those a read for
    // growth waits for (see `GROWTH_QUARTERS`).
    let mut last_live = 0;
    let mut read_again_at = GROWTH_FLOOR;
    loop {
        let due = next_flush
            .min(next_sample)
            .min(otlp::due_ns().unwrap_or(u64::MAX));
        match &mut server {
            // A request can delay a write by at most its time limits
            // (`allocmux_recorder::http`), and one is served per wake-up.
            Some(s) => {
                let due = due.min(s.due_ns().unwrap_or(u64::MAX));
                if !PAUSE.load(SeqCst) {
                    endpoint::wait_and_serve(s, due, ticks_per_ns());
                }
            }
            None => sleep_until(due),
        }
        if STOP.load(Relaxed) || PAUSE.load(SeqCst) {
            break;
        }
        if let Some(s) = &mut server {
            s.finish_due(ticks_per_ns());
            endpoint::note_pending(s);
        }
        // Before taking `WRITER`: a push may wait on the Collector.
        otlp::push_if_due();
        // A `pthread` flusher counts among glibc's threads: once every
        // thread of the program has ended (`main` left through
        // `pthread_exit`, the others returned), glibc's exit waits for
        // this one. Returning lets glibc end the process with status 0, as
        // it does when the program's own last thread ends.
        let t0 = recorder::monotonic_ns();
        if t0 >= next_flush && !RAW.load(Relaxed) && procfs::only_thread_left() {
            break;
        }
        // Before taking `WRITER`: see `writer::read_allocator_stats`. On
        // growth, from the last sample's live bytes (known only under
        // `WRITER`): a read comes at most one sample interval late.
        let may_read = !RAW.load(Relaxed) || raw_thread_may_read_stats();
        let grown = last_live >= read_again_at;
        let stats_due = t0 >= next_stats.max(PROGRAM_READ_NEXT.load(Relaxed));
        let reading = if has_output && may_read && (t0 >= next_flush || grown) && stats_due {
            let r = writer::read_allocator_stats();
            let took = recorder::monotonic_ns().saturating_sub(t0);
            next_stats = t0 + took.min(last_read_took) * STATS_DUTY;
            last_read_took = took;
            if grown {
                read_again_at = last_live.saturating_mul(GROWTH_QUARTERS) / 4;
            }
            r
        } else {
            if has_output && !may_read && grown && stats_due {
                // This thread may not read this allocator: a thread of the
                // program will (`read_on_program_thread`). The bar for the
                // next read rises once its reading is kept (below), not
                // now: a read dropped because it found `WRITER` busy, or
                // not yet made, is asked again at the next sample.
                recorder::program_read::ask();
            }
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
        // This thread's reading, and one a program thread kept since the
        // last loop: the next read for growth waits for a quarter more
        // live bytes than the reading nearest the peak, whoever made it.
        let peak_read = writer::keep_allocator_stats(&mut w, reading);
        read_again_at = read_again_at.max(peak_read.saturating_mul(GROWTH_QUARTERS) / 4);
        let now = recorder::monotonic_ns();
        if now >= next_sample {
            last_live = writer::sample_timeline(&mut w);
            let took = recorder::monotonic_ns().saturating_sub(now);
            let cost = took.min(last_took);
            last_took = took;
            next_sample = now + w.timeline.interval_ns().max(cost * SAMPLE_DUTY);
        }
        if now >= next_flush && has_output {
            writer::write_profile(&mut w, State::Running, false);
            next_flush = recorder::monotonic_ns()
                + (FLUSH_INTERVAL_MS * 1_000_000).max(w.staging.last_write_ns * FLUSH_DUTY);
        } else if now >= next_flush {
            next_flush = now + FLUSH_INTERVAL_MS * 1_000_000;
        }
    }
    if let Some(s) = server {
        endpoint::give_back(s);
    }
    core::ptr::null_mut()
}

/// When the next read on a program thread may be asked at the earliest
/// ([`STATS_DUTY`] after the last one), and how long the last one took.
static PROGRAM_READ_NEXT: AtomicU64 = AtomicU64::new(0);
static PROGRAM_READ_TOOK: AtomicU64 = AtomicU64::new(0);

/// The read of the allocator's statistics that this thread asked of the
/// program's (see `allocmux_recorder::program_read`) on the heap's growth,
/// where it may not make it itself: jemalloc's, and glibc's before the
/// program has a second thread. A program thread runs it inside an
/// allocator hook, after its call returned: the allocator is between calls
/// on that thread, and under glibc no other thread uses the heap. A
/// program that allocates in a signal handler while the same thread is in
/// the allocator is already outside what glibc and jemalloc support, read
/// or no read.
fn read_on_program_thread() {
    // Shim code that holds `WRITER` allocates through the hooks too: no
    // read is made under a lock of the shim's (see
    // `writer::read_allocator_stats`). The next growth asks again.
    if WRITER.held_here() {
        return;
    }
    let t0 = recorder::monotonic_ns();
    let reading = writer::read_allocator_stats();
    let now = recorder::monotonic_ns();
    let took = now.saturating_sub(t0);
    let shorter = took.min(PROGRAM_READ_TOOK.swap(took, Relaxed));
    PROGRAM_READ_NEXT.store(now + shorter * STATS_DUTY, Relaxed);
    // Never a wait for the writer thread inside the program's call: a
    // reading that finds it busy is dropped.
    if let Some(mut w) = WRITER.try_lock()
        && !w.finished
    {
        writer::keep_allocator_stats(&mut w, reading);
    }
}

/// Whether the thread glibc does not know of may read the backend's
/// statistics: mimalloc's always (atomic loads, no TLS); glibc's, read
/// under its arena locks, once the program has a thread of its own (until
/// then its `malloc` takes no lock); jemalloc's never (its control
/// interface needs the thread's jemalloc state, in TLS this thread lacks),
/// nor the next library's (none are read).
fn raw_thread_may_read_stats() -> bool {
    match choice::current().backend {
        Backend::Mimalloc => true,
        Backend::System => !threading::single_threaded(),
        Backend::Jemalloc | Backend::Next => false,
    }
}

/// Sleeps until `CLOCK_MONOTONIC` reaches `deadline_ns`, or [`wake`]
/// (the caller then just works early).
fn sleep_until(deadline_ns: u64) {
    let seen = WAKE.load(SeqCst);
    if !PAUSE.load(SeqCst) {
        raw_thread::wait_on(WAKE.as_ptr(), seen, deadline_ns, false);
    }
}
