//! `Counting<tikv_jemallocator::Jemalloc>` as the global allocator: the
//! same exact counts as with the system allocator, and the blocks really
//! come from jemalloc.

mod common;

use allocmux::Counting;
use tikv_jemallocator::Jemalloc;

#[global_allocator]
static ALLOC: Counting<Jemalloc> = Counting::new(Jemalloc);

#[test]
fn allocations_go_to_jemalloc() {
    let before = common::jemalloc_thread_allocated();
    let (b, s) = allocmux::measure(|| std::hint::black_box(vec![0u8; 10_000]));
    assert!(common::jemalloc_thread_allocated() - before >= 10_000);
    assert_eq!((s.allocs, s.bytes_allocated), (1, 10_000), "{s}");
    drop(b);
}

// The scenarios every global allocator must count exactly.
common::scenarios!();
