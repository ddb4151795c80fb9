"""Horizontal grouped bar charts as plain SVG, for scripts/bench.py and
scripts/cost_goals.py (stdlib only).

A bar runs from the value 1 (parity) to the median ratio, so a bar to the
right is slower (or faster, as the axis label says) and none is drawn
from an arbitrary zero; a whisker spans the interquartile range (or
another interval, as the chart says); dashed vertical lines mark
reference values such as goals.
"""
import math
from xml.sax.saxutils import escape

COLORS = ["#4c78a8", "#9ecae9", "#f58518", "#ffbf79", "#54a24b", "#e45756"]


def hbar_chart(title, rows, series, refs=(), xlabel="", log_scale=False, whisker="IQR"):
    """rows: [(category, {series name: (median, low, high)})]; series: the
    names in drawing order; whisker: what (low, high) is, for the bars'
    tooltips. Returns the SVG document as a string."""
    left, right, top, bar_h, gap = 190, 30, 60, 9, 8
    width = 900
    plot_w = width - left - right
    group_h = bar_h * max(len(series), 1) + gap
    height = top + group_h * max(len(rows), 1) + 70 + 16 * ((len(series) + 1) // 2)
    vals = [1.0] + [r for _, v in rows for s in v.values() for r in s if r and r > 0] + [x for x, _ in refs]
    lo, hi = min(vals), max(vals)
    if log_scale:
        lo, hi = math.log10(lo) - 0.05, math.log10(hi) + 0.05
    else:
        pad = (hi - lo) * 0.05 or 0.05
        lo, hi = lo - pad, hi + pad

    def x(v):
        v = math.log10(max(v, 1e-9)) if log_scale else v
        return left + (v - lo) / (hi - lo) * plot_w

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="14" font-weight="bold">{escape(title)}</text>']
    bottom = top + group_h * len(rows)
    # Ticks.
    for t in ticks(lo, hi, log_scale):
        tx = x(t)
        out.append(f'<line x1="{tx:.1f}" y1="{top - 5}" x2="{tx:.1f}" y2="{bottom}" stroke="#e0e0e0"/>')
        out.append(f'<text x="{tx:.1f}" y="{bottom + 14}" text-anchor="middle">{t:g}</text>')
    out.append(f'<text x="{left + plot_w / 2}" y="{bottom + 32}" text-anchor="middle">{escape(xlabel)}</text>')
    for i, (cat, vals_) in enumerate(rows):
        gy = top + i * group_h
        out.append(f'<text x="{left - 6}" y="{gy + group_h / 2:.1f}" text-anchor="end" dominant-baseline="middle">{escape(cat)}</text>')
        for j, s in enumerate(series):
            v = vals_.get(s)
            if not v:
                continue
            med, a, b = v
            y = gy + j * bar_h
            x0, x1 = sorted((x(1.0), x(med)))
            color = COLORS[j % len(COLORS)]
            out.append(f'<rect x="{x0:.1f}" y="{y:.1f}" width="{max(x1 - x0, 1):.1f}" height="{bar_h - 1}" fill="{color}">'
                       f'<title>{escape(cat)}, {escape(s)}: {med:.3f} ({escape(whisker)} {a:.3f}–{b:.3f})</title></rect>')
            if b > a:
                cy = y + (bar_h - 1) / 2
                out.append(f'<line x1="{x(a):.1f}" y1="{cy:.1f}" x2="{x(b):.1f}" y2="{cy:.1f}" stroke="black"/>')
    labelled = 0
    for v, label in refs:
        rx = x(v)
        dash = "" if v == 1.0 else ' stroke-dasharray="5,3"'
        out.append(f'<line x1="{rx:.1f}" y1="{top - 8}" x2="{rx:.1f}" y2="{bottom}" stroke="{"black" if v == 1.0 else "#c00"}"{dash}/>')
        if label:
            # Close reference lines (1.03, 1.10): the first label left of its line, the next right.
            anchor, dx = ("end", -3) if labelled % 2 == 0 else ("start", 3)
            labelled += 1
            out.append(f'<text x="{rx + dx:.1f}" y="{top - 12}" text-anchor="{anchor}" fill="#c00">{escape(label)}</text>')
    ly = bottom + 50
    for j, s in enumerate(series):
        lx = left + (j % 2) * 340
        yy = ly + (j // 2) * 16
        out.append(f'<rect x="{lx}" y="{yy - 9}" width="12" height="10" fill="{COLORS[j % len(COLORS)]}"/>')
        out.append(f'<text x="{lx + 18}" y="{yy}">{escape(s)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def ticks(lo, hi, log_scale):
    """About six round values between lo and hi (log10 bounds when log_scale)."""
    if log_scale:
        out = []
        for e in range(math.floor(lo), math.ceil(hi) + 1):
            for m in (1, 2, 5):
                v = m * 10 ** e
                if lo <= math.log10(v) <= hi:
                    out.append(v)
        return out
    step = 10 ** math.floor(math.log10((hi - lo) / 5))
    for m in (1, 2, 5, 10):
        if (hi - lo) / (step * m) <= 7:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [round(first + k * step, 10) for k in range(int((hi - first) / step) + 1)]
