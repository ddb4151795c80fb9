//! Allocation measurements for [criterion](https://docs.rs/criterion/0.8)
//! (cargo feature `criterion`): allocation calls, bytes allocated and time
//! inside the allocator per iteration, with criterion's statistics, change
//! detection, console report and `estimates.json` as for time.
//!
//! ```no_run
//! use std::hint::black_box;
//! use criterion::{Criterion, criterion_group, criterion_main};
//!
//! #[global_allocator]
//! static ALLOC: allocmux::Counting<std::alloc::System> =
//!     allocmux::Counting::new(std::alloc::System);
//!
//! fn bench(c: &mut Criterion<allocmux::criterion::Allocations>) {
//!     c.bench_function("format", |b| b.iter(|| format!("{}", black_box(42))));
//! }
//!
//! criterion_group! {
//!     name = benches;
//!     config = Criterion::default().with_measurement(allocmux::criterion::Allocations);
//!     targets = bench
//! }
//! criterion_main!(benches);
//! ```
//!
//! ```text
//! format                  time:   [1.0000 allocs 1.0000 allocs 1.0000 allocs]
//! ```
//!
//! (criterion calls every measured value "time" in its console report.)
//!
//! Counts are those of the thread that runs the benchmark, exact: other
//! threads, criterion's own bookkeeping between samples and the inputs of
//! `iter_batched` are not counted; allocations of threads the routine
//! spawns are not either. Criterion records one measurement per
//! [`Criterion`]; to see time, allocations and bytes
//! of the same benchmarks side by side, write the benchmark function
//! generic over the measurement and let
//! [`criterion_main_with_allocs!`](crate::criterion_main_with_allocs) run
//! it under each and print a table.
//!
//! Use [`std::hint::black_box`] in the routine (criterion 0.8 re-exports
//! it): the volatile-read `black_box` of older criterion copied the value
//! back through memory, which distorted comparisons between values of
//! different sizes.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::SystemTime;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{Criterion, Throughput};

use allocmux_recorder::readout::{require_counting, thread_counts};
use allocmux_recorder::ticks_to_ns;

#[doc(hidden)]
pub use criterion as __criterion;

/// Allocation calls per iteration: `alloc`, `alloc_zeroed` and `realloc`
/// (each asks the allocator for a block; frees are not counted), on the
/// benchmark's thread, exactly.
///
/// ```no_run
/// # #[global_allocator]
/// # static ALLOC: allocmux::Counting<std::alloc::System> =
/// #     allocmux::Counting::new(std::alloc::System);
/// let mut c = criterion::Criterion::default().with_measurement(allocmux::criterion::Allocations);
/// c.bench_function("vec", |b| b.iter(|| vec![0u8; std::hint::black_box(64)]));
/// ```
///
/// # Panics
/// When a benchmark starts and no [`Counting`](crate::Counting) is the
/// global allocator (every count would read 0).
#[derive(Clone, Copy, Debug, Default)]
pub struct Allocations;

/// Bytes allocated per iteration (the sizes requested, `realloc`'s new
/// size included), on the benchmark's thread, exactly.
///
/// # Panics
/// As [`Allocations`].
#[derive(Clone, Copy, Debug, Default)]
pub struct BytesAllocated;

/// Time spent inside the allocator per iteration, on the benchmark's
/// thread: the same unbiased estimate as
/// [`Counts::allocator_ns`](crate::Counts::allocator_ns), from timing a random sample of calls with
/// the TSC, which over the thousands of calls of a criterion sample is
/// precise; a routine that never allocates reads 0.
///
/// # Panics
/// As [`Allocations`].
#[derive(Clone, Copy, Debug, Default)]
pub struct AllocatorTime;

/// Set once a measurement has checked that `Counting` is the global
/// allocator.
static CHECKED: AtomicBool = AtomicBool::new(false);

fn check_counting(what: &str) {
    if !CHECKED.load(Relaxed) {
        require_counting(what);
        CHECKED.store(true, Relaxed);
    }
}

