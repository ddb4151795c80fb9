#!/usr/bin/env python3
"""What default recording and sampled stacks cost, per backend, measured side by side.

For each backend (glibc, jemalloc, mimalloc) and each workload, the same
program runs in interleaved rounds under:

  bare       the allocator without allocmux: glibc itself; Debian's
             libjemalloc.so.2 / libmimalloc.so.2 preloaded
  in-code    (Rust workloads only) the program built with that allocator
             as its #[global_allocator], the crates and versions the shim
             links (scripts/incode-allocators)
  shim       under the shim, default recording (stacks off)
  sampled    under the shim with ALLOCMUX_STACKS=sample (default rate)

(the shim being the library `allocmux run` preloads: the direct shim of
the backend and mode under glibc and jemalloc, the universal library
under mimalloc)

and the script reports per-round ratios (median [min, max]): shim / bare,
shim / in-code, and sampled - shim (in units of the bare run). Interleaving
spreads the drift of a shared machine over all configurations alike.

With --callgrind it also counts instructions (valgrind --tool=callgrind),
which do not move with the machine's load: the difference between a run
of 2N and of N units of work, so start-up cancels out.

Workloads: the malloc/free churn (scripts/churn.c, 2 threads; the worst
case, a program that does nothing but allocate) and the bundled
edit-distance workload (allocation-bound Rust: Vec<char> per call).

Usage:
  python3 scripts/recording_cost.py [--rounds 15] [--callgrind] [--out FILE.md]

Needs gcc, cargo, Debian's libjemalloc2 and libmimalloc2.0.
"""
import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile

from common import DEBIAN, ROOT, clean_env, require_debian
from shim_overhead import direct_shims, library, report, timed  # timed: one process, timed; exits if it fails

BACKENDS = ["system", "jemalloc", "mimalloc"]
INCODE = {"system": "glibc", "jemalloc": "jemalloc", "mimalloc": "mimalloc"}
# Units of work under callgrind (churn: pairs per thread; edit-distance: word
# pairs). It runs 50x slower, but a run must take a few hundred stack
# samples (one per 512 KiB) for what sampling adds to be told from which
# calls it happened to sample; doubled for the difference.
CALLGRIND_SIZES = {"churn": 500_000, "edit-distance": 30_000}


def build(tmp):
    churn = os.path.join(tmp, "churn")
    subprocess.run(["gcc", "-O2", "-g", "-pthread", os.path.join(ROOT, "scripts", "churn.c"), "-o", churn], check=True)
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "allocmux-shim", "-p", "incode-allocators"], cwd=ROOT, check=True)
    release = os.path.join(ROOT, "target", "release")
    return churn, os.path.join(release, "liballocmux_shim.so"), release


def configs(backend, workload, shim, shims, release, churn, out, base):
    """name -> (argv builder for a size, environment)."""
    rust = workload != "churn"

    def cmd(binary):
        if rust:
            return lambda n: [os.path.join(release, f"workload-{binary}"), workload, str(n)]
        return lambda n: [churn, "2", str(n)]

    plain = cmd("glibc")
    c = {}
    if backend == "system":
        c["bare"] = (plain, dict(base))
    else:
        c["bare"] = (plain, dict(base, LD_PRELOAD=DEBIAN[backend]))
    if rust:
        c["in-code"] = (cmd(INCODE[backend]), dict(base))
    shim_env = dict(base, ALLOCMUX_ALLOCATOR=backend, ALLOCMUX_OUTPUT=out)
    c["shim"] = (plain, dict(shim_env, LD_PRELOAD=library(shims, shim, backend)))
    c["sampled"] = (plain, dict(shim_env, LD_PRELOAD=library(shims, shim, backend, "sample"), ALLOCMUX_STACKS="sample"))
    return c


