//! `allocmux::criterion`'s measurements on a workload whose allocations
//! are known by construction: a domain name built on the heap
//! (`HeapName::new`, one `String`: 1 allocation of the name's length) and
//! inline (`InlineName::new`: none), then dropped. Time, allocation calls
//! and bytes per iteration side by side:
//!
//! ```text
//! cargo bench -p allocmux --bench allocations
//! ```
//!
//! `tests/criterion_measurements.rs` runs these benchmarks in criterion's
//! quick mode under each measurement (`AllocatorTime` too) and checks the
//! per-iteration estimates criterion writes.

use std::hint::black_box;

use allocmux_workloads::bounded_string::{HeapName, InlineName};
use criterion::{Criterion, measurement::Measurement};

#[global_allocator]
static ALLOC: allocmux::Counting<std::alloc::System> = allocmux::Counting::new(std::alloc::System);

/// The name every benchmark builds: 15 bytes.
pub const NAME: &str = "api.example.com";

/// Building a name on the heap and inline, under any measurement.
pub fn bounded_string<M: Measurement + 'static>(c: &mut Criterion<M>) {
    let mut g = c.benchmark_group("bounded-string");
    g.bench_function("heap", |b| b.iter(|| HeapName::new(black_box(NAME))));
    g.bench_function("inline", |b| b.iter(|| InlineName::new(black_box(NAME))));
    g.finish();
}

allocmux::criterion_main_with_allocs!(bounded_string);