/// What criterion is given for a measured value. Criterion takes a sample
/// of exactly 0 for a broken measurement ("took zero time per iteration")
/// and skips its analysis, while 0 allocations is a result worth having:
/// 0 becomes the smallest positive `f64` (5e-324), which any count of 1 or
/// more absorbs exactly and which divides to 0 by any number of
/// iterations above 1, so the per-iteration estimates read 0.
fn sample(value: u64) -> f64 {
    if value == 0 {
        f64::from_bits(1)
    } else {
        value as f64
    }
}

/// The calling thread's allocation calls so far.
fn calls() -> u64 {
    let (s, _) = thread_counts();
    s.allocs + s.reallocs
}

/// The calling thread's bytes allocated so far.
fn bytes() -> u64 {
    thread_counts().0.bytes_allocated
}

/// The calling thread's allocator time so far, in TSC ticks (estimated).
fn ticks() -> u64 {
    thread_counts().1
}

/// A `Measurement` of one of the calling thread's running totals: `$read`
/// gives the total so far (the intermediate value, at the start), and
/// `$finish` turns the difference at the end into the value criterion
/// gets, shown by `$formatter`.
macro_rules! thread_total_measurement {
    ($ty:ident, $read:expr, $finish:expr, $formatter:expr) => {
        impl Measurement for $ty {
            type Intermediate = u64;
            type Value = u64;

            fn start(&self) -> u64 {
                check_counting(concat!("allocmux::criterion::", stringify!($ty)));
                $read()
            }
            fn end(&self, start: u64) -> u64 {
                $finish($read().saturating_sub(start))
            }
            fn add(&self, a: &u64, b: &u64) -> u64 {
                a + b
            }
            fn zero(&self) -> u64 {
                0
            }
            fn to_f64(&self, value: &u64) -> f64 {
                sample(*value)
            }
            fn formatter(&self) -> &dyn ValueFormatter {
                &$formatter
            }
        }
    };
}

/// The value of a count is the difference itself.
fn as_is(n: u64) -> u64 {
    n
}

thread_total_measurement!(Allocations, calls, as_is, CountFormatter);
thread_total_measurement!(BytesAllocated, bytes, as_is, BytesFormatter);
// Ticks at the start; the value is in nanoseconds.
thread_total_measurement!(AllocatorTime, ticks, ticks_to_ns, NanosFormatter);

/// Per-unit-of-throughput values: `value / n`, with the unit's suffix.
fn per_throughput(throughput: &Throughput, values: &mut [f64]) -> &'static str {
    let (n, unit) = match *throughput {
        Throughput::Bytes(n) | Throughput::BytesDecimal(n) => (n, "/B"),
        Throughput::Bits(n) => (n, "/bit"),
        Throughput::Elements(n) | Throughput::ElementsAndBytes { elements: n, .. } => (n, "/elem"),
    };
    for v in values {
        *v /= n.max(1) as f64;
    }
    unit
}

/// Allocation calls: plain numbers up to 1,000, then thousands and millions.
struct CountFormatter;

impl ValueFormatter for CountFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (div, unit) = match typical {
            t if t < 1e3 => (1.0, "allocs"),
            t if t < 1e6 => (1e3, "K allocs"),
            _ => (1e6, "M allocs"),
        };
        values.iter_mut().for_each(|v| *v /= div);
        unit
    }
    fn scale_throughputs(&self, _: f64, t: &Throughput, values: &mut [f64]) -> &'static str {
        match per_throughput(t, values) {
            "/B" => "allocs/B",
            "/bit" => "allocs/bit",
            _ => "allocs/elem",
        }
    }
    fn scale_for_machines(&self, _: &mut [f64]) -> &'static str {
        "allocs"
    }
}

/// Bytes, in binary units (B, KiB, MiB, GiB) as the rest of allocmux.
struct BytesFormatter;

