//! Test support shared by allocmux's crates (not published).
//!
//! - [`process`]: every process a test starts, run in its own process group
//!   and killed with it after [`process::TIMEOUT`], so no test can hang;
//!   outputs as text for assertions and messages.
//! - [`fixtures`]: C, C++ (or Rust) fixtures compiled once per test binary,
//!   and small C programs a test writes.
//! - `shim` (feature `shim`): the shim built from this tree, and running
//!   programs under it with a scrubbed environment.
//! - `profiles` (feature `shim`): reading the profiles a run left, and
//!   summaries of them for messages.
//! - [`fuzz`]: real profiles and random edits of them, for fuzzing what
//!   reads profiles.
//! - [`tools`]: a program a test needs from the system, or a skip (a
//!   failure on CI).
//!
//! The crate root re-exports all but [`fuzz`], so a test file's
//! `use allocmux_testkit::*;` (or its `common` module's) sees them.
//!
//! The feature `shim` brings in the CLI crate, whose build script builds
//! the shim; without it (the profile reader's fuzzing needs only
//! [`fuzz`]) no shim or CLI is built.

pub mod fixtures;
pub mod fuzz;
pub mod process;
#[cfg(feature = "shim")]
pub mod profiles;
#[cfg(feature = "shim")]
pub mod shim;
pub mod tools;

pub use fixtures::*;
pub use process::*;
#[cfg(feature = "shim")]
pub use profiles::*;
#[cfg(feature = "shim")]
pub use shim::*;
pub use tools::*;
