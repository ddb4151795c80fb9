#!/usr/bin/env python3
"""The least that exact counting through interposition can cost, per backend,
and what it would cost if the allocator counted the bytes itself.

Frozen study: it decided that default recording keeps exact counts through
interposition, over an unmodified mimalloc (results/counting-floor.md);
kept as it was run, not maintained with the suite.

  python3 scripts/studies/counting_floor.py [--pairs 200000] [--words 30000] [--out FILE.md]

Default recording keeps exact per-function call counts and exact bytes. A
5% budget is set by the bare allocator's cost per call, so this script
counts instructions (callgrind; the difference between a run of 2N and of N
units of work, so start-up cancels out; the thread that does the work's
only: the shim's writer thread wakes by wall time, which valgrind
stretches, so its share would vary from run to run) for:

  bare        the allocator without allocmux: glibc itself, Debian's
              libjemalloc.so.2 and libmimalloc.so.2 preloaded
  forward     the shim built with `--cfg allocmux_bench="forward"`: malloc,
              free, calloc and realloc forward to the embedded allocator,
              nothing recorded (the universal library: its exports jump
              through a slot)
  count       built with `--cfg allocmux_bench="count"`: the same, plus one
              per-thread increment per call, the cheapest exact call count
  shipped     the shim as it ships, stacks off: the universal library, and
              the direct shim `allocmux run` preloads where there is one
              (glibc, jemalloc), whose exports are the hooks

and, for mimalloc, the allocator alone built from the source the shim links
(libmimalloc-sys's copy of mimalloc 2.x, with its build's flags) in three
forms: as shipped (`MI_STAT=0`), with its statistics (`MI_STAT=1`, which
keeps per-thread byte counts among others), and with the least change that
makes it count bytes for the shim the way jemalloc does (one per-thread
counter of block bytes handed out and one of block bytes taken back, added
to where mimalloc already has the block's page; the patch is below).

From these it derives, per backend: the floor of exact counting through
interposition (the direct shim's forwarding plus the count build's counting:
no bytes, no time sample), against 5% of the bare allocator; and, for
mimalloc, the recording a shim could reach if mimalloc counted bytes: the
forwarding, plus what the jemalloc hooks add over their forward build (call
counts, requested bytes, the time sample, with the sizes left to the
allocator), plus what the counting costs inside mimalloc.

Workloads: the malloc/free churn (scripts/churn.c, 1 thread, per
malloc/free pair) and the bundled edit-distance workload (the whole run).

Needs gcc, cargo, valgrind, Debian's libjemalloc2 and libmimalloc2.0.
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from bench import callgrind_ir  # noqa: E402  (the suite's helpers, in scripts/)
from common import DEBIAN, ROOT, clean_env, require_debian  # noqa: E402
from recording_cost import build  # noqa: E402
from shim_overhead import build_variant, direct_shims, report  # noqa: E402
BACKENDS = ["system", "jemalloc", "mimalloc"]
NAMES = {"system": "glibc", "jemalloc": "jemalloc", "mimalloc": "mimalloc"}

# The least change that makes mimalloc count bytes per thread, as jemalloc's
# `thread.allocatedp`/`deallocatedp` do: (file, anchor, text added after it).
MIMALLOC_COUNTERS = [
    ("include/mimalloc/internal.h", '#include "types.h"\n',
     "extern __thread unsigned long long mi_thread_allocated, mi_thread_freed;\n"),
    ("src/init.c", "#include <string.h>  // memcpy, memset\n",
     "__thread unsigned long long mi_thread_allocated, mi_thread_freed;\n"),
    # the allocation fast path, once it has a block
    ("src/alloc.c", "  if (usable != NULL) { *usable = mi_page_usable_block_size(page); };\n",
     "  mi_thread_allocated += page->block_size;\n"),
    # a free by the page's own thread
    ("src/free.c", "  if (track_stats) { mi_stat_free(page, block); }\n",
     "  if (track_stats) { mi_thread_freed += page->block_size; }\n"),
    # a free by another thread
    ("src/free.c", "mi_block_t* block, void* p, bool was_guarded)\n{\n  MI_UNUSED(was_guarded);\n",
     "  mi_thread_freed += page->block_size;\n"),
]


def mimalloc_source():
    """The mimalloc 2.x source libmimalloc-sys builds the shim's copy from."""
    meta = json.loads(subprocess.run(["cargo", "metadata", "--format-version", "1", "--locked"],
                                     cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    for p in meta["packages"]:
        if p["name"] == "libmimalloc-sys":
            return os.path.join(os.path.dirname(p["manifest_path"]), "c_src", "mimalloc", "v2")
    sys.exit("libmimalloc-sys is not in the workspace's dependencies")


def build_mimallocs(tmp):
    """mimalloc as a preloadable library, with libmimalloc-sys's release
    flags (and its `override` feature's), in the three forms above."""
    src = mimalloc_source()
    patched = os.path.join(tmp, "mimalloc-counters")
    shutil.copytree(src, patched)
    for rel, anchor, added in MIMALLOC_COUNTERS:
        path = os.path.join(patched, rel)
        with open(path) as f:
            text = f.read()
        if text.count(anchor) != 1:
            sys.exit(f"{rel}: the patch's anchor is not found once; has mimalloc changed? {anchor!r}")
        with open(path, "w") as f:
            f.write(text.replace(anchor, anchor + added))
    flags = ["-O3", "-fPIC", "-shared", "-ftls-model=initial-exec", "-fno-builtin-malloc", "-DNDEBUG",
             "-DMI_BUILD_RELEASE", "-DMI_DEBUG=0", "-DMI_MALLOC_OVERRIDE"]
    out = {}
    for name, root, extra in [("as shipped", src, []), ("MI_STAT=1", src, ["-DMI_STAT=1"]),
                              ("byte counters", patched, [])]:
        so = os.path.join(tmp, f"mimalloc-{len(out)}.so")
        subprocess.run(["gcc", *flags, *extra, f"-I{root}/include", f"{root}/src/static.c", "-o", so, "-lpthread"],
                       check=True)
        out[name] = so
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=200_000, help="churn malloc/free pairs (N)")
    ap.add_argument("--words", type=int, default=30_000, help="edit-distance word pairs (N)")
    ap.add_argument("--out", help="also write the tables as Markdown to this file")
    a = ap.parse_args()
    require_debian()
    base = clean_env()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        churn, shipped, release = build(tmp)
        workload = os.path.join(release, "workload-glibc")
        shims = direct_shims(shipped, tmp)
        variants = {"forward": build_variant("forward"), "count": build_variant("count")}
        mimallocs = build_mimallocs(tmp)
        out = os.path.join(tmp, "%p.prof")
        workloads = {"churn": (lambda n: [churn, "1", str(n)], a.pairs, a.pairs),
                     "edit-distance": (lambda n: [workload, "edit-distance", str(n)], a.words, 1)}
        ir = {}  # (workload, backend, configuration) -> instructions per unit
        for wname, (argv, n, per) in workloads.items():
            def run(env):
                return (callgrind_ir(argv(2 * n), env, tmp) - callgrind_ir(argv(n), env, tmp)) / per
            for backend in BACKENDS:
                shim_env = dict(base, ALLOCMUX_ALLOCATOR=backend, ALLOCMUX_OUTPUT=out)
                confs = {"bare": dict(base, **({"LD_PRELOAD": DEBIAN[backend]} if backend in DEBIAN else {})),
                         "forward": dict(shim_env, LD_PRELOAD=variants["forward"]),
                         "count": dict(shim_env, LD_PRELOAD=variants["count"]),
                         "shipped universal": dict(shim_env, LD_PRELOAD=shipped),
                         "shipped": dict(shim_env, LD_PRELOAD=shims.get(backend, shipped))}
                if backend == "mimalloc":
                    confs.update({f"mimalloc {k}": dict(base, LD_PRELOAD=v) for k, v in mimallocs.items()})
                for cname, env in confs.items():
                    ir[wname, backend, cname] = run(env)
                    print(f"{wname} {backend} {cname}: {ir[wname, backend, cname]:,.1f}", flush=True)
    lines = [f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}; "
             f"load average at start {load:.2f} (instruction counts do not move with it)",
             f"Instructions (callgrind, 2N - N, the working thread): churn, 1 thread, N = {a.pairs:,} malloc/free pairs, "
             f"per pair; edit-distance, N = {a.words:,} word pairs, the whole difference.", ""]
    for wname, (_, _, per) in workloads.items():
        unit = "per malloc/free pair" if per > 1 else "for N word pairs"
        d = 1 if per > 1 else 0  # decimals: a pair's figures are means
        lines += [f"### {wname}, instructions {unit}", "",
                  "| | " + " | ".join(NAMES[b] for b in BACKENDS) + " |", "|---|---|---|---|"]

        def row(label, f, fmt=None):
            fmt = fmt or f"{{:+,.{d}f}}"
            lines.append(f"| {label} | " + " | ".join(fmt.format(f(b)) for b in BACKENDS) + " |")

        def g(b, c):
            return ir[wname, b, c]

        def direct_saving(b):
            """The export's jump, which a direct shim does not take: one
            `jmp` a call, whatever the backend, so mimalloc, which has no
            direct shim, is taken to save what glibc's does."""
            b = "system" if b == "mimalloc" else b
            return g(b, "shipped universal") - g(b, "shipped")

        def floor(b):
            """Forwarding without the export's jump, plus counting both
            calls: the count build as a direct shim, over the bare run."""
            return g(b, "count") - direct_saving(b) - g(b, "bare")

        row("the bare allocator", lambda b: g(b, "bare"), f"{{:,.{d}f}}")
        row("5% of it: the budget", lambda b: 0.05 * g(b, "bare"), f"{{:,.{d}f}}")
        row("interposing (forward build, universal library)", lambda b: g(b, "forward") - g(b, "bare"))
        row("the export's jump (shipped: universal less direct; mimalloc: as glibc)", direct_saving)
        row("counting both calls (count build less forward build)", lambda b: g(b, "count") - g(b, "forward"))
        row("**floor of exact counting** (direct shim, calls only)", floor)
        row("floor / bare", lambda b: 1 + floor(b) / g(b, "bare"), "{:.3f}")
        row("shipped shim, stacks off (direct where there is one)", lambda b: g(b, "shipped") - g(b, "bare"))
        row("shipped / bare", lambda b: g(b, "shipped") / g(b, "bare"), "{:.3f}")
        lines.append("")
        mi = {k: g("mimalloc", f"mimalloc {k}") for k in ("as shipped", "MI_STAT=1", "byte counters")}
        hooks = g("jemalloc", "shipped universal") - g("jemalloc", "forward")
        reach = g("mimalloc", "forward") + hooks + mi["byte counters"] - mi["as shipped"]
        lines += [
            "| mimalloc counting bytes itself | instructions | over mimalloc as shipped |",
            "|---|---|---|",
            f"| mimalloc as shipped (built from libmimalloc-sys's source) | {mi['as shipped']:,.{d}f} | |",
            f"| with its statistics (`MI_STAT=1`) | {mi['MI_STAT=1']:,.{d}f} | {mi['MI_STAT=1'] - mi['as shipped']:+,.{d}f} |",
            f"| with two per-thread byte counters | {mi['byte counters']:,.{d}f} | {mi['byte counters'] - mi['as shipped']:+,.{d}f} |",
            "",
            f"A shim over mimalloc with byte counters, its hooks recording as jemalloc's do "
            f"(jemalloc's shipped universal library over its forward build: {hooks:+,.{d}f}), "
            f"the universal library: {reach:,.{d}f}, "
            f"{reach / g('mimalloc', 'bare'):.3f}× Debian's mimalloc "
            f"(the shipped shim: {g('mimalloc', 'shipped') / g('mimalloc', 'bare'):.3f}×).",
            ""]
    report("\n".join(lines), a.out)


if __name__ == "__main__":
    main()
