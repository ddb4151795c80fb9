#!/usr/bin/env python3
"""Size and first-render time of the HTML report (`allocmux report --html`).

Builds a C program whose every allocation has its own call stack (10,000
and 100,000 distinct stacks: a path of five-digit decimal numbers through
ten functions), records each with `allocmux run --stacks exact`, writes the
HTML report, and loads it in headless Chromium (Debian's, driven by
playwright-core from flamegraph/tests/browser; `npm ci` there first) RUNS
times: the first render is the page's own clock (`performance.now()`, from
navigation start) when the flamegraph's root frame is drawn (width and label). Writes a
Markdown table. Takes about a minute.

    python3 scripts/html_report.py --runs 5 --out scripts/results/html-report.md
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
DRIVER = ROOT / "flamegraph/tests/browser/check_report.cjs"

# step() walks the digits of v, calling one of ten functions per digit, so
# that each v in [0, 10^DIGITS) allocates from a stack of its own.
PROGRAM = r"""
#include <stdlib.h>
static void *step(unsigned v, int d);
#define F(k) __attribute__((noinline)) static void *f##k(unsigned v, int d) { \
    static volatile int tag = k; (void)tag; void *p = step(v, d); \
    __asm__ volatile("" : : "r"(p) : "memory"); return p; }
F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9)
static void *(*const fs[10])(unsigned, int) = {f0, f1, f2, f3, f4, f5, f6, f7, f8, f9};
__attribute__((noinline)) static void *step(unsigned v, int d)
{
    if (d == 0) return malloc(64);
    return fs[v % 10](v / 10, d - 1);
}
int main(int argc, char **argv)
{
    int digits = atoi(argv[1]);
    unsigned n = 1;
    for (int i = 0; i < digits; i++) n *= 10;
    void **held = malloc(n * sizeof *held);
    for (unsigned v = 0; v < n; v++) held[v] = step(v, digits);
    return held[0] == 0;
}
"""


def allocmux_binary(given):
    if given:
        return pathlib.Path(given)
    for kind in ("release", "debug"):
        p = ROOT / "target" / kind / "allocmux"
        if p.exists():
            return p
    subprocess.run(["cargo", "build", "-q", "-p", "allocmux-cli"], cwd=ROOT, check=True)
    return ROOT / "target/debug/allocmux"


def measure(allocmux, exe, digits, runs, tmp, shots):
    prof = tmp / f"stacks-{digits}.prof"
    html = tmp / f"stacks-{digits}.html"
    subprocess.run([allocmux, "run", "--stacks", "exact", "-o", prof, "--force", "--", exe, str(digits)],
                   check=True, stderr=subprocess.DEVNULL)
    folded = subprocess.run([allocmux, "export", prof, "--format", "folded", "-o", "-"],
                            check=True, capture_output=True, text=True).stdout
    stacks = sum(1 for line in folded.splitlines() if line.strip())
    subprocess.run([allocmux, "report", "--top", "0", "--force", "--html", html, prof],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = subprocess.run(["node", DRIVER, "render", html, shots / f"stacks-{digits}", "", str(runs)],
                         check=True, capture_output=True, text=True)
    seen = json.loads(out.stdout)
    if seen["blocked"] or seen["console_errors"] or seen["page_errors"]:
        raise SystemExit(f"the page misbehaved: {seen}")
    pruned = [n for n in seen["notes"] if "below threshold" in n]
    return {
        "stacks": stacks,
        "bytes": html.stat().st_size,
        "render_ms": seen["render_ms"],
        "frames": seen["frames"],
        "pruned": pruned[0] if pruned else "not pruned",
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--allocmux", help="the allocmux binary [default: target/release, else target/debug]")
    ap.add_argument("--out", default=str(ROOT / "scripts/results/html-report.md"))
    a = ap.parse_args()
    allocmux = allocmux_binary(a.allocmux)
    with tempfile.TemporaryDirectory() as t:
        tmp = pathlib.Path(t)
        (tmp / "many.c").write_text(PROGRAM)
        exe = tmp / "many"
        subprocess.run(["cc", "-O1", "-g", "-fno-ipa-icf", "-fno-optimize-sibling-calls",
                        tmp / "many.c", "-o", exe], check=True)
        shots = ROOT / "target/html-report-shots/bench"
        rows = [measure(allocmux, exe, d, a.runs, tmp, shots) for d in (4, 5)]
    load = os.getloadavg()[0]
    lines = [
        "# HTML report: size and first render",
        "",
        f"`python3 scripts/html_report.py --runs {a.runs}` (allocmux `{allocmux.relative_to(ROOT) if allocmux.is_relative_to(ROOT) else allocmux}`), "
        f"headless Chromium (`/usr/bin/chromium`), {os.cpu_count()} cores, load average {load:.2f} at the end.",
        "First render: navigation start to the flamegraph's root frame drawn (width and label set), the page's own "
        f"`performance.now()`, median (min–max) of {a.runs} loads. Goal: under 3 MB and 1 s for 10,000 stacks.",
        "",
        "| distinct stacks | file | first render | frames drawn | pruning (as the page states it) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        ms = r["render_ms"]
        lines.append(
            f"| {r['stacks']:,} | {r['bytes'] / 1e6:.2f} MB | {statistics.median(ms):.0f} ms "
            f"({min(ms):.0f}–{max(ms):.0f}) | {r['frames']:,} | {r['pruned']} |")
    text = "\n".join(lines) + "\n"
    pathlib.Path(a.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
