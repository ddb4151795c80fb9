//! Tells dependents where this crate's sources are (`links` metadata:
//! their build scripts see `DEP_ALLOCMUX_SHIM_SOURCE_DIR`), and links the
//! shared library with jemalloc's fork handlers wrapped.
//!
//! The CLI embeds the shim library, and cargo cannot build a cdylib for
//! another package to use, so the CLI's build script builds it from these
//! sources with a cargo of its own. Passing the directory through cargo,
//! rather than a path relative to the CLI, finds them wherever cargo put
//! this crate: in the workspace, or unpacked from a registry.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo");
    println!("cargo::metadata=source_dir={dir}");
    // jemalloc's `pthread_atfork` registration goes to the shim, which
    // runs its handlers only when jemalloc is the backend (see
    // `backend::jemalloc::fork`). Only the shared library: the unit tests
    // and the rlib keep jemalloc's own registration.
    if matches!(
        std::env::var("CARGO_CFG_TARGET_ARCH").as_deref(),
        Ok("x86_64" | "aarch64")
    ) {
        println!("cargo::rustc-link-arg-cdylib=-Wl,--wrap=pthread_atfork");
    }
    // The unit tests check the shim's mirror of a mimalloc struct against
    // mimalloc's own header (see `backend::mimalloc::fork`).
    if let Ok(include) = std::env::var("DEP_MIMALLOC_INCLUDE_DIR") {
        println!("cargo::rustc-env=ALLOCMUX_MIMALLOC_INCLUDE={include}");
    }
    println!("cargo::rerun-if-env-changed=DEP_MIMALLOC_INCLUDE_DIR");
    // Nothing else needs to rerun it.
    println!("cargo::rerun-if-changed=build.rs");
}
