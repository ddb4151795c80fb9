//! Checks shared by the test binaries, each of which installs its own
//! `Counting<...>` as the global allocator: the expected numbers do not
//! depend on the allocator inside, since bytes are `Layout` sizes.
#![allow(dead_code)] // each binary uses some of them

use std::alloc::{Layout, alloc, alloc_zeroed, dealloc, realloc};
use std::hint::black_box;
use std::sync::{Arc, Barrier};

use allocmux::{Counts, measure};

/// A known sequence of raw calls, counted exactly by `measure`.
pub fn known_sequence() {
    let l100 = Layout::from_size_align(100, 8).unwrap();
    let l400 = Layout::from_size_align(400, 8).unwrap();
    let l10 = Layout::from_size_align(10, 1).unwrap();
    let (_, s) = measure(|| {
        // SAFETY: non-zero sizes; each block is freed once with its layout
        // (the realloc'd one with its new size).
        unsafe {
            let a = black_box(alloc(l100));
            let b = black_box(alloc_zeroed(l400));
            let c = black_box(alloc(l10));
            assert!(!a.is_null() && !b.is_null() && !c.is_null());
            assert!((0..400).all(|i| *b.add(i) == 0));
            let c = black_box(realloc(c, l10, 1000));
            assert!(!c.is_null());
            dealloc(a, l100);
            dealloc(b, l400);
            dealloc(c, Layout::from_size_align(1000, 1).unwrap());
        }
    });
    assert_eq!(s.allocs, 3, "{s}");
    assert_eq!(s.frees, 3, "{s}");
    assert_eq!(s.reallocs, 1, "{s}");
    assert_eq!(s.failures, 0, "{s}");
    assert_eq!(s.bytes_allocated, 100 + 400 + 10 + 1000, "{s}");
    assert_eq!(s.bytes_freed, 100 + 400 + 10 + 1000, "{s}");
    assert_eq!(s.live_bytes, 0, "{s}");
    // Live: 100, 500, 510, then the realloc: 500 + 1000.
    assert_eq!(s.peak_live_bytes, 1500, "{s}");
    // The thread's first calls are timed exactly, so something was timed
    // in a thread's first measure; later ones may time nothing.
    assert!(s.timed_calls <= 5, "{s}");
}

/// The same through ordinary collections: `measure` sees what `Vec`,
/// `Box` and `String` do.
pub fn measure_is_exact_for_a_closure() {
    let (v, s) = measure(|| {
        let mut v: Vec<u32> = Vec::with_capacity(4);
        v.extend(0..4); // fits
        let b = black_box(Box::new([7u8; 64]));
        drop(b);
        v
    });
    assert_eq!(v, [0, 1, 2, 3]);
    assert_eq!((s.allocs, s.frees, s.reallocs), (2, 1, 0), "{s}");
    assert_eq!((s.bytes_allocated, s.bytes_freed), (16 + 64, 64), "{s}");
    assert_eq!((s.live_bytes, s.peak_live_bytes), (16, 80), "{s}");
    let (_, s) = measure(|| drop(v));
    assert_eq!((s.frees, s.bytes_freed, s.live_bytes), (1, 16, -16), "{s}");
    assert_eq!(s.peak_live_bytes, 0, "{s}");
}

/// `measure` counts only the calling thread, while another thread
/// allocates as fast as it can, and nested measures each see their part.
pub fn measure_ignores_other_threads() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    let stop = Arc::new(AtomicBool::new(false));
    let made = Arc::new(AtomicU64::new(0));
    let noise = {
        let (stop, made) = (stop.clone(), made.clone());
        std::thread::spawn(move || {
            while !stop.load(Relaxed) {
                drop(black_box(vec![0u8; 48]));
                made.fetch_add(1, Relaxed);
            }
        })
    };
    while made.load(Relaxed) < 100 {
        std::thread::yield_now();
    }
    let (inner, outer) = measure(|| {
        let mut kept = Vec::new();
        for i in 0..10_000 {
            kept.push(black_box(Box::new(i as u64)));
        }
        let (_, inner) = measure(|| drop(black_box(vec![1u8; 4096])));
        drop(kept);
        inner
    });
    stop.store(true, Relaxed);
    noise.join().unwrap();
    assert_eq!((inner.allocs, inner.bytes_allocated), (1, 4096), "{inner}");
    assert_eq!(inner.peak_live_bytes, 4096, "{inner}");
    // 10,000 boxes of 8 bytes, the Vec holding them growing by doubling
    // (capacities 4, 8, ..., 16384 pointers), and the inner 4 KiB.
    let vec_growths = 12; // 4 -> 8 -> ... -> 16384 = 4 << 12
    assert_eq!(outer.allocs, 10_000 + 1 + 1, "{outer}");
    assert_eq!(outer.reallocs, vec_growths, "{outer}");
    assert_eq!(outer.frees, 10_000 + 1 + 1, "{outer}");
    assert_eq!(outer.live_bytes, 0, "{outer}");
    assert_eq!(
        outer.peak_live_bytes,
        10_000 * 8 + 16384 * 8 + 4096,
        "the boxes, the full Vec, and the inner block: {outer}"
    );
}

