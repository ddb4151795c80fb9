//! What allocmux's parts agree on, in safe Rust with no allocator built in:
//! the profile format (written by the shim and by `allocmux::Profiler`,
//! read by the command line), the plain statistics it holds, the memory
//! timeline, the allocator names, the environment variables and how they
//! are read, and the table of direct shims.
//!
//! A program reads a profile with [`profile::parse`]:
//!
//! ```no_run
//! let text = std::fs::read_to_string("allocmux.prof").unwrap();
//! for process in allocmux_format::profile::parse(&text).unwrap() {
//!     println!("{} allocations", process.totals.allocation_calls());
//! }
//! ```
//!
//! Nothing here reads the process's state: the recorder
//! (`allocmux-recorder`) fills these types in, and `allocmux` re-exports
//! the ones a Rust program meets.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod allocator_stats;
mod backend;
pub mod byte_size;
pub mod clock;
pub mod counts;
pub mod direct;
pub mod func;
pub mod lifetimes;
pub mod marks;
pub mod profile;
pub mod settings;
pub mod site_counts;
pub mod timeline;
pub mod totals;

pub use allocator_stats::{AllocatorStats, GlibcStats, JemallocStats, MimallocStats};
pub use backend::{Backend, UnknownBackend};
pub use byte_size::ByteSize;
pub use counts::Counts;
pub use func::{FUNC_COUNT, Func};
pub use lifetimes::Lifetimes;
pub use site_counts::SiteCounts;
pub use totals::{EXACT_TIMING_BYTES, SIZE_BUCKETS, Totals};
