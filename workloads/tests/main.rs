//! The workloads' integration tests, one binary: each file under tests/ is
//! a module of it (linked once, its tests run side by side), but for those
//! that install a global allocator of their own, which stay binaries of
//! their own (see Cargo.toml). Run one file's tests with `cargo test -p
//! allocmux-workloads --test integration MODULE::`.

#[macro_use]
mod common;

mod bench_script;
mod smoke;
mod stress;
