#!/usr/bin/env python3
"""What the sampled level (live profiles) costs, per backend, measured side by side.

The goal: at most 1.01x on a typical Rust program and 1.03x on the
allocation-bound edit-distance and the C malloc/free churn, under each
backend, against the same allocator without allocmux.

For each workload and backend the same program runs under:

  base       the allocator without allocmux. Rust: the workload built with
             it as its #[global_allocator] (scripts/incode-allocators, the
             crate versions the shim links). C: glibc itself; for jemalloc
             and mimalloc the forwarder, the direct shim that only forwards
             (what `compare` times), and Debian's library preloaded
  forwarder  the shim recording nothing: the backend's forwarder (under
             glibc, which has none, the universal library with
             ALLOCMUX_RECORD=off, one jump more than a direct shim), to
             tell what interposing costs from what recording adds
  live       the sampled level as `allocmux run --http` / `allocmux
             preload --http` start it: the level's direct shim, serving
             /debug/pprof on a free port, no profile file
  exact      default (exact) recording, for reference: the library
             `allocmux run` preloads

Rust programs under the shim are the glibc-built binary, whose `malloc`
the shim replaces. Workloads: edit-distance-fixed (the same Levenshtein
with its buffers reused: a typical program, allocating now and then),
edit-distance (a Vec per word and a row per letter: allocation-bound), and
scripts/churn.c (2 threads doing nothing but malloc/free: the worst case).

Instructions (valgrind --tool=callgrind, the whole process tree) are the
difference between a run of 2N and of N units of work, so start-up
cancels out; they do not move with the machine's load. Wall time: the
median of per-round ratios over interleaved rounds [min, max].

A real service last: Debian's redis-server loaded by redis-benchmark (SET
and GET, 20 clients), its throughput under the sampled level with the
endpoint on, against the same allocator without allocmux (glibc itself,
the jemalloc and mimalloc forwarders), over interleaved rounds.

Usage:
  python3 scripts/live_cost.py [--rounds 11] [--redis-rounds 7] [--no-callgrind] [--out FILE.md]

With --out, the chart (live / base per workload and backend, instructions
and wall time, the goals marked) is written next to it, as
FILE-without-.md/live-cost.svg, and linked from the tables.

Needs gcc, cargo, valgrind, Debian's libjemalloc2 and libmimalloc2.0.
"""
import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from bench_svg import hbar_chart
from common import DEBIAN, clean_env, require_debian
from recording_cost import INCODE, build, instructions
from shim_overhead import direct_shims, report, timed

BACKENDS = ["system", "jemalloc", "mimalloc"]
# Units of work: under callgrind (50x slower; a few hundred stack samples
# a run, one per 512 KiB, so that what sampling adds is seen), and timed.
CALLGRIND_SIZES = {"edit-distance-fixed": 100_000, "edit-distance": 20_000, "churn": 400_000}
WALL_SIZES = {"edit-distance-fixed": 1_000_000, "edit-distance": 60_000, "churn": 2_000_000}
GOALS = {"edit-distance-fixed": 1.01, "edit-distance": 1.03, "churn": 1.03}


def configs(backend, workload, shim, shims, release, churn, base):
    """name -> (argv builder for a size, environment), the baselines first."""
    rust = workload != "churn"

    def cmd(binary):
        if rust:
            return lambda n: [os.path.join(release, f"workload-{binary}"), workload, str(n)]
        return lambda n: [churn, "2", str(n)]

    c = {}
    if rust:
        c["base"] = (cmd(INCODE[backend]), dict(base))
    elif backend == "system":
        c["base"] = (cmd("glibc"), dict(base))
    else:
        c["base"] = (cmd("glibc"), dict(base, LD_PRELOAD=shims[f"{backend}_forward"]))
        c["preloaded"] = (cmd("glibc"), dict(base, LD_PRELOAD=DEBIAN[backend]))
    shim_env = dict(base, ALLOCMUX_ALLOCATOR=backend)
    if rust or backend == "system":
        forwarder = shims.get(f"{backend}_forward", shim)
        c["forwarder"] = (cmd("glibc"), dict(shim_env, LD_PRELOAD=forwarder, ALLOCMUX_RECORD="off"))
    else:
        c["forwarder"] = c["base"]
    c["live"] = (cmd("glibc"), dict(shim_env, LD_PRELOAD=shims[f"{backend}_sampled_level"],
                                    ALLOCMUX_RECORD="sampled", ALLOCMUX_HTTP="127.0.0.1:0"))
    c["exact"] = (cmd("glibc"), dict(shim_env, LD_PRELOAD=shims.get(backend, shim), ALLOCMUX_RECORD="exact"))
    return c


def redis_rps(env, port):
    """Starts redis-server under `env` on `port`, loads it, stops it: the
    SET and GET requests per second."""
    server = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        out = subprocess.run(["redis-benchmark", "-p", str(port), "-n", "200000", "-c", "20", "--csv",
                              "-t", "set,get"], capture_output=True, text=True, check=True).stdout
    finally:
        subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"], capture_output=True)
        server.wait()
    rps = {}
    for line in out.splitlines()[1:]:
        f = [x.strip('"') for x in line.split(",")]
        rps[f[0]] = float(f[1])
    return rps


def redis_throughput(rounds, shims, base, lines):
    """Interleaved rounds of redis under each backend, bare and live;
    appends a row per backend and test."""
    port = 16379
    for backend in BACKENDS:
        bare = dict(base)
        if backend != "system":
            bare["LD_PRELOAD"] = shims[f"{backend}_forward"]
        live = dict(base, LD_PRELOAD=shims[f"{backend}_sampled_level"], ALLOCMUX_ALLOCATOR=backend,
                    ALLOCMUX_RECORD="sampled", ALLOCMUX_HTTP="127.0.0.1:0")
        ratios = {"SET": [], "GET": []}
        for _ in range(rounds):
            b = redis_rps(bare, port)
            v = redis_rps(live, port)
            for t in ratios:
                ratios[t].append(v[t] / b[t])
        for t, rs in ratios.items():
            lines.append(f"| redis {t} | {backend} | {fmt(rs)} |")
            print(lines[-1], flush=True)


