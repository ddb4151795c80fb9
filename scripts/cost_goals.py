#!/usr/bin/env python3
"""The four recording-cost goals, measured in one run, with charts.

  python3 scripts/cost_goals.py [--rounds 15] [--heaptrack-rounds 9] [--accuracy-runs 10]
                                [--only 3] [--out scripts/results/cost-goals.md]

1. Default recording (stacks off) within 1.05x of the same allocator
   without allocmux, on the C malloc/free churn (scripts/churn.c, 2 threads)
   and on edit-distance (allocation-bound Rust), per backend: against glibc,
   against Debian's libjemalloc.so.2 and libmimalloc.so.2 preloaded, and for
   the Rust workload against the program built with that allocator as its
   #[global_allocator] (scripts/incode-allocators).
2. Sampled stacks at the default rate within 0.02 (of the bare run) above
   stacks off, on the same runs.
3. Exact stacks, record and export, with at least 3x less overhead than
   heaptrack's record and heaptrack_print, on the churn (1 thread),
   edit-distance (deep Rust stacks) and python3 building and serialising a
   dict with PYTHONMALLOC=malloc (~45-frame stacks).
4. The allocator-time estimate and its 95% interval against a true time
   known by construction: profiler/tests/allocator_time_interval.rs, whose
   allocator spins for a chosen number of TSC ticks in every call and times
   each call itself, run --accuracy-runs times (3 rounds of 40,000 calls
   each).

Goals 1 and 2 are measured twice: in instructions (callgrind, a run of 2N
less a run of N, so start-up cancels; what the machine's load does not
move, and the verdict), and in wall time over interleaved rounds (per-round
ratios: median, interquartile range, and the Hodges-Lehmann estimate with
its 95% signed-rank interval). The configurations are recording_cost.py's
(goals 1 and 2) and stacks_overhead.py's (goal 3), whose functions this
script runs.

With --out, the Markdown goes to that file and the charts (SVG) to a
directory of the same name without `.md`, linked from the Markdown.

Needs gcc, cargo, valgrind, heaptrack, python3, Debian's libjemalloc2 and
libmimalloc2.0.
"""
import argparse
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench import Ratio, spread
from bench_svg import hbar_chart
from common import ROOT, clean_env, require_debian
from recording_cost import BACKENDS, CALLGRIND_SIZES, build, configs, instruction_counts, wall_times
from shim_overhead import direct_shims, library
from stacks_overhead import end_to_end_ratios, measure_times, python_program

NAMES = {"system": "glibc", "jemalloc": "jemalloc", "mimalloc": "mimalloc"}
STACKS_OFF_GOAL = 1.05
SAMPLED_GOAL = 0.02
HEAPTRACK_GOAL = 3.0
# The allocator-time test's line for one round.
ROUND = re.compile(r"round \d+: true (\d+) ticks, estimated (-?\d+) ± (\d+)")


def met(ok):
    return "**met**" if ok else "**not met**"


def iqr(xs):
    med, q1, q3, _, _ = spread(xs)
    return med, q1, q3