/// Reallocations are counted, and told apart by whether the pointer moved.
pub fn reallocs_in_place_and_moved() {
    let mut moved = 0;
    let mut in_place = 0;
    let (_, s) = measure(|| {
        let l = |n| Layout::from_size_align(n, 8).unwrap();
        // SAFETY: non-zero sizes, each block freed once with its current layout.
        unsafe {
            // Shrinking within a size class stays put in glibc, jemalloc
            // and mimalloc alike.
            let a = alloc(l(1000));
            let a2 = realloc(a, l(1000), 900);
            assert_eq!(
                a, a2,
                "a small shrink is in place with every allocator here"
            );
            in_place += 1;
            // Growing a 64-byte-aligned small block to 100 kB moves it
            // everywhere: std's System reallocates over-aligned blocks by
            // copying, jemalloc moves small slab blocks to a large extent,
            // mimalloc moves whatever outgrows its usable size.
            let l64 = |n| Layout::from_size_align(n, 64).unwrap();
            let b = alloc(l64(16));
            let b2 = realloc(b, l64(16), 100_000);
            if b2 == b {
                in_place += 1;
            } else {
                moved += 1;
            }
            dealloc(a2, l(900));
            dealloc(b2, l64(100_000));
        }
    });
    assert_eq!(s.reallocs, 2, "{s}");
    assert_eq!(s.reallocs_in_place, in_place, "{s}");
    assert_eq!(s.reallocs_moved(), moved, "{s}");
    assert_eq!(moved, 1, "growing an aligned 16 B to 100 kB moves");
    assert_eq!(s.bytes_allocated, 1000 + 900 + 16 + 100_000, "{s}");
    assert_eq!(s.live_bytes, 0, "{s}");
}

/// A single large block is the peak, exactly.
pub fn peak_sees_a_single_large_block() {
    const BIG: usize = 64 << 20;
    let (_, s) = measure(|| {
        let small: Vec<Box<u64>> = (0..100).map(Box::new).collect();
        let big = black_box(vec![1u8; BIG]);
        drop(big);
        drop(small);
    });
    assert_eq!(s.peak_live_bytes, (BIG + 100 * 8 + 100 * 8) as u64, "{s}");
    assert_eq!(s.live_bytes, 0, "{s}");
}

/// `threads` threads each make `per_thread` allocations and frees of
/// `size` bytes; returns the sum of what each thread measured of its own
/// loop, which must be exact.
pub fn threads_each_allocate(threads: usize, per_thread: u64, size: usize) -> Counts {
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                let ((), s) = measure(|| {
                    for _ in 0..per_thread {
                        drop(black_box(vec![0xa5u8; size]));
                    }
                });
                s
            })
        })
        .collect();
    let mut sum = Counts::default();
    for h in handles {
        let s = h.join().unwrap();
        assert_eq!((s.allocs, s.frees), (per_thread, per_thread), "{s}");
        assert_eq!(s.bytes_allocated, per_thread * size as u64, "{s}");
        let peak = if per_thread > 0 { size as u64 } else { 0 };
        assert_eq!(s.peak_live_bytes, peak, "{s}");
        sum.allocs += s.allocs;
        sum.frees += s.frees;
        sum.bytes_allocated += s.bytes_allocated;
        sum.bytes_freed += s.bytes_freed;
    }
    sum
}

/// The scenarios every `Counting<_>` test binary runs, as `#[test]`
/// functions of the binary that invokes it (each binary has its own
/// global allocator, so each needs its own copies).
#[allow(unused_macros)] // not every test binary runs them
macro_rules! scenarios {
    () => {
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
    };
}
#[allow(unused_imports)]
pub(crate) use scenarios;

/// jemalloc's own count of the bytes this thread allocated through it.
pub fn jemalloc_thread_allocated() -> u64 {
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
