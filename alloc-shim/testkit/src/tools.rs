//! Programs a test needs from the system.

use std::path::{Path, PathBuf};

/// Finds a program needed by a test. If it is missing: on CI (`CI` set)
/// the test fails naming the package to install; elsewhere it prints
/// `skipping: <program> not installed` and the caller returns.
pub fn require(program: &str, package: &str) -> Option<PathBuf> {
    let found = if program.contains('/') {
        Some(PathBuf::from(program)).filter(|p| is_executable(p))
    } else {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(program))
                .find(|p| is_executable(p))
        })
    };
    if found.is_none() {
        if std::env::var_os("CI").is_some() {
            panic!(
                "{program} is not installed: install the `{package}` package (CI must run every test)"
            );
        }
        eprintln!("skipping: {program} not installed");
    }
    found
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
