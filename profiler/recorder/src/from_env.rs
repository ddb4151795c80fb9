//! A program whose global allocator is `Counting` records itself, as the
//! shim would, when its environment asks the shim's way: `ALLOCMUX_OUTPUT`
//! names the profile, `ALLOCMUX_RECORD` is not `off`, and no shim is
//! preloaded to answer. That is how the command line records a program
//! that switches its allocator in code (`Counting<Switchable>`): a
//! preloaded shim would see none of its allocations, which never reach
//! `malloc` under jemalloc or mimalloc.
//!
//! A constructor (`.init_array`, before `main`) checks and starts, and
//! writes the profile marked running, as the shim does at start (so a
//! program killed before it exits still leaves its counts so far); an
//! `atexit` handler writes it again, marked exited. `ALLOCMUX_STACKS`,
//! `ALLOCMUX_SAMPLE_BYTES`, `ALLOCMUX_EXACT_FIRST` and
//! `ALLOCMUX_TIME_SAMPLE` are read with the shim's defaults (no stacks
//! unless asked). What only the shim does is not done: the sampled level
//! (every call is counted, as `exact`), the live endpoint
//! (`ALLOCMUX_HTTP`, which a `Profiler` serves on request), the memory
//! timeline, and a profile for `_exit` or a fatal signal.
//!
//! A `Profiler` the program builds takes the recording over
//! ([`hand_over`]): it writes its own file, and this one writes no more.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use allocmux_format::profile::{StackMode, State};
use allocmux_format::settings::{self as env, Level, Reader, Settings};

use crate::profile_file;

/// Whether this module records (and so writes at exit).
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// `ALLOCMUX_OUTPUT`: expanded at each write, so that a child forked
/// without `exec` (which inherits the `atexit` handler) writes its own
/// file, as the shim's children do.
static TEMPLATE: OnceLock<Vec<u8>> = OnceLock::new();

/// The profile's path for the calling process (its allocation is the
/// recorder's own, with no stack).
fn path() -> Option<PathBuf> {
    let t = TEMPLATE.get()?;
    Some(crate::with_stack_thread(|st| {
        st.as_recorder(|| profile_file::expand_pid(t, std::process::id()))
    }))
}

// SAFETY: `.init_array` holds functions the loader calls once, with no
// arguments that matter, before `main`; `start` is one, and needs nothing
// that is not ready by then (the environment, the allocator, std's I/O).
#[used]
#[unsafe(link_section = ".init_array")]
static START: extern "C" fn() = start;

/// The constructor: one `getenv` and nothing else unless `ALLOCMUX_OUTPUT`
/// is set.
extern "C" fn start() {
    let Some(template) = crate::switchable::getenv(env::OUTPUT).filter(|v| !v.is_empty()) else {
        return;
    };
    let settings = Settings::from_env(Reader::Shim, crate::switchable::getenv);
    if settings.level == Level::Off {
        return;
    }
    // An allocation through the global allocator: if that is a `Counting`,
    // it has registered by now.
    drop(std::hint::black_box(Box::new(0u64)));
    if !crate::is_counting() || profile_file::shim_preloaded() {
        return; // nothing here counts, or the shim writes the file
    }
    for problem in settings.problems() {
        eprintln!("allocmux: {problem}");
    }
    TEMPLATE.get_or_init(|| template.to_vec());
    crate::set_time_sample_mean(settings.time_sample_mean);
    // Last, so that nothing above is recorded as the program's.
    if settings.stacks != StackMode::Off {
        crate::start_stacks(settings.stacks, settings.exact_first);
    }
    ACTIVE.store(true, SeqCst);
    if let Some(path) = path()
        && let Err(e) = profile_file::write(&path, State::Running, "")
    {
        eprintln!("allocmux: {e}");
    }
    // SAFETY: `finish` is an `extern "C" fn()` that lives as long as the
    // process; registering it may allocate (glibc's, never ours).
    unsafe { libc::atexit(finish) };
}

/// At exit: the final profile, unless a `Profiler` took over.
extern "C" fn finish() {
    if !ACTIVE.swap(false, SeqCst) {
        return;
    }
    if let Some(path) = path()
        && let Err(e) = profile_file::write(&path, State::Exited, "")
    {
        eprintln!("allocmux: {e}");
    }
}

/// Stops this module's recording for a `Profiler` the program builds,
/// which writes the profile from then on. Whether it was recording.
pub fn hand_over() -> bool {
    ACTIVE.swap(false, SeqCst)
}
