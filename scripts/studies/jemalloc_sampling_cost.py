#!/usr/bin/env python3
"""What jemalloc's own allocation sampler costs, per malloc/free pair.

The shim samples stacks from outside the allocator: every `malloc` takes
its size off a byte countdown and every `free` looks its block up in a
filter of sampled blocks. jemalloc, built with --enable-prof (Debian's
is), can sample by itself: its byte countdown is the thread-event counter
its fast path keeps anyway, and a sampled small request gets a page-sized
extent, which its `free` tells apart by metadata it reads in any case.
This measures that design's cost, on Debian's libjemalloc.so.2 preloaded
under the 1-thread churn (scripts/churn.c), in instructions (callgrind,
the difference between 2N and N pairs, so start-up cancels out):

  bare              no MALLOC_CONF
  prof inactive     prof:true,prof_active:false
  prof, libgcc      prof:true,prof_active:true,lg_prof_sample:19 (one
                    sample per 512 KiB, the shim's default), stacks by
                    jemalloc's default unwinder
  prof, one frame   the same with a one-frame backtrace hook
                    (scripts/studies/jemalloc_prof_hook.c): the sampler alone

Usage: python3 scripts/studies/jemalloc_sampling_cost.py [--pairs 100000]

Needs gcc, valgrind and Debian's libjemalloc2.
"""
import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def instructions(argv, env, tmp):
    out = os.path.join(tmp, "cg.out")
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv],
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    with open(out) as f:
        for line in f:
            if line.startswith("summary:"):
                return int(line.split()[1])
    sys.exit("no summary in callgrind's output")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=100_000, help="N: the runs make N and 2N pairs")
    a = ap.parse_args()
    if not os.path.exists(JEMALLOC):
        sys.exit(f"{JEMALLOC} is missing: apt-get install libjemalloc2")
    with tempfile.TemporaryDirectory() as tmp:
        churn = os.path.join(tmp, "churn")
        hook = os.path.join(tmp, "jemalloc_prof_hook.so")
        subprocess.run(["gcc", "-O2", "-pthread", os.path.join(ROOT, "scripts", "churn.c"), "-o", churn], check=True)
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", os.path.join(ROOT, "scripts", "studies", "jemalloc_prof_hook.c"),
                        "-o", hook, JEMALLOC], check=True)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("LD_PRELOAD", "MALLOC_CONF"))}
        active = "prof:true,prof_active:true,lg_prof_sample:19"
        configs = [
            ("bare", dict(base, LD_PRELOAD=JEMALLOC)),
            ("prof inactive", dict(base, LD_PRELOAD=JEMALLOC, MALLOC_CONF="prof:true,prof_active:false")),
            ("prof, libgcc backtraces", dict(base, LD_PRELOAD=JEMALLOC, MALLOC_CONF=active)),
            ("prof, one-frame backtraces", dict(base, LD_PRELOAD=f"{JEMALLOC} {hook}", MALLOC_CONF=active)),
        ]
        n = a.pairs
        print(f"| Debian jemalloc, 1-thread churn | instructions per malloc/free pair (2N - N, N = {n:,}) |")
        print("|---|---|")
        bare = None
        for name, env in configs:
            per_pair = (instructions([churn, "1", str(2 * n)], env, tmp) - instructions([churn, "1", str(n)], env, tmp)) / n
            bare = bare or per_pair
            print(f"| {name} | {per_pair:.1f} ({per_pair - bare:+.1f}) |", flush=True)


if __name__ == "__main__":
    main()
