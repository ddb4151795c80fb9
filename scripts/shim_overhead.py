#!/usr/bin/env python3
"""Overhead of the allocmux shim's default recording, measured side by side.

Runs the malloc/free churn (scripts/churn.c, 2 threads) in interleaved rounds
under four configurations and reports the median wall-time ratios:

  shim jemalloc   vs  Debian's libjemalloc.so.2 preloaded directly
  shim system     vs  no preload (glibc)

Interleaving (A B C D A B C D ...) spreads the drift of a shared machine over
all configurations alike. Usage:

  python3 scripts/shim_overhead.py [--rounds 21] [--iterations 4000000] [--threads 2] [--out FILE.md]

It then does the same, with fewer rounds, for two real programs where the
allocator is one cost among others: python3 building and serialising a
large dict, and allocmux's bundled edit-distance workload.

With --floors it also builds the shim twice more for the jemalloc
comparison (`--cfg allocmux_bench="forward"`: malloc, free, calloc and
realloc forward with no recording; `"count"`: one per-thread increment per
call and nothing else), to show what interposition and the cheapest exact
counting cost by themselves;
the shipped shim with ALLOCMUX_TIME_SAMPLE=1000000, to show what the timed
calls cost;
and it runs scripts/ideal_shim.c, the least C that records what the shim's
fast path records (countdown, requested bytes, large-block check; and the
chunk-header sizes for glibc), over Debian's jemalloc and over glibc: the
floor for any shim that counts every call exactly.

With --baseline-shim PATH it also runs another build of the shim (say, one
built from an earlier commit) in the same interleaved rounds, and reports the
current shim's time over the baseline's round by round: a before/after
comparison of a change, measured side by side. It also measures the CPU time
of an idle process (`sleep`) under both, where the work of the shim's writer
thread shows by itself.

With --callgrind it also counts instructions (valgrind --tool=callgrind) on
a 1-thread churn of 200,000 pairs under each configuration: repeatable to
the instruction whatever else the machine does, so a stable second figure.

Needs gcc, cargo and Debian's libjemalloc2 (apt-get install libjemalloc2).
"""
import argparse
import os
import resource
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from common import DEBIAN_JEMALLOC, ROOT, clean_env, require_debian


def direct_shims(universal, outdir, tool=None):
    """The direct shims made from `universal` (see docs/performance.md), as
    {table: path}, by the CLI's `direct_shims` example (`tool`; by default
    built here). What `allocmux run` preloads for stacks off and sampled
    stacks under glibc and jemalloc."""
    if tool is None:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "allocmux-cli", "--example", "direct_shims"], cwd=ROOT, check=True)
        tool = os.path.join(ROOT, "target", "release", "examples", "direct_shims")
    out = subprocess.run([tool, universal, outdir], capture_output=True, text=True, check=True).stdout.split()
    return {os.path.basename(p)[len("liballocmux_shim-"):-len(".so")]: p for p in out}


def library(shims, universal, backend, stacks="off"):
    """The library allocmux preloads for `backend` and `stacks` (off, sample,
    exact): a direct shim where there is one, else the universal one."""
    if stacks == "exact":
        return universal
    return shims.get(backend + ("_sampled" if stacks == "sample" else ""), universal)


def build_variant(cfg):
    """The shim built with `--cfg allocmux_bench=cfg` in its own target directory."""
    target = os.path.join(ROOT, "target", f"bench-{cfg}")
    env = dict(os.environ, RUSTFLAGS=f'--cfg allocmux_bench="{cfg}"')
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "allocmux-shim", "--target-dir", target], cwd=ROOT, env=env, check=True)
    return os.path.join(target, "release", "liballocmux_shim.so")


def build(tmp):
    churn = os.path.join(tmp, "churn")
    subprocess.run(["gcc", "-O2", "-g", "-pthread", os.path.join(ROOT, "scripts", "churn.c"), "-o", churn], check=True)
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "allocmux-shim"], cwd=ROOT, check=True)
    return churn, os.path.join(ROOT, "target", "release", "liballocmux_shim.so")


