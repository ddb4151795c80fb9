#!/usr/bin/env python3
"""Per-stack instruction counts and library calls from callgrind runs.

run.sh runs `unwind-bench --only METHOD --depths D --iters K` under
callgrind twice, with K = LO and K = HI.  Start-up, module registration and
the fixed warm-up are identical in both, so (total(HI) - total(LO)) / (HI - LO)
is exactly the cost of one capture through the chain, and the same difference
of call counts gives how often each function is called per capture.  The
`none` method (empty capture) gives the chain's own cost, subtracted.

Usage: callgrind_report.py DIR LO HI METHOD... (files DIR/METHOD.D.K)
Prints a markdown table on stdout.
"""
import collections
import os
import re
import sys

# Calls that matter inside a malloc hook: locks, loader walks, allocation,
# system calls.  Patterns are matched against callgrind's function names.
WATCH = [
    ("mutex/rwlock", re.compile(r"pthread_(mutex|rwlock)_|lll_lock|__lll_")),
    ("dl_iterate_phdr", re.compile(r"dl_iterate_phdr")),
    ("_dl_find_object", re.compile(r"_dl_find_object")),
    ("malloc family", re.compile(r"^(malloc|calloc|realloc|free|__libc_malloc|__libc_free)$")),
    ("mmap/munmap", re.compile(r"^(mmap|munmap|mmap64)$")),
    ("sigprocmask", re.compile(r"^pthread_sigmask")),  # sigprocmask() wraps it
    ("pthread_once", re.compile(r"^pthread_once")),
    ("other syscalls", re.compile(r"^(mincore|msync|syscall|write|read|open|openat|getpid|gettid)$")),
]


# unwind-bench --only runs this many uncounted warm-up captures first.
WARMUP = 200
# The chain and harness frames, not interesting in the most-called list.
HARNESS = re.compile(r"^(f[0-3]('\d+)?|chain_(o2|fp)_run|unwind_bench::(capture|Ctx::run))$")


def parse(path):
    """Returns (total Ir, {callee name: call count})."""
    total = None
    calls = collections.Counter()
    fn = cfn = None
    with open(path) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                total = int(line.split()[1])
            elif line.startswith("fn="):
                fn = line[3:].strip()
            elif line.startswith("cfn="):
                cfn = line[4:].strip()
            elif line.startswith("calls=") and cfn is not None:
                # A PLT stub carries its target's name, so a call through
                # the PLT shows up as X -> X(stub) -> X; count it once.
                if cfn != fn:
                    calls[cfn] += int(line[6:].split()[0])
    if total is None:
        sys.exit(f"{path}: no summary line")
    return total, calls


def per_stack(d, method, depth, lo, hi):
    t_lo, c_lo = parse(os.path.join(d, f"{method}.{depth}.{lo}"))
    t_hi, c_hi = parse(os.path.join(d, f"{method}.{depth}.{hi}"))
    n = hi - lo
    calls = {k: (c_hi[k] - c_lo.get(k, 0)) / n for k in c_hi}
    return (t_hi - t_lo) / n, calls


def main():
    d, lo, hi, methods = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    depths = sorted({int(f.split(".")[1]) for f in os.listdir(d) if f.count(".") == 2})
    base = {dep: per_stack(d, "none", dep, lo, hi)[0] for dep in depths}
    base_fp = {dep: per_stack(d, "none_fp", dep, lo, hi)[0] for dep in depths
               if os.path.exists(os.path.join(d, f"none_fp.{dep}.{lo}"))}
    print("| unwinder | C frames (D) | instructions/stack (net) | " + " | ".join(w for w, _ in WATCH) + " |")
    print("|---|---:|---:|" + "---:|" * len(WATCH))
    details = []
    cold = []
    for m in methods:
        for dep in depths:
            ir, calls = per_stack(d, m, dep, lo, hi)
            b = base_fp.get(dep, base[dep]) if m == "fp" else base[dep]
            cells = []
            for _, rx in WATCH:
                c = sum(v for k, v in calls.items() if rx.search(k))
                cells.append(f"{c:.2f}" if c else "0")
            print(f"| {m} | {dep} | {ir - b:,.0f} | " + " | ".join(cells) + " |")
            hot = sorted(((v, k) for k, v in calls.items() if v >= 0.5 and not HARNESS.search(k)),
                         reverse=True)[:10]
            details.append((m, dep, hot))
            # Cold path: calls beyond the steady state in the LO run
            # (first sight of each address: cache fills, lazy init), net of
            # the `none` run, which has the same set-up.
            _, c_m = parse(os.path.join(d, f"{m}.{dep}.{lo}"))
            _, c_0 = parse(os.path.join(d, f"none.{dep}.{lo}"))
            cold_cells = []
            for _, rx in WATCH:
                tot = sum(v for k, v in c_m.items() if rx.search(k)) - sum(v for k, v in c_0.items() if rx.search(k))
                steady = sum(v for k, v in calls.items() if rx.search(k)) * (lo + WARMUP)
                cold_cells.append(f"{tot - steady:.0f}")
            cold.append(f"| {m} | {dep} | " + " | ".join(cold_cells) + " |")
    print("\nCold path: the same calls in total over the first captures, beyond the steady")
    print("state (lazy initialisation, first sight of each return address):\n")
    print("| unwinder | C frames (D) | " + " | ".join(w for w, _ in WATCH) + " |")
    print("|---|---:|" + "---:|" * len(WATCH))
    print("\n".join(cold))
    print("\nMost-called functions per capture (calls/stack; unnamed hex = local functions of the stripped libgcc_s/libunwind):\n")
    for m, dep, hot in details:
        print(f"- {m} D={dep}: " + ", ".join(f"`{k}` {v:.1f}" for v, k in hot))


if __name__ == "__main__":
    main()
