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
              hand (glibc: no preload; tcmalloc: its library): what
              compare's machinery (launching, interleaving, the CLI) should
              reproduce
  library     one run per allocator with its own library preloaded by hand:
              jemalloc and mimalloc built as preloadable libraries from the
              very sources the shim links (target/forwarder-reference, built
              by scripts/forwarder_instructions.sh), tcmalloc's Debian
              library: the switch a user would make without allocmux
  in-code     (Rust workloads) one run per allocator with it linked in as
              #[global_allocator] (scripts/incode-allocators, the crates and
              versions the shim links): what switching in code gives

tcmalloc (Debian's libtcmalloc-minimal4), where installed, is a fourth
contender, `-a tcmalloc=PATH`: its timing runs preload that library alone,
so its forwarder and library runs are the same switch. Instructions are
not counted here (callgrind on every workload would take hours): a timing
run is the same process as a forwarder run by hand, and
scripts/forwarder_instructions.sh counts the forwarders against the own
libraries.

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
from common import DEBIAN_TCMALLOC, clean_env  # noqa: E402
from shim_overhead import timed  # noqa: E402

ALLOCATORS = ["system", "jemalloc", "mimalloc"] + (["tcmalloc"] if os.path.exists(DEBIAN_TCMALLOC) else [])
INCODE = {"system": "glibc", "jemalloc": "jemalloc", "mimalloc": "mimalloc"}
# `compare -a`: the built-in allocators by name, tcmalloc by its path.
COMPARE_A = ",".join(f"{al}={DEBIAN_TCMALLOC}" if al == "tcmalloc" else al for al in ALLOCATORS)
# The allocators' own libraries (see the module docs).
REFERENCE = os.path.join(ROOT, "target", "forwarder-reference")
OWN_LIBRARY = {
    "jemalloc": os.path.join(REFERENCE, "jemalloc", "lib", "libjemalloc.so.2"),
    "mimalloc": os.path.join(REFERENCE, "libmimalloc-override.so"),
    "tcmalloc": DEBIAN_TCMALLOC,
}
KINDS = ("compare", "forwarder", "library", "in-code")
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
    with its 95% interval: (estimate, low, high), for the allocators
    `times` has."""
    return {a: paired_ratio(times["system"], times[a])[:3] for a in ALLOCATORS[1:] if times.get(a)}


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
    for al, lib in OWN_LIBRARY.items():
        if al in ALLOCATORS and not os.path.exists(lib):
            sys.exit(f"{lib} is missing: bash scripts/forwarder_instructions.sh builds it")
    release = os.path.join(ROOT, "target", "release")
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "allocmux-cli", "-p", "allocmux-workloads",
                    "-p", "incode-allocators"], cwd=ROOT, check=True)
    allocmux = os.path.join(release, "allocmux")
    started, load_before = time.time(), os.getloadavg()
    env = clean_env()
    # The forwarders, written to the cache as compare writes them.
    for al in ALLOCATORS[1:]:
        if al in INCODE:
            subprocess.run([allocmux, "run", "--record", "off", "-a", al, "--", "true"], env=env, check=True,
                           stderr=subprocess.DEVNULL)
    rows, chart_rows, tallies = [], [], {"same": 0, "different": 0, "one names none": 0, "neither": 0}
    worst = {"forwarder": 0.0, "library": 0.0, "in-code": 0.0}
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
                incode = {al: [os.path.join(release, f"workload-{INCODE[al]}"), name, str(size)] for al in INCODE}
            log(f"{name}: {a.rounds} rounds")
            js = os.path.join(tmp, f"{name}.json")
            hand = {"system": (plain, env)}
            own = {"system": (plain, env)}
            for al in ALLOCATORS[1:]:
                fw = forwarder(al) if al in INCODE else OWN_LIBRARY[al]
                hand[al] = (plain, dict(env, LD_PRELOAD=fw))
                own[al] = (plain, dict(env, LD_PRELOAD=OWN_LIBRARY[al]))
            times = {f"{kind} {al}": [] for kind in KINDS for al in ALLOCATORS}
            # Round 0 warms the caches and is left out.
            for rnd in range(a.rounds + 1):
                if rnd == 1:
                    times = {k: [] for k in times}
                r = subprocess.run([allocmux, "compare", "-n", str(COMPARE_ROUNDS), "--warmup", "0", "-a", COMPARE_A,
                                    "--json", js, "--force", "--", *plain],
                                   env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                if r.returncode != 0:
                    sys.exit(f"compare on {name} failed: {r.stderr[-2000:]}")
                with open(js) as f:
                    for run in json.load(f)["runs"]:
                        if not run["recorded"] and run["round"] == 1:
                            times[f"compare {run['allocator']}"].append(run["wall_ns"] / 1e9)
                # The hand runs in another order each round, so none
                # always follows compare's.
                k = rnd % len(ALLOCATORS)
                order = ALLOCATORS[k:] + ALLOCATORS[:k]
                for al in order:
                    times[f"forwarder {al}"].append(wall(*hand[al]))
                for al in order:
                    times[f"library {al}"].append(wall(*own[al]))
                if incode:
                    for al in order:
                        if al in incode:
                            times[f"in-code {al}"].append(wall(incode[al], env))
            series = {kind: {al: times[f"{kind} {al}"] for al in ALLOCATORS} for kind in KINDS}
            comp = speedups(series["compare"])
            fwd = speedups(series["forwarder"])
            lib = speedups(series["library"])
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
                e_lib = error(series["compare"], series["library"], al)
                worst["library"] = max(worst["library"], abs(e_lib[0] - 1))
                cell = (f"{comp[al][0]:.3f} | {fwd[al][0]:.3f} | {fmt_error(e_fwd)} | "
                        f"{lib[al][0]:.3f} | {fmt_error(e_lib)}")
                chart[f"library {al}"] = lib[al]
                if ic and al in ic:
                    e_ic = error(series["compare"], series["in-code"], al)
                    if name in ALLOCATION_BOUND:
                        worst["in-code"] = max(worst["in-code"], abs(e_ic[0] - 1))
                    cell += f" | {ic[al][0]:.3f} | {fmt_error(e_ic)}"
                    chart[f"in-code {al}"] = ic[al]
                else:
                    cell += " | n/a | "
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
            "Speed-up over glibc: compare and each allocator's own library run by hand",
            chart_rows, [f"{kind} {al}" for al in ALLOCATORS[1:] for kind in ("compare", "library")],
            refs=[(1.0, "")], xlabel="glibc wall time / the allocator's (Hodges–Lehmann estimate over the rounds)",
            whisker="95% interval"))
    out = [
        f"Command: `python3 scripts/compare_fidelity.py --rounds {a.rounds} --divisor {a.divisor}`; "
        f"{platform.node()}, {os.cpu_count()} cores, {took / 60:.0f} min, load average "
        f"{load_before[0]:.2f} at the start and {load_after[0]:.2f} at the end.",
        "",
        "Speed-up over glibc (Hodges–Lehmann estimate over the rounds): compare's timing runs', the forwarders' "
        "run by hand in the same rounds, and compare's error against them with its 95% interval (per round, "
        "compare's speed-up over theirs); likewise the allocator's own library preloaded by hand, and the "
        "in-code allocator (n/a: a C program, or no in-code build). Winners by compare's rule (95% intervals "
        "against every other allocator below 1), from compare's runs and the forwarders'.",
        "",
        "| workload | " + " | ".join(f"compare {al} | forwarder | error | library | error | in-code | error"
                                    for al in ALLOCATORS[1:])
        + " | compare's winner | forwarders' winner | same? |",
        "|---" * (1 + 7 * len(ALLOCATORS[1:]) + 3) + "|",
        *rows,
        "",
        f"Largest error against the forwarders: {worst['forwarder']:.1%} (goal 1%); against the own libraries: "
        f"{worst['library']:.1%}; against in-code switching on "
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
