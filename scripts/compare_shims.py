#!/usr/bin/env python3
"""Exact mode's overhead under two builds of the shim, side by side.

For a change to the stack recorder: runs each workload bare, under the old
shim and under the new one (ALLOCMUX_STACKS=exact, profile written), in
interleaved rounds, and prints the ratio of the new build's overhead over
the bare run to the old build's (median [min, max] of per-round ratios).

  git worktree add /tmp/old <commit> && (cd /tmp/old && cargo build --release -p allocmux-shim)
  cargo build --release -p allocmux-shim -p allocmux-workloads
  python3 scripts/compare_shims.py --old /tmp/old/target/release/liballocmux_shim.so \\
      [--new target/release/liballocmux_shim.so] [--rounds 5]

Workloads: `workload-glibc edit-distance 400000` (deep Rust stacks) and
python3 building and serialising a dict of 100,000 keys with
PYTHONMALLOC=malloc (every object through malloc).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PY_SCRIPT = """
import json
d = {str(i): {"v": i * i, "s": "x" * (i % 50), "l": list(range(i % 20))} for i in range(100000)}
t = json.dumps(d, sort_keys=True)
print(len(json.loads(t)))
"""


def run(cmd, env, shim, out):
    e = dict(os.environ, **env)
    if shim:
        e.update(LD_PRELOAD=shim, ALLOCMUX_STACKS="exact", ALLOCMUX_OUTPUT=out)
    start = time.perf_counter()
    subprocess.run(cmd, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", required=True, help="the shim before the change")
    ap.add_argument("--new", default=os.path.join(ROOT, "target/release/liballocmux_shim.so"))
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    for so in (args.old, args.new):
        if not os.path.exists(so):
            sys.exit(f"no shim at {so}: build it first (see --help)")
    workload = os.path.join(ROOT, "target/release/workload-glibc")
    if not os.path.exists(workload):
        sys.exit("build the workloads first: cargo build --release -p allocmux-workloads")
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "dict.py")
        with open(script, "w") as f:
            f.write(PY_SCRIPT)
        python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
        workloads = [
            ("edit-distance 400000", [workload, "edit-distance", "400000"], {}),
            ("python3 dict + json, PYTHONMALLOC=malloc", [python, script], {"PYTHONMALLOC": "malloc"}),
        ]
        out = os.path.join(tmp, "p.prof")
        print(f"{args.rounds} interleaved rounds on {os.cpu_count()} CPUs; "
              f"load average at start {os.getloadavg()[0]:.2f}\n")
        print("| workload | bare s | old exact s | new exact s | new overhead / old |")
        print("|---|---|---|---|---|")
        for name, cmd, env in workloads:
            rows, ratios = [], []
            for _ in range(args.rounds):
                bare = run(cmd, env, None, out)
                old = run(cmd, env, args.old, out)
                new = run(cmd, env, args.new, out)
                rows.append((bare, old, new))
                ratios.append((new - bare) / (old - bare))
            med = [statistics.median(r[i] for r in rows) for i in range(3)]
            print(f"| {name} | {med[0]:.3f} | {med[1]:.3f} | {med[2]:.3f} | "
                  f"{statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}] |")


if __name__ == "__main__":
    main()
