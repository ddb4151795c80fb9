#!/usr/bin/env python3
"""Allocator time from program-counter samples against the shim's TSC sample.

Frozen study: it decided that allocator time stays a TSC sample of 1 call in
256 rather than program-counter sampling (results/pc-sampling.md); kept as
it was run, not maintained with the suite.

  python3 scripts/studies/pc_sampling.py [--rounds 5] [--iterations 4000000] [--callgrind] [--out FILE.md]

Estimating time in the allocator by sampling the program counter (a
per-thread CPU-time timer, or a perf event, raising a signal; a sample is
the allocator's if the interrupted PC lies in its code) costs nothing per
call, where the shim times 1 call in 256 with the TSC. Which gives the
narrower interval for its cost? On the one-thread churn (malloc/free pairs
and little else, against glibc):

- `scripts/studies/pc_sampling.c` runs the churn bare, with a CPU-time timer
  (`timer_create` on `CLOCK_THREAD_CPUTIME_ID`) and with a software
  task-clock perf event at several rates; each sample's PC is the
  allocator's if it is in libc, which the churn calls for nothing else.
  What a rate costs is the thread's CPU time over the bare run's.
- `scripts/churn.c` runs under the shim (stacks off, the system backend)
  with the default time sample and with `ALLOCMUX_TIME_SAMPLE=2^30`
  (almost no call timed), and the profile's timed calls give the TSC
  sample's 95% margin, as `allocmux report --json` gives it
  (docs/recording.md). With `--callgrind`, the two
  shim runs are also counted in instructions under callgrind: the TSC
  sample's cost per malloc/free pair.

Needs gcc, valgrind for `--callgrind`, and the shim and the CLI built
(`cargo build --release -p allocmux-shim -p allocmux-cli`, or `--shim
PATH` and `--allocmux PATH`).
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RATES = [250, 1000, 4000, 10000]
MEAN = 256  # the shim's default time sample


def parse(line):
    return {k: v for k, v in (kv.split("=", 1) for kv in line.split())}


def run_pcs(exe, mode, rate, iters):
    out = subprocess.run([exe, mode, str(rate), str(iters)], capture_output=True, text=True)
    if out.returncode != 0:
        return None  # e.g. perf_event_open refused
    return parse(out.stdout)


def run_shim(churn, shim, exe, iters, tmp, mean, tag):
    """The churn under the shim, and its process's figures as `allocmux
    report --json` gives them (the allocator-time estimate and its margin
    included)."""
    out = os.path.join(tmp, f"{tag}.amx")
    env = dict(os.environ, LD_PRELOAD=shim, ALLOCMUX_ALLOCATOR="system", ALLOCMUX_STACKS="off",
               ALLOCMUX_OUTPUT=out, ALLOCMUX_TIME_SAMPLE=str(mean))
    subprocess.run([churn, "1", str(iters)], env=env, check=True, stdout=subprocess.DEVNULL)
    report = subprocess.run([exe, "report", "--json", out], capture_output=True, text=True, check=True)
    os.remove(out)
    return json.loads(report.stdout)["processes"][0]


def callgrind_instructions(cmd, env):
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd],
                         env=env, capture_output=True, text=True, check=True)
    for line in out.stderr.splitlines():
        if "Collected :" in line:
            return int(line.split(":")[1])
    raise RuntimeError("no callgrind total")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=4_000_000)
    ap.add_argument("--shim", default=os.path.join(ROOT, "target/release/liballocmux_shim.so"))
    ap.add_argument("--allocmux", default=os.path.join(ROOT, "target/release/allocmux"))
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    if not os.path.exists(args.shim):
        sys.exit(f"no shim at {args.shim}: build it (cargo build --release -p allocmux-shim) or pass --shim")
    if not os.path.exists(args.allocmux):
        sys.exit(f"no allocmux at {args.allocmux}: build it (cargo build --release -p allocmux-cli) or pass --allocmux")
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        exe, churn = os.path.join(tmp, "pc_sampling"), os.path.join(tmp, "churn")
        subprocess.run(["gcc", "-O2", "-o", exe, os.path.join(ROOT, "scripts/studies/pc_sampling.c")], check=True)
        subprocess.run(["gcc", "-O2", "-pthread", "-o", churn, os.path.join(ROOT, "scripts/churn.c")], check=True)
        configs = [("none", 0)] + [(m, r) for m in ("timer", "perf") for r in RATES]
        runs = {c: [] for c in configs}
        shim_runs = {"default": [], "off": []}
        for i in range(args.rounds):
            # Each round starts elsewhere, so that no configuration always
            # runs first (on a cold CPU).
            start = i % len(configs)
            for c in configs[start:] + configs[:start]:
                r = run_pcs(exe, c[0], c[1], args.iterations)
                if r:
                    runs[c].append(r)
            shim_runs["default"].append(run_shim(churn, args.shim, args.allocmux, args.iterations, tmp, MEAN, "default"))
            shim_runs["off"].append(run_shim(churn, args.shim, args.allocmux, args.iterations, tmp, 1 << 30, "off"))

        bare_cpu = statistics.median(int(r["cpu_ns"]) for r in runs[("none", 0)])
        lines = ["# Allocator time: program-counter samples against the TSC sample", "",
                 f"`python3 scripts/studies/pc_sampling.py {' '.join(sys.argv[1:])}` on {os.cpu_count()} CPUs; "
                 f"load average at start {load:.2f}. One-thread churn, "
                 f"{args.iterations:,} malloc/free pairs against glibc; medians of {args.rounds} rounds.", "",
                 f"Bare run: {bare_cpu / 1e6:.1f} ms of CPU.", "",
                 "| method | rate asked | samples (per CPU s) | allocator share | 95% margin, of the estimate | CPU cost over bare | cost per sample |",
                 "|---|---|---|---|---|---|---|"]
        shares = []
        for c in configs[1:]:
            rs = runs[c]
            if not rs:
                lines.append(f"| {c[0]} | {c[1]} Hz | refused | | | | |")
                continue
            n = statistics.median(int(r["samples"]) for r in rs)
            k = statistics.median(int(r["in_alloc"]) for r in rs)
            cpu = statistics.median(int(r["cpu_ns"]) for r in rs)
            p = k / n if n else 0
            if n:
                shares.append(p)
            rel = 1.96 * math.sqrt(p * (1 - p) / n) / p if n and p else float("nan")
            cost = cpu - bare_cpu
            # Below 1% of the bare run, the cost is lost in the noise.
            each = f"{cost / n / 1000:.1f} µs" if n and cost > bare_cpu / 100 else "(noise)"
            lines.append(f"| {c[0]} | {c[1]:,} Hz | {n:,.0f} ({n / (cpu / 1e9):,.0f}) | {p:.1%} | ±{rel:.1%} | "
                         f"{cost / bare_cpu:+.1%} | {each} |")
        est_rel = [f["allocator_ns_margin"] / f["allocator_ns"] for f in shim_runs["default"]]
        timed = statistics.median(f["timed_calls"] for f in shim_runs["default"])
        cpu_default = statistics.median(f["cpu_ns"] for f in shim_runs["default"])
        cpu_off = statistics.median(f["cpu_ns"] for f in shim_runs["off"])
        rel = statistics.median(est_rel)
        lines.append(f"| the shim's TSC sample (1 call in {MEAN}) | | {timed:,.0f} timed calls | | ±{rel:.1%} "
                     f"(rounds: ±{min(est_rel):.1%} to ±{max(est_rel):.1%}) | "
                     f"{(cpu_default - cpu_off) / cpu_off:+.1%} (against 1 call in 2^30 timed) | |")
        lines.append("")
        if shares:
            p = statistics.median(shares)
            need = 1.96 ** 2 * (1 - p) / (p * rel ** 2)
            lines.append(f"For the TSC sample's margin (±{rel:.1%}) at the allocator share the samples found "
                         f"({p:.0%}), program-counter sampling needs {need:,.0f} samples "
                         f"({need / (bare_cpu / 1e9):,.0f} a CPU second on this run).")
            lines.append("")
        if args.callgrind:
            env = dict(os.environ, LD_PRELOAD=args.shim, ALLOCMUX_ALLOCATOR="system", ALLOCMUX_STACKS="off")
            n = 1_000_000
            ins = {}
            for tag, mean in (("default", MEAN), ("off", 1 << 30)):
                e = dict(env, ALLOCMUX_TIME_SAMPLE=str(mean), ALLOCMUX_OUTPUT=os.path.join(tmp, f"cg-{tag}.amx"))
                ins[tag] = callgrind_instructions([churn, "1", str(n)], e)
            lines.append(f"Callgrind, `churn 1 {n}` under the shim: the TSC sample costs "
                         f"{(ins['default'] - ins['off']) / n:.2f} instructions a malloc/free pair "
                         f"({ins['default']:,} against {ins['off']:,} with 1 call in 2^30 timed).")
            lines.append("")
        text = "\n".join(lines)
        print(text)
        if args.out:
            with open(args.out, "w") as fh:
                fh.write(text + "\n")


if __name__ == "__main__":
    main()
