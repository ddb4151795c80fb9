//! Where a Rust program allocates: `allocmux::Profiler` records the call
//! stacks and writes a profile every allocmux command reads.
//!
//! ```text
//! cargo run -p allocmux --example profiler -- exact
//! cargo run -p allocmux-cli -- export --format svg -o words.svg allocmux-example.prof
//! cargo run -p allocmux-cli -- report allocmux-example.prof
//! ```

use std::alloc::System;
use std::collections::HashMap;

use allocmux::{Counting, Profiler};

#[global_allocator]
static ALLOC: Counting<System> = Counting::new(System);

/// One `String` per word: the allocations the flamegraph points at.
#[inline(never)]
fn lowercase_words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_lowercase).collect()
}

#[inline(never)]
fn count(words: &[String]) -> HashMap<&str, usize> {
    let mut counts = HashMap::new();
    for w in words {
        *counts.entry(w.as_str()).or_insert(0) += 1;
    }
    counts
}

fn main() {
    let exact = std::env::args().nth(1).as_deref() == Some("exact");
    let builder = Profiler::builder().file("allocmux-example.prof");
    // Exact: every allocation's stack. Sampled: one per 64 KiB on average,
    // with scaled, unbiased estimates (cheap enough to leave on).
    let profiler = if exact {
        builder.exact().build()
    } else {
        builder.sample_bytes(64 * 1024).build()
    };

    let text = "The quick brown Fox jumps over the lazy Dog ".repeat(20_000);
    let words = lowercase_words(&text);
    let counts = count(&words);
    println!("{} distinct words of {}", counts.len(), words.len());

    drop(profiler); // writes the profile
    println!("wrote allocmux-example.prof: try `allocmux report allocmux-example.prof`");
}
