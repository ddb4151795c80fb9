//! Internal to allocmux's own preload shim and command line, with no
//! stability promise: Rust programs use the items at the crate root
//! ([`Counting`], [`Switchable`], [`Backend`](crate::Backend), ...).
//!
//! The recording core: the only module of this crate with `unsafe` code.
//!
//! It runs inside `malloc` of other people's programs (through the shim) and
//! inside a Rust program's global allocator, so nothing here allocates, takes
//! a lock that can allocate, formats on the hot path, or panics. The design:
//!
//! - every thread owns a [`ThreadState`] (in initial-exec TLS in the shim),
//!   whose counters only that thread writes, with plain relaxed loads and
//!   stores: no shared atomic read-modify-write on the hot path;
//! - threads are linked into a registry under a spin lock that never
//!   allocates; readers (the periodic writer, a snapshot) sum the registry,
//!   and an exiting thread folds its counts into the shared totals;
//! - a per-thread countdown decides, with a geometric distribution, which
//!   calls are timed with the TSC, so the time estimate is unbiased while
//!   most calls pay no clock read;
//! - live bytes are tracked per thread and published to a global live/peak
//!   pair only when the thread drifts by more than [`PUBLISH_BYTES`].
//!
//! [`Counting`] (the Rust `#[global_allocator]` wrapper) runs on the same
//! machinery from a `thread_local!` state; [`Switchable`] is the allocator
//! chosen at start-up. The allocators' own statistics
//! ([`AllocatorStats`](crate::AllocatorStats)) are read here too.

mod allocator_stats;
mod block_map;
mod clock;
mod counters;
pub mod direct;
pub mod env;
pub mod http;
mod last_stack;
pub mod loader;
mod lock;
pub mod pprof;
pub mod process;
mod random;
pub mod stacks;
mod switchable;
mod tables;
#[cfg(test)]
mod test_alloc;
mod thread;
pub mod unwind;
pub mod watch;
mod wrapper;

pub use crate::Backend;
pub(crate) use allocator_stats::{read_glibc_stats, read_jemalloc_stats, read_mimalloc_stats};
pub use clock::{ClockPair, Tsc, clock_ns, monotonic_ns};
pub use counters::Counters;
pub use lock::{AtFork, SpinLock};
pub use switchable::Switchable;
pub use thread::{
    Body, DEFAULT_TIME_SAMPLE_MEAN, EXACT_TIMING_BYTES, MAX_SAMPLED_TICKS, OwnState, PUBLISH_BYTES,
    Paused, Scope, ThreadState, after_fork_child, enter, live_bytes, peak_live_bytes,
    prepare_thread_key, retire_thread, set_time_sample_mean, snapshot, threads_seen,
    time_sample_mean,
};
#[cfg(target_arch = "x86_64")]
pub use thread::{FsState, TlsBlock, enter_fs};
pub use wrapper::Counting;
pub(crate) use wrapper::{
    clock_start, inner_allocator_name, is_counting, own_thread, start_stacks, ticks_to_ns,
    with_stack_thread, with_thread,
};
