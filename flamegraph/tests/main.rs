//! The command line's integration tests, one binary: each file under tests/
//! is a module of it (linked once, its tests run side by side), but for
//! those that install a global allocator of their own, which stay binaries
//! of their own (see Cargo.toml). Run one file's tests with `cargo test -p
//! allocmux-cli --test integration MODULE::`.

#[macro_use]
mod common;

mod allocator_library;
mod backend_matches;
mod bad_input;
mod cli;
mod compare;
mod demo;
mod docs_commands;
mod figures;
mod fuzz_report;
mod html_report;
mod install;
mod leaks;
mod live_service;
mod otlp_collector;
mod preload;
mod stack_languages;
mod stacks;
mod what_to_change;
