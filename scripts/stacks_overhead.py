#!/usr/bin/env python3
"""Cost of allocmux's stack recording, measured side by side with heaptrack.

For each workload, runs these configurations interleaved round by round
(A B C ... A B C ...), so the drift of a shared machine hits all alike, and
reports median wall times and the median per-round ratios:

  bare        the program alone
  off         the shim, stacks off (default recording)
  sample      the shim, ALLOCMUX_STACKS=sample (512 KiB mean)
  exact       the shim, ALLOCMUX_STACKS=exact

(the shim being the library `allocmux run` preloads for the mode: the
direct shim of glibc for off and sample, the universal library for exact)
  exact+fold  exact, then `allocmux export --format folded --weight count`
              (record plus analysis: symbolized, merged stacks)
  heaptrack   `heaptrack -o FILE prog` (record)
  heaptrack+print   record, then `heaptrack_print -F stacks.txt` (analysis)

Workloads: a 1-thread malloc/free churn (scripts/churn.c, shallow stacks),
the edit-distance workload (allocation-bound Rust, deep stacks with inlined
frames; scripts/incode-allocators' glibc build), python3 building and
serialising a dict with PYTHONMALLOC=malloc (every object through malloc,
~45-frame stacks), and the same without it (pymalloc: few mallocs).

For each, the end-to-end overhead ratio: heaptrack's (record + print,
minus bare) over allocmux's (exact + export folded, minus bare), the
median of per-round ratios; the goal is at least 3.

It also reports, for a run of ten million allocations in exact mode, the
profile's size and the time `allocmux flame` takes to render it, against the
number of calls (the profile grows with distinct stacks, not calls).

  python3 scripts/stacks_overhead.py [--rounds 5] [--sampling-rounds 15] [--only sampling] [--out FILE.md]

Because `sample` costs only a few percent, it is also compared with stacks
off alone, over more rounds (--sampling-rounds), so the machine's noise
does not swamp it; `--only sampling` runs just that part.

Needs gcc, python3, heaptrack (apt-get install heaptrack) and cargo.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from shim_overhead import direct_shims, library, report  # report: prints a table, writes it to --out

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY_SCRIPT = """
import json
d = {str(i): {"v": i * i, "s": "x" * (i % 50), "l": list(range(i % 20))} for i in range(100000)}
t = json.dumps(d, sort_keys=True)
print(len(json.loads(t)))
"""


def build(tmp):
    churn = os.path.join(tmp, "churn")
    subprocess.run(["gcc", "-O2", "-g", "-pthread", os.path.join(ROOT, "scripts", "churn.c"), "-o", churn], check=True)
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "allocmux-cli", "-p", "incode-allocators"], cwd=ROOT, check=True)
    exe = os.path.join(ROOT, "target", "release", "allocmux")
    shim = os.path.join(ROOT, "target", "allocmux-shim", "release", "liballocmux_shim.so")
    if not os.path.exists(shim):
        shim = os.path.join(ROOT, "target", "release", "liballocmux_shim.so")
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "allocmux-shim"], cwd=ROOT, check=True)
    return churn, exe, shim


def python_program(tmp):
    """[python3, a script building and serialising a dict], the script
    written into `tmp`."""
    py = shutil.which("python3")
    if not os.path.realpath(py).startswith("/usr/bin/") and os.path.exists("/usr/bin/python3"):
        py = "/usr/bin/python3"  # a pyenv shim would be measured instead of Python
    script = os.path.join(tmp, "dict.py")
    with open(script, "w") as f:
        f.write(PY_SCRIPT)
    return [py, script]


def timed(cmds, env=None):
    """Runs the commands one after another; their total wall time."""
    start = time.perf_counter()
    for cmd in cmds:
        r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.decode()[-2000:]}")
    return time.perf_counter() - start


def configs(prog, exe, lib, tmp, extra_env):
    base = dict(os.environ, **extra_env)
    base.pop("LD_PRELOAD", None)

    def shim_env(stacks, out):
        return dict(base, LD_PRELOAD=lib(stacks), ALLOCMUX_STACKS=stacks, ALLOCMUX_OUTPUT=out)

    def fresh(name):
        path = os.path.join(tmp, name)
        for f in os.listdir(tmp):
            if f.startswith(name):
                p = os.path.join(tmp, f)
                shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
        return path

    def bare():
        return timed([prog], base)

    def shim_run(stacks):
        def run():
            out = fresh(f"p-{stacks}")
            return timed([prog], shim_env(stacks, out + ".%p"))
        return run

    def exact_fold():
        out = fresh("p-fold")
        start = time.perf_counter()
        timed([prog], shim_env("exact", out + ".%p"))
        profiles = [os.path.join(tmp, f) for f in os.listdir(tmp) if f.startswith("p-fold.")]
        timed([[exe, "export", *profiles, "--format", "folded", "--weight", "count", "-o", os.path.join(tmp, "fold.txt"), "--force"]], base)
        return time.perf_counter() - start

    def heaptrack(print_too):
        def run():
            out = fresh("ht")
            start = time.perf_counter()
            timed([["heaptrack", "-o", out, *prog]], base)
            if print_too:
                data = [os.path.join(tmp, f) for f in os.listdir(tmp) if f.startswith("ht.")][0]
                timed([["heaptrack_print", "-F", os.path.join(tmp, "ht-stacks.txt"), data]], base)
            return time.perf_counter() - start
        return run

    return {
        "bare": bare,
        "off": shim_run("off"),
        "sample": shim_run("sample"),
        "exact": shim_run("exact"),
        "exact+fold": exact_fold,
        "heaptrack": heaptrack(False),
        "heaptrack+print": heaptrack(True),
    }


def measure_times(name, prog, exe, lib, tmp, rounds, extra_env, only=None):
    """Interleaved rounds of the configurations (those named in `only`, or
    all): name -> wall seconds, one per round."""
    runs = {k: run for k, run in configs(prog, exe, lib, tmp, extra_env).items() if only is None or k in only}
    times = {k: [] for k in runs}
    for r in range(rounds):
        for k, run in runs.items():
            times[k].append(run())
        print(f"  {name}: round {r + 1}/{rounds}", file=sys.stderr)
    return times


def end_to_end_ratios(times):
    """Per round, heaptrack's overhead (record + print, less the bare run)
    over allocmux's (exact + export); None when allocmux's overhead is under
    5% of the bare run in some round, where the ratio is noise over noise
    (it can come out negative or in the thousands)."""
    ours = [(a - b) / b for a, b in zip(times["exact+fold"], times["bare"])]
    if min(ours) < 0.05:
        return None
    return [(h - b) / (a - b) for h, a, b in zip(times["heaptrack+print"], times["exact+fold"], times["bare"])]


def measure(name, prog, exe, lib, tmp, rounds, extra_env):
    times = measure_times(name, prog, exe, lib, tmp, rounds, extra_env)
    med = {k: statistics.median(v) for k, v in times.items()}

    def ratio(a, b):
        return statistics.median([x / y for x, y in zip(times[a], times[b])])

    lines = [f"### {name}", "", "| configuration | median wall s | ratio |", "|---|---|---|"]
    lines.append(f"| bare | {med['bare']:.2f} | 1 |")
    for k in ["off", "sample", "exact"]:
        lines.append(f"| shim, stacks {k} | {med[k]:.2f} | {ratio(k, 'bare'):.2f}x bare, {ratio(k, 'off'):.2f}x stacks off |")
    lines.append(f"| shim exact + export folded (record + analysis) | {med['exact+fold']:.2f} | |")
    lines.append(f"| heaptrack (record) | {med['heaptrack']:.2f} | {ratio('heaptrack', 'exact'):.2f}x allocmux exact |")
    lines.append(f"| heaptrack + heaptrack_print (record + analysis) | {med['heaptrack+print']:.2f} | {ratio('heaptrack+print', 'exact+fold'):.2f}x allocmux exact + export |")
    overhead = end_to_end_ratios(times)
    if overhead is None:
        lines += ["", "End to end, allocmux's overhead is within the noise "
                  "(under 5% of the bare run in some round): no ratio."]
    else:
        lines += ["", f"End to end, heaptrack's overhead over allocmux's: **{statistics.median(overhead):.2f}x** "
                  f"[{min(overhead):.2f}, {max(overhead):.2f}] (goal: at least 3)."]
    return "\n".join(lines) + "\n"


def size_and_render(churn, exe, tmp, iterations):
    """Profile size and flame rendering time against the number of calls."""
    rows = ["### Profile size and render time (exact mode, churn, 1 thread)", "",
            "| allocations | distinct stacks | profile bytes | `allocmux flame` total s | render s (`export --format folded` + SVG) |",
            "|---|---|---|---|---|"]
    for n in iterations:
        out = os.path.join(tmp, f"size-{n}.svg")
        prof = os.path.join(tmp, f"size-{n}.prof")
        for p in (out, prof):
            if os.path.exists(p):
                os.remove(p)
        start = time.perf_counter()
        subprocess.run([exe, "run", "--stacks", "exact", "-o", prof, "--", churn, "1", str(n)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        recorded = time.perf_counter() - start
        text = open(prof).read()
        stacks = sum(1 for line in text.splitlines() if line.startswith("stack "))
        start = time.perf_counter()
        subprocess.run([exe, "export", prof, "--format", "folded", "--weight", "count", "-o", out + ".folded"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        folded = time.perf_counter() - start
        start = time.perf_counter()
        subprocess.run([exe, "flame", "--exact", "--weight", "count", "-o", out, "--", churn, "1", str(n)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        flame = time.perf_counter() - start
        rows.append(f"| {n:,} | {stacks} | {len(text):,} | {flame:.2f} (recording alone {recorded:.2f}) | {folded:.2f} |")
    return "\n".join(rows) + "\n"


def sampling(name, prog, lib, tmp, rounds, extra_env):
    """Stacks off against sample only, interleaved over many rounds."""
    base = dict(os.environ, **extra_env)
    base.pop("LD_PRELOAD", None)
    times = {"off": [], "sample": []}
    for r in range(rounds):
        for mode in times:
            out = os.path.join(tmp, f"s-{mode}")
            env = dict(base, LD_PRELOAD=lib(mode), ALLOCMUX_STACKS=mode, ALLOCMUX_OUTPUT=out + ".%p")
            times[mode].append(timed([prog], env))
            for f in os.listdir(tmp):
                if f.startswith(f"s-{mode}."):
                    os.remove(os.path.join(tmp, f))
        print(f"  {name} (sampling): round {r + 1}/{rounds}", file=sys.stderr)
    ratios = [s / o for o, s in zip(times["off"], times["sample"])]
    return (f"| {name} | {statistics.median(times['off']):.3f} | {statistics.median(times['sample']):.3f} | "
            f"{statistics.median(ratios):.3f} [{min(ratios):.2f}, {max(ratios):.2f}] |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sampling-rounds", type=int, default=15)
    ap.add_argument("--only", choices=["sampling"])
    ap.add_argument("--out")
    args = ap.parse_args()
    for tool in ["gcc", "heaptrack", "heaptrack_print", "python3"]:
        if not shutil.which(tool):
            sys.exit(f"{tool} is needed (apt-get install {tool.split('_')[0]})")
    with tempfile.TemporaryDirectory() as tmp:
        churn, exe, shim = build(tmp)
        shims = direct_shims(shim, tmp)

        def lib(stacks):
            return library(shims, shim, "system", stacks)
        py, script = python_program(tmp)
        out = ["# Stack recording overhead", "",
               f"`python3 scripts/stacks_overhead.py {' '.join(sys.argv[1:])}` on {os.cpu_count()} CPUs; "
               f"load average at start {os.getloadavg()[0]:.2f}.", ""]
        out += ["### Sampling against stacks off", "",
                f"{args.sampling_rounds} interleaved rounds; ratio: median [min, max] of per-round ratios.", "",
                "| workload | stacks off, median s | sample, median s | ratio |", "|---|---|---|---|",
                sampling("churn, 1 thread, 2M pairs", [churn, "1", "2000000"], lib, tmp, args.sampling_rounds, {}),
                sampling("python3 dict + json, PYTHONMALLOC=malloc", [py, script], lib, tmp, args.sampling_rounds,
                         {"PYTHONMALLOC": "malloc"}), ""]
        if args.only == "sampling":
            report("\n".join(out), args.out)
            return
        out.append(measure("churn: 1 thread, 2,000,000 malloc/free pairs", [churn, "1", "2000000"], exe, lib, tmp, args.rounds, {}))
        edit = [os.path.join(ROOT, "target", "release", "workload-glibc"), "edit-distance", "400000"]
        out.append(measure("edit-distance: 400,000 word pairs (Rust, glibc)", edit, exe, lib, tmp, args.rounds, {}))
        out.append(measure("python3 dict + json, PYTHONMALLOC=malloc (6.7M mallocs)", [py, script], exe, lib, tmp, args.rounds, {"PYTHONMALLOC": "malloc"}))
        out.append(measure("python3 dict + json, pymalloc (default)", [py, script], exe, lib, tmp, args.rounds, {}))
        out.append(size_and_render(churn, exe, tmp, [1_000_000, 10_000_000]))
        report("\n".join(out), args.out)


if __name__ == "__main__":
    main()
