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

// The scenarios every global allocator must count exactly.
common::scenarios!();
