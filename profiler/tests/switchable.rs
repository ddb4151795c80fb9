//! `Counting<Switchable>` as the global allocator: the backend comes from
//! `ALLOCMUX_ALLOCATOR` at start-up. The test runs this binary again as a
//! child per setting, with the variable set and a filter that runs only
//! `child_reports_its_backend`, which checks the choice and that the blocks
//! come from that allocator.

use std::process::Command;

mod common;

use allocmux::{Backend, Counting, Switchable};

unsafe extern "C" {
    /// Whether mimalloc manages `p` (libmimalloc-sys declares it only with
    /// its `extended` feature; the symbol is in the library it links).
    fn mi_is_in_heap_region(p: *const std::ffi::c_void) -> bool;
}

#[global_allocator]
static ALLOC: Counting<Switchable> = Counting::new(Switchable::new());

/// Tells the child which backend it must find.
const EXPECT: &str = "ALLOCMUX_TEST_EXPECT_BACKEND";

#[test]
fn child_reports_its_backend() {
    let Ok(expected) = std::env::var(EXPECT) else {
        return; // run by the parent test only
    };
    assert_eq!(ALLOC.inner().backend().name(), expected);
    let je_before = common::jemalloc_thread_allocated();
    let (block, s) = allocmux::measure(|| std::hint::black_box(vec![7u8; 10_000]));
    assert_eq!((s.allocs, s.bytes_allocated), (1, 10_000), "{s}");
    let p = block.as_ptr();
    let in_jemalloc = common::jemalloc_thread_allocated() - je_before >= 10_000;
    // SAFETY: mimalloc answers for any address.
    let in_mimalloc = unsafe { mi_is_in_heap_region(p.cast()) };
    assert_eq!(in_jemalloc, expected == "jemalloc", "jemalloc's count");
    assert_eq!(in_mimalloc, expected == "mimalloc", "mimalloc's heap");
    // The statistics are those of the backend in use, and see the block;
    // allocmux knows no way to ask the next library for its own.
    let stats = ALLOC.inner().allocator_stats();
    if expected == "next" {
        assert_eq!(stats, None);
    } else {
        let stats = stats.expect("statistics");
        assert_eq!(stats.backend(), ALLOC.inner().backend());
        if let Some(allocated) = stats.allocated_bytes() {
            assert!(allocated >= 10_000, "{stats}");
        }
    }
    // `next` without a library preloaded is the process's `malloc`, glibc's.
    if expected == "system" || expected == "next" {
        // SAFETY: a live block of glibc's (neither other allocator's).
        assert!(unsafe { libc::malloc_usable_size(p as *mut _) } >= 10_000);
    }
    drop(block);
    println!("child saw {expected}");
}

/// Runs the child test with `ALLOCMUX_ALLOCATOR` set to `value` (or unset)
/// and returns its stderr.
fn child(value: Option<&str>, expected: Backend) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["child_reports_its_backend", "--exact", "--nocapture"])
        .env(EXPECT, expected.name());
    match value {
        Some(v) => cmd.env("ALLOCMUX_ALLOCATOR", v),
        None => cmd.env_remove("ALLOCMUX_ALLOCATOR"),
    };
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "ALLOCMUX_ALLOCATOR={value:?}:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(&format!("child saw {}", expected.name())) && stdout.contains("1 passed"),
        "the child test ran: {stdout}"
    );
    stderr
}

#[test]
fn picks_each_backend_from_the_environment() {
    for (value, expected) in [
        (Some("system"), Backend::System),
        (Some("jemalloc"), Backend::Jemalloc),
        (Some("mimalloc"), Backend::Mimalloc),
        (Some("next"), Backend::Next),
        (Some("glibc"), Backend::System),
        (Some(""), Backend::System),
        (None, Backend::System),
    ] {
        let stderr = child(value, expected);
        assert!(!stderr.contains("allocmux:"), "{value:?}: {stderr}");
    }
}

#[test]
fn unknown_name_warns_once_and_uses_system() {
    let stderr = child(Some("tcmalloc"), Backend::System);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("allocmux:")).collect();
    assert_eq!(
        lines,
        [
            "allocmux: unknown ALLOCMUX_ALLOCATOR=tcmalloc (expected system, jemalloc, mimalloc or next); using system"
        ],
        "{stderr}"
    );
}

#[test]
fn counting_composes_with_switchable() {
    let (_, s) = allocmux::measure(|| {
        let mut v = vec![std::hint::black_box(1u64)];
        v.push(2);
        v
    });
    assert_eq!(
        (s.allocs, s.reallocs, s.bytes_allocated),
        (1, 1, 8 + 32),
        "{s}"
    );
    assert!(allocmux::Switchable::can_use(Backend::Jemalloc));
    assert_eq!(Backend::from_name(b"tcmalloc"), None);
}
