//! Allocation budgets for tests (cargo feature `budget`): [`Budget`] runs
//! a closure, counts what it allocates on the calling thread, and fails
//! when that goes over a limit or over a checked-in baseline, saying where
//! the allocations came from.
//!
//! By job: this module is the API and the check; `file` reads and writes
//! the baseline file (TOML, through the `toml` crate); `stacks` is the
//! failing path, the closure run again with its allocations' call stacks
//! captured and symbolized (the `backtrace` crate).

mod file;
mod stacks;

use std::fmt::{self, Write as _};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use allocmux_format::ByteSize;
use allocmux_format::Counts;
use allocmux_recorder::readout::{measure, require_counting};
use serde::{Deserialize, Serialize};

use file::{bless, read_file};
use stacks::stacks_report;

/// The baseline file's name, in the directory of the crate under test
/// (`CARGO_MANIFEST_DIR`, which `cargo test` sets) unless
/// [`Budget::baseline_file`] names another.
pub const BUDGETS_FILE: &str = "allocmux-budgets.toml";

/// Set to `1` (any value but empty or `0`), baseline budgets record what
/// the closures allocate now instead of comparing with the file.
pub const BLESS_ENV: &str = "ALLOCMUX_BLESS";

/// An allocation budget: limits on what a closure may allocate on the
/// calling thread, checked exactly.
///
/// ```no_run
/// #[global_allocator]
/// static ALLOC: allocmux::Counting<std::alloc::System> =
///     allocmux::Counting::new(std::alloc::System);
///
/// fn greeting(name: &str) -> String {
///     format!("hello, {name}")
/// }
///
/// #[test]
/// fn greeting_allocates_once() {
///     allocmux::Budget::new()
///         .allocs(1)
///         .bytes(64)
///         .leaked_bytes(0)
///         .check(|| greeting("world"));
/// }
///
/// #[test]
/// fn greeting_stays_within_its_baseline() {
///     // Compared with the entry `greeting` of allocmux-budgets.toml;
///     // `ALLOCMUX_BLESS=1 cargo test` records it.
///     allocmux::Budget::baseline("greeting").check(|| greeting("world"));
/// }
/// ```
///
/// The four figures:
///
/// - **allocs**: allocation calls (`alloc`, `alloc_zeroed`, `realloc`: each
///   asks the allocator for a block);
/// - **bytes**: bytes requested, the sizes asked for (`realloc`'s new
///   size included), however many were freed again;
/// - **peak_bytes**: how far the thread's live bytes rose above where they
///   were when the closure started, at most: the memory the closure needed
///   at once;
/// - **leaked_bytes**: bytes requested by the closure and not freed when it
///   returned (what it returns is dropped before that, so a returned `Vec`
///   is not a leak; a `Box::leak`, or a block stored in a static, is).
///
/// Counts are the calling thread's own (see [`measure`]), so budgets in
/// tests running in parallel do not see each other's allocations; threads
/// the closure spawns are not counted.
///
/// On failure, the closure is run a second time on the same thread with
/// each allocation's call stack recorded (only that thread's, only then),
/// and the message shows what went over and the allocations grouped by
/// call stack, largest first, each as its first frames outside the
/// standard library and allocmux: the function of yours that allocated and
/// its caller, with file and line. A closure that allocates differently
/// when run again (a first-use initialisation, say) gets stacks of the
/// second run, and the message says so.
#[derive(Clone, Debug, Default)]
#[must_use = "a budget does nothing until `.check(...)` runs a closure"]
pub struct Budget {
    limits: Figures,
    baseline: Option<String>,
    file: Option<PathBuf>,
}

/// The four figures a budget limits (or, as limits, `u64::MAX` for none).
/// Its fields are the keys of an entry of the baseline file, in their
/// order there ([`KEYS`]); an entry needs all four, and no other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Figures {
    allocs: u64,
    bytes: u64,
    peak_bytes: u64,
    leaked_bytes: u64,
}

impl Default for Figures {
    fn default() -> Self {
        Figures {
            allocs: u64::MAX,
            bytes: u64::MAX,
            peak_bytes: u64::MAX,
            leaked_bytes: u64::MAX,
        }
    }
}

