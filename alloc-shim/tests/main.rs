//! The shim's integration tests, one binary: each file under tests/ is a
//! module of it, linked once, its tests run side by side. Run one file's
//! tests with `cargo test -p allocmux-shim --test integration MODULE::`.

#[macro_use]
mod common;

mod allocator_stats;
mod bad_settings;
mod crash_safety;
mod direct_shims;
mod endpoint;
mod exact_counts;
mod fork_safety;
mod forwarder;
mod long_runs;
mod next_library;
mod processes;
mod real_programs;
mod recorder_memory;
mod sampled_level;
mod secure_execution;
mod semantics;
mod stacks;
mod timeline;
