//! What counting costs per allocation/free pair: `Counting<System>` and
//! `Counting<Jemalloc>` against the bare allocators, and against a naive
//! counting wrapper with global `SeqCst` atomics (what `stats_alloc` does),
//! on one thread and on two at once.
//!
//! ```text
//! cargo bench -p allocmux --bench counting -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! The wrappers are called directly as `GlobalAlloc` values (the bench's
//! own allocator stays the system's), which is what `#[global_allocator]`
//! compiles to: `__rust_alloc` calls the static's `alloc`, inlined.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::Barrier;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use allocmux::{Counting, Switchable};
use criterion::{Criterion, criterion_group};
use tikv_jemallocator::Jemalloc;

/// The yardstick: `stats_alloc`'s `StatsAlloc`, two `SeqCst` read-modify-
/// writes on shared counters per call.
struct Naive<A> {
    inner: A,
    allocations: AtomicUsize,
    deallocations: AtomicUsize,
    bytes_allocated: AtomicUsize,
    bytes_deallocated: AtomicUsize,
}

impl<A> Naive<A> {
    const fn new(inner: A) -> Self {
        Naive {
            inner,
            allocations: AtomicUsize::new(0),
            deallocations: AtomicUsize::new(0),
            bytes_allocated: AtomicUsize::new(0),
            bytes_deallocated: AtomicUsize::new(0),
        }
    }
}

// SAFETY: forwards every call unchanged.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Naive<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.allocations.fetch_add(1, SeqCst);
        self.bytes_allocated.fetch_add(layout.size(), SeqCst);
        // SAFETY: forwarded.
        unsafe { self.inner.alloc(layout) }
    }
    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.deallocations.fetch_add(1, SeqCst);
        self.bytes_deallocated.fetch_add(layout.size(), SeqCst);
        // SAFETY: forwarded.
        unsafe { self.inner.dealloc(ptr, layout) }
    }
}

static COUNTING_SYSTEM: Counting<System> = Counting::new(System);
static COUNTING_JEMALLOC: Counting<Jemalloc> = Counting::new(Jemalloc);
static NAIVE_SYSTEM: Naive<System> = Naive::new(System);
static NAIVE_JEMALLOC: Naive<Jemalloc> = Naive::new(Jemalloc);
static SWITCHABLE: Switchable = Switchable::new();

const LAYOUT: Layout = match Layout::from_size_align(64, 8) {
    Ok(l) => l,
    Err(_) => panic!(),
};

/// One allocation and its free.
#[inline(always)]
fn pair<A: GlobalAlloc>(a: &A) {
    // SAFETY: a non-zero layout; the block is freed once, with it.
    unsafe {
        let p = a.alloc(LAYOUT);
        a.dealloc(black_box(p), LAYOUT);
    }
}

/// Each of `threads` threads runs `iters` pairs at once; the time is the
/// slowest thread's, from a common start, so per iteration it is the
/// time of one pair on each thread while the others run too.
fn concurrent<A: GlobalAlloc + Sync>(a: &A, threads: usize, iters: u64) -> Duration {
    let start = Barrier::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    pair(a); // the thread's first call sets up its state
                    start.wait();
                    let t = Instant::now();
                    for _ in 0..iters {
                        pair(a);
                    }
                    t.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap()
    })
}

macro_rules! allocators {
    ($f:ident) => {
        $f!("system", &System);
        $f!("counting<system>", &COUNTING_SYSTEM);
        $f!("naive<system>", &NAIVE_SYSTEM);
        $f!("jemalloc", &Jemalloc);
        $f!("counting<jemalloc>", &COUNTING_JEMALLOC);
        $f!("naive<jemalloc>", &NAIVE_JEMALLOC);
    };
}

fn one_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("pair, 1 thread");
    macro_rules! bench {
        ($name:expr, $a:expr) => {
            g.bench_function($name, |b| b.iter(|| pair($a)));
        };
    }
    allocators!(bench);
    bench!("switchable(system)", &SWITCHABLE);
    g.finish();
}

fn two_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("pair, 2 threads");
    macro_rules! bench {
        ($name:expr, $a:expr) => {
            g.bench_function($name, |b| b.iter_custom(|iters| concurrent($a, 2, iters)));
        };
    }
    allocators!(bench);
    g.finish();
}

criterion_group!(benches, one_thread, two_threads);

/// An allocator's name and a loop of `n` pairs through it.
type Loop = (&'static str, fn(u32));

/// A [`Loop`] for every allocator of `allocators!`, in groups of three:
/// bare, counting, naive.
fn loops() -> Vec<Loop> {
    let mut v: Vec<Loop> = Vec::new();
    macro_rules! add {
        ($name:expr, $a:expr) => {
            v.push(($name, |n| (0..n).for_each(|_| pair($a))));
        };
    }
    allocators!(add);
    v
}

/// `counting --pairs NAME N`: N pairs through one allocator and nothing
/// else, for `valgrind --tool=callgrind`, whose instruction counts do not
/// move with the machine's load as wall time does (`scripts/
/// counting_instructions.sh` takes the difference of two N to cancel the
/// start-up).
fn pairs_only(name: &str, n: u32) {
    let (_, run) = loops()
        .into_iter()
        .find(|(k, _)| *k == name)
        .expect("an allocator's name");
    run(n);
}

/// `counting --rounds R`: every allocator in turn, R rounds of 2,000,000
/// pairs each on one thread, interleaved so that load on a shared machine
/// hits them all alike; prints each one's fastest round and its median,
/// in ns per pair, and the fastest round's excess over the bare allocator.
fn rounds(r: usize) {
    const N: u32 = 2_000_000;
    let loops = loops();
    let mut times = vec![Vec::new(); loops.len()];
    for _ in 0..r {
        for ((_, run), t) in loops.iter().zip(&mut times) {
            let start = Instant::now();
            run(N);
            t.push(start.elapsed().as_secs_f64() * 1e9 / f64::from(N));
        }
    }
    for t in &mut times {
        t.sort_by(f64::total_cmp);
    }
    println!("ns per alloc/free pair of 64 B, 1 thread, {r} rounds of {N}");
    println!(
        "{:<20} {:>8} {:>8} {:>14}",
        "allocator", "min", "median", "min over bare"
    );
    for (k, ((name, _), t)) in loops.iter().zip(&times).enumerate() {
        let bare = times[k / 3 * 3][0];
        println!(
            "{name:<20} {:>8.2} {:>8.2} {:>+14.2}",
            t[0],
            t[t.len() / 2],
            t[0] - bare
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match &args[1..] {
        [flag, name, n] if flag == "--pairs" => {
            return pairs_only(name, n.parse().expect("a number of pairs"));
        }
        [flag, r] if flag == "--rounds" => return rounds(r.parse().expect("a number of rounds")),
        _ => {}
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
