#!/usr/bin/env python3
"""Does `allocmux compare` measure the allocators, and not allocmux?

For each workload (the suite's, and the C malloc/free churn), R rounds, and
in each round, one right after the other:

  compare     `allocmux compare -n 6 --warmup 0 --json FILE -- PROG SIZE`,
              as a user runs it (the embedded shim: its timing runs preload
              each allocator's forwarder, glibc's none; its recorded runs
              are left out here), of which the timing runs of its first
              round are kept: one per allocator, as a compare of one round
              would give (compare refuses fewer than 6 rounds, which cannot
              give a 95% interval)
  forwarder   one run per allocator with the same forwarders preloaded by
              hand (glibc: no preload): what compare's machinery
              (launching, interleaving, the CLI) should reproduce
  in-code     (Rust workloads) one run per allocator with it linked in as
              #[global_allocator] (scripts/incode-allocators, the crates and
              versions the shim links): what switching in code gives

Speedups over glibc are Hodges-Lehmann estimates over the rounds (compare's
method). compare's error against the forwarder runs (goal: within 1%) is
estimated per round, as the ratio of the two speedups in the same round,
with its 95% interval, so that a drift of the machine between rounds
cancels; against in-code switching (goal: within 3% on the
allocation-bound workloads) likewise. Winners by compare's rule (the
allocator whose 95% interval against every other one is below 1), from
compare's timing runs and from the forwarder runs.

Usage:
  python3 scripts/compare_fidelity.py [--rounds 15] [--divisor 1]
      [--workloads NAME,...] [--out FILE.md]

Writes Markdown (default scripts/results/compare-fidelity.md) and its chart
beside it. Needs gcc and cargo; builds what it runs.
"""
import argparse
import glob
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import bench_svg  # noqa: E402
from bench import WORKLOADS, paired_ratio, winner  # noqa: E402
from common import clean_env  # noqa: E402
from shim_overhead import timed  # noqa: E402

ALLOCATORS = ["system", "jemalloc", "mimalloc"]
INCODE = {"system": "glibc", "jemalloc": "jemalloc", "mimalloc": "mimalloc"}
# Rounds of each compare: its fewest; only the first is kept.
COMPARE_ROUNDS = 6
# Pairs per thread of the C churn (2 threads) at divisor 1.
CHURN_SIZE = 20_000_000
# Where the allocator is most of the work (docs/workloads.md), and where
# the in-code goal applies.
ALLOCATION_BOUND = {"edit-distance", "larson", "producer-consumer", "churn"}


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def wall(cmd, env):
    """Wall time of one run of `cmd`, which must succeed."""
    return timed(cmd, env)[0]