def build_ideal(tmp):
    """scripts/ideal_shim.c built for jemalloc (no sizes) and for glibc (-DSIZES)."""
    src = os.path.join(ROOT, "scripts", "ideal_shim.c")
    out = {}
    for name, flags in [("jemalloc", []), ("glibc", ["-DSIZES"])]:
        so = os.path.join(tmp, f"ideal_{name}.so")
        subprocess.run(["gcc", "-O2", "-fPIC", "-shared", *flags, src, "-o", so, "-ldl"], check=True)
        out[name] = so
    return out


def report(text, out):
    """Prints a results table, and writes it to `out` if given."""
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")


def timed(cmd, env):
    start = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.decode()}")
    return elapsed, r.stdout


def idle_cpu_ms(env, seconds):
    """CPU time (user + sys, ms) of `sleep SECONDS` under env: what the
    shim does in a process that does nothing."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(["sleep", str(seconds)], env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return 1000 * ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--iterations", type=int, default=4_000_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", help="also write the table as Markdown to this file")
    ap.add_argument("--callgrind", action="store_true", help="also count instructions with callgrind")
    ap.add_argument("--floors", action="store_true", help="also measure the forward-only and count-only shim builds")
    ap.add_argument("--program-rounds", type=int, default=11, help="rounds for the real programs (0 skips them)")
    ap.add_argument("--baseline-shim", metavar="PATH", help="also run this build of the shim and compare the current one against it")
    ap.add_argument("--idle-seconds", type=float, default=5, help="length of the idle run with --baseline-shim")
    a = ap.parse_args()
    require_debian([DEBIAN_JEMALLOC])
    with tempfile.TemporaryDirectory() as tmp:
        churn, shim = build(tmp)
        cmd = [churn, str(a.threads), str(a.iterations)]
        base = clean_env()
        # Profiles go to a file, as `allocmux run` does, so nothing is printed.
        out = os.path.join(tmp, "%p.prof")
        configs = {
            "glibc (no preload)": dict(base),
            "shim system": dict(base, LD_PRELOAD=shim, ALLOCMUX_ALLOCATOR="system", ALLOCMUX_OUTPUT=out),
            "Debian libjemalloc.so.2": dict(base, LD_PRELOAD=DEBIAN_JEMALLOC),
            "shim jemalloc": dict(base, LD_PRELOAD=shim, ALLOCMUX_ALLOCATOR="jemalloc", ALLOCMUX_OUTPUT=out),
        }
        if a.floors:
            ideal = build_ideal(tmp)
            configs["ideal C shim, glibc"] = dict(base, LD_PRELOAD=ideal["glibc"])
            configs["ideal C shim, jemalloc"] = dict(base, LD_PRELOAD=f"{ideal['jemalloc']}:{DEBIAN_JEMALLOC}")
        instructions = {}
        if a.callgrind:
            pairs = 200_000
            for name, env in configs.items():
                out_file = os.path.join(tmp, "cg.out")
                r = subprocess.run(
                    ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}", churn, "1", str(pairs)],
                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
                total = [l for l in r.stderr.splitlines() if "Collected" in l][0].split()[-1]
                instructions[name] = int(total.replace(",", ""))
        main_configs = {k: v for k, v in configs.items() if not k.startswith("ideal")}  # the real programs run under these only
        if a.baseline_shim:
            baseline = os.path.abspath(a.baseline_shim)
            for alloc in ["system", "jemalloc"]:
                configs[f"baseline shim {alloc}"] = dict(base, LD_PRELOAD=baseline, ALLOCMUX_ALLOCATOR=alloc, ALLOCMUX_OUTPUT=out)
        if a.floors:
            for cfg, label in [("forward", "shim jemalloc, no recording"), ("count", "shim jemalloc, counting calls only")]:
                configs[label] = dict(base, LD_PRELOAD=build_variant(cfg), ALLOCMUX_ALLOCATOR="jemalloc", ALLOCMUX_OUTPUT=out)
            # The shipped shim with (almost) no timed calls: what the TSC reads cost.
            configs["shim jemalloc, untimed (ALLOCMUX_TIME_SAMPLE=1000000)"] = dict(
                configs["shim jemalloc"], ALLOCMUX_TIME_SAMPLE="1000000")
        times = {name: [] for name in configs}
        outputs = set()
        timed(cmd, configs["glibc (no preload)"])  # warm the page cache
        for _ in range(a.rounds):
            for name, env in configs.items():
                t, stdout = timed(cmd, env)
                times[name].append(t)
                outputs.add(stdout)
        if len(outputs) != 1:
            sys.exit("the churn's output differed between configurations")

        idle = {}
        if a.baseline_shim:
            for _ in range(3):
                for name in ["glibc (no preload)", "baseline shim system", "shim system"]:
                    idle.setdefault(name, []).append(idle_cpu_ms(configs[name], a.idle_seconds))

        programs = {}
        if a.program_rounds > 0:
            subprocess.run(["cargo", "build", "--release", "-q", "-p", "allocmux-cli"], cwd=ROOT, check=True)
            allocmux = os.path.join(ROOT, "target", "release", "allocmux")
            py = "import json; d = {i: [str(i) * 8, {'k': i}] for i in range(300000)}; print(len(json.dumps(d)))"
            for label, cmd in [
                ("python3 json", ["/usr/bin/python3", "-c", py]),
                ("edit-distance workload", [allocmux, "__workload", "edit-distance", "40000"]),
            ]:
                t = {name: [] for name in main_configs}
                for _ in range(a.program_rounds):
                    for name, env in main_configs.items():
                        t[name].append(timed(cmd, env)[0])
                programs[label] = t

    def ratio(num, den, times=times):
        # Per-round ratios (side by side in time), then their median.
        rs = [x / y for x, y in zip(times[num], times[den])]
        return statistics.median(rs), min(rs), max(rs)

    lines = [
        f"Churn: {a.threads} threads x {a.iterations:,} malloc/free pairs each, {a.rounds} interleaved rounds",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "",
        "| configuration | median wall (s) | min | max |",
        "|---|---|---|---|",
    ]
    for name, ts in times.items():
        lines.append(f"| {name} | {statistics.median(ts):.3f} | {min(ts):.3f} | {max(ts):.3f} |")
    lines += ["", "| ratio (per-round, median [min, max]) | value |", "|---|---|"]
    pairs = [("shim jemalloc", "Debian libjemalloc.so.2"), ("shim system", "glibc (no preload)")]
    pairs += [(n, "Debian libjemalloc.so.2") for n in times if n.startswith("shim jemalloc,")]
    if "ideal C shim, jemalloc" in times:
        pairs += [("ideal C shim, jemalloc", "Debian libjemalloc.so.2"), ("ideal C shim, glibc", "glibc (no preload)")]
    pairs += [(n.removeprefix("baseline "), n) for n in times if n.startswith("baseline shim ")]
    for num, den in pairs:
        m, lo, hi = ratio(num, den)
        lines.append(f"| {num} / {den} | {m:.3f} [{lo:.3f}, {hi:.3f}] |")
    if programs:
        lines += ["", f"| real program ({a.program_rounds} interleaved rounds) | shim jemalloc / Debian jemalloc | shim system / glibc |", "|---|---|---|"]
        for label, t in programs.items():
            j = ratio("shim jemalloc", "Debian libjemalloc.so.2", t)
            g = ratio("shim system", "glibc (no preload)", t)
            lines.append(f"| {label} | {j[0]:.3f} [{j[1]:.3f}, {j[2]:.3f}] | {g[0]:.3f} [{g[1]:.3f}, {g[2]:.3f}] |")
    if idle:
        lines += ["", f"| idle process (`sleep {a.idle_seconds:g}`, 3 rounds) | CPU time, median (ms) | min | max |", "|---|---|---|---|"]
        for name, ms in idle.items():
            lines.append(f"| {name} | {statistics.median(ms):.1f} | {min(ms):.1f} | {max(ms):.1f} |")
    if instructions:
        lines += ["", f"| instructions, 1 thread x 200,000 pairs (callgrind) | total | per pair over the bare allocator |", "|---|---|---|"]
        bare = {
            "shim system": "glibc (no preload)",
            "shim jemalloc": "Debian libjemalloc.so.2",
            "ideal C shim, glibc": "glibc (no preload)",
            "ideal C shim, jemalloc": "Debian libjemalloc.so.2",
        }
        for name, n in instructions.items():
            extra = f"{(n - instructions[bare[name]]) / 200_000:+.1f}" if name in bare else ""
            lines.append(f"| {name} | {n:,} | {extra} |")
    report("\n".join(lines), a.out)


if __name__ == "__main__":
    main()
