//! `Counting<System>` as the global allocator: exact counts through
//! `measure`, which reads only the calling thread's counters, so the test
//! harness's own threads do not disturb them.

mod common;

use std::alloc::System;

use allocmux::Counting;

#[global_allocator]
static ALLOC: Counting<System> = Counting::new(System);

// The scenarios every global allocator must count exactly.
common::scenarios!();

#[test]
fn snapshot_sees_what_measure_sees() {
    // Other tests run concurrently, so the process-wide difference is at
    // least this thread's part (exactness is `counting_threads`' job).
    let before = ALLOC.snapshot();
    let (_, mine) = allocmux::measure(|| drop(std::hint::black_box(vec![3u8; 5000])));
    let diff = allocmux::snapshot() - before;
    assert!(
        diff.allocs >= mine.allocs && diff.bytes_allocated >= 5000,
        "{diff}"
    );
    assert!(before.allocs > 0 && before.peak_live_bytes > 0, "{before}");
}
