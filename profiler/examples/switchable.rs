//! One binary, three allocators: `allocmux::Switchable` picks the system
//! allocator, jemalloc or mimalloc from `ALLOCMUX_ALLOCATOR` at start-up,
//! and `Counting` around it counts the same way whichever it is.
//!
//! ```text
//! cargo run -p allocmux --release --example switchable
//! ALLOCMUX_ALLOCATOR=jemalloc cargo run -p allocmux --release --example switchable
//! ALLOCMUX_ALLOCATOR=mimalloc cargo run -p allocmux --release --example switchable
//! ```

use std::time::Instant;

use allocmux::{Counting, Switchable};

#[global_allocator]
static ALLOC: Counting<Switchable> = Counting::new(Switchable::new());

fn main() {
    let start = Instant::now();
    let (total, stats) = allocmux::measure(|| {
        let mut total = 0usize;
        for round in 0..200 {
            let strings: Vec<String> = (0..1000).map(|i| format!("{round}-{i}")).collect();
            total += strings.iter().map(String::len).sum::<usize>();
        }
        total
    });
    println!(
        "{}: {total} bytes of text in {:.1?}",
        ALLOC.inner().backend().name(),
        start.elapsed()
    );
    println!("{stats}");
}