def instructions(argv, env, tmp):
    """Instructions of the whole process tree (callgrind)."""
    pattern = os.path.join(tmp, "cg.%p.out")
    subprocess.run(["valgrind", "--tool=callgrind", "--trace-children=yes", f"--callgrind-out-file={pattern}", *argv],
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    total = 0
    for f in os.listdir(tmp):
        if f.startswith("cg.") and f.endswith(".out"):
            path = os.path.join(tmp, f)
            with open(path) as fh:
                for line in fh:
                    if line.startswith("summary:"):
                        total = max(total, int(line.split()[1]))
            os.remove(path)
    return total


def fmt(rs):
    return f"{statistics.median(rs):.3f} [{min(rs):.3f}, {max(rs):.3f}]"


def wall_times(rounds, n, c, workload):
    """Interleaved timed rounds of the configurations `c`: name -> seconds,
    one per round. Exits if the program's output differs between them."""
    times = {name: [] for name in c}
    outputs = set()
    timed(c["bare"][0](n), c["bare"][1])  # warm up
    for _ in range(rounds):
        for name, (argv, env) in c.items():
            t, stdout = timed(argv(n), env)
            times[name].append(t)
            outputs.add(stdout)
    if len(outputs) != 1:
        sys.exit(f"{workload}: output differed between configurations")
    return times


def instruction_counts(c, m, tmp):
    """Instructions of each configuration of `c` for m units of work: a run
    of 2m less a run of m, so start-up cancels out."""
    return {name: instructions(argv(2 * m), env, tmp) - instructions(argv(m), env, tmp) for name, (argv, env) in c.items()}


def wall(rounds, n, c, workload, backend, lines):
    """Interleaved timed rounds of the configurations `c`; appends a row."""
    times = wall_times(rounds, n, c, workload)

    def per_round(num, den):
        return [x / y for x, y in zip(times[num], times[den])]

    vs_incode = fmt(per_round("shim", "in-code")) if "in-code" in times else "n/a (C)"
    sampled = [(s - m) / b for s, m, b in zip(times["sampled"], times["shim"], times["bare"])]
    lines.append(f"| {workload} | {backend} | {fmt(per_round('shim', 'bare'))} | {vs_incode} | "
                 f"{statistics.median(sampled):+.3f} [{min(sampled):+.3f}, {max(sampled):+.3f}] |")
    print(lines[-1], flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15, help="0: instructions only (with --callgrind)")
    ap.add_argument("--churn-iterations", type=int, default=2_000_000, help="per thread")
    ap.add_argument("--edit-distance", type=int, default=40_000, help="word pairs")
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--out", help="also write the tables as Markdown to this file")
    a = ap.parse_args()
    require_debian()
    sizes = {"churn": a.churn_iterations, "edit-distance": a.edit_distance}
    base = clean_env()
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}; "
        f"load average at start {os.getloadavg()[0]:.2f}",
        f"{a.rounds} interleaved rounds; churn: 2 threads x {a.churn_iterations:,} malloc/free pairs; "
        f"edit-distance: {a.edit_distance:,} word pairs",
        "",
        "| workload | backend | shim / bare | shim / in-code | sampled - shim (of bare) |",
        "|---|---|---|---|---|",
    ]
    cg_lines = [
        "",
        "| instructions (callgrind, 2N - N) | backend | bare | in-code | shim | sampled | shim / bare | shim / in-code | sampled - shim (of bare) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        churn, shim, release = build(tmp)
        shims = direct_shims(shim, tmp)
        out = os.path.join(tmp, "%p.prof")
        for workload, n in sizes.items():
            for backend in BACKENDS:
                c = configs(backend, workload, shim, shims, release, churn, out, base)
                if a.rounds > 0:
                    wall(a.rounds, n, c, workload, backend, lines)
                if a.callgrind:
                    ir = instruction_counts(c, CALLGRIND_SIZES[workload], tmp)
                    incode = ir.get("in-code")
                    incode_ir = f"{incode:,}" if incode else "n/a"
                    shim_incode = f"{ir['shim'] / incode:.3f}" if incode else "n/a"
                    cg_lines.append(
                        f"| {workload} | {backend} | {ir['bare']:,} | {incode_ir} | "
                        f"{ir['shim']:,} | {ir['sampled']:,} | {ir['shim'] / ir['bare']:.3f} | "
                        f"{shim_incode} | {(ir['sampled'] - ir['shim']) / ir['bare']:+.3f} |")
                    print(cg_lines[-1], flush=True)
    report("\n".join((lines if a.rounds > 0 else lines[:2]) + (cg_lines if a.callgrind else [])), a.out)


if __name__ == "__main__":
    main()
