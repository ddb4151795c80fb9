//! Every `match` on the allocator (`Backend`, the shim's `Allocator`)
//! lists each variant: none ends in a catch-all (`_ =>`) after arms that
//! name backends. With a catch-all, a backend added to the enum would
//! compile and silently run, or be read, as whatever the catch-all does
//! (glibc, as a rule); without one, it does not compile until every match
//! says what it does.
//!
//! Read from the sources: an arm at a match's own indentation that starts
//! with `_` (or `(_,`), in a match whose other arms name a backend.

use std::fs;
use std::path::{Path, PathBuf};

/// The enums whose matches must be exhaustive, as the arms name them.
const BACKEND_PATHS: [&str; 2] = ["Backend::", "Allocator::"];

fn rust_sources(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() && name != "target" && !name.starts_with('.') {
            rust_sources(&path, into);
        } else if name.ends_with(".rs") {
            into.push(path);
        }
    }
}

/// The catch-all arms (1-based line numbers) of matches on a backend in
/// `text`.
fn catch_alls(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let arm = line.trim_start();
        if !(arm.starts_with("_ =>") || arm.starts_with("(_,")) {
            continue;
        }
        let depth = indent(line);
        // The arms above it, up to the line that opens the match.
        let names_a_backend = lines[..i]
            .iter()
            .rev()
            .take_while(|l| l.trim().is_empty() || indent(l) >= depth)
            .filter(|l| indent(l) == depth)
            .any(|l| {
                let l = l.trim_start().trim_start_matches('(');
                BACKEND_PATHS.iter().any(|p| l.starts_with(p))
            });
        if names_a_backend {
            found.push(i + 1);
        }
    }
    found
}

#[test]
fn no_match_on_the_backend_falls_through() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for crate_dir in ["alloc-shim", "profiler", "flamegraph", "workloads"] {
        rust_sources(&root.join(crate_dir), &mut files);
    }
    assert!(files.len() > 50, "{} sources found", files.len());
    let mut offenders = Vec::new();
    for file in &files {
        for line in catch_alls(&fs::read_to_string(file).unwrap()) {
            offenders.push(format!(
                "{}:{line}",
                file.strip_prefix(root).unwrap().display()
            ));
        }
    }
    assert!(
        offenders.is_empty(),
        "matches on the backend with a catch-all arm (list every backend instead):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn a_catch_all_after_backend_arms_is_found() {
    let text = "fn f(b: Backend) -> u8 {\n    match b {\n        Backend::Jemalloc => 2,\n        \
                _ => 1,\n    }\n}\n";
    assert_eq!(catch_alls(text), [4]);
    let pairs = "match (b, m) {\n    (Allocator::Jemalloc, Off) => 1,\n    (_, Off) => 2,\n}\n";
    assert_eq!(catch_alls(pairs), [3]);
    // A catch-all in a match on something else, nested or not, is no concern.
    let other = "match b {\n    Backend::System => match n {\n        1 => 1,\n        _ => 0,\n    },\n    \
                 Backend::Jemalloc => 2,\n}\n";
    assert!(catch_alls(other).is_empty());
}
