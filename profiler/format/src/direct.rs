//! Direct shims: copies of the preload library whose malloc-family exports
//! are one hook table's functions themselves, rather than one indirect
//! jump through the table in force (see docs/performance.md). The shim
//! exports each such table's hooks under [`hook_symbol`]'s names and a
//! one-byte marker, [`MARKER`]; a direct shim is the library with the
//! family's dynamic symbols pointed at one table's hooks and the marker
//! set to that table's code. The CLI writes them; the shim reads the
//! marker at its first call and takes the table's backend and mode.
//!
//! The tables with a direct shim are default recording and sampled stacks
//! under glibc and jemalloc, the sampled level under every backend, and
//! forwarding without recording under jemalloc and mimalloc (the
//! forwarders: under glibc the CLI preloads nothing instead). mimalloc's
//! exactly counted hooks have none: they are chosen at run time, after
//! checking that its block layout is the one the shim reads sizes from,
//! which an export fixed in the file cannot follow (the sampled level
//! reads no sizes).
//! Exact mode has none: a call there costs thousands of instructions, and
//! one jump is nothing to them.

use crate::profile::StackMode;
use crate::settings::Level;
use crate::{Backend, Func};

/// One hook table with a direct shim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectTable {
    /// The table's name in its hooks' symbols and in the library's file
    /// name.
    pub name: &'static str,
    /// The marker's value in its direct shim (never [`UNIVERSAL`]).
    pub code: u8,
    /// The backend its hooks call.
    pub backend: Backend,
    /// Whether its hooks sample stacks (else stacks are off).
    pub sampled: bool,
    /// Whether its hooks record at all (else they only forward).
    pub recorded: bool,
    /// Whether they record at the sampled level (the stack sample alone,
    /// nothing counted; see `stacks::enter_sampled_level`).
    pub sampled_level: bool,
}

/// The marker's value in the library as built: no table's exports.
pub const UNIVERSAL: u8 = 0xa5;

/// The marker's symbol.
pub const MARKER: &str = "allocmux_direct_table";

/// Every table with a direct shim.
pub const TABLES: [DirectTable; 9] = [
    DirectTable {
        name: "system",
        code: 1,
        backend: Backend::System,
        sampled: false,
        recorded: true,
        sampled_level: false,
    },
    DirectTable {
        name: "system_sampled",
        code: 2,
        backend: Backend::System,
        sampled: true,
        recorded: true,
        sampled_level: false,
    },
    DirectTable {
        name: "jemalloc",
        code: 3,
        backend: Backend::Jemalloc,
        sampled: false,
        recorded: true,
        sampled_level: false,
    },
    DirectTable {
        name: "jemalloc_sampled",
        code: 4,
        backend: Backend::Jemalloc,
        sampled: true,
        recorded: true,
        sampled_level: false,
    },
    DirectTable {
        name: "jemalloc_forward",
        code: 5,
        backend: Backend::Jemalloc,
        sampled: false,
        recorded: false,
        sampled_level: false,
    },
    DirectTable {
        name: "mimalloc_forward",
        code: 6,
        backend: Backend::Mimalloc,
        sampled: false,
        recorded: false,
        sampled_level: false,
    },
    DirectTable {
        name: "system_sampled_level",
        code: 7,
        backend: Backend::System,
        sampled: true,
        recorded: true,
        sampled_level: true,
    },
    DirectTable {
        name: "jemalloc_sampled_level",
        code: 8,
        backend: Backend::Jemalloc,
        sampled: true,
        recorded: true,
        sampled_level: true,
    },
    DirectTable {
        name: "mimalloc_sampled_level",
        code: 9,
        backend: Backend::Mimalloc,
        sampled: true,
        recorded: true,
        sampled_level: true,
    },
];

impl DirectTable {
    /// The table a marker value names, if any.
    pub fn from_code(code: u8) -> Option<DirectTable> {
        TABLES.into_iter().find(|t| t.code == code)
    }

    /// The table serving `backend` at `level` with stacks in `mode`, if it
    /// has a direct shim (exact mode has none).
    pub fn serving(backend: Backend, level: Level, mode: StackMode) -> Option<DirectTable> {
        let sampled = match mode {
            StackMode::Off => false,
            StackMode::Sample { .. } => true,
            StackMode::Exact => return None,
        };
        let sampled_level = match level {
            Level::Off => return Self::forwarding(backend),
            Level::Sampled => true,
            Level::Exact => false,
        };
        TABLES.into_iter().find(|t| {
            t.recorded
                && t.sampled_level == sampled_level
                && t.backend == backend
                && t.sampled == sampled
        })
    }

    /// The allocator's own function that this table's export of `func` is
    /// bound to, instead of the table's hook, where that function already
    /// keeps the shim's C rules (`alloc-shim/src/posix.rs`): a forwarder's
    /// `malloc` and `free`, and jemalloc's `calloc`. Each sets `errno` to
    /// `ENOMEM` when it fails (jemalloc itself, mimalloc through the error
    /// handler the shim registers at start-up) and ignores `free(NULL)`; the
    /// hook would add one jump to each call, 2% of a `malloc`/`free` pair's
    /// instructions under mimalloc. The other functions keep their hooks:
    /// mimalloc's `calloc` sets no `errno` when the product overflows, and
    /// `realloc(p, 0)`, the alignment rules and `malloc_usable_size(NULL)`
    /// are glibc's only through the hooks. A symbol of the shim's static
    /// symbol table (the allocators' functions are not exported); where it
    /// is missing (a stripped shim) the export stays the hook.
    pub fn entry_point(&self, func: Func) -> Option<&'static str> {
        if self.recorded {
            return None;
        }
        let (malloc, free, calloc) = match self.backend {
            Backend::Jemalloc => ("_rjem_malloc", "_rjem_free", Some("_rjem_calloc")),
            Backend::Mimalloc => ("mi_malloc", "mi_free", None),
            // glibc needs no forwarder, and the next library has no
            // direct shim: its functions are found at run time.
            Backend::System | Backend::Next => return None,
        };
        match func {
            Func::Malloc => Some(malloc),
            Func::Free => Some(free),
            Func::Calloc => calloc,
            _ => None,
        }
    }

    /// The forwarder of `backend`: its table that records nothing (glibc
    /// has none: running without the shim is its forwarder).
    pub fn forwarding(backend: Backend) -> Option<DirectTable> {
        TABLES
            .into_iter()
            .find(|t| !t.recorded && t.backend == backend)
    }
}

/// The symbol under which the shim exports table `table`'s hook of the
/// malloc-family function `func`. The shim spells the same names out with
/// `concat!` (attributes take no function calls); the CLI's tests check
/// that every one is there.
pub fn hook_symbol(table: &str, func: &str) -> String {
    format!("allocmux_direct_{table}_{func}")
}
