//! allocmux: allocation profiling for Rust programs, and the recording core
//! shared with the `LD_PRELOAD` shim.
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
//! happened between them (see [`Stats`] for what a difference means).
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
//! # How it counts
//!
//! Each thread counts on its own thread-local state with plain loads and
//! stores (no shared atomic operation per call); a snapshot sums the
//! threads under a short lock, and a thread that exits folds its counts
//! into shared totals from a pthread key destructor. Allocator time is an
//! unbiased estimate from timing a random sample of calls with the TSC.
//! The per-thread state belongs to the crate, not to the `Counting` value,
//! so [`measure`] and [`snapshot`] need no reference to the static, and
//! one `Counting` per process (the global allocator) is the supported
//! case. See the [`recorder`] module for the machinery, shared with the
//! `LD_PRELOAD` shim.
//!
//! # The rest of the crate
//!
//! The [`recorder`] module counts and times allocator calls per thread
//! without allocating or taking locks on the hot path; [`profile`] reads and
//! writes the profile format every allocmux tool shares; [`stats`] holds the
//! plain numbers; [`timeline`] keeps live and resident bytes over time.
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod counting;
pub mod profile;
mod profiler;
#[allow(unsafe_code)]
pub mod recorder;
pub mod stats;
pub mod timeline;

pub use counting::{Stats, measure, snapshot};
pub use profiler::{DEFAULT_FILE, DEFAULT_SAMPLE_BYTES, Profiler, ProfilerBuilder};
pub use recorder::{Backend, Counting, Switchable};
pub use stats::{Func, SiteCounts, Totals};
