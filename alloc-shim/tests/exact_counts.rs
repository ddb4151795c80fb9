//! The shim counts every call exactly: the difference between two runs of a
//! fixture that differ only in an iteration count is exactly that many
//! times the fixture's per-iteration table, under every backend.

use crate::common;

use std::process::Command;

use allocmux_format::totals::size_bucket;
use common::*;

/// The per-iteration call table at the top of counts.c.
const PER_ITERATION: [(Func, u64); 10] = [
    (Func::Malloc, 1),
    (Func::Free, 7),
    (Func::Calloc, 1),
    (Func::Realloc, 1),
    (Func::AlignedAlloc, 1),
    (Func::MallocUsableSize, 1),
    (Func::Memalign, 1),
    (Func::PosixMemalign, 1),
    (Func::Pvalloc, 1),
    (Func::Valloc, 1),
];

/// The sizes counts.c requests per iteration: malloc, calloc (4 * 32),
/// realloc, aligned_alloc, memalign, posix_memalign, pvalloc (as passed),
/// valloc.
const REQUESTS: [u64; 8] = [64, 128, 256, 128, 100, 300, 100, 100];
const BYTES_PER_ITERATION: u64 = 1176;
const ITERATIONS: u64 = 1000;

/// Runs `counts n` under `backend`; checks its output and returns its one profile.
fn counts(backend: &str, n: u64) -> ProcessProfile {
    counts_sampled(backend, n, "1")
}

/// `counts`, with `ALLOCMUX_TIME_SAMPLE` set: 1 times every call, which
/// also makes the size histogram exact (it is otherwise estimated from the
/// timed calls).
fn counts_sampled(backend: &str, n: u64, time_sample: &str) -> ProcessProfile {
    let exe = compile_c("counts.c");
    let (out, profiles) = run_under(
        backend,
        Command::new(&exe).arg(n.to_string()),
        &[("ALLOCMUX_TIME_SAMPLE", time_sample)],
    );
    assert!(
        out.status.success(),
        "counts {n} under {backend} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(
        text(&out.stdout),
        format!("counts: {n} iterations, checksum {n}\n"),
        "counts {n} under {backend}: unexpected output"
    );
    assert_eq!(
        profiles.len(),
        1,
        "counts {n} under {backend} is one process and should leave one profile: {:#?}",
        profiles.iter().map(summary).collect::<Vec<_>>()
    );
    let p = profiles.into_iter().next().unwrap();
    assert_eq!(
        p.state,
        State::Exited,
        "counts {n} under {backend}: {}",
        summary(&p)
    );
    assert_eq!(p.allocator, backend, "counts {n}: {}", summary(&p));
    p
}

/// With the default sampling, calls and bytes stay exact and the size
/// histogram is an estimate: its total is near the number of requests.
fn default_sampling_keeps_counts_exact(backend: &str) {
    let base = counts_sampled(backend, 0, "256");
    let many = counts_sampled(backend, 20 * ITERATIONS, "256");
    let calls = |p: &ProcessProfile| p.totals.calls_of(Func::Malloc);
    assert_eq!(calls(&many) - calls(&base), 20 * ITERATIONS);
    let requested = many.totals.bytes_requested - base.totals.bytes_requested;
    assert_eq!(requested, 20 * ITERATIONS * BYTES_PER_ITERATION);
    let estimated: u64 = many.totals.size_hist.iter().sum();
    let requests = 20 * ITERATIONS * REQUESTS.len() as u64;
    assert!(
        estimated > requests * 7 / 10 && estimated < requests * 13 / 10,
        "histogram total {estimated} is far from the {requests} requests it estimates"
    );
}

