//! Tells dependents where this crate's sources are (`links` metadata:
//! their build scripts see `DEP_ALLOCMUX_SHIM_SOURCE_DIR`).
//!
//! The CLI embeds the shim library, and cargo cannot build a cdylib for
//! another package to use, so the CLI's build script builds it from these
//! sources with a cargo of its own. Passing the directory through cargo,
//! rather than a path relative to the CLI, finds them wherever cargo put
//! this crate: in the workspace, or unpacked from a registry.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo");
    println!("cargo::metadata=source_dir={dir}");
    // The directory is all it reports: nothing else needs to rerun it.
    println!("cargo::rerun-if-changed=build.rs");
}
