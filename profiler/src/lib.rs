//! allocmux: allocation profiling for Rust programs, and the recording core
//! shared with the `LD_PRELOAD` shim.
//!
//! The [`recorder`] module counts and times allocator calls per thread
//! without allocating or taking locks on the hot path; [`profile`] reads and
//! writes the profile format every allocmux tool shares; [`stats`] holds the
//! plain numbers; [`timeline`] keeps live and resident bytes over time.
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod profile;
#[allow(unsafe_code)]
pub mod recorder;
pub mod stats;
pub mod timeline;

pub use stats::{Func, SiteCounts, Totals};
