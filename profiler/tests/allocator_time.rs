//! Allocator time with every call timed (`set_time_sample_mean(1)`).
//!
//! Its own test binary: the sampling mean is process-wide, and while this
//! test had it at 1 inside `counting_system`, the scenarios running beside
//! it there (`known_sequence`, which allows at most five timed calls) saw
//! every call timed and failed now and then.

use std::alloc::System;

use allocmux::Counting;
use allocmux_recorder::{DEFAULT_TIME_SAMPLE_MEAN, set_time_sample_mean};

#[global_allocator]
static ALLOC: Counting<System> = Counting::new(System);

#[test]
fn allocator_time_is_estimated() {
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
