//! The backend's own statistics in the shim's profiles: every backend's
//! figures are there, read while the program ran and at its exit, and
//! consistent with each other and with the program's live bytes.

use crate::common;

use std::process::Command;

use allocmux_format::AllocatorStats;
use allocmux_format::profile::AllocatorReading;
use common::*;

const MIB: u64 = 1 << 20;
const MS: u64 = 1_000_000;
/// How far the live bytes the shim reads with the statistics (published
/// per thread in steps) may lag the exact count.
const SLACK: u64 = 256 << 10;

/// Runs the fixture under `backend`, leaving by `how` (`exit` or `_exit`);
/// returns its one profile.
fn run_fixture(backend: &str, how: &str) -> ProcessProfile {
    let exe = compile_c("allocstats.c");
    let (out, mut procs) = run_under(backend, Command::new(&exe).arg(how), &[]);
    assert!(
        out.status.success() && text(&out.stdout) == "allocstats done\n",
        "allocstats {how} under {backend} failed ({}):\n{}\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(procs.len(), 1, "one process, one profile");
    let p = procs.pop().unwrap();
    assert_eq!((p.allocator.as_str(), p.state), (backend, State::Exited));
    // Reading the statistics made no allocation call through the hooks
    // from the writer thread: only the program's one thread made any.
    assert_eq!(p.threads, 1, "{}", summary(&p));
    p
}

/// What every reading must satisfy, for a program holding 32 MiB and
/// 10 000 small blocks: the backend's figures, consistent among
/// themselves and with the live bytes read with them.
fn check_reading(backend: &str, r: &AllocatorReading) {
    let live = r.live_bytes;
    assert!(live >= 32 * MIB + 10_000 * 100, "{r:?}");
    assert_eq!(r.stats.backend().name(), backend, "{r:?}");
    match r.stats {
        AllocatorStats::Jemalloc(j) => {
            // `allocated` also counts blocks cached in thread caches.
            assert!(j.allocated + SLACK >= live, "{r:?}");
            assert!(j.active >= j.allocated, "{r:?}");
            assert!(j.resident >= j.active && j.mapped >= j.active, "{r:?}");
            assert!(j.resident >= 32 * MIB, "the touched block: {r:?}");
        }
        AllocatorStats::Mimalloc(m) => {
            assert!(m.committed >= live, "{r:?}");
            assert!(m.peak_committed >= m.committed, "{r:?}");
            assert!(m.peak_rss >= 32 * MIB, "{r:?}");
        }
        AllocatorStats::System(g) => {
            // Chunk sizes (headers included), and the shim's own heap.
            assert!(g.in_use + SLACK >= live, "{r:?}");
            assert_eq!(g.in_use + g.free, g.arena + g.mmapped, "{r:?}");
            assert!(g.mmapped >= 32 * MIB, "the large block: {r:?}");
            // The 10 000 freed small blocks are free space in the arena.
            assert!(g.free >= 10_000 * 100, "{r:?}");
        }
        other => panic!("unexpected statistics {other:?}"),
    }
    if let Some(x) = r.overhead() {
        assert!(
            x >= 0.99,
            "held {:?} for {live} live: {r:?}",
            r.stats.held_bytes()
        );
    }
}

/// A normal exit reads the figures afresh for the exit profile.
fn exit_profile_has_fresh_figures(backend: &str) {
    let p = run_fixture(backend, "exit");
    let r = p
        .allocator_stats
        .unwrap_or_else(|| panic!("no allocator statistics: {}", summary(&p)));
    check_reading(backend, &r);
    // Read at the exit, after the 700 ms sleep.
    assert!(
        r.t_ns >= 700 * MS && r.t_ns <= p.wall_ns(),
        "{r:?}, wall {}",
        p.wall_ns()
    );
}

/// `_exit` runs no exit handler and may come from a signal handler that
/// interrupted the allocator, so the exit profile reads nothing afresh: it
/// carries the last reading made while the program ran. The fixture leaves
/// once a periodic profile shows a reading made with its heap live (under
/// mimalloc, and glibc with threads, the writer thread's at a flush; under
/// jemalloc, and glibc without threads, a program thread's, asked for as
/// the heap grew and made in one of the calls the fixture goes on making),
/// so on any schedule that reading, or a later one, is the exit profile's.
fn underscore_exit_reuses_the_last_reading(backend: &str) {
    let p = run_fixture(backend, "_exit");
    let r = p
        .allocator_stats
        .unwrap_or_else(|| panic!("no allocator statistics: {}", summary(&p)));
    check_reading(backend, &r);
    assert!(r.t_ns < p.wall_ns(), "{r:?}, wall {}", p.wall_ns());
}

per_backend!(
    exit_profile_has_fresh_figures,
    underscore_exit_reuses_the_last_reading
);