impl ValueFormatter for BytesFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (div, unit) = match typical {
            t if t < 1024.0 => (1.0, "B"),
            t if t < 1024.0 * 1024.0 => (1024.0, "KiB"),
            t if t < 1024.0 * 1024.0 * 1024.0 => (1024.0 * 1024.0, "MiB"),
            _ => (1024.0 * 1024.0 * 1024.0, "GiB"),
        };
        values.iter_mut().for_each(|v| *v /= div);
        unit
    }
    fn scale_throughputs(&self, _: f64, t: &Throughput, values: &mut [f64]) -> &'static str {
        match per_throughput(t, values) {
            "/B" => "B/B",
            "/bit" => "B/bit",
            _ => "B/elem",
        }
    }
    fn scale_for_machines(&self, _: &mut [f64]) -> &'static str {
        "B"
    }
}

/// Nanoseconds, in the largest unit that keeps them at least 1.
struct NanosFormatter;

impl ValueFormatter for NanosFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (div, unit) = match typical {
            t if t < 1e3 => (1.0, "ns"),
            t if t < 1e6 => (1e3, "µs"),
            t if t < 1e9 => (1e6, "ms"),
            _ => (1e9, "s"),
        };
        values.iter_mut().for_each(|v| *v /= div);
        unit
    }
    fn scale_throughputs(&self, _: f64, t: &Throughput, values: &mut [f64]) -> &'static str {
        match per_throughput(t, values) {
            "/B" => "ns/B",
            "/bit" => "ns/bit",
            _ => "ns/elem",
        }
    }
    fn scale_for_machines(&self, _: &mut [f64]) -> &'static str {
        "ns"
    }
}

/// A `main` for benchmarks that runs them under wall time (as
/// `criterion_main!` would), then under [`Allocations`] and
/// [`BytesAllocated`], and prints a table of the three per benchmark after
/// criterion's own report. Each target is a benchmark function generic over
/// the measurement, so it is written once:
///
/// ```no_run
/// use std::hint::black_box;
/// use criterion::{Criterion, measurement::Measurement};
///
/// #[global_allocator]
/// static ALLOC: allocmux::Counting<std::alloc::System> =
///     allocmux::Counting::new(std::alloc::System);
///
/// fn names<M: Measurement + 'static>(c: &mut Criterion<M>) {
///     let mut g = c.benchmark_group("names");
///     g.bench_function("string", |b| b.iter(|| black_box("api.example.com").to_owned()));
///     g.bench_function("boxed str", |b| {
///         b.iter(|| Box::<str>::from(black_box("api.example.com")))
///     });
///     g.finish();
/// }
///
/// allocmux::criterion_main_with_allocs!(names);
/// ```
///
/// ```text
/// allocmux: per iteration (time as criterion estimated it; allocation calls and
/// bytes exact, on the benchmark's thread)
/// benchmark                time      allocs     bytes
/// names/string           17.9 ns      1.00      15 B
/// names/boxed str        16.2 ns      1.00      15 B
/// ```
///
/// Time results stay where criterion keeps them (`target/criterion`, or
/// `CRITERION_HOME`), so its change detection works as before; the
/// allocation runs go beside it, in `target/criterion-allocmux/allocations`
/// and `.../bytes`, each with its own history. Command-line arguments
/// (`--quick`, a filter, `--save-baseline`, `--test`) apply to all three
/// runs.
#[macro_export]
macro_rules! criterion_main_with_allocs {
    ( $( $target:path ),+ $(,)? ) => {
        fn main() {
            let run = $crate::criterion::SideBySide::start();
            {
                let mut c = run.criterion($crate::criterion::__criterion::measurement::WallTime);
                $( $target(&mut c); )+
            }
            {
                let mut c = run.criterion($crate::criterion::Allocations);
                $( $target(&mut c); )+
            }
            {
                let mut c = run.criterion($crate::criterion::BytesAllocated);
                $( $target(&mut c); )+
            }
            run.finish();
        }
    };
}

/// The three runs of [`criterion_main_with_allocs!`](crate::criterion_main_with_allocs)
/// and the table after them; public for the macro, usable by hand for
/// another set of measurements.
#[derive(Debug)]
pub struct SideBySide {
    started: SystemTime,
    home: PathBuf,
}

