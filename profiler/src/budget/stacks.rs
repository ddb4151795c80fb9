//! The failing path of a budget: the closure run again with the
//! recorder's `watch` on (that thread's calls only), each allocation's
//! return addresses captured with `backtrace::trace` inside the allocator
//! without allocating through it, then, outside it, the blocks behind the
//! figure that went over grouped by call stack and symbolized with
//! `backtrace::resolve`, the program's own frames first.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use allocmux_format::ByteSize;
use allocmux_recorder::watch;

use super::{Figures, show};

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
pub(super) fn stacks_report<R>(
    out: &mut String,
    figure: usize,
    first: Figures,
    f: &mut impl FnMut() -> R,
) {
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
