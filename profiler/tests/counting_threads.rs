//! `Counting<System>`, process-wide: snapshot differences are exact when
//! threads come and go. No test harness (`harness = false`), so no thread
//! but the ones started here allocates while the checks run.

mod common;

use std::alloc::System;
use std::hint::black_box;

use allocmux::{Counting, Counts};

#[global_allocator]
static ALLOC: Counting<System> = Counting::new(System);

fn main() {
    peak_sees_a_single_large_block();
    eight_threads_lose_no_update();
    blocks_freed_by_another_thread_balance();
    println!("counting_threads: ok");
}

/// The process peak, from snapshots, sees one large block exactly.
fn peak_sees_a_single_large_block() {
    const BIG: usize = 256 << 20;
    let before = ALLOC.snapshot();
    let big = black_box(vec![1u8; BIG]);
    drop(big);
    let after = ALLOC.snapshot();
    assert!(before.peak_live_bytes < BIG as u64, "{before}");
    assert_eq!(
        after.peak_live_bytes,
        before.live_bytes as u64 + BIG as u64,
        "{before} / {after}"
    );
    assert_eq!(after.live_bytes, before.live_bytes, "{after}");
    let d = after - before;
    assert_eq!(
        (d.allocs, d.frees, d.bytes_allocated),
        (1, 1, BIG as u64),
        "{d}"
    );
}

/// Spawns `threads` threads that each make `per_thread` allocation/free
/// pairs of 40 bytes, joins them, and returns the process-wide difference.
fn run(threads: usize, per_thread: u64) -> Counts {
    let before = ALLOC.snapshot();
    let sum = common::threads_each_allocate(threads, per_thread, 40);
    let diff = ALLOC.snapshot() - before;
    assert_eq!(sum.allocs, threads as u64 * per_thread);
    diff
}

/// 8 threads × 100,000 pairs: every thread counts on its own state and
/// folds it into the shared totals when it exits (before `join` returns),
/// so the process count is exact: what spawning and joining 8 threads
/// allocates by itself (measured with empty loops) plus 800,000.
fn eight_threads_lose_no_update() {
    run(8, 0); // first spawn: the runtime's one-time set-up
    let empty = run(8, 0);
    let full = run(8, 100_000);
    assert!(empty.allocs > 0, "spawning allocates: {empty}");
    assert_eq!(full.allocs, empty.allocs + 800_000, "{empty} / {full}");
    assert_eq!(full.frees, empty.frees + 800_000, "{empty} / {full}");
    assert_eq!(
        full.bytes_allocated,
        empty.bytes_allocated + 800_000 * 40,
        "{empty} / {full}"
    );
    assert_eq!(full.bytes_freed, empty.bytes_freed + 800_000 * 40);
    assert_eq!(full.live_bytes, empty.live_bytes, "{empty} / {full}");
    assert_eq!(full.reallocs, empty.reallocs);
}

/// Blocks allocated on worker threads and freed on this one: the process
/// balance is exact although each side's own count is lopsided.
fn blocks_freed_by_another_thread_balance() {
    let before = ALLOC.snapshot();
    let workers: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(|| (0..10_000).map(|i| Box::new(i as u64)).collect::<Vec<_>>()))
        .collect();
    let blocks: Vec<Vec<Box<u64>>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let (_, mine) = allocmux::measure(|| drop(blocks));
    assert_eq!(mine.frees, 4 * 10_000 + 4 + 1, "{mine}");
    assert!(mine.live_bytes < 0, "{mine}");
    let d = ALLOC.snapshot() - before;
    assert_eq!(d.live_bytes, 0, "{d}");
    assert_eq!(d.allocs, d.frees, "{d}");
}
