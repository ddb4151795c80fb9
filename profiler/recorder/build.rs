//! Tells dependents where this crate's sources are (`links` metadata:
//! their build scripts see `DEP_ALLOCMUX_RECORDER_SOURCE_DIR`).
//!
//! The CLI builds the preload shim with a cargo of its own, outside the
//! build that compiles the CLI. When the CLI and the shim come from a
//! registry (or from `cargo package`'s unpublished crates), that cargo
//! builds the shim against this very copy of the crate, so that the shim
//! writes the profile format the CLI reads, whatever versions are
//! published.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo");
    println!("cargo::metadata=source_dir={dir}");
    // The directory is all it reports: nothing else needs to rerun it.
    println!("cargo::rerun-if-changed=build.rs");
}