/// The figures in the order they are reported and stored.
const KEYS: [&str; 4] = ["allocs", "bytes", "peak_bytes", "leaked_bytes"];

impl Figures {
    fn of(s: &Counts) -> Figures {
        Figures {
            allocs: s.allocs + s.reallocs,
            bytes: s.bytes_allocated,
            peak_bytes: s.peak_live_bytes,
            leaked_bytes: s.live_bytes.max(0) as u64,
        }
    }

    fn get(&self, i: usize) -> u64 {
        [self.allocs, self.bytes, self.peak_bytes, self.leaked_bytes][i]
    }
}

/// A figure as the messages show it: calls as a number, bytes in units.
fn show(i: usize, v: u64) -> String {
    match i {
        0 => format!("{v} call{}", if v == 1 { "" } else { "s" }),
        _ if v < 1024 => format!("{v} B"),
        _ => format!("{} ({v} B)", ByteSize(v)),
    }
}

/// What each figure is, in a message.
const WHAT: [&str; 4] = [
    "allocation calls",
    "bytes requested",
    "peak live bytes",
    "bytes leaked",
];

impl Budget {
    /// A budget with no limit yet.
    pub fn new() -> Budget {
        Budget::default()
    }

    /// A budget compared with the entry `name` of the baseline file
    /// ([`BUDGETS_FILE`] in the crate's directory, or
    /// [`baseline_file`](Self::baseline_file)): it fails when any figure
    /// is higher than the one recorded there, or when there is no entry,
    /// and tells (on stderr, past the test harness's capture) when figures
    /// went down, so the file can be tightened. With `ALLOCMUX_BLESS=1` it
    /// records the figures instead (creating the file or the entry);
    /// tests blessing at once, in threads or processes, each keep their
    /// own entry. Limits set on the same budget apply as well.
    pub fn baseline(name: impl Into<String>) -> Budget {
        Budget {
            baseline: Some(name.into()),
            ..Budget::default()
        }
    }

    /// At most `n` allocation calls (`alloc`, `alloc_zeroed`, `realloc`).
    pub fn allocs(mut self, n: u64) -> Self {
        self.limits.allocs = n;
        self
    }

    /// At most `n` bytes requested in all.
    pub fn bytes(mut self, n: u64) -> Self {
        self.limits.bytes = n;
        self
    }

    /// At most `n` bytes live at once, above what was live at the start.
    pub fn peak_bytes(mut self, n: u64) -> Self {
        self.limits.peak_bytes = n;
        self
    }

    /// At most `n` bytes requested and still live when the closure
    /// returns (0: no leak at all).
    pub fn leaked_bytes(mut self, n: u64) -> Self {
        self.limits.leaked_bytes = n;
        self
    }

