#!/usr/bin/env python3
"""Overhead of the allocmux shim's default recording, measured side by side.

Runs the malloc/free churn (scripts/churn.c, 2 threads) in interleaved rounds
under four configurations and reports the median wall-time ratios:

  shim jemalloc   vs  Debian's libjemalloc.so.2 preloaded directly
  shim system     vs  no preload (glibc)

Interleaving (A B C D A B C D ...) spreads the drift of a shared machine over
all configurations alike. Usage:

  python3 scripts/shim_overhead.py [--rounds 21] [--iterations 4000000] [--threads 2] [--out FILE.md]

Needs gcc, cargo and Debian's libjemalloc2 (apt-get install libjemalloc2).
"""
import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEBIAN_JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def build(tmp):
    churn = os.path.join(tmp, "churn")
    subprocess.run(["gcc", "-O2", "-g", "-pthread", os.path.join(ROOT, "scripts", "churn.c"), "-o", churn], check=True)
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "allocmux-shim"], cwd=ROOT, check=True)
    return churn, os.path.join(ROOT, "target", "release", "liballocmux_shim.so")


def timed(cmd, env):
    start = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.decode()}")
    return elapsed, r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--iterations", type=int, default=4_000_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", help="also write the table as Markdown to this file")
    a = ap.parse_args()
    if not os.path.exists(DEBIAN_JEMALLOC):
        sys.exit(f"{DEBIAN_JEMALLOC} is missing: apt-get install libjemalloc2")
    with tempfile.TemporaryDirectory() as tmp:
        churn, shim = build(tmp)
        cmd = [churn, str(a.threads), str(a.iterations)]
        base = {k: v for k, v in os.environ.items() if not k.startswith(("LD_PRELOAD", "ALLOCMUX_"))}
        # Profiles go to a file, as `allocmux run` does, so nothing is printed.
        out = os.path.join(tmp, "%p.prof")
        configs = {
            "glibc (no preload)": dict(base),
            "shim system": dict(base, LD_PRELOAD=shim, ALLOCMUX_ALLOCATOR="system", ALLOCMUX_OUTPUT=out),
            "Debian libjemalloc.so.2": dict(base, LD_PRELOAD=DEBIAN_JEMALLOC),
            "shim jemalloc": dict(base, LD_PRELOAD=shim, ALLOCMUX_ALLOCATOR="jemalloc", ALLOCMUX_OUTPUT=out),
        }
        times = {name: [] for name in configs}
        outputs = set()
        timed(cmd, configs["glibc (no preload)"])  # warm the page cache
        for _ in range(a.rounds):
            for name, env in configs.items():
                t, stdout = timed(cmd, env)
                times[name].append(t)
                outputs.add(stdout)
        if len(outputs) != 1:
            sys.exit("the churn's output differed between configurations")

    def ratio(num, den):
        # Per-round ratios (side by side in time), then their median.
        rs = [x / y for x, y in zip(times[num], times[den])]
        return statistics.median(rs), min(rs), max(rs)

    lines = [
        f"Churn: {a.threads} threads x {a.iterations:,} malloc/free pairs each, {a.rounds} interleaved rounds",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "",
        "| configuration | median wall (s) | min | max |",
        "|---|---|---|---|",
    ]
    for name, ts in times.items():
        lines.append(f"| {name} | {statistics.median(ts):.3f} | {min(ts):.3f} | {max(ts):.3f} |")
    lines += ["", "| ratio (per-round, median [min, max]) | value |", "|---|---|"]
    for num, den in [("shim jemalloc", "Debian libjemalloc.so.2"), ("shim system", "glibc (no preload)")]:
        m, lo, hi = ratio(num, den)
        lines.append(f"| {num} / {den} | {m:.3f} [{lo:.3f}, {hi:.3f}] |")
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
