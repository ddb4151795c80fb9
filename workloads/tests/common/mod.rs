//! Helpers shared by the workloads' integration tests: where cargo built
//! this package's binaries. The rest comes from `allocmux-testkit`.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};

/// The directory cargo built this package's binaries into (the CLI's
/// `allocmux` is there too when the whole workspace is built).
pub fn bin_dir() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_allocmux-workload"))
        .parent()
        .expect("binaries live in a directory")
}

/// One of this package's binaries.
pub fn bin(name: &str) -> PathBuf {
    bin_dir().join(name)
}