/// A measurement whose results go to a directory of their own beside
/// criterion's, and its column in the side-by-side table.
pub trait Column: Measurement {
    /// The directory under `target/criterion-allocmux` (`None`: criterion's
    /// own directory, for time).
    const DIR: Option<&'static str>;
    /// The column's heading.
    const HEADING: &'static str;
    /// A per-iteration value as the table shows it.
    fn cell(value: f64) -> String;
}

impl Column for WallTime {
    const DIR: Option<&'static str> = None;
    const HEADING: &'static str = "time";
    fn cell(ns: f64) -> String {
        match ns {
            t if t < 1e3 => format!("{t:.1} ns"),
            t if t < 1e6 => format!("{:.1} µs", t / 1e3),
            t if t < 1e9 => format!("{:.1} ms", t / 1e6),
            t => format!("{:.2} s", t / 1e9),
        }
    }
}

impl Column for Allocations {
    const DIR: Option<&'static str> = Some("allocations");
    const HEADING: &'static str = "allocs";
    fn cell(n: f64) -> String {
        format!("{n:.2}")
    }
}

impl Column for BytesAllocated {
    const DIR: Option<&'static str> = Some("bytes");
    const HEADING: &'static str = "bytes";
    fn cell(b: f64) -> String {
        match b {
            b if b < 1024.0 => format!("{b:.0} B"),
            b if b < 1024.0 * 1024.0 => format!("{:.1} KiB", b / 1024.0),
            b => format!("{:.1} MiB", b / (1024.0 * 1024.0)),
        }
    }
}

impl Column for AllocatorTime {
    const DIR: Option<&'static str> = Some("allocator-time");
    const HEADING: &'static str = "in allocator";
    fn cell(ns: f64) -> String {
        WallTime::cell(ns)
    }
}

/// The columns of the table, in order: (heading, directory, formatter).
type ColumnInfo = (&'static str, PathBuf, fn(f64) -> String);

impl SideBySide {
    /// Notes the time (the table shows only benchmarks run from now on)
    /// and where criterion keeps its results.
    pub fn start() -> SideBySide {
        SideBySide {
            started: SystemTime::now(),
            home: criterion_home(),
        }
    }

    /// A criterion configured from the command line, measuring with `m`,
    /// writing its results to the measurement's own directory.
    pub fn criterion<M: Column>(&self, m: M) -> Criterion<M> {
        let c = Criterion::default().with_measurement(m);
        let c = match M::DIR {
            Some(dir) => c.output_directory(&self.dir(dir)),
            None => c,
        };
        c.configure_from_args()
    }

    fn dir(&self, measurement: &str) -> PathBuf {
        let mut name = self.home.file_name().unwrap_or_default().to_owned();
        name.push("-allocmux");
        self.home.with_file_name(name).join(measurement)
    }

    /// Criterion's closing summary, then the table of wall time,
    /// allocation calls, bytes (and allocator time, when measured) per
    /// iteration of every benchmark run since [`start`](Self::start)
    /// (nothing when none was measured, as with `--test` or `--list`).
    pub fn finish(&self) {
        Criterion::default().configure_from_args().final_summary();
        let columns: [ColumnInfo; 4] = [
            (WallTime::HEADING, self.home.clone(), WallTime::cell),
            (
                Allocations::HEADING,
                self.dir("allocations"),
                Allocations::cell,
            ),
            (
                BytesAllocated::HEADING,
                self.dir("bytes"),
                BytesAllocated::cell,
            ),
            (
                AllocatorTime::HEADING,
                self.dir("allocator-time"),
                AllocatorTime::cell,
            ),
        ];
        if let Some(table) = self.table(&columns) {
            print!("{table}");
        }
    }

    /// The table, from the `estimates.json` criterion wrote since the
    /// start, or `None` if there is none.
    fn table(&self, columns: &[ColumnInfo]) -> Option<String> {
        // Benchmark id, in the order first seen, and its cells.
        let mut rows: Vec<(String, Vec<String>)> = Vec::new();
        for (i, (_, dir, cell)) in columns.iter().enumerate() {
            let mut found = Vec::new();
            estimates_since(dir, self.started, &mut found);
            for (id, value) in found {
                let row = match rows.iter().position(|(r, _)| *r == id) {
                    Some(r) => r,
                    None => {
                        rows.push((id, vec![String::from("-"); columns.len()]));
                        rows.len() - 1
                    }
                };
                rows[row].1[i] = cell(value);
            }
        }
        if rows.is_empty() {
            return None;
        }
        // Only the columns that were measured.
        let measured: Vec<usize> = (0..columns.len())
            .filter(|&i| rows.iter().any(|(_, cells)| cells[i] != "-"))
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        let width = rows.iter().map(|(id, _)| id.chars().count()).max()?;
        let width = width.max("benchmark".len());
        let mut out = String::from(
            "\nallocmux: per iteration, as criterion estimated it (allocation calls and bytes \
             are exact, on the benchmark's thread)\n",
        );
        let _ = write!(out, "{:<width$}", "benchmark");
        for &i in &measured {
            let _ = write!(out, "  {:>12}", columns[i].0);
        }
        out.push('\n');
        for (id, cells) in rows {
            let _ = write!(out, "{id:<width$}");
            for &i in &measured {
                let _ = write!(out, "  {:>12}", cells[i]);
            }
            out.push('\n');
        }
        Some(out)
    }
}

/// Where criterion keeps its results, found as criterion finds it:
/// `CRITERION_HOME`, else `criterion` in cargo's target directory
/// (`CARGO_TARGET_DIR`, or asked of `cargo metadata`), else
/// `target/criterion`.
fn criterion_home() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            let cargo = std::env::var_os("CARGO")?;
            let out = std::process::Command::new(cargo)
                .args(["metadata", "--format-version", "1", "--no-deps"])
                .output()
                .ok()?;
            let meta: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
            Some(PathBuf::from(meta.get("target_directory")?.as_str()?))
        });
    match target {
        Some(t) => t.join("criterion"),
        None => PathBuf::from("target/criterion"),
    }
}

