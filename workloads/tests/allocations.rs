//! The workloads' allocation claims, counted: `Counting<System>` as the
//! global allocator and `allocmux::measure`, which reads only the calling
//! thread's counters (so the harness's other threads do not disturb them).

use std::alloc::System;
use std::hint::black_box;

use allocmux::{Counting, measure};
use allocmux_workloads::bounded_string::{self, HeapName, InlineName};
use allocmux_workloads::edit_distance::{self, Levenshtein, levenshtein_naive};
use allocmux_workloads::filter::{Boxed, Program, Scratch, filters, records};
use allocmux_workloads::{ALL, cache, readers, realloc_growth, short_threads};

#[global_allocator]
static ALLOC: Counting<System> = Counting::new(System);

#[test]
fn heap_names_allocate_once_and_inline_names_never() {
    let mut valid = 0;
    for s in bounded_string::sample_names(300, 8) {
        let ok = bounded_string::validate(&s).is_ok();
        valid += usize::from(ok);
        let (h, st) = measure(|| black_box(HeapName::new(&s)));
        assert_eq!(h.is_ok(), ok, "{s}");
        assert_eq!(
            st.allocs,
            u64::from(ok),
            "validated heap construction of {s}: {st}"
        );
        assert_eq!(st.bytes_allocated, if ok { s.len() as u64 } else { 0 });
        drop(h);
        let (h, st) = measure(|| black_box(HeapName::new_unvalidated(&s)));
        assert_eq!(
            st.allocs,
            u64::from(s.len() <= bounded_string::MAX_LEN),
            "{s}: {st}"
        );
        drop(h);
        let (i, st) = measure(|| black_box(InlineName::new(&s)));
        assert_eq!((i.is_ok(), st.allocs, st.frees), (ok, 0, 0), "{s}: {st}");
        let (_, st) = measure(|| black_box(InlineName::new_unvalidated(&s)));
        assert_eq!((st.allocs, st.frees), (0, 0), "{s}: {st}");
    }
    assert!(valid > 250, "{valid} of 300 valid");
}

#[test]
fn naive_edit_distance_allocates_per_row_and_the_fixed_one_not_at_all() {
    let pairs: Vec<(String, String)> = allocmux_workloads::rng::words(500, 1)
        .zip(allocmux_workloads::rng::words(500, 2))
        .collect();
    let mut lev = Levenshtein::default();
    // Warm up: the buffers grow to the longest words once.
    for (a, b) in &pairs {
        lev.distance(a, b);
    }
    for (a, b) in &pairs {
        let (d, naive) = measure(|| levenshtein_naive(a, b));
        // Both words collected, the first row, then one row per letter of `a`.
        assert_eq!(naive.allocs, 3 + a.len() as u64, "{a} {b}: {naive}");
        let (e, fixed) = measure(|| lev.distance(a, b));
        assert_eq!(d, e);
        assert_eq!((fixed.allocs, fixed.reallocs), (0, 0), "{a} {b}: {fixed}");
    }
    // Whole runs: both allocate the input words (two per pair); only the
    // naive one allocates per letter besides.
    let n = 2_000;
    let (x, naive) = measure(|| edit_distance::naive(n));
    let (y, fixed) = measure(|| edit_distance::fixed(n));
    assert_eq!(x, y);
    assert!(fixed.allocs <= 2 * n + 20, "fixed: {fixed}");
    assert!(
        naive.allocs >= fixed.allocs + 6 * n,
        "naive: {naive}, fixed: {fixed}"
    );
}

#[test]
fn owned_keys_allocate_per_lookup_and_borrowed_ones_do_not() {
    let (map, log) = cache::setup(1_000);
    let keys: Vec<&str> = log.lines().collect();
    let (hits, owned) = measure(|| {
        keys.iter()
            .filter(|k| cache::lookup_owned(&map, k).is_some())
            .count()
    });
    assert_eq!(owned.allocs, keys.len() as u64, "{owned}");
    assert_eq!(owned.frees, keys.len() as u64, "{owned}");
    let (hits_b, borrowed) = measure(|| {
        keys.iter()
            .filter(|k| cache::lookup_borrowed(&map, k).is_some())
            .count()
    });
    assert_eq!(hits, hits_b);
    assert_eq!((borrowed.allocs, borrowed.frees), (0, 0), "{borrowed}");
}

#[test]
fn a_bufreader_per_stream_allocates_8_kib_per_stream() {
    let n = 3_000;
    let (x, per) = measure(|| readers::per_stream(n));
    let (y, reused) = measure(|| readers::reused(n));
    assert_eq!(x, y);
    // The reused version allocates its one buffer; the other, one per stream.
    assert_eq!(
        per.allocs - reused.allocs,
        n - 1,
        "per stream: {per}; reused: {reused}"
    );
    assert_eq!(
        per.bytes_allocated - reused.bytes_allocated,
        (n - 1) * 8 * 1024,
        "per stream: {per}; reused: {reused}"
    );
}

#[test]
fn boxed_filters_allocate_per_record_and_the_arena_does_not() {
    let recs = records(1_000, 3);
    let boxed: Vec<Boxed> = filters().iter().map(|(_, e)| Boxed::compile(e)).collect();
    let arena: Vec<Program> = filters().iter().map(|(_, e)| Program::compile(e)).collect();
    let mut scratch = Scratch::default();
    let all = |scratch: &mut Scratch| -> usize {
        recs.iter()
            .map(|r| arena.iter().filter(|p| p.matches(r, scratch)).count())
            .sum()
    };
    all(&mut scratch); // the scratch buffer grows to its largest
    let (a, st) = measure(|| all(&mut scratch));
    assert_eq!((st.allocs, st.reallocs), (0, 0), "arena: {st}");
    let (b, st) = measure(|| {
        recs.iter()
            .map(|r| boxed.iter().filter(|f| f.matches(r)).count())
            .sum::<usize>()
    });
    assert_eq!(a, b);
    // The first filter alone clones `service`, lower-cases it and clones
    // the literal for every record.
    assert!(st.allocs >= 4 * recs.len() as u64, "boxed: {st}");
}

#[test]
fn growing_vectors_reallocate_more_often_than_they_allocate() {
    let (_, st) = measure(|| realloc_growth::run(512));
    assert!(st.reallocs > 2 * st.allocs, "{st}");
    assert!(st.reallocs_moved() > 0, "{st}");
}

#[test]
fn single_threaded_workloads_free_everything_they_allocate() {
    let threaded = ["producer-consumer", "larson", "short-threads"];
    for w in ALL.iter().filter(|w| !threaded.contains(&w.name)) {
        let (_, st) = measure(|| (w.run)(500));
        assert!(st.allocs > 0, "{}: {st}", w.name);
        assert_eq!(st.live_bytes, 0, "{}: {st}", w.name);
    }
    let (_, st) = measure(|| allocmux_workloads::fragmentation::run(20_000));
    assert!(
        st.peak_live_bytes > 4 << 20,
        "long-lived objects pile up: {st}"
    );
}

#[test]
fn short_lived_threads_leave_their_blocks_to_the_parent_to_free() {
    let (_, st) = measure(|| short_threads::run(16));
    assert!(
        st.live_bytes < 0,
        "the parent frees what the threads allocated: {st}"
    );
}
