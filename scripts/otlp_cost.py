#!/usr/bin/env python3
"""What pushing OTLP profiles adds to the sampled level, measured side by side.

The same program runs at the sampled level as `allocmux run --http` starts
it (`live`: the level's direct shim, serving /debug/pprof on a free port),
and the same with pushes to a real OpenTelemetry Collector every second
(`pushing`: ALLOCMUX_OTLP to the Collector scripts/otelcol/ builds,
ALLOCMUX_OTLP_INTERVAL=1, sixty times the default rate), in interleaved
rounds. Workloads: the C malloc/free churn (scripts/churn.c, 2 threads)
and edit-distance (allocation-bound Rust), under glibc. Reported: the
median per-round ratio pushing / live of wall time and of CPU time (user +
sys, which counts the flusher thread's pushes wherever they ran), with
the range, and the pushes the Collector received with their mean size.

Each run takes about 3 s, so it pushes twice or three times.

Usage:
  python3 scripts/otlp_cost.py [--rounds 11]

Needs gcc, cargo and the Collector (target/otelcol/allocmux-otelcol, built
by scripts/otelcol/build.sh if missing: Go 1.26 or later).
"""
import argparse
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from common import ROOT, clean_env
from recording_cost import build
from shim_overhead import direct_shims

SIZES = {"churn": 80_000_000, "edit-distance": 4_000_000}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def collector(tmp):
    """Starts the Collector on a free port; (process, URL, output file)."""
    binary = os.path.join(ROOT, "target", "otelcol", "allocmux-otelcol")
    if not os.path.exists(binary):
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "otelcol", "build.sh"), binary], check=True)
    port = free_port()
    out = os.path.join(tmp, "received.jsonl")
    env = dict(os.environ, OTELCOL_HTTP_PORT=str(port), OTELCOL_PROFILES_OUT=out, OTELCOL_DEBUG_VERBOSITY="basic")
    p = subprocess.Popen([binary, "--config=" + os.path.join(ROOT, "scripts", "otelcol", "config.yaml")],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return p, f"http://127.0.0.1:{port}", out
        except OSError:
            time.sleep(0.1)
    sys.exit("the Collector did not listen")


def run(argv, env):
    """Wall seconds and CPU seconds (user + sys) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    r = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed: {r.stderr.decode()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def fmt(xs):
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}, {max(xs):.3f}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=11)
    a = ap.parse_args()
    base = clean_env()
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores; load average at start {os.getloadavg()[0]:.2f}\n")
    print(f"| workload (glibc) | pushes received | mean request | wall time, pushing / live ({a.rounds} rounds) | CPU time, pushing / live |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        churn, shim, release = build(tmp)
        shims = direct_shims(shim, tmp)
        proc, url, received = collector(tmp)
        try:
            live = dict(base, LD_PRELOAD=shims["system_sampled_level"], ALLOCMUX_ALLOCATOR="system",
                        ALLOCMUX_RECORD="sampled", ALLOCMUX_HTTP="127.0.0.1:0")
            pushing = dict(live, ALLOCMUX_OTLP=url, ALLOCMUX_OTLP_INTERVAL="1")
            for workload, n in SIZES.items():
                if workload == "churn":
                    argv = [churn, "2", str(n)]
                else:
                    argv = [os.path.join(release, "workload-glibc"), workload, str(n)]
                open(received, "w").close()
                run(argv, live)  # warm up
                walls, cpus = [], []
                for _ in range(a.rounds):
                    w0, c0 = run(argv, live)
                    w1, c1 = run(argv, pushing)
                    walls.append(w1 / w0)
                    cpus.append(c1 / c0)
                time.sleep(0.5)  # the file exporter flushes every 100 ms
                with open(received) as f:
                    sizes = [len(line) for line in f if line.strip()]
                pushes = len(sizes)
                mean = statistics.mean(sizes) if sizes else 0
                print(f"| {workload} | {pushes} in {a.rounds} runs | {mean / 1024:.1f} KiB of JSON | {fmt(walls)} | {fmt(cpus)} |",
                      flush=True)
        finally:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
