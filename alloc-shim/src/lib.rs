//! The allocmux preload shim: a complete malloc replacement for any
//! dynamically linked Linux program, which records every call and forwards
//! it to glibc, jemalloc or mimalloc (`ALLOCMUX_ALLOCATOR`).
//!
//! Layers, as in mimalloc: `exports` (the C names only, jumping through the
//! `hooks` table of the chosen backend), `posix` (the C semantics, once for
//! all backends), `backend` (forwarding), with the recording core from the
//! `allocmux-recorder` crate. Around them: `choice` (which backend, at the first
//! call), `config` (the environment), `lifecycle` and `exec` (start-up,
//! `fork`, `exec`, exit), `children` (programs started by `vfork` or
//! `posix_spawn` that the shim cannot reach), `writer` (the process's record and the profile
//! written from it), `output` (the profile file), `flusher` (the periodic
//! timeline samples and profile rewrites), `endpoint` (the live
//! `/debug/pprof` socket the flusher serves), `otlp` (the OTLP pushes the
//! flusher makes to an OpenTelemetry Collector), `raw_thread` (the flusher's
//! thread under glibc's allocator, which glibc does not count),
//! `threading` (whether the program is single-threaded), `procfs`, `fd`
//! and `fmt` (allocation-free helpers), `tls` (the per-thread state),
//! `heap` (the shim's own Rust heap, with its emergency reserve) and
//! `page_blocks` (the writer's blocks, mappings of their own), and
//! `credentials` (`setuid` and the like, which restart that thread).
//!
//! The README lists the environment variables; `docs/guarantees.md` says
//! what the shim promises inside other people's programs,
//! `docs/c-semantics.md` how each function behaves under every backend, and
//! `docs/architecture.md` how the modules fit together.

// Without the `library` feature the crate is empty (see Cargo.toml).
#![cfg(feature = "library")]
// The unit-test binary does not export the C symbols, so they look unused.
#![cfg_attr(test, allow(dead_code))]
// Every `match` names its variants: a backend (or any other variant) added
// to an enum fails to compile where it is not handled, rather than falling
// into a catch-all.
#![deny(clippy::wildcard_enum_match_arm)]

mod backend;
mod children;
mod choice;
mod config;
mod credentials;
mod endpoint;
mod exec;
mod exports;
mod fd;
mod flusher;
mod fmt;
mod heap;
mod hooks;
mod lifecycle;
mod otlp;
mod output;
mod page_blocks;
mod posix;
mod procfs;
mod raw_thread;
mod threading;
mod tls;
mod writer;

#[cfg(not(test))]
#[global_allocator]
static OWN_HEAP: heap::OwnHeap = heap::OwnHeap;
