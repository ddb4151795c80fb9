//! `Counting<tikv_jemallocator::Jemalloc>` as the global allocator: the
//! same exact counts as with the system allocator, and the blocks really
//! come from jemalloc.

mod common;

use allocmux::Counting;
use tikv_jemallocator::Jemalloc;

#[global_allocator]
static ALLOC: Counting<Jemalloc> = Counting::new(Jemalloc);

/// jemalloc's own count of the bytes this thread allocated.
fn jemalloc_thread_allocated() -> u64 {
    let mut v = 0u64;
    let mut len = size_of::<u64>();
    // SAFETY: a read-only control with a u64 out-parameter of that size.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"thread.allocated".as_ptr(),
            (&mut v as *mut u64).cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    assert_eq!(rc, 0);
    v
}

#[test]
fn allocations_go_to_jemalloc() {
    let before = jemalloc_thread_allocated();
    let (b, s) = allocmux::measure(|| std::hint::black_box(vec![0u8; 10_000]));
    assert!(jemalloc_thread_allocated() - before >= 10_000);
    assert_eq!((s.allocs, s.bytes_allocated), (1, 10_000), "{s}");
    drop(b);
}

#[test]
fn known_sequence_is_counted_exactly() {
    common::known_sequence();
}

#[test]
fn measure_is_exact_for_a_closure() {
    common::measure_is_exact_for_a_closure();
}

#[test]
fn measure_ignores_other_threads_and_nests() {
    common::measure_ignores_other_threads();
}

#[test]
fn reallocs_are_counted_in_place_or_moved() {
    common::reallocs_in_place_and_moved();
}

#[test]
fn peak_sees_a_single_large_block() {
    common::peak_sees_a_single_large_block();
}

#[test]
fn four_threads_count_exactly() {
    let sum = common::threads_each_allocate(4, 20_000, 40);
    assert_eq!(sum.allocs, 80_000);
}
