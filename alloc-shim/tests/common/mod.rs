//! Helpers of the shim's integration tests that only they use; the rest
//! (compiling the C fixtures, running programs with and without the shim
//! preloaded, reading the profiles they leave) comes from
//! `allocmux-testkit`, re-exported here so each test's `use common::*;`
//! sees it all.
#![allow(dead_code, unused_macros, unused_imports)] // each test binary uses a different subset

pub use allocmux_format::Func;
pub use allocmux_format::profile::{ProcessProfile, State};
pub use allocmux_testkit::*;
// The shortened form as `text` (it takes precedence over the glob's whole
// one): the shim's tests print outputs that can run to megabytes.
pub use allocmux_testkit::shortened as text;

/// Generates one `#[test]` per backend for each named `fn(backend: &str)`:
/// `per_backend!(f)` makes `f::system`, `f::jemalloc` and `f::mimalloc`.
/// `per_backend!(with_next: f)` adds `f::next`, with tcmalloc preloaded
/// after the shim (skipped where it is not installed, outside CI): for the
/// tests of what the shim promises whatever the allocator behind it
/// (exact counts, the C rules, `fork`).
macro_rules! per_backend {
    (@one $name:ident { $($more:tt)* }) => {
        mod $name {
            #[test]
            fn system() {
                super::$name("system")
            }
            #[test]
            fn jemalloc() {
                super::$name("jemalloc")
            }
            #[test]
            fn mimalloc() {
                super::$name("mimalloc")
            }
            $($more)*
        }
    };
    (with_next: $($name:ident),* $(,)?) => {$(
        per_backend!(@one $name {
            #[test]
            fn next() {
                if allocmux_testkit::next_library().is_some() {
                    super::$name("next")
                }
            }
        });
    )*};
    ($($name:ident),* $(,)?) => {$(
        per_backend!(@one $name {});
    )*};
}

/// What is wanted of a result and does not hold: each check is whether it
/// holds and what it wants, so a test reports every failed want at once.
pub fn unmet<W: Into<String>>(checks: impl IntoIterator<Item = (bool, W)>) -> Vec<String> {
    checks
        .into_iter()
        .filter(|(holds, _)| !holds)
        .map(|(_, want)| want.into())
        .collect()
}

/// `a - b` of two counters, signed.
pub fn delta(a: u64, b: u64) -> i128 {
    a as i128 - b as i128
}
