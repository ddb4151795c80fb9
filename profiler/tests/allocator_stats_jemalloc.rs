//! `AllocatorStats` with `Counting<tikv_jemallocator::Jemalloc>` as the
//! global allocator: the figures are jemalloc's, for the jemalloc the
//! program allocates with, and fresh (the read advances jemalloc's epoch).
//! One `main` (no harness): no other thread allocates or frees meanwhile.

use allocmux::{AllocatorStats, Backend, Counting, JemallocStats};
use tikv_jemallocator::Jemalloc;

#[global_allocator]
static ALLOC: Counting<Jemalloc> = Counting::new(Jemalloc);

const BLOCK: u64 = 32 << 20;

fn read() -> JemallocStats {
    match allocmux::read_allocator_stats(Backend::Jemalloc) {
        Some(AllocatorStats::Jemalloc(j)) => j,
        other => panic!("no jemalloc statistics: {other:?}"),
    }
}

fn main() {
    let before = read();
    let block = std::hint::black_box(vec![1u8; BLOCK as usize]);
    let held = read();
    let live = ALLOC.snapshot().live_bytes as u64;
    // Fresh figures (an unadvanced epoch would show `before` again), and
    // they are those of the jemalloc that served the block.
    assert!(
        held.allocated >= before.allocated + BLOCK,
        "allocated rose by {} for a {BLOCK}-byte block: {before:?} -> {held:?}",
        held.allocated.saturating_sub(before.allocated)
    );
    assert!(held.allocated >= live, "{held:?} vs {live} live");
    assert!(held.active >= held.allocated, "{held:?}");
    assert!(held.resident >= held.active, "{held:?}");
    assert!(held.mapped >= held.active, "{held:?}");
    // The block was written, so its pages are resident.
    assert!(
        held.resident >= before.resident + BLOCK,
        "{before:?} -> {held:?}"
    );
    let s = AllocatorStats::Jemalloc(held);
    assert_eq!(s.held_bytes(), Some(held.resident));
    assert!(s.overhead(live).unwrap() >= 1.0);
    assert!(s.to_string().starts_with("jemalloc: "), "{s}");

    drop(block);
    let after = read();
    // (The checks above formatted a string or two meanwhile.)
    assert!(
        after.allocated + BLOCK <= held.allocated + (64 << 10),
        "{held:?} -> {after:?}"
    );

    // tikv-jemalloc-ctl turns on tikv-jemalloc-sys's default feature
    // `background_threads_runtime_support`: background threads stay off.
    assert!(!tikv_jemalloc_ctl::opt::background_thread::read().unwrap());
    assert!(!tikv_jemalloc_ctl::background_thread::read().unwrap());
    let threads = std::fs::read_dir("/proc/self/task").unwrap().count();
    assert_eq!(threads, 1, "only the main thread runs");
    println!("ok: {s}");
}