def recording(a, tmp, churn, shim, shims, release, base, lines, charts, summary):
    """Goals 1 and 2."""
    out = os.path.join(tmp, "%p.prof")
    sizes = {"churn": a.churn_iterations, "edit-distance": a.edit_distance}
    rows1, rows2, chart1, chart2 = [], [], [], []
    verdicts1, verdicts2 = [], []
    for workload, n in sizes.items():
        for backend in BACKENDS:
            c = configs(backend, workload, shim, shims, release, churn, out, base)
            label = f"{workload}, {NAMES[backend]}"
            print(f"{label}: {a.rounds} rounds, then callgrind", file=sys.stderr, flush=True)
            times = wall_times(a.rounds, n, c, workload)
            ir = instruction_counts(c, CALLGRIND_SIZES[workload], tmp)
            bars = {}
            against = [("bare", "the bare allocator", "bare") if backend == "system"
                       else ("bare", "Debian's, preloaded", "preloaded")]
            if "in-code" in c:
                against.append(("in-code", "in-code (`#[global_allocator]`)", "in-code"))
            for ref, ref_text, ref_short in against:
                ir_ratio = ir["shim"] / ir[ref]
                w = Ratio(times["shim"], times[ref])
                ok = ir_ratio <= STACKS_OFF_GOAL
                verdicts1.append((f"{label} ({ref_short})", ok))
                rows1.append(f"| {workload} | {NAMES[backend]} | {ref_text} | {ir_ratio:.3f} | {met(ok)} | "
                             f"{w.med:.3f} ({w.q1:.3f}–{w.q3:.3f}) | {w.ci_text()} | {w.verdict(STACKS_OFF_GOAL)} |")
                bars[f"instructions / {ref}"] = (ir_ratio, ir_ratio, ir_ratio)
                bars[f"wall / {ref}"] = (w.med, w.q1, w.q3)
            chart1.append((label, bars))
            ir_extra = (ir["sampled"] - ir["shim"]) / ir["bare"]
            wall_extra = [(s - m) / b for s, m, b in zip(times["sampled"], times["shim"], times["bare"])]
            med, q1, q3 = iqr(wall_extra)
            ok = ir_extra <= SAMPLED_GOAL
            verdicts2.append((label, ok))
            rows2.append(f"| {workload} | {NAMES[backend]} | {ir_extra:+.3f} | {met(ok)} | "
                         f"{med:+.3f} ({q1:+.3f} to {q3:+.3f}) | {'met' if med <= SAMPLED_GOAL else 'not met'} (median) |")
            chart2.append((label, {"instructions": (1 + ir_extra,) * 3, "wall": (1 + med, 1 + q1, 1 + q3)}))
            print(rows1[-1], rows2[-1], sep="\n", file=sys.stderr, flush=True)
    lines += [
        f"## 1. Default recording (stacks off) within {STACKS_OFF_GOAL}× the same allocator without allocmux", "",
        f"{sum(ok for _, ok in verdicts1)} of {len(verdicts1)} comparisons met in instructions.", "",
        "| workload | backend | against | instructions: shim / it | ≤ 1.05 | wall: median (IQR) | wall: 95% interval | "
        "≤ 1.05 (wall) |",
        "|---|---|---|---|---|---|---|---|", *rows1, "",
        "![stacks off](CHARTS/stacks-off.svg)", "",
        f"## 2. Sampled stacks within +{SAMPLED_GOAL} of stacks off", "",
        "What `ALLOCMUX_STACKS=sample` (the default rate) adds over stacks off, in units of the bare run. "
        f"{sum(ok for _, ok in verdicts2)} of {len(verdicts2)} met in instructions.", "",
        "| workload | backend | instructions | ≤ +0.02 | wall, median (IQR) | ≤ +0.02 (wall) |",
        "|---|---|---|---|---|---|", *rows2, "",
        "![sampled](CHARTS/sampled.svg)", ""]
    missed = [what for what, ok in verdicts1 if not ok]
    summary.append(f"1. Stacks off ≤ {STACKS_OFF_GOAL}×: {met(not missed)}: within it in instructions on "
                   f"{len(verdicts1) - len(missed)} of {len(verdicts1)} comparisons"
                   + (f"; not on {'; '.join(missed)}." if missed else "."))
    over = [what for what, ok in verdicts2 if not ok]
    summary.append(f"2. Sampled ≤ +{SAMPLED_GOAL} over stacks off: {met(not over)}: within it in instructions on "
                   f"{len(verdicts2) - len(over)} of {len(verdicts2)}" + (f"; not on {'; '.join(over)}." if over else "."))
    charts["stacks-off"] = hbar_chart(
        "Stacks off: the shim over the same allocator without allocmux", chart1,
        ["instructions / bare", "wall / bare", "instructions / in-code", "wall / in-code"],
        refs=[(1.0, ""), (STACKS_OFF_GOAL, f"{STACKS_OFF_GOAL} goal")],
        xlabel="shim / without allocmux (wall: median, whisker the IQR of per-round ratios)")
    charts["sampled"] = hbar_chart(
        "Sampled stacks: what they add over stacks off", chart2, ["instructions", "wall"],
        refs=[(1.0, ""), (1 + SAMPLED_GOAL, f"+{SAMPLED_GOAL} goal")],
        xlabel="1 + (sampled − stacks off) / bare (wall: median, whisker the IQR)")


