//! One cache read: `HashMap<String, Row>` looked up by an owned `String`
//! built from the request's `&str`, or by the `&str` itself.

use std::hint::black_box;

use allocmux_workloads::cache::{lookup_borrowed, lookup_owned, setup};
use criterion::{Criterion, criterion_group, criterion_main};

fn lookup(c: &mut Criterion) {
    let (map, log) = setup(1_024);
    let keys: Vec<&str> = log.lines().collect();
    let mut g = c.benchmark_group("cache");
    g.bench_function("owned key", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % keys.len();
            lookup_owned(&map, black_box(keys[i])).map(|r| r.score)
        })
    });
    g.bench_function("borrowed key", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % keys.len();
            lookup_borrowed(&map, black_box(keys[i])).map(|r| r.score)
        })
    });
    g.finish();
}

criterion_group!(benches, lookup);
criterion_main!(benches);
