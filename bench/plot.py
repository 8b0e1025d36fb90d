"""Latency against load as a self-contained SVG (no plotting library): offered turns/s on x,
produce-to-row latency on a log-scale y, median and p99 per worker count.

    .venv/bin/python -m bench.plot results.json docs/latency-vs-load.svg
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

WIDTH, HEIGHT = 760, 440
LEFT, RIGHT, TOP, BOTTOM = 70, 190, 48, 58
COLOURS = {1: "#1f77b4", 2: "#d62728", 3: "#2ca02c", 4: "#9467bd"}
Y_TICKS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


def _fmt_rate(x: float) -> str:
    return f"{x / 1000:g}k" if x >= 1000 else f"{x:g}"


def render(groups: Sequence[dict[str, Any]], title: str, note: str = "") -> str:
    """``groups``: ``{"workers": n, "steps": [{"rate", "latency": {"median_ms", "p99_ms"}, "kept_up"}]}``."""
    points = [(s["rate"], s["latency"][k]) for g in groups for s in g["steps"] for k in ("median_ms", "p99_ms")
              if s["latency"][k] == s["latency"][k] and s["latency"][k] > 0]
    if not points:
        raise ValueError("no latency figures to plot")
    x_max = float(max(p[0] for p in points)) * 1.05
    low = min(p[1] for p in points)
    y_lo = max([t for t in Y_TICKS if t <= low / 1.2] or [1])
    y_hi = max(100.0, max(p[1] for p in points)) * 1.3
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + x / x_max * plot_w

    def sy(y: float) -> float:
        y = max(y, y_lo)
        span = math.log10(y_hi) - math.log10(y_lo)
        return float(TOP + plot_h - (math.log10(y) - math.log10(y_lo)) / span * plot_h)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{LEFT}" y="22" font-size="15" font-weight="bold">{escape(title)}</text>']
    if note:
        out.append(f'<text x="{LEFT}" y="38" fill="#555">{escape(note)}</text>')
    # grid and axes
    for y in Y_TICKS:
        if y_lo <= y <= y_hi:
            out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#e4e4e4"/>')
            out.append(f'<text x="{LEFT - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
    step = 1000 if x_max > 4000 else 500
    x = 0.0
    while x <= x_max:
        out.append(f'<line x1="{sx(x):.1f}" x2="{sx(x):.1f}" y1="{TOP}" y2="{TOP + plot_h}" stroke="#f0f0f0"/>')
        out.append(f'<text x="{sx(x):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">{_fmt_rate(x)}</text>')
        x += step
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 18}" text-anchor="middle">offered load, turns/s</text>')
    out.append(f'<text x="18" y="{TOP + plot_h / 2}" text-anchor="middle" '
               f'transform="rotate(-90 18 {TOP + plot_h / 2})">produce-to-row latency, ms (log scale)</text>')
    # targets at 500 turns/s
    for y, label in ((30, "target at 500 turns/s: median 30 ms"), (100, "and p99 100 ms")):
        out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#999" '
                   f'stroke-dasharray="4 4"/>')
        out.append(f'<text x="{LEFT + plot_w - 4}" y="{sy(y) - 4:.1f}" text-anchor="end" fill="#777">{label}</text>')
    # series
    legend_y = TOP + 10
    for g in groups:
        colour = COLOURS.get(int(g["workers"]), "#333")
        for key, dash, name in (("median_ms", "", "median"), ("p99_ms", "6 4", "p99")):
            pts = [(s["rate"], s["latency"][key], s["kept_up"]) for s in g["steps"]
                   if s["latency"][key] == s["latency"][key]]
            if not pts:
                continue
            path = " ".join(f"{'M' if i == 0 else 'L'}{sx(r):.1f},{sy(v):.1f}" for i, (r, v, _) in enumerate(pts))
            out.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2"'
                       + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
            for r, v, kept in pts:
                fill = colour if kept else "white"
                out.append(f'<circle cx="{sx(r):.1f}" cy="{sy(v):.1f}" r="3.5" fill="{fill}" stroke="{colour}"/>')
            label = f"{g['workers']} worker{'s' if g['workers'] != 1 else ''}, {name}"
            lx = LEFT + plot_w + 14
            out.append(f'<line x1="{lx}" x2="{lx + 24}" y1="{legend_y}" y2="{legend_y}" stroke="{colour}" '
                       f'stroke-width="2"' + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
            out.append(f'<text x="{lx + 30}" y="{legend_y + 4}">{escape(label)}</text>')
            legend_y += 18
    lx = LEFT + plot_w + 14
    out.append(f'<circle cx="{lx + 12}" cy="{legend_y + 6}" r="3.5" fill="white" stroke="#333"/>')
    out.append(f'<text x="{lx + 30}" y="{legend_y + 10}">fell behind</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        raise SystemExit("usage: python -m bench.plot RESULTS.json OUT.svg")
    results = json.loads(Path(args[0]).read_text())
    groups = results["e2e"]["groups"]
    Path(args[1]).write_text(render(groups, "Produce-to-row latency against load", results.get("plot_note", "")))


if __name__ == "__main__":
    main()
