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

#[test]
fn allocator_time_is_estimated() {
    use allocmux::recorder::{DEFAULT_TIME_SAMPLE_MEAN, set_time_sample_mean};
    let pair = || drop(std::hint::black_box(Box::new([0u8; 32])));
    set_time_sample_mean(1);
    // Gaps drawn with the old mean (256 on average) run out first.
    (0..20_000).for_each(|_| pair());
    let (_, s) = allocmux::measure(|| (0..1000).for_each(|_| pair()));
    set_time_sample_mean(DEFAULT_TIME_SAMPLE_MEAN);
    assert_eq!(s.timed_calls, 2000, "every call of this thread timed: {s}");
    // 2000 calls of some ns each: more than 2 µs, less than a second.
    assert!(
        s.allocator_ns > 2_000 && s.allocator_ns < 1_000_000_000,
        "{s}"
    );
}
