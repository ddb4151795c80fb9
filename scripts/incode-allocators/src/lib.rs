//! The bundled workloads built with glibc, jemalloc and mimalloc linked in
//! (`#[global_allocator]`, the crates and versions the shim links), so
//! `scripts/shim_overhead.py` can measure the shim against the allocator
//! used the way a Rust program uses it, besides against Debian's
//! preloaded libraries. Binaries only: `workload-glibc`, `workload-jemalloc`,
//! `workload-mimalloc`, each taking a workload's name and size, and
//! `workload-switchable`, allocmux's `Switchable`, which is any of the three
//! as `ALLOCMUX_ALLOCATOR` says.
