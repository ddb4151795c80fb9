//! allocmux: allocation profiling for Rust programs, from inside, as the
//! `LD_PRELOAD` shim profiles any program from outside (the recording core
//! they share is the `allocmux-recorder` crate).
//!
//! # Counting allocations in a Rust program
//!
//! Wrap the allocator you use in [`Counting`] and make it the global
//! allocator; it counts every allocation, free and reallocation that goes
//! through it, the bytes, live and peak live bytes, and the time spent in
//! the allocator:
//!
//! ```no_run
//! #[global_allocator]
//! static ALLOC: allocmux::Counting<std::alloc::System> =
//!     allocmux::Counting::new(std::alloc::System);
//!
//! fn main() {
//!     let before = ALLOC.snapshot();
//!     let words: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
//!     let used = ALLOC.snapshot() - before;
//!     println!("{used}");
//!     println!("{} allocations, {} bytes", used.allocs, used.bytes_allocated);
//!     # drop(words);
//! }
//! ```
//!
//! Any [`GlobalAlloc`](core::alloc::GlobalAlloc) can be inside: jemalloc
//! and mimalloc through their crates work the same way.
//!
//! ```no_run
//! // With tikv-jemallocator (or mimalloc::MiMalloc) as a dependency:
//! #[global_allocator]
//! static ALLOC: allocmux::Counting<tikv_jemallocator::Jemalloc> =
//!     allocmux::Counting::new(tikv_jemallocator::Jemalloc);
//! # fn main() {}
//! ```
//!
//! [`snapshot`] (the same as `ALLOC.snapshot()`) covers the whole process,
//! every thread, including those that have exited; subtract two for what
//! happened between them (see [`Counts`] for what a difference means).
//!
//! # One closure: `measure`
//!
//! [`measure`] runs a closure and returns its result with what it
//! allocated on the calling thread, exactly: other threads' allocations
//! meanwhile are not mixed in.
//!
//! ```no_run
//! #[global_allocator]
//! static ALLOC: allocmux::Counting<std::alloc::System> =
//!     allocmux::Counting::new(std::alloc::System);
//!
//! fn main() {
//!     let (sum, stats) = allocmux::measure(|| {
//!         let v: Vec<u64> = (0..10_000).collect();
//!         v.iter().sum::<u64>()
//!     });
//!     assert_eq!(stats.allocs, 1);
//!     assert_eq!(stats.peak_live_bytes, 80_000);
//!     println!("sum {sum}: {stats}");
//! }
//! ```
//!
//! # Choosing the allocator at start-up: `Switchable`
//!
//! [`Switchable`] is the system allocator, jemalloc or mimalloc, as
//! `ALLOCMUX_ALLOCATOR` says when the process starts, so one build can be
//! compared under all three (`allocmux compare -- ./target/release/app`
//! needs no `LD_PRELOAD` for it). It composes with [`Counting`]:
//!
//! ```no_run
//! #[global_allocator]
//! static ALLOC: allocmux::Counting<allocmux::Switchable> =
//!     allocmux::Counting::new(allocmux::Switchable::new());
//!
//! fn main() {
//!     let (_, stats) = allocmux::measure(|| vec![1u32; 100]);
//!     println!("{}: {stats}", ALLOC.inner().backend().name());
//! }
//! ```
//!
//! ```text
//! $ ALLOCMUX_ALLOCATOR=mimalloc ./target/release/app
//! ```
//!
//! The backends other than the system's are the cargo features `jemalloc`
//! and `mimalloc` (both on by default).
//!
//! The `allocmux` command line knows such a binary by marks the crate
//! leaves in its ELF file, and preloads nothing for it: `compare` sets
//! `ALLOCMUX_ALLOCATOR` for each run. With [`Counting`] around the switch,
//! its recorded runs are recorded by the program itself: a program whose
//! global allocator is a `Counting` writes the shim's profile, counts and
//! (with `ALLOCMUX_STACKS`) stacks, to `ALLOCMUX_OUTPUT` when that is set
//! and no shim is preloaded, from before `main` to its exit (`atexit`).
//! A [`Profiler`] the program builds takes that recording over.
//!
//! # Where the allocations come from: `Profiler`
//!
//! With [`Counting`] as the global allocator, a [`Profiler`] records the
//! call stack of a sample of allocations (or of every one) while it
//! lives, and writes them with the process's counts when dropped, in the
//! profile format of the `LD_PRELOAD` shim, so the `allocmux` CLI's
//! `report`, `export` (folded, pprof, JSON, SVG flamegraph) and `diff`
//! work on it:
//!
//! ```no_run
//! #[global_allocator]
//! static ALLOC: allocmux::Counting<std::alloc::System> =
//!     allocmux::Counting::new(std::alloc::System);
//!
//! fn main() {
//!     let _profiler = allocmux::Profiler::builder()
//!         .sample_bytes(64 * 1024) // or .exact()
//!         .file("app.prof")
//!         .build();
//!     let words: Vec<String> = (0..100_000).map(|i| i.to_string()).collect();
//!     # drop(words);
//! } // app.prof is written here
//! ```
//!
//! ```text
//! $ allocmux export --format svg -o app.svg app.prof
//! ```
//!
//! The CLI trims allocmux's own frames and Rust's allocator glue, so a
//! stack's leaf is the program's request (`alloc::alloc::alloc`, `RawVec`,
//! ... under the program's function). Allocations the recorder makes for
//! itself (its stack table, the copy it writes) are counted as allocations
//! without a stack.
//!
//! # The allocator's own statistics: `AllocatorStats`
//!
//! [`Stats`] says what the program asked for; [`AllocatorStats`] says what
//! the allocator holds to serve it: jemalloc's allocated, active, resident,
//! mapped and retained bytes (through tikv-jemalloc-ctl, after advancing
//! jemalloc's `epoch` so they are fresh), mimalloc's process information
//! (committed bytes, peak RSS, page faults), or glibc's `mallinfo2` (in use,
//! free, arena, mmapped, releasable). Read them for a backend, or for the
//! one a [`Switchable`] uses:
//!
//! ```no_run
//! use allocmux::{AllocatorStats, Backend};
//!
//! #[global_allocator]
//! static ALLOC: allocmux::Counting<allocmux::Switchable> =
//!     allocmux::Counting::new(allocmux::Switchable::new());
//!
//! fn main() {
//!     let cache: Vec<Vec<u8>> = (0..1000).map(|i| vec![0; 100 + i]).collect();
//!     let live = ALLOC.snapshot().live_bytes as u64;
//!     if let Some(stats) = ALLOC.inner().allocator_stats() {
//!         // jemalloc: 612.0 KiB allocated, 680.0 KiB active, 2.9 MiB resident, ...
//!         println!("{stats}");
//!         if let Some(x) = stats.overhead(live) {
//!             println!("{x:.2} bytes held per live byte");
//!         }
//!     }
//!     // With `Counting<tikv_jemallocator::Jemalloc>`, name the backend:
//!     if let Some(AllocatorStats::Jemalloc(j)) = allocmux::read_allocator_stats(Backend::Jemalloc) {
//!         println!("{} bytes free in active pages", j.active - j.allocated);
//!     }
//!     # drop(cache);
//! }
//! ```
//!
//! A read takes a few microseconds and some of the allocator's locks: call
//! it now and then, not per allocation.
//!
//! # Allocations in criterion benchmarks (feature `criterion`)
//!
//! `allocmux::criterion::{Allocations, BytesAllocated, AllocatorTime}`
//! are criterion 0.8 measurements: allocation
//! calls, bytes and time inside the allocator per iteration, counted
//! exactly on the benchmark's thread, with criterion's statistics, change
//! detection and `estimates.json`. One line switches a benchmark to one:
//!
//! ```no_run
//! # #[cfg(feature = "criterion")] mod bench {
//! use std::hint::black_box;
//! use criterion::{Criterion, criterion_group, criterion_main};
//! use allocmux::criterion::Allocations;
//!
//! #[global_allocator]
//! static ALLOC: allocmux::Counting<std::alloc::System> =
//!     allocmux::Counting::new(std::alloc::System);
//!
//! fn bench(c: &mut Criterion<Allocations>) {
//!     c.bench_function("to_owned", |b| b.iter(|| black_box("a name").to_owned()));
//! }
//!
//! criterion_group! {
//!     name = benches;
//!     config = Criterion::default().with_measurement(Allocations);
//!     targets = bench
//! }
//! criterion_main!(benches);
//! # }
//! # fn main() {}
//! ```
//!
//! To see time, allocation calls and bytes of the same benchmarks side by
//! side, write the benchmark function once, generic over the measurement,
//! and let `allocmux::criterion_main_with_allocs!` run it under each and print a
//! table after criterion's report:
//!
//! ```no_run
//! # #[cfg(feature = "criterion")] mod bench {
//! use std::hint::black_box;
//! use criterion::{Criterion, measurement::Measurement};
//!
//! #[global_allocator]
//! static ALLOC: allocmux::Counting<std::alloc::System> =
//!     allocmux::Counting::new(std::alloc::System);
//!
//! fn names<M: Measurement + 'static>(c: &mut Criterion<M>) {
//!     c.bench_function("to_owned", |b| b.iter(|| black_box("a name").to_owned()));
//!     c.bench_function("len", |b| b.iter(|| black_box("a name").len()));
//! }
//!
//! allocmux::criterion_main_with_allocs!(names);
//! # }
//! # fn main() {}
//! ```
//!
//! ```text
//! $ cargo bench --bench names -- --quick
//! ...
//! allocmux: per iteration, as criterion estimated it (allocation calls and bytes are exact, ...)
//! benchmark          time        allocs         bytes
//! len              0.6 ns          0.00           0 B
//! to_owned        16.8 ns          1.00           6 B
//! ```
//!
//! Use [`std::hint::black_box`], not the volatile-read `black_box` of
//! criterion's past, which copied values through memory and distorted
//! comparisons between values of different sizes.
//!
//! # Allocation budgets in tests (feature `budget`)
//!
//! `Budget` runs a closure and fails when it allocates more than allowed:
//! allocation calls, bytes, peak live bytes, or bytes still live when it
//! returns. Counts are the test thread's own, so budgets in tests that
//! `cargo test` runs in parallel never see each other's allocations:
//!
//! ```no_run
//! # #[cfg(feature = "budget")] mod test {
//! #[global_allocator]
//! static ALLOC: allocmux::Counting<std::alloc::System> =
//!     allocmux::Counting::new(std::alloc::System);
//!
//! fn key(id: u32) -> String {
//!     format!("user:{id}")
//! }
//!
//! #[test]
//! fn key_allocates_once_and_keeps_nothing() {
//!     allocmux::Budget::new().allocs(1).leaked_bytes(0).check(|| key(7));
//! }
//!
//! #[test]
//! fn key_stays_within_its_baseline() {
//!     // Compared with [key] in allocmux-budgets.toml, next to Cargo.toml;
//!     // `ALLOCMUX_BLESS=1 cargo test` records it.
//!     allocmux::Budget::baseline("key").check(|| key(7));
//! }
//! # }
//! # fn main() {}
//! ```
//!
//! A failing budget runs the closure again with call stacks on (that
//! thread's only) and panics with what went over and where it was
//! allocated, in about 20 lines at most; with `.allocs(0)` above:
//!
//! ```text
//! allocmux: allocation budget exceeded
//!   allocation calls: 1 call, budget 0 calls
//! 1 block allocated, by call stack (yours first):
//!          1 × 10 B  app::key (src/lib.rs:6)
//!                    <- app::key_allocates_once_and_keeps_nothing::{{closure}} (src/lib.rs:11)
//! ```
//!
//! The repository's `docs/rust-workflow.md` has the details of both.
//!
//! # How it counts
//!
//! Each thread counts on its own thread-local state with plain loads and
//! stores (no shared atomic operation per call); a snapshot sums the
//! threads under a short lock, and a thread that exits folds its counts
//! into shared totals from a pthread key destructor, before `join`
//! returns. The state is a `thread_local!` with a `const` initialiser and
//! no `Drop`, so it needs no lazy initialisation or destructor (either
//! would allocate inside `alloc`) and is usable from any destructor.
//!
//! Bytes are the `Layout` sizes the program asked for, exactly, and the
//! same whichever allocator is inside (a `realloc` frees its old size and
//! allocates its new one). Allocator time is an unbiased estimate: a
//! random 1 in 256 calls, each thread's first calls and every block of
//! 64 KiB or more are timed with the TSC, calibrated against
//! `CLOCK_MONOTONIC`. See [`Counts`] for how exact each figure is.
//!
//! The per-thread state belongs to the crate, not to the `Counting` value,
//! so [`measure`] and [`snapshot`] need no reference to the static, and
//! one `Counting` per process (the global allocator) is the supported
//! case. The recording core is the one the `LD_PRELOAD` shim uses
//! (`allocmux-recorder`); the profile format and the plain statistics are
//! in `allocmux-format`, which reads profiles without either.
//!
//! # Examples and cost
//!
//! From a checkout of the repository:
//!
//! ```text
//! $ cargo run -p allocmux --example counting
//! $ ALLOCMUX_ALLOCATOR=mimalloc cargo run -p allocmux --example switchable
//! $ cargo run -p allocmux --example profiler -- exact    # writes allocmux-example.prof
//! $ cargo bench -p allocmux --bench allocations          # time, allocations, bytes
//! ```
//!
//! What `Counting` costs per allocation and free, in instructions and in
//! nanoseconds, with one and two threads, is measured by
//! `scripts/bench.sh` and kept in the repository's `BENCHMARKS.md`.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(feature = "budget")]
mod budget;
#[cfg(feature = "criterion")]
pub mod criterion;
mod profiler;

/// How a [`Profiler`] records stacks ([`Profiler::mode`]).
pub use allocmux_format::profile::StackMode;
pub use allocmux_format::{
    AllocatorStats, Backend, Counts, Func, GlibcStats, JemallocStats, MimallocStats, SiteCounts,
    Totals, UnknownBackend,
};
pub use allocmux_recorder::readout::{measure, snapshot};
pub use allocmux_recorder::{Counting, Switchable};
#[cfg(feature = "budget")]
pub use budget::{BLESS_ENV, BUDGETS_FILE, Budget, Exceeded};
pub use profiler::{DEFAULT_FILE, DEFAULT_SAMPLE_BYTES, Profiler, ProfilerBuilder};

/// Reads the statistics of `backend` (see [`AllocatorStats`]), or `None`
/// if this build does not have it (the `jemalloc` and `mimalloc`
/// features), its statistics cannot be read, or, for the system
/// allocator, the C library is not glibc. A few microseconds, and some of
/// the allocator's locks: not for a hot path.
pub fn read_allocator_stats(backend: Backend) -> Option<AllocatorStats> {
    allocmux_recorder::allocator_stats::read(backend)
}
