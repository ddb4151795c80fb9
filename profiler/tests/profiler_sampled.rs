//! `Profiler` in sample mode, with `Counting<System>` as the global
//! allocator: the per-stack estimates, scaled by the sampling weights, add
//! up to what the program allocated, on two threads; and a process gets
//! one profiler.

use std::alloc::System;

use allocmux::{Counting, Profiler};
use allocmux_format::profile::{self, StackMode};

#[global_allocator]
static ALLOC: Counting<System> = Counting::new(System);

const BLOCKS: usize = 20_000;
const BLOCK_BYTES: usize = 4096;
const MEAN_BYTES: u64 = 64 * 1024;

#[inline(never)]
fn churn() -> u64 {
    let mut sum = 0u64;
    for i in 0..BLOCKS {
        let v = std::hint::black_box(vec![i as u8; BLOCK_BYTES]);
        sum += v[BLOCK_BYTES - 1] as u64;
    }
    sum
}

#[test]
fn sampled_estimates_add_up_and_one_profiler_per_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sampled.prof");
    let profiler = Profiler::builder()
        .sample_bytes(MEAN_BYTES)
        .file(&path)
        .build();
    assert_eq!(
        profiler.mode(),
        StackMode::Sample {
            mean_bytes: MEAN_BYTES
        }
    );
    let before = ALLOC.snapshot();
    let other = std::thread::spawn(churn);
    churn();
    other.join().unwrap();
    let allocated = (ALLOC.snapshot() - before).bytes_allocated;
    // A flush while running, then the final profile on drop.
    profiler.write().unwrap();
    let running = profile::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(running[0].state, profile::State::Running);
    drop(profiler);

    let procs = profile::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let p = &procs[0];
    assert_eq!(p.state, profile::State::Exited);
    assert_eq!(
        p.stacks.mode,
        StackMode::Sample {
            mean_bytes: MEAN_BYTES
        }
    );
    let samples: u64 = p.stacks.stacks.iter().map(|s| s.counts.samples).sum();
    let estimate: u64 = p.stacks.stacks.iter().map(|s| s.counts.bytes).sum();
    // 2 × 80 MiB in 4 KiB blocks, one sample per 64 KiB: about 2,500
    // samples, so the estimate's standard error is about 2%; 15% is
    // seven of them.
    let truth = (2 * BLOCKS * BLOCK_BYTES) as f64;
    assert!(samples > 1_500 && samples < 4_000, "{samples} samples");
    let ratio = estimate as f64 / allocated as f64;
    eprintln!("{samples} samples, estimate {estimate} of {allocated}: {ratio:.3}");
    assert!(
        (0.85..1.15).contains(&ratio),
        "estimated {estimate} of {allocated} bytes ({truth} in blocks)"
    );
    // Both threads' stacks are there: `churn` called from the test and
    // from the spawned thread are two stacks at least.
    assert!(p.stacks.stacks.len() >= 2);
    assert!(p.threads >= 2);

    let second = std::panic::catch_unwind(Profiler::new);
    assert!(
        second.is_err(),
        "a second profiler in one process is refused"
    );
}
