//! Allocation budgets for tests (cargo feature `budget`): [`Budget`] runs
//! a closure, counts what it allocates on the calling thread, and fails
//! when that goes over a limit or over a checked-in baseline, saying where
//! the allocations came from.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use allocmux_format::ByteSize;
use allocmux_format::Counts;
use allocmux_recorder::counting::{measure, require_counting};
use allocmux_recorder::{process, watch};

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

    fn set(&mut self, i: usize, v: u64) {
        *[
            &mut self.allocs,
            &mut self.bytes,
            &mut self.peak_bytes,
            &mut self.leaked_bytes,
        ][i] = v;
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
                match entries.iter().find(|(n, _)| n == name) {
                    None => missing = Some(path.clone()),
                    Some((_, base)) => {
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

// ---------------------------------------------------------------------
// The failing path: the closure again, with stacks.

/// Most frames kept per allocation: enough to get past the allocator,
/// the standard library's collections and a few frames of the program.
const MAX_FRAMES: usize = 48;

/// The calls of a re-run, as the watcher saw them.
#[derive(Default)]
struct Recording {
    events: Vec<(watch::Event, usize, usize)>,
    frames: Vec<usize>,
}

thread_local! {
    static RECORDING: RefCell<Recording> = RefCell::new(Recording::default());
}

/// The watcher: inside the global allocator, on the budget's thread only.
/// It must not panic: `try_borrow_mut`, and nothing else that could.
fn record(e: watch::Event) {
    let _ = RECORDING.try_with(|r| {
        let Ok(mut r) = r.try_borrow_mut() else {
            return;
        };
        let at = r.frames.len();
        if e.new != 0 {
            backtrace::trace(|frame| {
                r.frames.push(frame.ip() as usize);
                r.frames.len() - at < MAX_FRAMES
            });
        }
        let len = r.frames.len() - at;
        r.events.push((e, at, len));
    });
}

/// Runs `f` again with stacks and writes the allocations behind `figure`
/// (all of them for calls and bytes, those live at the peak or at the end
/// for the peak and leaks) grouped by call stack.
fn stacks_report<R>(out: &mut String, figure: usize, first: Figures, f: &mut impl FnMut() -> R) {
    // Set up outside the allocator (a thread-local's first use may
    // allocate), and empty.
    RECORDING.with(|r| *r.borrow_mut() = Recording::default());
    watch::watching(record, || drop(f()));
    let rec = RECORDING.with(|r| std::mem::take(&mut *r.borrow_mut()));

    // Replay the calls: which blocks are live, and when the peak was.
    let mut blocks: Vec<Block> = Vec::new();
    let mut live: HashMap<usize, usize> = HashMap::new();
    let (mut now, mut peak, mut peak_live) = (0u64, 0u64, Vec::new());
    // The re-run's own figures, from what the watcher saw (the thread's
    // counters also hold the watcher's allocations).
    let mut again = Figures {
        allocs: 0,
        bytes: 0,
        peak_bytes: 0,
        leaked_bytes: 0,
    };
    for &(e, at, len) in &rec.events {
        if e.old != 0
            && let Some(b) = live.remove(&e.old)
        {
            now -= blocks[b].size;
        }
        if e.new != 0 {
            live.insert(e.new, blocks.len());
            blocks.push(Block {
                frames: (at, len),
                size: e.size as u64,
            });
            now += e.size as u64;
            again.allocs += 1;
            again.bytes += e.size as u64;
            if now > peak {
                peak = now;
                if figure == 2 {
                    peak_live = live.values().copied().collect();
                }
            }
        }
    }
    again.peak_bytes = peak;
    again.leaked_bytes = now;
    let chosen: Vec<usize> = match figure {
        2 => peak_live,
        3 => live.values().copied().collect(),
        _ => (0..blocks.len()).collect(),
    };
    if again.get(figure) != first.get(figure) {
        let _ = writeln!(
            out,
            "  (the re-run with stacks: {}; the closure allocates differently when run again)",
            show(figure, again.get(figure))
        );
    }

    // Group by stack, then by how the stack reads (different return
    // addresses can read the same).
    let mut by_stack: HashMap<&[usize], (u64, u64)> = HashMap::new();
    for &b in &chosen {
        let (at, len) = blocks[b].frames;
        let e = by_stack.entry(&rec.frames[at..at + len]).or_default();
        e.0 += 1;
        e.1 += blocks[b].size;
    }
    let mut symbols = Symbols::default();
    let mut groups: Vec<(Vec<String>, u64, u64)> = Vec::new();
    for (frames, (n, bytes)) in by_stack {
        let key = symbols.describe(frames);
        match groups.iter_mut().find(|g| g.0 == key) {
            Some(g) => {
                g.1 += n;
                g.2 += bytes;
            }
            None => groups.push((key, n, bytes)),
        }
    }
    let by_bytes = figure != 0;
    groups.sort_by(|a, b| {
        let k = |g: &(Vec<String>, u64, u64)| if by_bytes { (g.2, g.1) } else { (g.1, g.2) };
        k(b).cmp(&k(a)).then_with(|| a.0.cmp(&b.0))
    });
    let what = match figure {
        2 => "live at the peak",
        3 => "still live at return",
        _ => "allocated",
    };
    let _ = writeln!(
        out,
        "{} block{} {what}, by call stack (yours first):",
        chosen.len(),
        if chosen.len() == 1 { "" } else { "s" }
    );
    const SHOWN: usize = 6;
    for (lines, n, bytes) in groups.iter().take(SHOWN) {
        let head = format!("{n} × {}", ByteSize(*bytes));
        let _ = writeln!(out, "  {head:>16}  {}", lines[0]);
        for l in &lines[1..] {
            let _ = writeln!(out, "  {:>16}  <- {l}", "");
        }
    }
    if groups.len() > SHOWN {
        let rest = &groups[SHOWN..];
        let _ = writeln!(
            out,
            "  ... and {} more stack{} ({} blocks)",
            rest.len(),
            if rest.len() == 1 { "" } else { "s" },
            rest.iter().map(|g| g.1).sum::<u64>()
        );
    }
}

struct Block {
    frames: (usize, usize),
    size: u64,
}

/// A resolved frame: its function (demangled, without hash) and location.
#[derive(Clone)]
struct Frame {
    name: String,
    file: Option<String>,
    line: Option<u32>,
}

/// Symbolization of return addresses, each resolved once (inlined
/// functions each a frame, innermost first).
#[derive(Default)]
struct Symbols {
    cache: HashMap<usize, Vec<Frame>>,
}

/// How many of the program's frames a stack shows.
const SHOWN_FRAMES: usize = 2;

impl Symbols {
    fn resolve(&mut self, ip: usize) -> &[Frame] {
        self.cache.entry(ip).or_insert_with(|| {
            let mut frames = Vec::new();
            backtrace::resolve(ip as *mut std::ffi::c_void, |s| {
                frames.push(Frame {
                    name: s
                        .name()
                        .map(|n| format!("{n:#}"))
                        .unwrap_or_else(|| format!("{ip:#x}")),
                    file: s.filename().map(short_path),
                    line: s.lineno(),
                });
            });
            if frames.is_empty() {
                frames.push(Frame {
                    name: format!("{ip:#x}"),
                    file: None,
                    line: None,
                });
            }
            frames
        })
    }

    /// The stack as shown: its first frames outside the standard library,
    /// allocmux and the unwinder (the program's own), or, if it has none,
    /// its first frames past the allocator.
    fn describe(&mut self, ips: &[usize]) -> Vec<String> {
        let mut all = Vec::new();
        for &ip in ips {
            all.extend(self.resolve(ip).iter().cloned());
        }
        let mine: Vec<&Frame> = all.iter().filter(|f| !is_library(f)).collect();
        let shown: Vec<&Frame> = if mine.is_empty() {
            all.iter().filter(|f| !is_recorder(f)).collect()
        } else {
            mine
        };
        shown
            .iter()
            .take(SHOWN_FRAMES)
            .map(|f| match (&f.file, f.line) {
                (Some(file), Some(line)) => format!("{} ({file}:{line})", f.name),
                (Some(file), None) => format!("{} ({file})", f.name),
                _ => f.name.clone(),
            })
            .collect::<Vec<_>>()
            .into_iter()
            .chain(shown.is_empty().then(|| String::from("(no stack)")))
            .collect()
    }
}

/// allocmux's own source directory, to tell its frames apart.
const OWN_SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/");

/// Frames of the recorder and the unwinder: never the allocation's cause.
fn is_recorder(f: &Frame) -> bool {
    f.file.as_deref().is_some_and(|p| p.starts_with(OWN_SRC))
        || [
            "allocmux::",
            "<allocmux::",
            "allocmux_recorder::",
            "<allocmux_recorder::",
            "backtrace::",
            "<backtrace::",
        ]
            .iter()
            .any(|p| f.name.starts_with(p))
        || f.name.starts_with("__rust") // the global allocator's shims
        || f.name.starts_with("__rdl")
}

/// Frames of the standard library (by its sources, or by name when there
/// are no line tables), the recorder, and the test harness.
fn is_library(f: &Frame) -> bool {
    if is_recorder(f) {
        return true;
    }
    if let Some(file) = &f.file
        && (file.starts_with("/rustc/") || file.contains("/library/"))
    {
        return true;
    }
    const STD: [&str; 8] = [
        "std::", "<std::", "core::", "<core::", "alloc::", "<alloc::", "test::", "<test::",
    ];
    STD.iter().any(|p| f.name.starts_with(p))
}

/// A source path as a message shows it: relative to the current directory
/// (the crate's, under `cargo test`) when inside it, else as found.
fn short_path(p: &Path) -> String {
    let cwd = std::env::current_dir().unwrap_or_default();
    p.strip_prefix(&cwd).unwrap_or(p).display().to_string()
}

// ---------------------------------------------------------------------
// The baseline file.

/// Serialises blessing within the process (threads of one test binary);
/// the directory lock serialises processes.
static BLESSING: Mutex<()> = Mutex::new(());

/// The file's entries, in its order; none if it does not exist.
fn read_file(path: &Path) -> io::Result<Vec<(String, Figures)>> {
    match fs::read_to_string(path) {
        Ok(text) => parse(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Records `got` as the entry `name`, keeping every other entry: under a
/// lock on the file's directory (other processes) and a mutex (other
/// threads), read, change, and replace the file whole. True if it changed.
fn bless(path: &Path, name: &str, got: Figures) -> io::Result<bool> {
    let _threads = BLESSING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let _processes = process::DirLock::exclusive(&dir)?;
    let mut entries = read_file(path)?;
    match entries.iter_mut().find(|(n, _)| n == name) {
        Some((_, f)) if *f == got => return Ok(false),
        Some((_, f)) => *f = got,
        None => entries.push((name.to_owned(), got)),
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    fs::write(&tmp, render(&entries))?;
    fs::rename(&tmp, path).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })?;
    Ok(true)
}

const HEADER: &str = "\
# Allocation budgets: what each named allocmux::Budget::baseline allocated
# when last recorded. A test fails when a figure goes up;
# `ALLOCMUX_BLESS=1 cargo test` records the figures of now.
";

fn render(entries: &[(String, Figures)]) -> String {
    let mut out = String::from(HEADER);
    for (name, f) in entries {
        let bare = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if bare {
            let _ = writeln!(out, "\n[{name}]");
        } else {
            let escaped = name.replace('\\', "\\\\").replace('"', "\\\"");
            let _ = writeln!(out, "\n[\"{escaped}\"]");
        }
        for (i, key) in KEYS.iter().enumerate() {
            let _ = writeln!(out, "{key} = {}", f.get(i));
        }
    }
    out
}

/// Reads the file's form of TOML: comments, `[name]` or `["name"]`
/// tables, and the four integer keys in each.
fn parse(text: &str) -> Result<Vec<(String, Figures)>, String> {
    let mut entries: Vec<(String, Figures)> = Vec::new();
    let mut seen = [false; 4];
    let complete = |entries: &[(String, Figures)], seen: &[bool; 4]| match entries.last() {
        Some((name, _)) if seen.contains(&false) => Err(format!(
            "entry {name:?} lacks {}",
            KEYS[seen.iter().position(|s| !s).unwrap_or(0)]
        )),
        _ => Ok(()),
    };
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        let at = |what: String| format!("line {}: {what}", n + 1);
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(inner) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            complete(&entries, &seen).map_err(at)?;
            let name = match inner.strip_prefix('"').and_then(|l| l.strip_suffix('"')) {
                Some(quoted) => unescape(quoted).ok_or_else(|| at(format!("bad name {inner}")))?,
                None => inner.trim().to_owned(),
            };
            if entries.iter().any(|(e, _)| *e == name) {
                return Err(at(format!("entry {name:?} appears twice")));
            }
            entries.push((name, Figures::default()));
            seen = [false; 4];
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(at(format!("expected `key = number` or `[name]`: {line}")));
        };
        let (key, value) = (key.trim(), value.trim());
        let i = KEYS
            .iter()
            .position(|k| *k == key)
            .ok_or_else(|| at(format!("unknown key {key:?}")))?;
        let v: u64 = value
            .replace('_', "")
            .parse()
            .map_err(|_| at(format!("{key} is not a whole number: {value}")))?;
        let Some((_, f)) = entries.last_mut() else {
            return Err(at(format!("{key} before any [name]")));
        };
        f.set(i, v);
        seen[i] = true;
    }
    complete(&entries, &seen)?;
    Ok(entries)
}

fn unescape(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next()? {
                c @ ('\\' | '"') => out.push(c),
                _ => return None,
            },
            '"' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(a: u64, b: u64, p: u64, l: u64) -> Figures {
        Figures {
            allocs: a,
            bytes: b,
            peak_bytes: p,
            leaked_bytes: l,
        }
    }

    #[test]
    fn the_file_reads_back_what_was_written() {
        let entries = vec![
            ("parse".to_owned(), figures(3, 120, 96, 0)),
            ("with \"quotes\" and \\".to_owned(), figures(0, 0, 0, 0)),
        ];
        let text = render(&entries);
        assert!(text.contains("\n[parse]\nallocs = 3\nbytes = 120\n"));
        assert_eq!(parse(&text).unwrap(), entries);
    }

    #[test]
    fn a_broken_file_is_an_error_naming_the_line() {
        let e = parse("[a]\nallocs = 1\nbytes = x\n").unwrap_err();
        assert!(e.starts_with("line 3: bytes is not a whole number"), "{e}");
        let e = parse("[a]\nallocs = 1\n").unwrap_err();
        assert!(e.contains("lacks bytes"), "{e}");
        let e = parse("allocs = 1\n").unwrap_err();
        assert!(e.contains("before any [name]"), "{e}");
    }
}
