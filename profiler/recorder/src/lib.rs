//! The recording core of allocmux, shared by its `LD_PRELOAD` shim and by
//! the `allocmux` crate's `#[global_allocator]` wrapper: with the shim,
//! where allocmux's `unsafe` code is (but for the CLI's process-control
//! calls and one slice read in the workloads).
//!
//! Its API is for those two, with no stability promise of its own: they
//! depend on it pinned with `=`. Rust programs use `allocmux`, which
//! re-exports [`Counting`], [`Switchable`], [`readout::snapshot`] and
//! [`readout::measure`].
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
//! ([`allocator_stats::read`]) are read here too.
//!
//! # The path of one call
//!
//! A hooked call is a [`Body`] (what the function does, written once: the
//! shim's `posix.rs`, this crate's `wrapper.rs`) run under a [`Scope`]
//! (where it records). Which functions it passes through depends on the
//! stack mode and the recording level:
//!
//! | when | path |
//! |---|---|
//! | stacks off | [`enter`] (or [`enter_fs`] in the shim): the countdown's `dec`, then `body.run(&Owned)`; when it runs out, `thread::scope::slow` picks `Sampled`, `Exact`, `Shared` or `Unrecorded` |
//! | exact mode, or the exact prefix | [`stacks::enter_stacks`]: every block goes to `stacks::record::stacked` (the call timed, its stack captured, `State::enter_call`), the rest to [`enter`] |
//! | sample mode (shim) | [`stacks::enter_sampled`]: the byte countdown; an unsampled call goes through `unsampled` and the `SizeChecked`/`ReleaseChecked` scopes (which catch a sampled block's free) to [`enter`]; a sampled one to `stacked` |
//! | sampled level (shim) | [`stacks::enter_sampled_level`]: the byte countdown alone, a sampled call to `sampled_level_stacked`, nothing else counted |
//!
//! `Counting::alloc` takes the first two rows (`wrapper::record`); the
//! shim's hook tables (`alloc-shim/src/hooks.rs`) pick one row per process.
//! Files: `thread/` is the per-thread state (`mod.rs`), the scopes
//! (`scope.rs`), its `%fs`-relative form (`fs.rs`) and the registry
//! (`registry.rs`); `stacks/` is the sampling policy (`policy.rs`), the
//! sampled hook chain (`sampled.rs`), recording a call (`record.rs`), the
//! stack table (`table.rs`) and its snapshot (`snapshot.rs`).

// Every `match` names its variants: a backend (or any other variant) added
// to an enum fails to compile where it is not handled, rather than falling
// into a catch-all.
#![deny(clippy::wildcard_enum_match_arm)]

pub mod allocator_stats;
mod block_map;
mod clock;
mod counters;
#[cfg(feature = "from-env")]
pub mod from_env;
pub mod http;
mod last_stack;
pub mod loader;
mod lock;
mod marks;
pub mod otlp;
pub mod pprof;
pub mod process;
pub mod profile_file;
pub mod program_read;
mod protobuf;
mod random;
pub mod readout;
pub mod stacks;
mod switchable;
mod tables;
#[cfg(test)]
mod test_alloc;
mod thread;
pub mod unwind;
pub mod watch;
mod wrapper;

pub use allocmux_format::Backend;
pub use clock::{ClockPair, Tsc, clock_ns, monotonic_ns, read_clocks};
pub use counters::Counters;
pub use lock::{AtFork, SpinGuard, SpinLock};
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
pub use wrapper::{
    clock_start, inner_allocator_name, is_counting, own_thread, start_stacks, ticks_to_ns,
    with_stack_thread, with_thread,
};