def forwarder(name):
    """The forwarder compare wrote to the cache for `name` (the newest)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ["HOME"], ".cache")
    found = glob.glob(os.path.join(cache, "allocmux", f"liballocmux_shim-{name}_forward-*.so"))
    if not found:
        sys.exit(f"no {name} forwarder in {cache}/allocmux: did compare run?")
    return max(found, key=os.path.getmtime)


def speedups(times):
    """allocator -> Hodges-Lehmann estimate of glibc's time over its own,
    with its 95% interval: (estimate, low, high)."""
    return {a: paired_ratio(times["system"], times[a])[:3] for a in ALLOCATORS[1:]}


def error(ours, theirs, al):
    """How much larger `ours`'s speedup of `al` over glibc is than
    `theirs`'s, from the two in the same rounds: the Hodges-Lehmann
    estimate of (ours_glibc / ours_al) / (theirs_glibc / theirs_al) with
    its 95% interval, (estimate, low, high)."""
    x = [a * d for a, d in zip(ours["system"], theirs[al])]
    y = [b * c for b, c in zip(ours[al], theirs["system"])]
    return paired_ratio(x, y)[:3]


def fmt_error(e):
    est, lo, hi = e
    return f"{est - 1:+.1%} [{lo - 1:+.1%}, {hi - 1:+.1%}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--divisor", type=int, default=1, help="sizes are the suite's (scripts/bench.py) over this")
    ap.add_argument("--workloads", help="comma-separated (default: the suite's and churn)")
    ap.add_argument("--out", default=os.path.join(ROOT, "scripts", "results", "compare-fidelity.md"))
    a = ap.parse_args()
    names = a.workloads.split(",") if a.workloads else list(WORKLOADS) + ["churn"]
    for n in names:
        if n not in WORKLOADS and n != "churn":
            sys.exit(f"unknown workload {n!r}")
    release = os.path.join(ROOT, "target", "release")
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "allocmux-cli", "-p", "allocmux-workloads",
                    "-p", "incode-allocators"], cwd=ROOT, check=True)
    allocmux = os.path.join(release, "allocmux")
    started, load_before = time.time(), os.getloadavg()
    env = clean_env()
    # The forwarders, written to the cache as compare writes them.
    for al in ALLOCATORS[1:]:
        subprocess.run([allocmux, "run", "--record", "off", "-a", al, "--", "true"], env=env, check=True,
                       stderr=subprocess.DEVNULL)
    rows, chart_rows, tallies = [], [], {"same": 0, "different": 0, "one names none": 0, "neither": 0}
    worst = {"forwarder": 0.0, "in-code": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        churn = os.path.join(tmp, "churn")
        subprocess.run(["gcc", "-O2", "-pthread", os.path.join(ROOT, "scripts", "churn.c"), "-o", churn], check=True)
        for name in names:
            if name == "churn":
                size = CHURN_SIZE // a.divisor
                plain = [churn, "2", str(size)]
                incode = None
            else:
                size = WORKLOADS[name][0] // a.divisor
                plain = [os.path.join(release, name), str(size)]
                incode = {al: [os.path.join(release, f"workload-{INCODE[al]}"), name, str(size)] for al in ALLOCATORS}
            log(f"{name}: {a.rounds} rounds")
            js = os.path.join(tmp, f"{name}.json")
            hand = {"system": (plain, env)}
            for al in ALLOCATORS[1:]:
                hand[al] = (plain, dict(env, LD_PRELOAD=forwarder(al)))
            times = {f"{kind} {al}": [] for kind in ("compare", "forwarder", "in-code") for al in ALLOCATORS}
            # Round 0 warms the caches and is left out.
            for rnd in range(a.rounds + 1):
                if rnd == 1:
                    times = {k: [] for k in times}
                r = subprocess.run([allocmux, "compare", "-n", str(COMPARE_ROUNDS), "--warmup", "0", "--json", js, "--force",
                                    "--", *plain], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                if r.returncode != 0:
                    sys.exit(f"compare on {name} failed: {r.stderr[-2000:]}")
                with open(js) as f:
                    for run in json.load(f)["runs"]:
                        if not run["recorded"] and run["round"] == 1:
                            times[f"compare {run['allocator']}"].append(run["wall_ns"] / 1e9)
                # The hand runs in another order each round, so none
                # always follows compare's.
                order = ALLOCATORS[rnd % 3:] + ALLOCATORS[:rnd % 3]
                for al in order:
                    times[f"forwarder {al}"].append(wall(*hand[al]))
                if incode:
                    for al in order:
                        times[f"in-code {al}"].append(wall(incode[al], env))
            series = {kind: {al: times[f"{kind} {al}"] for al in ALLOCATORS}
                      for kind in ("compare", "forwarder", "in-code")}
            comp = speedups(series["compare"])
            fwd = speedups(series["forwarder"])
            ic = speedups(series["in-code"]) if incode else None
            comp_winner = winner(series["compare"])
            plain_winner = winner(series["forwarder"])
            if comp_winner and plain_winner:
                agree = "yes" if comp_winner == plain_winner else "**no**"
                tallies["same" if comp_winner == plain_winner else "different"] += 1
            elif comp_winner or plain_winner:
                agree = "one names none"
                tallies["one names none"] += 1
            else:
                agree = "neither names one"
                tallies["neither"] += 1
            cells = []
            chart = {}
            for al in ALLOCATORS[1:]:
                e_fwd = error(series["compare"], series["forwarder"], al)
                worst["forwarder"] = max(worst["forwarder"], abs(e_fwd[0] - 1))
                cell = f"{comp[al][0]:.3f} | {fwd[al][0]:.3f} | {fmt_error(e_fwd)}"
                if ic:
                    e_ic = error(series["compare"], series["in-code"], al)
                    if name in ALLOCATION_BOUND:
                        worst["in-code"] = max(worst["in-code"], abs(e_ic[0] - 1))
                    cell += f" | {ic[al][0]:.3f} | {fmt_error(e_ic)}"
                    chart[f"in-code {al}"] = ic[al]
                else:
                    cell += " | n/a (C) | "
                cells.append(cell)
                chart[f"compare {al}"] = comp[al]
                chart[f"forwarder {al}"] = fwd[al]
            rows.append(f"| {name} | {' | '.join(cells)} | {comp_winner or 'none'} | {plain_winner or 'none'} | {agree} |")
            chart_rows.append((name, chart))
    load_after = os.getloadavg()
    took = time.time() - started
    svg_dir = os.path.splitext(a.out)[0]
    os.makedirs(svg_dir, exist_ok=True)
    svg = os.path.join(svg_dir, "speedups.svg")
    with open(svg, "w") as f:
        f.write(bench_svg.hbar_chart(
            "Speed-up over glibc: compare, the forwarders run by hand, and in-code switching",
            chart_rows, ["compare jemalloc", "forwarder jemalloc", "in-code jemalloc",
                         "compare mimalloc", "forwarder mimalloc", "in-code mimalloc"],
            refs=[(1.0, "")], xlabel="glibc wall time / the allocator's (Hodges–Lehmann estimate over the rounds)",
            whisker="95% interval"))
    out = [
        f"Command: `python3 scripts/compare_fidelity.py --rounds {a.rounds} --divisor {a.divisor}`; "
        f"{platform.node()}, {os.cpu_count()} cores, {took / 60:.0f} min, load average "
        f"{load_before[0]:.2f} at the start and {load_after[0]:.2f} at the end.",
        "",
        "Speed-up over glibc (Hodges–Lehmann estimate over the rounds): compare's timing runs', the forwarders' "
        "run by hand in the same rounds, and compare's error against them with its 95% interval (per round, "
        "compare's speed-up over theirs); the in-code allocator's, and compare's error against it. Winners by "
        "compare's rule (95% intervals against every other allocator below 1), from the same runs.",
        "",
        "| workload | compare jemalloc | forwarder | error | in-code | error | compare mimalloc | forwarder | error "
        "| in-code | error | compare's winner | forwarders' winner | same? |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Largest error against the forwarders: {worst['forwarder']:.1%} (goal 1%); against in-code switching on "
        f"the allocation-bound workloads ({', '.join(sorted(ALLOCATION_BOUND))}): {worst['in-code']:.1%} (goal 3%). "
        f"Winners: {tallies['same']} the same, {tallies['different']} different, "
        f"{tallies['one names none']} where one side names none, {tallies['neither']} where neither does.",
        "",
        f"![speed-ups]({os.path.relpath(svg, os.path.dirname(a.out))})",
        "",
    ]
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        f.write("\n".join(out))
    print("\n".join(out))


if __name__ == "__main__":
    main()