def heaptrack(a, tmp, churn, exe, shim, shims, release, lines, charts, summary):
    """Goal 3."""
    def lib(stacks):
        return library(shims, shim, "system", stacks)
    workloads = [
        ("churn, 1 thread", [churn, "1", str(a.heaptrack_churn)], {}),
        ("edit-distance (Rust, glibc)", [os.path.join(release, "workload-glibc"), "edit-distance", str(a.heaptrack_edit_distance)], {}),
        ("python3, PYTHONMALLOC=malloc", python_program(tmp), {"PYTHONMALLOC": "malloc"}),
    ]
    rows, chart, verdicts = [], [], []
    for name, prog, env in workloads:
        times = measure_times(name, prog, exe, lib, tmp, a.heaptrack_rounds, env,
                              only={"bare", "exact", "exact+fold", "heaptrack", "heaptrack+print"})
        ratios = end_to_end_ratios(times)
        record = [(h - b) / (x - b) for h, x, b in zip(times["heaptrack"], times["exact"], times["bare"])]
        med = {k: statistics.median(v) for k, v in times.items()}
        if ratios is None:
            rows.append(f"| {name} | {med['bare']:.2f} | {med['exact+fold']:.2f} | {med['heaptrack+print']:.2f} | "
                        "within noise | | n/a |")
            continue
        m, q1, q3 = iqr(ratios)
        ok = m >= HEAPTRACK_GOAL
        verdicts.append(ok)
        rows.append(f"| {name} | {med['bare']:.2f} | {med['exact+fold']:.2f} | {med['heaptrack+print']:.2f} | "
                    f"{m:.2f} ({q1:.2f}–{q3:.2f}; range {min(ratios):.2f}–{max(ratios):.2f}) | "
                    f"{statistics.median(record):.2f} | {met(ok)} (median) |")
        chart.append((name, {"end to end (record + analysis)": (m, q1, q3), "record only": iqr(record)}))
        print(rows[-1], file=sys.stderr, flush=True)
    lines += [
        f"## 3. Exact stacks end to end, at least {HEAPTRACK_GOAL:g}× less overhead than heaptrack", "",
        "allocmux: `ALLOCMUX_STACKS=exact` (the universal library, glibc), then `allocmux export --format folded "
        "--weight count`; heaptrack: `heaptrack -o FILE`, then `heaptrack_print -F`. Overhead: the time less the bare "
        f"run's, per round; {a.heaptrack_rounds} interleaved rounds. {sum(verdicts)} of {len(verdicts)} met.", "",
        "| workload | bare, s | allocmux exact + export, s | heaptrack + print, s | heaptrack's overhead / allocmux's, "
        "median (IQR; range) | record only | ≥ 3 |",
        "|---|---|---|---|---|---|---|", *rows, "",
        "![heaptrack](CHARTS/heaptrack.svg)", ""]
    summary.append(f"3. Exact stacks ≥ {HEAPTRACK_GOAL:g}× less overhead than heaptrack: "
                   f"{met(len(verdicts) == len(workloads) and all(verdicts))}: by the median on {sum(verdicts)} of "
                   f"{len(workloads)} workloads.")
    charts["heaptrack"] = hbar_chart(
        "Exact stacks: heaptrack's overhead over allocmux's", chart,
        ["end to end (record + analysis)", "record only"],
        refs=[(1.0, ""), (HEAPTRACK_GOAL, f"{HEAPTRACK_GOAL:g}× goal")], log_scale=True,
        xlabel="heaptrack's overhead / allocmux's (median, whisker the IQR of per-round ratios)")


