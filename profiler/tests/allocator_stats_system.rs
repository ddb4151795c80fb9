//! `AllocatorStats` with `Counting<System>` as the global allocator:
//! glibc's `mallinfo2` figures follow what the program holds, in its
//! arenas and in mmapped blocks. One `main` (no harness): no other thread
//! allocates or frees meanwhile.

use std::alloc::System;

use allocmux::{AllocatorStats, Backend, Counting, GlibcStats};

#[global_allocator]
static ALLOC: Counting<System> = Counting::new(System);

const BLOCK: u64 = 32 << 20;
const SMALL: u64 = 100_000;

fn read() -> GlibcStats {
    match allocmux::read_allocator_stats(Backend::System) {
        Some(AllocatorStats::System(g)) => g,
        other => panic!("no glibc statistics: {other:?}"),
    }
}

/// `mallinfo2` sums the arenas: used plus free is all of them.
fn check_sums(g: &GlibcStats) {
    assert_eq!(g.in_use + g.free, g.arena + g.mmapped, "{g:?}");
    assert!(g.releasable <= g.free, "{g:?}");
}

fn main() {
    let before = read();
    check_sums(&before);
    // Above the mmap threshold: a block of its own mapping.
    let block = std::hint::black_box(vec![1u8; BLOCK as usize]);
    let with_block = read();
    check_sums(&with_block);
    assert!(
        with_block.mmapped >= before.mmapped + BLOCK,
        "{before:?} -> {with_block:?}"
    );
    assert!(with_block.in_use >= before.in_use + BLOCK);
    // Small blocks come from the arena.
    let small: Vec<Box<[u8; 64]>> = (0..SMALL).map(|_| Box::new([2u8; 64])).collect();
    let held = read();
    check_sums(&held);
    assert!(
        held.arena >= with_block.arena + 64 * SMALL,
        "{with_block:?} -> {held:?}"
    );
    let live = ALLOC.snapshot().live_bytes as u64;
    assert!(held.in_use >= live, "{held:?} vs {live} live");
    let s = AllocatorStats::System(held);
    assert_eq!(s.held_bytes(), Some(held.arena + held.mmapped));
    assert_eq!(s.allocated_bytes(), Some(held.in_use));
    assert!(s.overhead(live).unwrap() >= 1.0);
    assert!(s.to_string().starts_with("glibc: "), "{s}");

    drop((block, small));
    let after = read();
    check_sums(&after);
    assert!(
        after.in_use + BLOCK + 64 * SMALL <= held.in_use + (64 << 10),
        "{held:?} -> {after:?}"
    );
    // mimalloc is linked in but never allocated with here: nothing
    // committed, so a reading is of the mimalloc that serves the program
    // (allocator_stats_mimalloc.rs) and not of some other one.
    match allocmux::read_allocator_stats(Backend::Mimalloc) {
        Some(AllocatorStats::Mimalloc(m)) => assert_eq!(m.committed, 0, "{m:?}"),
        other => panic!("{other:?}"),
    }
    println!("ok: {s}");
}
