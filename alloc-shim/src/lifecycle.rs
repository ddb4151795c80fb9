//! The process life cycle seen from the shim: start-up (from
//! `.init_array`), `fork`, `exec` and `_exit`, and the normal exit (from
//! `.fini_array` and a late exit handler), each writing or restarting the
//! profile as it must.

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicBool, Ordering::Relaxed};

use allocmux_format::Backend;
use allocmux_format::profile::State;
use allocmux_recorder::{self as recorder, AtFork, read_clocks};

use crate::writer::{self, WRITER};
use crate::{backend, choice, config, endpoint, fd, flusher, otlp, procfs, threading, tls};

/// Set by the first start-up of this process image.
static STARTED: AtomicBool = AtomicBool::new(false);

/// The shim's constructor and destructor, in `.init_array` and
/// `.fini_array` (not in a unit-test binary, which has no shim to start).
#[cfg(not(test))]
mod registration {
    use core::ffi::{c_char, c_int};

    /// glibc calls `.init_array` functions with argc, argv and envp.
    extern "C" fn init(_argc: c_int, _argv: *const *const c_char, envp: *const *const c_char) {
        super::init(envp);
    }

    extern "C" fn fini() {
        super::finish();
    }

    #[used]
    #[unsafe(link_section = ".init_array")]
    static INIT: extern "C" fn(c_int, *const *const c_char, *const *const c_char) = init;

    #[used]
    #[unsafe(link_section = ".fini_array")]
    static FINI: extern "C" fn() = fini;
}

