//! `AllocatorStats` with `Counting<mimalloc::MiMalloc>` as the global
//! allocator: mimalloc's committed bytes bound what the program holds.
//! One `main` (no harness): no other thread allocates or frees meanwhile.

use allocmux::{AllocatorStats, Backend, Counting, MimallocStats};
use mimalloc::MiMalloc;

#[global_allocator]
static ALLOC: Counting<MiMalloc> = Counting::new(MiMalloc);

const BLOCK: u64 = 32 << 20;

fn read() -> MimallocStats {
    match allocmux::read_allocator_stats(Backend::Mimalloc) {
        Some(AllocatorStats::Mimalloc(m)) => m,
        other => panic!("no mimalloc statistics: {other:?}"),
    }
}

fn main() {
    let before = read();
    // One large block, and many small ones (in mimalloc's pages).
    let block = std::hint::black_box(vec![1u8; BLOCK as usize]);
    let small: Vec<Box<[u8; 64]>> = (0..100_000).map(|_| Box::new([2u8; 64])).collect();
    let held = read();
    let live = ALLOC.snapshot().live_bytes as u64;
    // An upper bound on what mimalloc holds: at least the program's live
    // bytes (with overcommit, the whole reserved arena).
    assert!(held.committed >= live, "{held:?} vs {live} live");
    assert!(held.committed >= before.committed, "{before:?} -> {held:?}");
    assert!(held.peak_committed >= held.committed, "{held:?}");
    // The process's peak RSS: the written block is in it.
    assert!(held.peak_rss >= BLOCK, "{held:?}");
    let s = AllocatorStats::Mimalloc(held);
    assert_eq!((s.held_bytes(), s.allocated_bytes()), (None, None));
    assert!(s.to_string().starts_with("mimalloc: "), "{s}");

    drop((block, small));
    let after = read();
    // The peak stays; what is committed now is at most what it was.
    assert!(
        after.peak_committed >= held.committed,
        "{held:?} -> {after:?}"
    );
    assert!(after.committed <= held.committed, "{held:?} -> {after:?}");
    println!("ok: {s}");
}
