//! The profiles a run left, and summaries of them for messages.

use std::path::Path;

use allocmux_format::Func;
use allocmux_format::profile::ProcessProfile;

/// Parses every file in `dir` as a profile of exactly one process, sorted
/// by file name. A leftover temporary file or an unreadable profile fails
/// the test.
pub fn read_profiles(dir: &Path) -> Vec<(String, ProcessProfile)> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .map(|e| {
            e.expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            assert!(
                !is_temporary(&name),
                "the shim left a temporary file {name} in {}",
                dir.display()
            );
            let p = read_profile(&dir.join(&name));
            (name, p)
        })
        .collect()
}

/// Whether a file name is one of the shim's temporary names (`PATH.tmp`,
/// `PATH.tmp1`, `PATH.tmp2`, ...), which a rename must have replaced.
pub fn is_temporary(name: &str) -> bool {
    name.rsplit_once(".tmp")
        .is_some_and(|(_, n)| n.bytes().all(|b| b.is_ascii_digit()))
}

/// Parses one profile file holding exactly one process.
pub fn read_profile(path: &Path) -> ProcessProfile {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading the profile {}: {e}", path.display()));
    let mut procs = allocmux_format::profile::parse(&text).unwrap_or_else(|e| {
        panic!(
            "the profile {} does not parse: {e}\n--- content ---\n{text}",
            path.display()
        )
    });
    assert_eq!(
        procs.len(),
        1,
        "the profile {} should hold one process:\n{text}",
        path.display()
    );
    procs.pop().unwrap()
}

/// One line per profile file (name and summary), for assertion messages.
pub fn listing(files: &[(String, ProcessProfile)]) -> String {
    files
        .iter()
        .map(|(f, p)| format!("  {f}: {}", summary(p)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A one-line summary of a profile, for messages.
pub fn summary(p: &ProcessProfile) -> String {
    let calls: Vec<String> = Func::ALL
        .iter()
        .filter(|&&f| p.totals.calls_of(f) != 0)
        .map(|&f| format!("{} {}", f.name(), p.totals.calls_of(f)))
        .collect();
    format!(
        "pid {} ppid {} argv {:?} allocator {} state {:?} threads {} calls [{}] requested {} allocated {} freed {}",
        p.pid,
        p.ppid,
        p.argv,
        p.allocator,
        p.state,
        p.threads,
        calls.join(", "),
        p.totals.bytes_requested,
        p.totals.bytes_allocated,
        p.totals.bytes_freed
    )
}
