//! One edit distance: allocating fresh vectors per call and per row, or
//! reusing one `Levenshtein`'s buffers.

use std::hint::black_box;

use allocmux_workloads::edit_distance::{Levenshtein, levenshtein_naive};
use allocmux_workloads::rng::words;
use criterion::{Criterion, criterion_group, criterion_main};

fn distance(c: &mut Criterion) {
    let pairs: Vec<(String, String)> = words(256, 1).zip(words(256, 2)).collect();
    let mut g = c.benchmark_group("edit-distance");
    g.bench_function("naive", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % pairs.len();
            let (x, y) = &pairs[i];
            levenshtein_naive(black_box(x), black_box(y))
        })
    });
    g.bench_function("fixed", |b| {
        let mut lev = Levenshtein::default();
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % pairs.len();
            let (x, y) = &pairs[i];
            lev.distance(black_box(x), black_box(y))
        })
    });
    g.finish();
}

criterion_group!(benches, distance);
criterion_main!(benches);