fn counts_differences_are_exact(backend: &str) {
    assert_eq!(REQUESTS.iter().sum::<u64>(), BYTES_PER_ITERATION);
    let base = counts(backend, 0);
    let many = counts(backend, ITERATIONS);
    let (a, b) = (&many.totals, &base.totals);
    let n = ITERATIONS as i128;
    let mut wrong = Vec::new();
    for (f, per) in PER_ITERATION {
        let got = delta(a.calls_of(f), b.calls_of(f));
        if got != n * per as i128 {
            wrong.push(format!(
                "{}: {got} more calls, want {} ({} per iteration)",
                f.name(),
                n * per as i128,
                per
            ));
        }
    }
    assert_eq!(
        PER_ITERATION.len(),
        Func::ALL.len(),
        "the table covers every function"
    );
    let requested = delta(a.bytes_requested, b.bytes_requested);
    if requested != n * BYTES_PER_ITERATION as i128 {
        wrong.push(format!(
            "bytes_requested: {requested} more, want {}",
            n * BYTES_PER_ITERATION as i128
        ));
    }
    let live = delta(a.bytes_allocated, a.bytes_freed) - delta(b.bytes_allocated, b.bytes_freed);
    if live != 0 {
        wrong.push(format!(
            "bytes_allocated - bytes_freed at exit differs by {live} (every block of the loop is freed)"
        ));
    }
    let failed = delta(a.failed_calls, b.failed_calls);
    if failed != 0 {
        wrong.push(format!("failed_calls: {failed} more, want 0"));
    }
    let null_frees = delta(a.null_frees, b.null_frees);
    if null_frees != n {
        wrong.push(format!(
            "null_frees: {null_frees} more, want {n} (one free(NULL) per iteration)"
        ));
    }
    let mut hist = [0i128; allocmux_format::SIZE_BUCKETS];
    for size in REQUESTS {
        hist[size_bucket(size as usize)] += n;
    }
    for (bucket, want) in hist.iter().enumerate() {
        let got = delta(a.size_hist[bucket], b.size_hist[bucket]);
        if got != *want {
            wrong.push(format!(
                "size_hist bucket {bucket}: {got} more, want {want}"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "under {backend}, counts {ITERATIONS} minus counts 0 is not {ITERATIONS} x the table of counts.c:\n  {}\ncounts 0:    {}\ncounts {ITERATIONS}: {}",
        wrong.join("\n  "),
        summary(&base),
        summary(&many)
    );
}

// ---- threads.c ------------------------------------------------------------

const THREADS: u64 = 32;
const FEW: u64 = 200;
const MANY: u64 = 2000;

/// threads.c's `mix`.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x
}

/// threads.c's `block_size(t, k)`: the size of thread t's k-th block.
fn block_size(t: u64, k: u64) -> u64 {
    16 + mix((t << 40) ^ k) % 2033
}

/// Runs the fixture `name` with `args` without the shim and under it with
/// `backend`: both succeed and print the same, and the run under the shim
/// leaves one complete profile, which is returned.
fn run_as_without_shim(name: &str, args: &[String], backend: &str) -> ProcessProfile {
    let exe = compile_c(name);
    let reference = run_reference(Command::new(&exe).args(args), None);
    assert!(
        reference.status.success(),
        "{name} {args:?} fails without the shim: {}\n{}",
        reference.status,
        text(&reference.stdout)
    );
    let (out, profiles) = run_under(backend, Command::new(&exe).args(args), &[]);
    assert!(
        out.status.success(),
        "{name} {args:?} under {backend} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(
        text(&out.stdout),
        text(&reference.stdout),
        "{name} {args:?}: stdout under {backend} differs from the run without the shim"
    );
    assert_eq!(
        profiles.len(),
        1,
        "{name} {args:?} under {backend}: {:#?}",
        profiles.iter().map(summary).collect::<Vec<_>>()
    );
    let p = profiles.into_iter().next().unwrap();
    assert_eq!(
        p.state,
        State::Exited,
        "{name} {args:?} under {backend}: {}",
        summary(&p)
    );
    p
}

fn threads(backend: &str, per_thread: u64) -> ProcessProfile {
    let p = run_as_without_shim(
        "threads.c",
        &[THREADS.to_string(), per_thread.to_string()],
        backend,
    );
    let args = [THREADS, per_thread];
    assert_eq!(p.allocator, backend);
    assert!(
        p.threads > THREADS,
        "threads {args:?} under {backend}: the profile counts {} threads, want at least {} (main + {THREADS} workers)",
        p.threads,
        THREADS + 1
    );
    p
}

fn threads_differences_are_exact(backend: &str) {
    let few = threads(backend, FEW);
    let many = threads(backend, MANY);
    let (a, b) = (&many.totals, &few.totals);
    let blocks = (THREADS * (MANY - FEW)) as i128;
    let bytes: u64 = (0..THREADS)
        .flat_map(|t| (FEW..MANY).map(move |k| block_size(t, k)))
        .sum();
    let mut wrong = Vec::new();
    for f in Func::ALL {
        let want = if matches!(f, Func::Malloc | Func::Free) {
            blocks
        } else {
            0
        };
        let got = delta(a.calls_of(f), b.calls_of(f));
        if got != want {
            wrong.push(format!("{}: {got} more calls, want {want}", f.name()));
        }
    }
    let requested = delta(a.bytes_requested, b.bytes_requested);
    if requested != bytes as i128 {
        wrong.push(format!(
            "bytes_requested: {requested} more, want {bytes} (the sizes threads.c computes)"
        ));
    }
    // Every block of the ring is freed, so the bytes live at exit are libc's
    // own (thread descriptors, stdio). Under jemalloc and mimalloc a usable
    // size is a function of the request, so they match exactly. glibc may
    // hand out a chunk up to 16 bytes larger when the rest of a free chunk
    // is too small to split, and with 33 racing threads which free chunks
    // exist varies: identical runs differ by 16 bytes live at exit (with
    // identical call counts), so there the check would test glibc's heap.
    let live = delta(a.bytes_allocated, a.bytes_freed) - delta(b.bytes_allocated, b.bytes_freed);
    if backend != "system" && live != 0 {
        wrong.push(format!(
            "bytes_allocated - bytes_freed at exit differs by {live} (every block is freed by the next thread)"
        ));
    }
    assert!(
        wrong.is_empty(),
        "under {backend}, threads {THREADS} {MANY} minus threads {THREADS} {FEW} is not exact:\n  {}\nfew:  {}\nmany: {}",
        wrong.join("\n  "),
        summary(&few),
        summary(&many)
    );
}

// ---- null_frees.c ---------------------------------------------------------

/// `free(NULL)` frees nothing, so it is no free: `calls free` counts the
/// frees of blocks, `null_frees` the `free(NULL)` calls (counted as frees,
/// a program that calls it often, as C++'s `delete nullptr` does through
/// libstdc++, showed far more frees than allocations).
fn null_frees_are_counted_apart(backend: &str) {
    const BLOCKS: u64 = 700;
    const NULLS: u64 = 1000;
    let run = |blocks: u64, nulls: u64| {
        run_as_without_shim(
            "null_frees.c",
            &[blocks.to_string(), nulls.to_string()],
            backend,
        )
    };
    let (base, p) = (run(0, 0), run(BLOCKS, NULLS));
    let (a, b) = (&p.totals, &base.totals);
    assert_eq!(
        (
            delta(a.calls_of(Func::Malloc), b.calls_of(Func::Malloc)),
            delta(a.calls_of(Func::Free), b.calls_of(Func::Free)),
            delta(a.null_frees, b.null_frees),
        ),
        (BLOCKS as i128, BLOCKS as i128, NULLS as i128),
        "under {backend}, null_frees {BLOCKS} {NULLS} minus null_frees 0 0 is not \
         {BLOCKS} mallocs, {BLOCKS} frees and {NULLS} free(NULL):\n  0 0: {}\n  {BLOCKS} {NULLS}: {}",
        summary(&base),
        summary(&p)
    );
}

per_backend!(
    with_next:
    counts_differences_are_exact,
    threads_differences_are_exact,
    default_sampling_keeps_counts_exact,
    null_frees_are_counted_apart
);

// ---- thread_exits.c -------------------------------------------------------

/// Threads that never allocate (whose only calls are glibc's frees after
/// their key destructors), one after the other in the same TLS block, and
/// threads that only free: the program ends (a thread registered after its
/// destructors once made the registry a cycle, a hang at exit), prints what
/// it prints without the shim, and every call of its own is counted.
#[test]
fn threads_that_never_allocate_or_only_free() {
    let (n, k) = (200u64, 50u64);
    for backend in BACKENDS {
        let p = &run_as_without_shim("thread_exits.c", &[n.to_string(), k.to_string()], backend);
        let (mallocs, frees) = (
            p.totals.calls_of(Func::Malloc),
            p.totals.calls_of(Func::Free),
        );
        assert!(
            mallocs >= n * k && mallocs < n * k + 100,
            "under {backend}: {mallocs} mallocs for {} of the program's: {}",
            n * k,
            summary(p)
        );
        assert!(
            frees >= n * k,
            "under {backend}: {frees} frees: {}",
            summary(p)
        );
    }
}

// ---- noalloc.c ------------------------------------------------------------

/// A program that allocates nothing has a profile that says so, under every
/// backend and stack mode: the shim's own allocations on the program's
/// thread (its writer thread's TLS block, which glibc allocates inside
/// `pthread_create` through the hooks) are neither counted nor stacked.
#[test]
fn the_shims_own_allocations_are_not_the_programs() {
    let exe = compile_c("noalloc.c");
    for backend in BACKENDS {
        for mode in ["off", "sample", "exact"] {
            let (out, profiles) = run_under(
                backend,
                &mut Command::new(&exe),
                &[("ALLOCMUX_STACKS", mode)],
            );
            assert!(
                out.status.success(),
                "noalloc under {backend}: {}",
                out.status
            );
            let [p] = &profiles[..] else {
                panic!("noalloc is one process: {} profiles", profiles.len())
            };
            let t = &p.totals;
            let calls: u64 = Func::ALL.iter().map(|&f| t.calls_of(f)).sum();
            assert!(
                calls == 0
                    && t.bytes_requested == 0
                    && t.bytes_allocated == 0
                    && p.stacks.stacks.is_empty(),
                "under {backend}, stacks {mode}: a program that allocates nothing shows allocations \
                 ({calls} calls, {} stacks): {}",
                p.stacks.stacks.len(),
                summary(p)
            );
        }
    }
}
