//! Call stacks recorded by the shim: exact per-stack counts on a fixture
//! built like a distribution binary (`-O2 -g`, no frame pointers), sampled
//! shares within a stated tolerance, leak and peak attribution, threads,
//! fork, and real programs whose output is unchanged with stacks on.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use allocmux_format::SiteCounts;
use allocmux_format::profile::StackMode;
use common::*;
use object::{Object, ObjectSymbol, SymbolKind};

/// Compiles the stacks fixture as distributions build: `-O2 -g`, without
/// frame pointers.
fn fixture_exe() -> PathBuf {
    compile("cc", "stacks.c", &["-O2", "-g", "-fomit-frame-pointer"])
}

/// The fixture's functions: ELF address range and name.
struct Symbols {
    path: PathBuf,
    funcs: Vec<(std::ops::Range<u64>, String)>,
}

impl Symbols {
    fn load(path: &Path) -> Symbols {
        let data = std::fs::read(path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let funcs = file
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
            .map(|s| {
                (
                    s.address()..s.address() + s.size(),
                    s.name().unwrap().to_string(),
                )
            })
            .collect();
        Symbols {
            path: path.canonicalize().unwrap(),
            funcs,
        }
    }

    /// The fixture's own functions on a stack, the allocating one first;
    /// frames elsewhere (libc, the loader) are left out.
    fn chain(&self, p: &ProcessProfile, frames: &[u64]) -> Vec<String> {
        frames
            .iter()
            .filter_map(|&addr| {
                let m = p.stacks.module_of(addr)?;
                if Path::new(&m.path) != self.path {
                    return None;
                }
                // A return address: the call is the byte before it.
                let vaddr = addr - m.bias - 1;
                self.funcs
                    .iter()
                    .find(|(r, _)| r.contains(&vaddr))
                    .map(|(_, n)| n.clone())
            })
            .collect()
    }

    /// Per-stack figures merged by fixture chain (non-empty chains only).
    fn by_chain(&self, p: &ProcessProfile) -> HashMap<Vec<String>, SiteCounts> {
        let mut out: HashMap<Vec<String>, SiteCounts> = HashMap::new();
        for s in &p.stacks.stacks {
            let chain = self.chain(p, &s.frames);
            if !chain.is_empty() {
                out.entry(chain).or_default().add(&s.counts);
            }
        }
        out
    }
}

fn chain(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// Runs the fixture under `backend` with `env`; checks its output.
fn run_fixture(backend: &str, n: u64, env: &[(&str, &str)]) -> ProcessProfile {
    let exe = fixture_exe();
    let (out, mut profiles) = run_under(backend, Command::new(&exe).arg(n.to_string()), env);
    assert!(
        out.status.success() && text(&out.stdout) == format!("stacks: {n} iterations\n"),
        "the stacks fixture under {backend} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(out.stderr.is_empty(), "stderr: {}", text(&out.stderr));
    assert_eq!(profiles.len(), 1);
    assert_eq!(profiles[0].state, State::Exited);
    profiles.pop().unwrap()
}

/// Exact mode: every allocation of the fixture is on the right stack, the
/// leaf's stacks include its caller, and only `leak` holds memory at exit.
fn exact_mode_counts_every_stack(backend: &str) {
    let n = 1000;
    // Every call timed, so that every stack's time is measured, not
    // estimated (see `stack_time_comes_from_the_time_sample`).
    let p = run_fixture(
        backend,
        n,
        &[("ALLOCMUX_STACKS", "exact"), ("ALLOCMUX_TIME_SAMPLE", "1")],
    );
    assert_eq!(p.stacks.mode, StackMode::Exact);
    assert_eq!(p.stacks.lost, 0, "{backend}");
    let syms = Symbols::load(&fixture_exe());
    let got = syms.by_chain(&p);
    let keys: Vec<_> = {
        let mut k: Vec<_> = got.keys().cloned().collect();
        k.sort();
        k
    };
    let leaf = got
        .get(&chain(&["leaf", "middle", "main", "_start"]))
        .unwrap_or_else(|| panic!("{backend}: fixture stacks {keys:?}"));
    let other = &got[&chain(&["other", "main", "_start"])];
    let leak = &got[&chain(&["leak", "main", "_start"])];
    assert_eq!(keys.len(), 3, "{backend}: fixture stacks {keys:?}");
    assert_eq!(
        (leaf.samples, leaf.allocs, leaf.bytes),
        (3 * n, 3 * n, 300 * n)
    );
    assert_eq!((other.samples, other.allocs, other.bytes), (n, n, 100 * n));
    assert_eq!((leak.allocs, leak.bytes), (16, 16_000));
    // Leaked: only `leak` still holds blocks at exit.
    assert_eq!((leak.live_allocs, leak.live_bytes), (16, 16_000));
    assert_eq!((leaf.live_allocs, other.live_allocs), (0, 0));
    // At the peak (after `leak`), the loop's blocks were all freed.
    assert_eq!((leak.peak_allocs, leak.peak_bytes), (16, 16_000));
    assert_eq!((leaf.peak_bytes, other.peak_bytes), (0, 0));
    // Every stack records allocator time (an allocation takes some ticks).
    assert!(leaf.ticks > 0 && other.ticks > 0);
    // The process's own counts are unaffected by stack recording.
    assert!(p.totals.calls_of(Func::Malloc) >= 4 * n + 16);
    // The shim's own frames are not in any stack.
    let shim_path = Path::new(shim()).canonicalize().unwrap();
    for s in &p.stacks.stacks {
        let leaf_module = p.stacks.module_of(s.frames[0]).map(|m| Path::new(&m.path));
        assert_ne!(leaf_module, Some(shim_path.as_path()), "{backend}: {s:?}");
    }
}

/// Sample mode: shares by bytes and the estimated totals are within a
/// stated tolerance of the truth. With 8 KiB between samples the run below
/// takes about 4 900 samples, so the standard error of the leaf's 3/4
/// share is about 0.006; the tolerance is 0.03 (five standard errors).
fn sample_mode_estimates_shares(backend: &str) {
    let n = 100_000;
    let p = run_fixture(
        backend,
        n,
        &[
            ("ALLOCMUX_STACKS", "sample"),
            ("ALLOCMUX_SAMPLE_BYTES", "8192"),
        ],
    );
    assert_eq!(p.stacks.mode, StackMode::Sample { mean_bytes: 8192 });
    let got = Symbols::load(&fixture_exe()).by_chain(&p);
    let leaf = got[&chain(&["leaf", "middle", "main", "_start"])];
    let other = got[&chain(&["other", "main", "_start"])];
    let total = (leaf.bytes + other.bytes) as f64;
    let share = leaf.bytes as f64 / total;
    assert!(
        (share - 0.75).abs() < 0.03,
        "{backend}: leaf share {share:.4} ({leaf:?} / {other:?})"
    );
    let calls = (leaf.allocs + other.allocs) as f64;
    assert!(
        (calls / (4 * n) as f64 - 1.0).abs() < 0.05,
        "{backend}: estimated {calls} allocations, made {}",
        4 * n
    );
    let samples = leaf.samples + other.samples;
    assert!(
        (3_000..8_000).contains(&samples),
        "{backend}: {samples} samples for 40 MB at 8 KiB"
    );
}

/// Sample mode sees the free of every sampled block: the fixture frees all
/// of the loop's blocks, so no stack of the loop may hold live blocks at
/// exit, whether its blocks are small (under glibc and mimalloc a sampled
/// one is made a page long, and only frees of blocks that long are looked
/// up), larger than that to begin with, or large enough for the
/// allocator's large-block paths (where jemalloc offsets a block from its
/// page by a random number of cache lines). Each run takes 600 to 1,000
/// samples and must lose none; a single missed free would leave one
/// block, weighed as about 40 (small) or 1 (larger), live.
fn sample_mode_sees_every_sampled_block_freed(backend: &str) {
    for (size, n) in [(100u64, 10_000u64), (5000, 1000), (100_000, 200)] {
        let exe = fixture_exe();
        let (out, profiles) = run_under(
            backend,
            Command::new(&exe).args([n.to_string(), size.to_string()]),
            &[
                ("ALLOCMUX_STACKS", "sample"),
                ("ALLOCMUX_SAMPLE_BYTES", "4096"),
            ],
        );
        assert!(out.status.success(), "{backend}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), format!("stacks: {n} iterations\n"));
        let p = &profiles[0];
        assert_eq!(p.stacks.lost, 0, "{backend} {size}");
        let got = Symbols::load(&exe).by_chain(p);
        let leaf = got[&chain(&["leaf", "middle", "main", "_start"])];
        let other = got[&chain(&["other", "main", "_start"])];
        assert!(leaf.samples > 300, "{backend} {size}: {leaf:?}");
        assert_eq!(
            (
                leaf.live_allocs,
                other.live_allocs,
                leaf.live_bytes,
                other.live_bytes
            ),
            (0, 0, 0, 0),
            "{backend} {size}: {leaf:?} {other:?}"
        );
    }
}

/// An exact prefix (`ALLOCMUX_EXACT_FIRST`): a process that makes fewer
/// allocations than the prefix has exact stacks; one that makes more has
/// every stack of the prefix with its exact counts, then sampled ones, and
/// the blocks made in the prefix and freed after sampling started are seen
/// freed (the filter that frees look in is rebuilt at the switch).
fn exact_prefix_then_samples(backend: &str) {
    let exe = compile(
        "cc",
        "exact_first.c",
        &["-O2", "-g", "-fomit-frame-pointer"],
    );
    let syms = Symbols::load(&exe);
    let run = |held: u64, churn: u64| {
        let (out, mut profiles) = run_under(
            backend,
            Command::new(&exe).args([held.to_string(), churn.to_string()]),
            &[
                ("ALLOCMUX_STACKS", "sample"),
                ("ALLOCMUX_SAMPLE_BYTES", "4096"),
                ("ALLOCMUX_EXACT_FIRST", "20000"),
            ],
        );
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{backend}: {}\n{}",
            out.status,
            text(&out.stderr)
        );
        assert_eq!(text(&out.stdout), format!("exact_first: {held} {churn}\n"));
        assert_eq!(profiles.len(), 1);
        profiles.pop().unwrap()
    };

    // Under the prefix: exact mode throughout.
    let p = run(100, 100);
    assert_eq!((p.stacks.mode, p.stacks.exact_first), (StackMode::Exact, 0));
    let got = syms.by_chain(&p);
    let hold = got[&chain(&["hold", "main", "_start"])];
    let churn = got[&chain(&["churn", "main", "_start"])];
    assert_eq!((hold.samples, hold.allocs, hold.live_allocs), (100, 100, 0));
    assert_eq!(
        (churn.samples, churn.allocs, churn.live_allocs),
        (100, 100, 0)
    );

    // Past it: `hold` lies wholly in the prefix, `churn` starts there and
    // goes on sampled (190,000 blocks of 100 bytes at 4 KiB: about 4,600
    // samples, a standard error of 1.5%; the tolerance is 8%).
    let (held, churned) = (10_000u64, 200_000u64);
    let p = run(held, churned);
    assert_eq!(p.stacks.mode, StackMode::Sample { mean_bytes: 4096 });
    assert_eq!((p.stacks.exact_first, p.stacks.lost), (20_000, 0));
    let got = syms.by_chain(&p);
    let hold = got[&chain(&["hold", "main", "_start"])];
    let churn = got[&chain(&["churn", "main", "_start"])];
    let leak = got[&chain(&["leak", "main", "_start"])];
    assert_eq!(
        (hold.samples, hold.allocs, hold.bytes),
        (held, held, 100 * held),
        "{backend}: every allocation of the prefix, weight 1"
    );
    assert_eq!(
        (hold.live_allocs, hold.live_bytes, churn.live_allocs),
        (0, 0, 0),
        "{backend}: blocks of the prefix freed after the switch are seen freed"
    );
    let error = churn.allocs as f64 / churned as f64 - 1.0;
    assert!(
        error.abs() < 0.08,
        "{backend}: churn estimated at {} allocations, made {churned}",
        churn.allocs
    );
    assert!(
        churn.samples < churned / 2,
        "{backend}: churn sampled, not recorded whole: {churn:?}"
    );
    // 100,000-byte blocks at 4 KiB between samples: each sampled surely.
    assert_eq!(
        (leak.allocs, leak.live_allocs),
        (16, 16),
        "{backend}: {leak:?}"
    );
}

/// Cross-thread frees with stacks on: exact call counts, no hang, every
/// thread's allocations on a stack.
fn threads_with_stacks(backend: &str) {
    let exe = compile_c("threads.c");
    for mode in ["sample", "exact"] {
        let (out, profiles) = run_under(
            backend,
            Command::new(&exe).args(["16", "5000"]),
            &[("ALLOCMUX_STACKS", mode)],
        );
        assert!(
            out.status.success(),
            "threads under {backend} with {mode} stacks: {}\n{}",
            out.status,
            text(&out.stderr)
        );
        assert_eq!(
            text(&out.stdout),
            text(&run_reference(Command::new(&exe).args(["16", "5000"]), None).stdout)
        );
        let p = &profiles[0];
        assert!(p.totals.calls_of(Func::Malloc) >= 80_000);
        let allocs: u64 = p.stacks.stacks.iter().map(|s| s.counts.allocs).sum();
        if mode == "exact" {
            // Every allocation has a stack.
            assert_eq!(
                allocs + p.stacks.lost,
                p.totals.allocation_calls() - p.totals.failed_calls,
                "{backend}: {}",
                summary(p)
            );
            assert_eq!(p.stacks.lost, 0);
        } else {
            assert!(!p.stacks.stacks.is_empty());
        }
    }
}

/// Sampling is unbiased for short-lived threads too: a new thread's first
/// allocation is sampled with the same probability as any other (a
/// countdown starting at zero would sample it for certain while weighting
/// it as rare, which here would inflate the estimate by about 60%).
/// 64 threads make 100 allocations each (about 6.6 MB); at one sample per
/// 64 KiB that is about 100 samples, a standard error near 10%.
fn sampling_is_unbiased_across_many_threads(backend: &str) {
    let exe = compile_c("threads.c");
    let mut ratios = Vec::new();
    for _ in 0..3 {
        let (out, profiles) = run_under(
            backend,
            Command::new(&exe).args(["64", "100"]),
            &[
                ("ALLOCMUX_STACKS", "sample"),
                ("ALLOCMUX_SAMPLE_BYTES", "65536"),
            ],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let p = &profiles[0];
        let estimated: u64 = p.stacks.stacks.iter().map(|s| s.counts.bytes).sum();
        ratios.push(estimated as f64 / p.totals.bytes_requested as f64);
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios[1];
    assert!(
        (median - 1.0).abs() < 0.3,
        "{backend}: estimated / requested bytes {ratios:?}"
    );
}

/// A forked child records its own stacks from zero; an exec'd one too.
fn fork_and_exec_with_stacks(backend: &str) {
    let exe = compile_c("forkexec.c");
    let (out, profiles) = run_under(
        backend,
        Command::new(&exe).arg("200"),
        &[("ALLOCMUX_STACKS", "exact")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(profiles.len() >= 3, "{} profiles", profiles.len());
    for p in profiles.iter().filter(|p| p.totals.allocation_calls() > 0) {
        assert_eq!(p.stacks.mode, StackMode::Exact);
        assert!(!p.stacks.stacks.is_empty(), "{}", summary(p));
        let allocs: u64 = p.stacks.stacks.iter().map(|s| s.counts.allocs).sum();
        assert!(
            allocs <= p.totals.allocation_calls(),
            "a child counts its parent's stacks: {allocs} > {}",
            p.totals.allocation_calls()
        );
    }
}

/// Exact mode takes each stack's allocator time from the calls the
/// process's time sample timed, weighted as the process total weighs them:
/// the stacks' times add up to the process's estimate, less the calls no
/// stack takes (the recorder's own, frees of blocks allocated before
/// recording began). On this fixture every call the process counts is
/// taken by a stack (with every call timed, the stacks' times were the
/// process's to the tick), so the two are equal whatever any call took,
/// unless a call gave up waiting for the stack lock (counted as lost):
/// then only the bound holds.
fn stack_time_comes_from_the_time_sample(backend: &str) {
    let n = 20_000;
    let p = run_fixture(backend, n, &[("ALLOCMUX_STACKS", "exact")]);
    assert_eq!(p.time_sample_mean, 256, "{backend}");
    let total = p.totals.estimated_allocator_ticks(p.time_sample_mean);
    let stacks: u64 = p.stacks.stacks.iter().map(|s| s.counts.ticks).sum();
    // Each stack's figure is rounded to whole ticks.
    let rounding = p.stacks.stacks.len() as f64;
    let lost = p.stacks.lost;
    eprintln!("{backend}: stacks {stacks} of {total} ticks, {lost} lost");
    assert!(
        stacks as f64 <= total + rounding,
        "{backend}: the stacks' time {stacks} exceeds the process's {total}"
    );
    if lost == 0 {
        assert!(
            stacks as f64 >= total - rounding,
            "{backend}: the stacks' time {stacks} falls short of the process's {total}"
        );
    }
}

/// Sample mode serves a sampled call as a larger (or aligned) block, whose
/// time is not the program's call's: a stack is charged for it one call at
/// the process's mean time per timed call, priced when the profile is
/// written. Charged what the larger blocks took, the stacks' times came to
/// 7 (glibc), 2.5 (jemalloc) and 2 (mimalloc) times the process's on the
/// churn.
///
/// The stacks' time is then their estimated calls (allocations and frees)
/// times `timed_ticks / timed_calls`, and the process's sampled time
/// `timed_ticks * time_sample_mean`: with every call timed, their ratio is
/// the estimated calls over the calls, which depends on the byte sampling
/// alone, not on what any call took (about 2,400 samples: a standard error
/// near 2%, the bounds ten of them). Compared with the whole estimate
/// instead, the ratio would also carry the calls timed for themselves (a
/// thread's first call of each function), measured whole: one of them
/// preempted on a loaded machine is milliseconds, a tenth of the run's
/// allocator time. Charged the thread's mean time so far, as the stacks
/// once were, a preempted call moved every later sample's charge, and the
/// ratio read up to 1.8 under load.
fn sample_mode_stack_time_is_the_processs(backend: &str) {
    let p = run_fixture(
        backend,
        100_000,
        &[
            ("ALLOCMUX_STACKS", "sample"),
            ("ALLOCMUX_SAMPLE_BYTES", "16384"),
            ("ALLOCMUX_TIME_SAMPLE", "1"),
        ],
    );
    let sampled = p.totals.timed_ticks as f64 * f64::from(p.time_sample_mean);
    let stacks: u64 = p.stacks.stacks.iter().map(|s| s.counts.ticks).sum();
    let samples: u64 = p.stacks.stacks.iter().map(|s| s.counts.samples).sum();
    let share = stacks as f64 / sampled;
    eprintln!("{backend}: stacks {stacks} of {sampled} ticks ({share:.3}), {samples} samples");
    assert!(samples > 1000, "{backend}: {samples} samples");
    assert!(
        (0.8..1.25).contains(&share),
        "{backend}: the stacks' time {stacks} is {share:.3} of the process's sampled {sampled}"
    );
    // Exactly so: each stack's time is its estimated calls, its
    // allocations and the frees of its blocks, at the mean (each figure
    // rounded: half a call for each of the two counts, and a tick).
    let mean = p.totals.timed_ticks as f64 / p.totals.timed_calls as f64;
    let calls: u64 = p
        .stacks
        .stacks
        .iter()
        .map(|s| 2 * s.counts.allocs - s.counts.live_allocs)
        .sum();
    let rounding = p.stacks.stacks.len() as f64 * (1.5 * mean + 1.0);
    assert!(
        (stacks as f64 - calls as f64 * mean).abs() <= rounding,
        "{backend}: the stacks' time {stacks} is not their {calls} calls at {mean:.1} ticks"
    );
}

/// A library closed and another opened where it was, over and over:
/// every allocation through either is on its own caller's stack. The two
/// builds' allocating functions have the same code but frames of
/// different sizes, so unwinding the second with what was learned of the
/// first (steps, last stacks) would lose its callers: the recorder must
/// see each load and unload.
#[test]
fn a_library_opened_where_another_was_unwinds_as_itself() {
    let (rounds, calls) = (20u64, 500u64);
    let lib = |frame: &str| {
        let flags = [
            "-O2",
            "-g",
            "-fomit-frame-pointer",
            "-shared",
            "-fPIC",
            "-DLIB",
            frame,
        ];
        compile("cc", "dlreload.c", &flags)
    };
    let (lib_a, lib_b) = (lib("-DFRAME=200"), lib("-DFRAME=2000"));
    let exe = compile(
        "cc",
        "dlreload.c",
        &["-O2", "-g", "-fomit-frame-pointer", "-ldl"],
    );
    let mut cmd = Command::new(&exe);
    cmd.arg(&lib_a)
        .arg(&lib_b)
        .arg(rounds.to_string())
        .arg(calls.to_string());
    let (out, mut profiles) = run_under("system", &mut cmd, &[("ALLOCMUX_STACKS", "exact")]);
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    // Where the loader put them is its choice: the test is only as strong
    // as it says.
    assert_eq!(
        text(&out.stdout),
        format!("dlreload: {rounds} rounds, same place\n"),
        "the two builds were never mapped at the same address"
    );
    assert_eq!(profiles.len(), 1);
    let p = profiles.pop().unwrap();
    assert_eq!(p.stacks.lost, 0);
    let got = Symbols::load(&exe).by_chain(&p);
    let mut keys: Vec<_> = got.keys().cloned().collect();
    keys.sort();
    for via in ["via_a", "via_b"] {
        let through: Vec<_> = keys
            .iter()
            .filter(|k| k.contains(&via.to_string()))
            .collect();
        assert_eq!(
            through,
            [&chain(&[via, "main", "_start"])],
            "stacks through {via}: {keys:?}"
        );
        let c = &got[&chain(&[via, "main", "_start"])];
        assert_eq!(
            (c.allocs, c.bytes),
            (rounds * calls, 48 * rounds * calls),
            "{via}"
        );
    }
}

per_backend!(
    exact_mode_counts_every_stack,
    exact_prefix_then_samples,
    stack_time_comes_from_the_time_sample,
    sample_mode_estimates_shares,
    sample_mode_sees_every_sampled_block_freed,
    sample_mode_stack_time_is_the_processs,
    threads_with_stacks,
    sampling_is_unbiased_across_many_threads,
    fork_and_exec_with_stacks,
);

/// python3 with stacks on, each mode under a different backend: unchanged
/// output, and stacks that reach into the interpreter.
#[test]
fn python_with_stacks() {
    let Some(python) = require("/usr/bin/python3", "python3") else {
        return;
    };
    let script = "import json\nd = {str(i): [i] * (i % 30) for i in range(30000)}\nprint(len(json.dumps(d)))\n";
    let reference = run_reference(Command::new(&python).args(["-c", script]), None);
    for (backend, mode) in [
        ("system", "exact"),
        ("system", "sample"),
        ("jemalloc", "sample"),
        ("mimalloc", "sample"),
    ] {
        let (out, profiles) = run_under(
            backend,
            Command::new(&python).args(["-c", script]),
            &[
                ("ALLOCMUX_STACKS", mode),
                ("ALLOCMUX_SAMPLE_BYTES", "65536"),
            ],
        );
        assert_eq!(out.stdout, reference.stdout, "{backend} {mode}");
        assert_eq!(out.stderr, reference.stderr, "{backend} {mode}");
        let p = &profiles[0];
        let in_python = p.stacks.stacks.iter().any(|s| {
            s.frames.iter().any(|&a| {
                p.stacks
                    .module_of(a)
                    .is_some_and(|m| m.path.contains("python"))
            })
        });
        assert!(
            in_python,
            "{backend} {mode}: no stack reaches the interpreter ({} stacks)",
            p.stacks.stacks.len()
        );
    }
}

/// Every malloc-family export of the shim has an unwind entry. The
/// exports are naked one-instruction jumps, which get none unless they
/// declare it, and a profiler or debugger that stops a program on one (a
/// sampling profiler does, now and then) must still walk its stack.
#[test]
fn every_export_has_an_unwind_entry() {
    let data = std::fs::read(shim()).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let frames = Command::new("readelf")
        .args(["--debug-dump=frames", shim()])
        .output()
        .expect("readelf (binutils) runs");
    assert!(frames.status.success());
    // FDE lines name their range as `pc=START..END`, in hex.
    let ranges: Vec<std::ops::Range<u64>> = String::from_utf8_lossy(&frames.stdout)
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("pc="))
        .filter_map(|r| {
            let (start, end) = r.split_once("..")?;
            Some(u64::from_str_radix(start, 16).ok()?..u64::from_str_radix(end, 16).ok()?)
        })
        .collect();
    assert!(!ranges.is_empty(), "no FDE parsed from readelf's output");
    for f in allocmux_format::Func::ALL {
        let symbol = file
            .dynamic_symbols()
            .find(|s| s.name() == Ok(f.name()))
            .unwrap_or_else(|| panic!("{} is exported", f.name()));
        assert!(
            ranges.iter().any(|r| r.contains(&symbol.address())),
            "{} at {:#x} has no unwind entry",
            f.name(),
            symbol.address()
        );
    }
}
