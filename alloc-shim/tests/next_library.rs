//! The `next` backend: the allocator library preloaded after the shim
//! (`LD_PRELOAD="SHIM LIBRARY"`, `ALLOCMUX_ALLOCATOR=next`) serves the
//! program's blocks, while the shim records them as it does under its own
//! backends (exact counts, the C rules and `fork` under tcmalloc are in
//! exact_counts.rs, semantics.rs and processes.rs).

use crate::common;

use std::process::Command;

use common::*;

/// tcmalloc's own count of the bytes it has handed out grows by what the
/// program allocated: the blocks are tcmalloc's, not glibc's. The same
/// program under glibc finds no tcmalloc, which is what the check tells
/// apart.
#[test]
fn the_library_after_the_shim_serves_the_blocks() {
    if next_library().is_none() {
        return;
    }
    let exe = compile("cc", "next_library.c", &["-O2", "-ldl"]);
    let (out, profiles) = run_under("next", &mut Command::new(&exe), &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let grew: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("tcmalloc: "))
        .and_then(|l| l.strip_suffix(" bytes more"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no tcmalloc figure in:\n{stdout}"));
    let allocated = 64 * 256 * 1024;
    assert!(
        grew >= allocated,
        "tcmalloc holds {grew} bytes more, want {allocated}"
    );
    assert!(stdout.contains("usable: OK"), "{stdout}");
    assert_eq!(profiles.len(), 1);
    let p = &profiles[0];
    assert_eq!(p.allocator, "next", "{}", summary(p));
    assert!(
        p.totals.bytes_requested >= allocated,
        "the shim recorded the blocks: {}",
        summary(p)
    );

    let (out, _) = run_under("system", &mut Command::new(&exe), &[]);
    assert_eq!(text(&out.stdout), "no tcmalloc\n");
}

/// A library the shim cannot size blocks of (no `malloc_usable_size`) is
/// not half used: one line says so, and glibc serves every call.
#[test]
fn a_library_without_the_whole_family_is_not_used() {
    let library = compile("cc", "incomplete_allocator.c", &["-O2", "-shared", "-fPIC"]);
    let exe = compile_c("counts.c");
    let preload = format!("{} {}", shim(), library.display());
    let (out, profiles) = run_under(
        "system",
        Command::new(&exe).arg("100"),
        &[("LD_PRELOAD", &preload), ("ALLOCMUX_ALLOCATOR", "next")],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr.matches("lacks one of malloc").count(),
        1,
        "one warning: {stderr}"
    );
    assert_eq!(profiles.len(), 1);
    assert_eq!(profiles[0].totals.calls_of(Func::Calloc), 100);
}

/// With no library after it, the next `malloc` is glibc's.
#[test]
fn with_no_library_after_the_shim_next_is_glibc() {
    let exe = compile_c("counts.c");
    let (out, profiles) = run_under(
        "system",
        Command::new(&exe).arg("100"),
        &[("LD_PRELOAD", shim()), ("ALLOCMUX_ALLOCATOR", "next")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "nothing to warn about");
    assert_eq!(profiles.len(), 1);
    assert_eq!(profiles[0].allocator, "next");
    assert_eq!(profiles[0].totals.calls_of(Func::Calloc), 100);
}