def fmt(rs):
    return f"{statistics.median(rs):.3f} [{min(rs):.3f}, {max(rs):.3f}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=11, help="timed rounds (0: instructions only)")
    ap.add_argument("--no-callgrind", action="store_true")
    ap.add_argument("--redis-rounds", type=int, default=7, help="0: no redis-server run")
    ap.add_argument("--only-redis", action="store_true", help="the redis-server rounds alone")
    ap.add_argument("--out", help="also write the tables as Markdown to this file")
    a = ap.parse_args()
    require_debian()
    base = clean_env()
    head = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}; "
        f"load average at start {os.getloadavg()[0]:.2f}",
        "",
    ]
    cg = [
        "| instructions (callgrind, 2N - N) | backend | base | live | live / base | goal | forwarder / base | live / forwarder | exact / base | (C: live / Debian's preloaded) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    wall = [
        "",
        f"| wall time ({a.rounds} interleaved rounds) | backend | live / base | goal | live / forwarder | exact / base | (C: live / Debian's preloaded) |",
        "|---|---|---|---|---|---|---|",
    ]
    chart = {}  # "workload, backend" -> {series: (median, low, high)}
    redis = [
        "",
        f"| redis-server throughput ({a.redis_rounds} interleaved rounds) | backend | live / base (requests per second) |",
        "|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        churn, shim, release = build(tmp)
        shims = direct_shims(shim, tmp)
        if a.redis_rounds > 0:
            redis_throughput(a.redis_rounds, shims, base, redis)
        for workload in ([] if a.only_redis else CALLGRIND_SIZES):
            for backend in BACKENDS:
                c = configs(backend, workload, shim, shims, release, churn, base)
                if not a.no_callgrind:
                    m = CALLGRIND_SIZES[workload]
                    # Without the endpoint: its thread wakes by the clock,
                    # which under callgrind runs 50 times slower (its cost is
                    # per second, not per call: measured apart below).
                    def quiet(env):
                        return {k: v for k, v in env.items() if k != "ALLOCMUX_HTTP"}

                    ir = {name: instructions(argv(2 * m), quiet(env), tmp) - instructions(argv(m), quiet(env), tmp)
                          for name, (argv, env) in c.items() if not (name == "forwarder" and c[name] is c["base"])}
                    ir.setdefault("forwarder", ir["base"])
                    pre = f"{ir['live'] / ir['preloaded']:.3f}" if "preloaded" in ir else ""
                    cg.append(f"| {workload} | {backend} | {ir['base']:,} | {ir['live']:,} | "
                              f"{ir['live'] / ir['base']:.3f} | {GOALS[workload]:.2f} | "
                              f"{ir['forwarder'] / ir['base']:.3f} | {ir['live'] / ir['forwarder']:.3f} | "
                              f"{ir['exact'] / ir['base']:.3f} | {pre} |")
                    print(cg[-1], flush=True)
                    r = ir["live"] / ir["base"]
                    chart.setdefault(f"{workload}, {backend}", {})["instructions"] = (r, r, r)
                if a.rounds > 0:
                    n = WALL_SIZES[workload]
                    times = {name: [] for name in c}
                    outputs = set()
                    timed(c["base"][0](n), c["base"][1])  # warm up
                    for _ in range(a.rounds):
                        for name, (argv, env) in c.items():
                            if name == "forwarder" and c[name] is c["base"]:
                                continue
                            t, stdout = timed(argv(n), env)
                            times[name].append(t)
                            outputs.add(stdout)
                    if len(outputs) != 1:
                        sys.exit(f"{workload} {backend}: output differed between configurations")

                    if not times["forwarder"]:
                        times["forwarder"] = times["base"]

                    def ratio(num, den):
                        return [x / y for x, y in zip(times[num], times[den])]

                    pre = fmt(ratio("live", "preloaded")) if "preloaded" in times else ""
                    wall.append(f"| {workload} | {backend} | {fmt(ratio('live', 'base'))} | "
                                f"{GOALS[workload]:.2f} | {fmt(ratio('live', 'forwarder'))} | "
                                f"{fmt(ratio('exact', 'base'))} | {pre} |")
                    print(wall[-1], flush=True)
                    w = ratio("live", "base")
                    chart.setdefault(f"{workload}, {backend}", {})["wall time"] = (
                        statistics.median(w), min(w), max(w))
    lines = head + ([] if a.no_callgrind or a.only_redis else cg) + \
        (wall if a.rounds > 0 and not a.only_redis else []) + (redis if a.redis_rounds > 0 else [])
    if a.out and chart:
        svg_dir = os.path.splitext(a.out)[0]
        os.makedirs(svg_dir, exist_ok=True)
        svg = hbar_chart("The sampled level against the same allocator without allocmux (live / base)",
                         list(chart.items()), ["instructions", "wall time"],
                         refs=[(1.01, "goal, typical"), (1.03, "goal, allocation-bound")],
                         xlabel="ratio (1: no cost)", whisker="min-max over the rounds")
        with open(os.path.join(svg_dir, "live-cost.svg"), "w") as f:
            f.write(svg)
        name = os.path.basename(svg_dir)
        lines += ["", f"![the sampled level's cost]({name}/live-cost.svg)"]
    report("\n".join(lines), a.out)


if __name__ == "__main__":
    main()
