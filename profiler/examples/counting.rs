//! Counting a program's allocations with `allocmux::Counting`.
//!
//! ```text
//! cargo run -p allocmux --example counting
//! ```

use std::alloc::System;
use std::collections::HashMap;

use allocmux::Counting;

#[global_allocator]
static ALLOC: Counting<System> = Counting::new(System);

fn word_counts(text: &str) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for word in text.split_whitespace() {
        *counts.entry(word.to_lowercase()).or_insert(0) += 1;
    }
    counts
}

fn main() {
    let text = "the quick brown fox jumps over the lazy dog ".repeat(2000);

    // The whole process between two points, every thread included.
    let before = ALLOC.snapshot();
    let counts = word_counts(&text);
    println!("word_counts, process-wide: {}", ALLOC.snapshot() - before);

    // One closure on this thread only.
    let (sorted, stats) = allocmux::measure(|| {
        let mut v: Vec<(&String, &usize)> = counts.iter().collect();
        v.sort();
        v
    });
    println!("sorting {} words: {stats}", sorted.len());

    // Threads that exit are folded into the process totals.
    let before = allocmux::snapshot();
    let workers: Vec<_> = (0..4)
        .map(|i| {
            let text = text.clone();
            std::thread::spawn(move || word_counts(&text[i * 10..]).len())
        })
        .collect();
    let sizes: Vec<usize> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let used = allocmux::snapshot() - before;
    println!("4 threads ({sizes:?} words): {used}");
    println!(
        "  {} allocations, {} frees, {} reallocations ({} in place), peak rose by {} bytes",
        used.allocs, used.frees, used.reallocs, used.reallocs_in_place, used.peak_live_bytes
    );

    println!("process so far: {}", allocmux::snapshot());
}