/// The benchmarks under `dir` whose `new/estimates.json` was written since
/// `since`: their full id and per-iteration estimate (the slope when
/// criterion fitted one, else the mean, as its console report shows).
fn estimates_since(dir: &Path, since: SystemTime, out: &mut Vec<(String, f64)>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if path.file_name().is_some_and(|n| n == "new") {
            if let Some(found) = read_estimate(&path, since) {
                out.push(found);
            }
        } else {
            estimates_since(&path, since, out);
        }
    }
}

fn read_estimate(new: &Path, since: SystemTime) -> Option<(String, f64)> {
    let estimates = new.join("estimates.json");
    let modified = fs::metadata(&estimates).ok()?.modified().ok()?;
    if modified < since {
        return None;
    }
    let id: serde_json::Value =
        serde_json::from_slice(&fs::read(new.join("benchmark.json")).ok()?).ok()?;
    let est: serde_json::Value = serde_json::from_slice(&fs::read(estimates).ok()?).ok()?;
    let point = |key: &str| est.get(key)?.get("point_estimate")?.as_f64();
    let value = point("slope").or_else(|| point("mean"))?;
    Some((id.get("full_id")?.as_str()?.to_owned(), value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_reads_as_zero_per_iteration_and_counts_stay_exact() {
        let zero = sample(0);
        assert!(zero > 0.0);
        for iters in [2.0, 3.0, 100.0, 1e9] {
            assert_eq!(zero / iters, 0.0);
        }
        assert_eq!(1.0 + zero, 1.0);
        assert_eq!(sample(7), 7.0);
    }

    #[test]
    fn formatters_scale_to_readable_units() {
        let mut v = [2048.0];
        assert_eq!(BytesFormatter.scale_values(2048.0, &mut v), "KiB");
        assert_eq!(v, [2.0]);
        let mut v = [4.0];
        let unit = CountFormatter.scale_throughputs(4.0, &Throughput::Elements(2), &mut v);
        assert_eq!((unit, v), ("allocs/elem", [2.0]));
        let mut v = [1500.0];
        assert_eq!(NanosFormatter.scale_values(1500.0, &mut v), "µs");
        assert_eq!(v, [1.5]);
    }
}
