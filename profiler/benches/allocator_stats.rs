//! What one `allocmux::read_allocator_stats` costs, per backend: what the shim's
//! writer thread pays per flush (every 500 ms) to put the allocator's own
//! figures in the profile. Each allocator holds 100 000 live 64-byte blocks
//! and, in the `fragmented` case, 50 000 freed ones between them (glibc's
//! `mallinfo2` walks its free lists, so that is its slow case).
//!
//! ```text
//! cargo bench -p allocmux --bench allocator_stats -- --warm-up-time 1 --measurement-time 3
//! ```

use std::ffi::c_void;
use std::hint::black_box;

use allocmux::Backend;
use criterion::{Criterion, criterion_group, criterion_main};

const BLOCKS: usize = 100_000;

type Alloc = unsafe fn(usize) -> *mut c_void;
type Free = unsafe fn(*mut c_void);

unsafe fn glibc_malloc(n: usize) -> *mut c_void {
    // SAFETY: plain forward.
    unsafe { libc::malloc(n) }
}
unsafe fn glibc_free(p: *mut c_void) {
    // SAFETY: a block of glibc's.
    unsafe { libc::free(p) }
}
unsafe fn je_malloc(n: usize) -> *mut c_void {
    // SAFETY: plain forward.
    unsafe { tikv_jemalloc_sys::malloc(n) }
}
unsafe fn je_free(p: *mut c_void) {
    // SAFETY: a block of jemalloc's.
    unsafe { tikv_jemalloc_sys::free(p) }
}
unsafe fn mi_malloc(n: usize) -> *mut c_void {
    // SAFETY: plain forward.
    unsafe { libmimalloc_sys::mi_malloc(n) }
}
unsafe fn mi_free(p: *mut c_void) {
    // SAFETY: a block of mimalloc's.
    unsafe { libmimalloc_sys::mi_free(p) }
}

/// `BLOCKS` live blocks of 64 bytes from the allocator, with every other
/// one of twice as many freed when `fragmented`.
fn populate(alloc: Alloc, free: Free, fragmented: bool) -> Vec<*mut c_void> {
    let n = if fragmented { 2 * BLOCKS } else { BLOCKS };
    // SAFETY: non-zero sizes; each freed block is one of these, once.
    let mut blocks: Vec<_> = (0..n).map(|_| unsafe { alloc(64) }).collect();
    if fragmented {
        let mut kept = Vec::with_capacity(BLOCKS);
        for (i, p) in blocks.drain(..).enumerate() {
            if i % 2 == 0 {
                kept.push(p);
            } else {
                // SAFETY: as above.
                unsafe { free(p) };
            }
        }
        blocks = kept;
    }
    blocks
}

fn bench(c: &mut Criterion) {
    let backends: [(Backend, Alloc, Free); 3] = [
        (Backend::System, glibc_malloc, glibc_free),
        (Backend::Jemalloc, je_malloc, je_free),
        (Backend::Mimalloc, mi_malloc, mi_free),
    ];
    let mut g = c.benchmark_group("allocator_stats_read");
    for fragmented in [false, true] {
        for (backend, alloc, free) in backends {
            let blocks = populate(alloc, free, fragmented);
            let case = if fragmented { "fragmented" } else { "compact" };
            g.bench_function(format!("{}/{case}", backend.name()), |b| {
                b.iter(|| black_box(allocmux::read_allocator_stats(black_box(backend))))
            });
            for p in blocks {
                // SAFETY: live blocks of this allocator, freed once.
                unsafe { free(p) };
            }
        }
    }
    // Where jemalloc's time goes: advancing the epoch alone (the refresh
    // that merges every arena's statistics), without the five reads.
    g.bench_function("jemalloc/epoch_only", |b| {
        b.iter(|| black_box(tikv_jemalloc_ctl::epoch::advance()))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