/// Start-up, from `.init_array` after libc is initialised.
pub fn init(envp: *const *const c_char) {
    let choice = choice::current();
    if !choice.recorded {
        // Forwarding only: no profile, no thread, no endpoint; but
        // jemalloc's and mimalloc's locks are still taken around `fork`,
        // as with recording (see `fork_prepare`).
        if has_fork_locks(choice.backend) && !STARTED.swap(true, Relaxed) {
            threading::init();
            register_fork_handlers();
        }
        return;
    }
    if STARTED.swap(true, Relaxed) {
        return;
    }
    let cfg = config::read(envp);
    threading::init();
    recorder::prepare_thread_key();
    {
        let mut w = WRITER.lock();
        w.process.clock_start = read_clocks();
        w.process.stderr_id = fd::fd_identity(2);
        w.process.exe_len = procfs::read_link(c"/proc/self/exe", &mut w.process.exe);
        let mut cmdline = [0u8; 4096];
        let n = procfs::read_file(c"/proc/self/cmdline", &mut cmdline);
        w.process.cmdline[..n].copy_from_slice(&cmdline[..n]);
        w.process.cmdline_len = n;
        if let Some(t) = cfg.output {
            w.file.template[..t.len()].copy_from_slice(t);
            w.file.template_len = t.len();
        }
        if let Some(spec) = cfg.http {
            w.process.http_len = endpoint::open(spec, &mut w.process.http);
        }
        writer::start_process(&mut w);
    }
    if let Some(o) = &cfg.otlp {
        otlp::configure(o);
    }
    register_fork_handlers();
    if WRITER.lock().has_output || endpoint::is_open() || otlp::is_on() {
        flusher::start();
    }
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
/// that write comes after every library's destructors; it is skipped when
/// nothing was counted in between (most programs: a profile of many stacks
/// takes milliseconds to write). The summary line waits for it.
pub fn finish() {
    if !choice::recorded() || !STARTED.load(Relaxed) {
        return;
    }
    flusher::stop();
    // The last interval, before anything else: the exit profile may take
    // a while to write, and a Collector waits for nobody.
    otlp::push_at_exit();
    let last_word = !LAST_WORD.swap(true, Relaxed)
        // SAFETY: a plain function of this library that never unwinds; no
        // DSO handle, so no `dlclose` runs it early. Registering may
        // allocate (a new block of handlers) through the hooks: not under
        // any lock of the shim's.
        && unsafe { __cxa_atexit(last_word, core::ptr::null_mut(), core::ptr::null_mut()) } == 0;
    // Before taking `WRITER` for the write: see
    // `writer::read_allocator_stats`. Only for a profile: the summary line
    // does not show them, and glibc's `mallinfo2` walks every free chunk.
    let has_output = WRITER.lock().has_output;
    let reading = if has_output {
        writer::read_allocator_stats()
    } else {
        None
    };
    let mut w = WRITER.lock();
    if w.has_output {
        writer::keep_allocator_stats(&mut w, reading);
        writer::write_profile(&mut w, State::Exited, true);
    } else if !w.finished && !last_word {
        writer::summary(&mut w);
    }
}

/// Set once the late exit handler is registered (once per process image).
static LAST_WORD: AtomicBool = AtomicBool::new(false);

unsafe extern "C" {
    fn __cxa_atexit(f: extern "C" fn(*mut c_void), arg: *mut c_void, dso: *mut c_void) -> c_int;
}

/// The exit handler `finish` registers: the exit profile (or summary)
/// again, now with what other libraries' destructors did, if they
/// allocated or freed anything. The allocator's statistics are those read
/// in `finish`.
extern "C" fn last_word(_: *mut c_void) {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let mut w = WRITER.lock();
    if w.process.pid != pid {
        return; // a forked child that exits inherited the registration
    }
    if w.has_output {
        if w.finished && !writer::unchanged_since_exit_profile(&w) {
            w.finished = false;
            writer::write_profile(&mut w, State::Exited, true);
        }
    } else if !w.finished {
        writer::summary(&mut w);
    }
}

/// How long `_exit` and `exec` wait for a write of the writer thread's to
/// end before the image leaves without its exit profile. A write takes
/// milliseconds (tens with many stacks), but its thread may be preempted
/// for a while on a loaded machine; the wait is bounded all the same,
/// because that write may wait for a lock this thread holds (a signal
/// handler here interrupted the allocator or the stack table).
const LEAVING_WAIT_NS: u64 = 2_000_000_000;

/// `WRITER` for the exit profile of an image that is leaving (`_exit`,
/// `exec`): at once if it is free, after the write in progress on another
/// thread (within [`LEAVING_WAIT_NS`]), never if this thread holds it (a
/// signal handler that interrupted a write here).
fn writer_for_leaving() -> Option<recorder::SpinGuard<'static, writer::Writer>> {
    let deadline = recorder::monotonic_ns().saturating_add(LEAVING_WAIT_NS);
    loop {
        if let Some(w) = WRITER.try_lock() {
            return Some(w);
        }
        if WRITER.held_here() || recorder::monotonic_ns() >= deadline {
            return None;
        }
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
}

/// From the `_exit` hook: the exit profile, for processes that leave
/// without exit handlers (dash, forked children). Skipped in a `vfork` child,
/// which shares the parent's memory (its pid is not the one recorded: vfork
/// runs no atfork handler), and if the writer cannot be had (see
/// [`writer_for_leaving`]). The allocator's statistics are the last
/// reading: `_exit` may come from a signal handler that interrupted the
/// allocator.
pub fn before_exit() {
    if !choice::recorded() || !STARTED.load(Relaxed) {
        return;
    }
    if let Some(mut w) = writer_for_leaving() {
        // SAFETY: getpid has no preconditions.
        if w.process.pid == unsafe { libc::getpid() } as u32 {
            flusher::stop();
            writer::write_profile(&mut w, State::Exited, true);
        }
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
pub fn before_exec(target: &[u8]) -> bool {
    if !choice::recorded() || !STARTED.load(Relaxed) {
        return false;
    }
    let Some(mut w) = writer_for_leaving() else {
        return false;
    };
    // SAFETY: getpid has no preconditions.
    if w.process.pid != unsafe { libc::getpid() } as u32 || w.finished || !w.has_output {
        return false;
    }
    // Named in the profile, so that a program the shim cannot reach
    // (static, setuid) is named rather than lost.
    let len = if target.len() <= w.process.exec.len() {
        target.len()
    } else {
        0
    };
    w.process.exec[..len].copy_from_slice(&target[..len]);
    w.process.exec_len = len;
    writer::write_profile(&mut w, State::Exited, true);
    w.finished
}

/// The `exec` failed and this image goes on: the profile is a running
/// one again, and the writer thread (which waits while it is finished)
/// goes on rewriting it.
pub fn after_failed_exec(written: bool) {
    if written {
        let mut w = WRITER.lock();
        w.finished = false;
        w.process.exec_len = 0;
        writer::write_profile(&mut w, State::Running, false);
    }
}

/// Registers the `fork` handlers below (once per process image).
fn register_fork_handlers() {
    // SAFETY: the handlers are allocation-free functions of this library.
    unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) };
}

/// `fork` handlers. None takes a lock of the shim's: a lock held across
/// `fork` is one the program's other threads can wait on while they hold
/// the program's own locks, which the forking thread waits for inside
/// `fork` (stdio's, glibc's allocator's), and one a signal handler's `fork`
/// may find held by the very frame it interrupted. The child sorts out
/// what the fork left instead (see `allocmux_recorder::SpinLock`).
///
/// The backend's own locks are taken, as glibc takes its allocator's:
/// jemalloc's through its own handlers, mimalloc's (it has none) by the
/// shim's, both only when [`backend_locks`] says so. glibc's stdio list
/// lock comes first. glibc's `fork` takes it itself, but only after the
/// prepare handlers, so a `fork` holding the allocator's locks would wait
/// for it; a thread in `fflush(NULL)` holds it and waits for a stream's
/// lock, held by a thread in `getline` that waits inside `malloc` for an
/// allocator lock (glibc bug 19431's cycle, in which jemalloc alone hangs).
/// Taken first, the `getline` thread gets its allocator lock, and glibc's
/// own take of the list lock is a recursive one by the same thread. glibc
/// releases it once after the `fork` in the parent (the parent handler
/// releases the other), and resets it in the child.
extern "C" fn fork_prepare() {
    if let Some(b) = backend_locks() {
        // SAFETY: glibc's recursive stdio list lock, released in
        // `fork_parent` (and reset by glibc in the child).
        unsafe { _IO_list_lock() };
        match b {
            Backend::Jemalloc => backend::jemalloc_fork::prepare(),
            Backend::Mimalloc => backend::mimalloc_fork::prepare(),
            Backend::System | Backend::Next => {}
        }
    }
}

extern "C" fn fork_parent() {
    if let Some(b) = backend_locks() {
        match b {
            Backend::Jemalloc => backend::jemalloc_fork::parent(),
            Backend::Mimalloc => backend::mimalloc_fork::parent(),
            Backend::System | Backend::Next => {}
        }
        // SAFETY: taken in `fork_prepare` by this thread.
        unsafe { _IO_list_unlock() };
    }
}

unsafe extern "C" {
    fn _IO_list_lock();
    fn _IO_list_unlock();
}

/// The backend whose locks this `fork` takes: jemalloc or mimalloc (glibc's
/// `fork` handles its own allocator), when another thread may hold one of
/// them. In a process that has never had a second thread none can, so, as
/// glibc does for its own allocator, nothing is taken: a signal handler's
/// `fork` then works as under glibc, where jemalloc alone hangs. The
/// answer is the same in all three handlers of one `fork` (a
/// single-threaded process cannot become multi-threaded while its one
/// thread forks, and the child's flag is the parent's), which matters
/// because glibc runs the handlers of concurrent forks concurrently.
fn backend_locks() -> Option<Backend> {
    let b = choice::current().backend;
    (has_fork_locks(b) && !threading::single_threaded()).then_some(b)
}

/// Whether the shim takes `b`'s locks around `fork` (glibc's `fork` takes
/// its own allocator's; a preloaded library replacing glibc's registers
/// its own `pthread_atfork` handlers, as tcmalloc does, or is not
/// fork-safe without the shim either). A match, so that a new backend
/// must answer.
const fn has_fork_locks(b: Backend) -> bool {
    match b {
        Backend::Jemalloc | Backend::Mimalloc => true,
        Backend::System | Backend::Next => false,
    }
}

extern "C" fn fork_child() {
    if let Some(b) = backend_locks() {
        match b {
            Backend::Jemalloc => backend::jemalloc_fork::child(),
            Backend::Mimalloc => backend::mimalloc_fork::child(),
            Backend::System | Backend::Next => {}
        }
    }
    if !choice::recorded() {
        return;
    }
    recorder::stacks::after_fork_child();
    recorder::after_fork_child(&tls::current().state);
    endpoint::after_fork_child();
    otlp::after_fork_child();
    // SAFETY: this is the child of a fork, still with one thread.
    match unsafe { WRITER.after_fork_in_child() } {
        // A write this thread's signal handler interrupted: the child
        // writes no profile of its own (its writer keeps the parent's pid,
        // which every write checks).
        AtFork::HeldHere => return,
        // SAFETY: the child has one thread, and the lock is free.
        AtFork::Orphaned => writer::rebuild_after_fork(unsafe { &mut *WRITER.as_ptr() }),
        AtFork::Free => {}
    }
    let has_output = {
        let mut w = WRITER.lock();
        w.process.clock_start = read_clocks();
        w.process.http_len = 0; // see `endpoint`: a child serves nothing
        writer::start_process(&mut w);
        w.has_output
    };
    // The parent's flusher thread does not exist here.
    if has_output || otlp::is_on() {
        flusher::start();
    }
}
