#!/usr/bin/env python3
"""Does `allocmux compare` measure the allocators, and not allocmux?

For each workload (the suite's, and the C malloc/free churn), in one run:

  compare     `allocmux compare -n R --warmup 1 --json FILE -- PROG SIZE`,
              as a user runs it (the embedded shim: its timing runs preload
              each allocator's forwarder, glibc's none); its speedups over
              glibc are the Hodges-Lehmann estimates in the JSON
  forwarder   R rounds of plain runs, interleaved, with the same forwarders
              preloaded by hand (glibc: no preload): what compare's
              machinery (launching, interleaving, the CLI) should reproduce
  in-code     (Rust workloads) R rounds with the allocator linked in as
              #[global_allocator] (scripts/incode-allocators, the crates and
              versions the shim links): what switching in code gives

and reports each speedup, compare's error against the forwarder runs (goal:
within 1%) and against in-code switching (goal: within 3% on the
allocation-bound workloads), and whether compare and the forwarder runs name
the same winner (compare's rule, recomputed here: the allocator whose 95%
interval against every other one is below 1).

Usage:
  python3 scripts/compare_fidelity.py [--rounds 10] [--divisor 4]
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

ALLOCATORS = ["system", "jemalloc", "mimalloc"]
INCODE = {"system": "glibc", "jemalloc": "jemalloc", "mimalloc": "mimalloc"}
# Pairs per thread of the C churn (2 threads) at divisor 1.
CHURN_SIZE = 20_000_000
# Where the allocator is most of the work (docs/workloads.md), and where
# the in-code goal applies.
ALLOCATION_BOUND = {"edit-distance", "larson", "producer-consumer", "churn"}


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def clean_env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("LD_PRELOAD", "ALLOCMUX_"))}


def timed(cmd, env):
    start = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.decode(errors='replace')[-2000:]}")
    return t


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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--divisor", type=int, default=4, help="sizes are the suite's (scripts/bench.py) over this")
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
            log(f"{name}: compare")
            js = os.path.join(tmp, f"{name}.json")
            r = subprocess.run([allocmux, "compare", "-n", str(a.rounds), "--warmup", "1", "--json", js, "--force",
                                "--", *plain], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                sys.exit(f"compare on {name} failed: {r.stderr[-2000:]}")
            with open(js) as f:
                c = json.load(f)
            comp = {s["allocator"]: tuple(s["speedup_vs_baseline"][k] for k in ("estimate", "low", "high"))
                    for s in c["allocators"][1:]}
            comp_winner = c["verdict"]["winner"]
            configs = {"system": (plain, env)}
            for al in ALLOCATORS[1:]:
                configs[al] = (plain, dict(env, LD_PRELOAD=forwarder(al)))
            if incode:
                for al in ALLOCATORS:
                    configs[f"in-code {al}"] = (incode[al], env)
            log(f"{name}: {a.rounds} plain rounds")
            times = {k: [] for k in configs}
            keys = list(configs)
            for rnd in range(a.rounds):
                # Each round starts one configuration later, as compare's own
                # rounds do not (a drift then touches each alike).
                for k in keys[rnd % len(keys):] + keys[:rnd % len(keys)]:
                    times[k].append(timed(*configs[k]))
            fwd = speedups({al: times[al] for al in ALLOCATORS})
            ic = speedups({al: times[f"in-code {al}"] for al in ALLOCATORS}) if incode else None
            plain_winner = winner({al: times[al] for al in ALLOCATORS})
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
                e_fwd = comp[al][0] / fwd[al][0] - 1
                worst["forwarder"] = max(worst["forwarder"], abs(e_fwd))
                cell = f"{comp[al][0]:.3f} | {fwd[al][0]:.3f} | {e_fwd:+.1%}"
                if ic:
                    e_ic = comp[al][0] / ic[al][0] - 1
                    if name in ALLOCATION_BOUND:
                        worst["in-code"] = max(worst["in-code"], abs(e_ic))
                    cell += f" | {ic[al][0]:.3f} | {e_ic:+.1%}"
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
        "Speed-up over glibc (Hodges–Lehmann estimate of the per-round ratio): compare's, the forwarders' run "
        "by hand, compare's error against them; the in-code allocator's, compare's error against it. Winners "
        "by compare's rule (95% intervals against every other allocator below 1).",
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
