//! Constructing a domain name: `String` vs inline buffer, with and without
//! validation. `std::hint::black_box` keeps the input opaque and the result
//! alive; the volatile-read `black_box` of old distorted exactly this
//! comparison, because it copies the whole value back (a 254-byte inline
//! name against a 24-byte `String`).

use std::hint::black_box;

use allocmux_workloads::bounded_string::{HeapName, InlineName};
use criterion::{Criterion, criterion_group, criterion_main};

fn construct(c: &mut Criterion) {
    let mut g = c.benchmark_group("bounded-string");
    for (label, name) in [
        ("short", "api.example.com"),
        (
            "long",
            "a-rather-long-label.with-several-parts.service-name.region-1.internal.example.org",
        ),
    ] {
        g.bench_function(format!("heap validated {label}"), |b| {
            b.iter(|| HeapName::new(black_box(name)))
        });
        g.bench_function(format!("heap unvalidated {label}"), |b| {
            b.iter(|| HeapName::new_unvalidated(black_box(name)))
        });
        g.bench_function(format!("inline validated {label}"), |b| {
            b.iter(|| InlineName::new(black_box(name)))
        });
        g.bench_function(format!("inline unvalidated {label}"), |b| {
            b.iter(|| InlineName::new_unvalidated(black_box(name)))
        });
    }
    g.finish();
}

criterion_group!(benches, construct);
criterion_main!(benches);