    /// The baseline file to use instead of [`BUDGETS_FILE`] in the crate's
    /// directory (a relative path is taken from the current directory,
    /// which `cargo test` makes the crate's).
    pub fn baseline_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.file = Some(path.into());
        self
    }

    /// Runs `f` and panics, with a message of at most about 20 lines, if
    /// it allocated more than the budget allows (see [`Budget`]). On
    /// failure `f` runs a second time, to record the call stacks.
    ///
    /// # Panics
    /// Over budget; when the baseline file cannot be read or written; and
    /// when no [`Counting`](crate::Counting) is the global allocator (every
    /// count would read 0).
    #[track_caller]
    pub fn check<R>(&self, f: impl FnMut() -> R) -> Checked {
        match self.try_check(f) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    /// [`check`](Self::check), returning the failure instead of panicking.
    ///
    /// # Panics
    /// When no [`Counting`](crate::Counting) is the global allocator.
    #[track_caller]
    pub fn try_check<R>(&self, mut f: impl FnMut() -> R) -> Result<Checked, Exceeded> {
        require_counting("allocmux::Budget");
        let ((), stats) = measure(|| drop(f()));
        let got = Figures::of(&stats);
        let mut over: Vec<Over> = (0..4)
            .filter(|&i| got.get(i) > self.limits.get(i))
            .map(|i| Over {
                figure: i,
                got: got.get(i),
                limit: self.limits.get(i),
                from_baseline: false,
            })
            .collect();
        let mut checked = Checked {
            stats,
            below_baseline: Vec::new(),
            blessed: false,
        };
        let mut missing = None;
        if let Some(name) = &self.baseline {
            let path = self.path();
            if blessing() {
                checked.blessed = bless(&path, name, got).map_err(|e| Exceeded::io(&path, e))?;
            } else {
                let entries = read_file(&path).map_err(|e| Exceeded::io(&path, e))?;
                match entries.get(name) {
                    None => missing = Some(path.clone()),
                    Some(base) => {
                        for (i, key) in KEYS.iter().enumerate() {
                            let (g, b) = (got.get(i), base.get(i));
                            if g > b {
                                over.push(Over {
                                    figure: i,
                                    got: g,
                                    limit: b,
                                    from_baseline: true,
                                });
                            } else if g < b {
                                checked.below_baseline.push(format!("{key} {b} -> {g}"));
                            }
                        }
                    }
                }
                if over.is_empty() && missing.is_none() && !checked.below_baseline.is_empty() {
                    // Past the harness's capture of `eprintln!`: a passing
                    // test's output is not shown otherwise.
                    let _ = writeln!(
                        io::stderr(),
                        "allocmux: budget {name:?} is below its baseline in {} ({}); \
                         {BLESS_ENV}=1 records the lower figures",
                        path.display(),
                        checked.below_baseline.join(", ")
                    );
                }
            }
        }
        if over.is_empty() && missing.is_none() {
            return Ok(checked);
        }
        let mut message = String::new();
        let name = self.baseline.as_deref();
        let _ = match name {
            Some(n) => writeln!(message, "allocmux: allocation budget {n:?} exceeded"),
            None => writeln!(message, "allocmux: allocation budget exceeded"),
        };
        if let Some(path) = &missing {
            let _ = writeln!(
                message,
                "  no baseline {:?} in {}; {BLESS_ENV}=1 records it ({})",
                name.unwrap_or_default(),
                path.display(),
                (0..4)
                    .map(|i| format!("{} {}", KEYS[i], got.get(i)))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        for o in &over {
            let _ = writeln!(
                message,
                "  {}: {}, {} {}",
                WHAT[o.figure],
                show(o.figure, o.got),
                if o.from_baseline {
                    "baseline"
                } else {
                    "budget"
                },
                show(o.figure, o.limit),
            );
        }
        if let Some(o) = over.first() {
            stacks_report(&mut message, o.figure, got, &mut f);
        }
        Err(Exceeded {
            message,
            stats: checked.stats,
        })
    }

    fn path(&self) -> PathBuf {
        match &self.file {
            Some(p) => p.clone(),
            None => std::env::var_os("CARGO_MANIFEST_DIR")
                .map(PathBuf::from)
                .unwrap_or_default()
                .join(BUDGETS_FILE),
        }
    }
}

/// What a budget that passed measured.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Checked {
    /// What the closure allocated (its first run), as [`measure`] says.
    pub stats: Counts,
    /// The baseline figures that went down, as `"allocs 5 -> 3"`: the
    /// baseline can be tightened by blessing.
    pub below_baseline: Vec<String>,
    /// Whether the baseline file was rewritten (blessing, with figures that
    /// changed).
    pub blessed: bool,
}

/// A budget that went over: [`Display`](fmt::Display) is the message
/// [`Budget::check`] panics with.
#[derive(Clone, Debug)]
pub struct Exceeded {
    message: String,
    stats: Counts,
}

impl Exceeded {
    /// What the closure allocated (its first run).
    pub fn stats(&self) -> &Counts {
        &self.stats
    }

    fn io(path: &Path, e: io::Error) -> Exceeded {
        Exceeded {
            message: format!("allocmux: budget baseline {}: {e}", path.display()),
            stats: Counts::default(),
        }
    }
}

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message.trim_end())
    }
}

impl std::error::Error for Exceeded {}

/// One figure over its limit.
struct Over {
    figure: usize,
    got: u64,
    limit: u64,
    from_baseline: bool,
}

fn blessing() -> bool {
    std::env::var_os(BLESS_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}