def allocator_time_test():
    """The allocator-time test's executable, built (release) if need be."""
    r = subprocess.run(["cargo", "test", "--release", "-q", "-p", "allocmux", "--test", "allocator_time_interval",
                        "--no-run", "--message-format=json"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"building the allocator-time test failed: {r.stderr[-2000:]}")
    for line in r.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("executable") \
                and msg["target"]["name"] == "allocator_time_interval":
            return msg["executable"]
    sys.exit("cargo named no executable for the allocator-time test")


def fewest_held(n, p=0.95, tail=0.025):
    """The smallest count of n intervals holding the truth that a true
    coverage of p makes no rarer than `tail` (binomial lower tail)."""
    acc = 0.0
    for k in range(n + 1):
        acc += math.comb(n, k) * p ** k * (1 - p) ** (n - k)
        if acc > tail:
            return k
    return n


def accuracy(a, lines, charts, summary):
    """Goal 4."""
    exe = allocator_time_test()
    rounds, failed = [], 0
    for run in range(a.accuracy_runs):
        r = subprocess.run([exe], capture_output=True, text=True)
        found = [tuple(float(x) for x in m.groups()) for m in ROUND.finditer(r.stderr)]
        if not found:
            sys.exit(f"the allocator-time test printed no round: {r.stderr[-2000:]}")
        failed += r.returncode != 0
        rounds += [(run + 1, i + 1, *f) for i, f in enumerate(found)]
    n = len(rounds)
    held = sum(1 for *_, t, e, m in rounds if abs(e - t) <= m)
    errors = [100 * (e - t) / t for *_, t, e, _ in rounds]
    margins = [100 * m / t for *_, t, _, m in rounds]
    least = fewest_held(n)
    ok = held >= least
    rows = [f"| {run}.{i} | {t:,.0f} | {e:,.0f} | {m:,.0f} | {100 * (e - t) / t:+.1f}% | {100 * m / t:.1f}% | "
            f"{'yes' if abs(e - t) <= m else 'no'} |" for run, i, t, e, m in rounds]
    lines += [
        "## 4. Allocator time: the estimate and its interval against a known true time", "",
        "`profiler/tests/allocator_time_interval.rs`: an allocator that spins 2,000 TSC ticks in seven calls of "
        "eight and 40,000 in the eighth, and times each call itself; the recorder times one call in 256 "
        f"(the default) and gives the total with a 95% margin. {a.accuracy_runs} runs of 3 rounds of 40,000 calls.", "",
        f"{met(ok)}: the interval held the true total in {held} of {n} rounds (a 95% interval should hold in about "
        f"{0.95 * n:.1f}; fewer than {least} would have under a 2.5% chance). Error: median {statistics.median(errors):+.1f}% "
        f"(from {min(errors):+.1f}% to {max(errors):+.1f}%); margin: median {statistics.median(margins):.1f}% of the "
        f"true total. The test's own check (an error within 2.5 margins) failed in {failed} of {a.accuracy_runs} runs.", "",
        "| run.round | true ticks | estimated | 95% margin | error | margin | held |",
        "|---|---|---|---|---|---|---|", *rows, "",
        "![allocator time](CHARTS/allocator-time.svg)", ""]
    summary.append(f"4. Allocator time, an honest interval: {met(ok)}: it held the true total in {held} of {n} rounds.")
    charts["allocator-time"] = hbar_chart(
        "Allocator time: estimate over the true total, with its 95% interval",
        [(f"run {run}, round {i}", {"estimate / true": (e / t, (e - m) / t, (e + m) / t)}) for run, i, t, e, m in rounds],
        ["estimate / true"], refs=[(1.0, "")], whisker="95% interval",
        xlabel="estimated / true allocator time (whisker: the 95% interval)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15, help="wall-time rounds for goals 1 and 2")
    ap.add_argument("--churn-iterations", type=int, default=2_000_000, help="goals 1 and 2: pairs per thread")
    ap.add_argument("--edit-distance", type=int, default=40_000, help="goals 1 and 2: word pairs")
    ap.add_argument("--heaptrack-rounds", type=int, default=9)
    ap.add_argument("--heaptrack-churn", type=int, default=2_000_000, help="goal 3: pairs")
    ap.add_argument("--heaptrack-edit-distance", type=int, default=400_000, help="goal 3: word pairs")
    ap.add_argument("--accuracy-runs", type=int, default=10)
    ap.add_argument("--only", type=int, choices=[1, 2, 3, 4], action="append",
                    help="measure only this goal (repeatable; 1 and 2 are measured together)")
    ap.add_argument("--out", help="write the Markdown here (and the charts beside it) as well as to stdout")
    a = ap.parse_args()
    if a.rounds < 2 or a.heaptrack_rounds < 1 or a.accuracy_runs < 1:
        sys.exit("--rounds must be at least 2 (for an interval), --heaptrack-rounds and --accuracy-runs at least 1")
    require_debian()
    for tool in ["gcc", "valgrind", "heaptrack", "heaptrack_print"]:
        if not shutil.which(tool):
            sys.exit(f"{tool} is needed (apt-get install {tool.split('_')[0]})")
    base = clean_env()
    start, load = time.time(), os.getloadavg()[0]
    lines, charts, summary = [], {}, []
    with tempfile.TemporaryDirectory() as tmp:
        churn, shim, release = build(tmp)
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "allocmux-cli"], cwd=ROOT, check=True)
        exe = os.path.join(release, "allocmux")
        shims = direct_shims(shim, tmp)
        goals = set(a.only or [1, 2, 3, 4])
        if goals & {1, 2}:
            recording(a, tmp, churn, shim, shims, release, base, lines, charts, summary)
        if 3 in goals:
            heaptrack(a, tmp, churn, exe, shim, shims, release, lines, charts, summary)
    if 4 in goals:
        accuracy(a, lines, charts, summary)
    head = [
        "# The recording-cost goals, in one run", "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}. "
        f"Load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end; "
        f"{(time.time() - start) / 60:.0f} minutes. Every figure below is from this run.", "",
        f"Goals 1 and 2: churn, 2 threads × {a.churn_iterations:,} malloc/free pairs; edit-distance, "
        f"{a.edit_distance:,} word pairs; {a.rounds} interleaved rounds. Instructions: callgrind, 2N − N, "
        f"N = {CALLGRIND_SIZES['churn']:,} pairs a thread and {CALLGRIND_SIZES['edit-distance']:,} word pairs; "
        "the verdicts are the instructions', which the machine's load does not move. The shim is the library "
        "`allocmux run` preloads: the direct shim under glibc and jemalloc, the universal library under mimalloc.", "",
        *summary, ""]
    text = "\n".join(head + lines)
    if a.out:
        svg_dir = os.path.splitext(a.out)[0]
        os.makedirs(svg_dir, exist_ok=True)
        for name, svg in charts.items():
            with open(os.path.join(svg_dir, f"{name}.svg"), "w") as f:
                f.write(svg)
        text = text.replace("](CHARTS/", f"]({os.path.basename(svg_dir)}/")
        with open(a.out, "w") as f:
            f.write(text)
    else:
        text = "\n".join(line for line in text.splitlines() if not line.startswith("![")) + "\n"
    print(text)


if __name__ == "__main__":
    main()
