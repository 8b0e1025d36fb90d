"""The Grafana dashboard's panels drawn from real Prometheus data, as a self-contained SVG grid of
small time series (no plotting library, like bench/plot.py).

The data comes from the real Prometheus integration test, which runs a worker through traffic, a
dead letter and a database outage while Prometheus scrapes it every second, then asks Prometheus
(``query_range``) for every query of compose/grafana/volunteer-dashboard.json:

    VOLUNTEER_PROMETHEUS_DUMP=/tmp/dashboard.json .venv/bin/python -m pytest \\
        tests/integration/observability/test_prometheus.py
    .venv/bin/python -m bench.dashboard_picture /tmp/dashboard.json docs/dashboard.svg
"""

from __future__ import annotations

import math
import re
import sys
from html import escape
from pathlib import Path
from typing import Any

import orjson

COLUMNS = 3
CELL_W, CELL_H = 320, 170
PAD_L, PAD_R, PAD_T, PAD_B = 46, 10, 24, 44
HEADER = 44
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
_LEGEND = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def _legend(template: str, labels: dict[str, str]) -> str:
    text = _LEGEND.sub(lambda m: labels.get(m.group(1), ""), template).strip()
    return text or ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "value"


def _fmt(value: float, unit: str) -> str:
    if unit == "bytes":
        return f"{value / 2**20:.0f} MiB"
    if unit == "s" and 0 < value < 1:
        return f"{value * 1000:.0f} ms"
    if value >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:.2g}" if value < 10 else f"{value:.0f}"


def series(panel: dict[str, Any]) -> list[tuple[str, list[tuple[float, float]]]]:
    """(legend, [(unix time, value)]) of every series of every query of ``panel``."""
    out = []
    for target in panel["targets"]:
        for result in target["result"]:
            points = [(float(t), float(v)) for t, v in result["values"] if math.isfinite(float(v))]
            if points:
                out.append((_legend(target["legend"], result["metric"]), points))
    return out


def _cell(panel: dict[str, Any], x0: float, y0: float, start: float, end: float) -> list[str]:
    unit = panel.get("unit", "")
    lines = series(panel)
    w, h = CELL_W - PAD_L - PAD_R, CELL_H - PAD_T - PAD_B
    out = [f'<text x="{x0 + 6}" y="{y0 + 15}" font-weight="bold">{escape(panel["title"])}</text>']
    top = max([v for _, pts in lines for _, v in pts] + [0.0])
    top = top * 1.15 if top > 0 else 1.0

    def sx(t: float) -> float:
        return x0 + PAD_L + (t - start) / max(end - start, 1) * w

    def sy(v: float) -> float:
        return y0 + PAD_T + h - v / top * h

    out.append(f'<rect x="{x0 + PAD_L}" y="{y0 + PAD_T}" width="{w}" height="{h}" fill="none" stroke="#bbb"/>')
    for frac in (0.0, 0.5, 1.0):
        v = top / 1.15 * frac if top != 1.0 else frac
        out.append(f'<text x="{x0 + PAD_L - 4}" y="{sy(v) + 4:.1f}" text-anchor="end" fill="#555">'
                   f'{escape(_fmt(v, unit))}</text>')
        out.append(f'<line x1="{x0 + PAD_L}" x2="{x0 + PAD_L + w}" y1="{sy(v):.1f}" y2="{sy(v):.1f}" stroke="#eee"/>')
    span = end - start
    step = next((s for s in (5, 10, 15, 30, 60, 300) if span / s <= 6), 600)
    for t in range(0, int(span) + 1, step):
        out.append(f'<text x="{sx(start + t):.1f}" y="{y0 + PAD_T + h + 13}" text-anchor="middle" fill="#555">{t}s</text>')
    if not lines:
        out.append(f'<text x="{x0 + PAD_L + w / 2}" y="{y0 + PAD_T + h / 2}" text-anchor="middle" fill="#999">'
                   'no data (nothing happened)</text>')
    legend_x = x0 + PAD_L
    per_row = 1 if len(lines) <= 3 and any(len(name) > 24 for name, _ in lines) else 2
    for i, (name, pts) in enumerate(lines[:6]):
        colour = COLOURS[i % len(COLOURS)]
        path = " ".join(f"{'M' if j == 0 or pts[j - 1][0] < t - 1.5 else 'L'}{sx(t):.1f},{sy(v):.1f}"
                        for j, (t, v) in enumerate(pts))
        out.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="1.4"/>')
        row, col = divmod(i, per_row)
        lx = legend_x + col * (w / per_row)
        ly = y0 + PAD_T + h + 26 + row * 11
        out.append(f'<rect x="{lx:.1f}" y="{ly - 7}" width="8" height="3" fill="{colour}"/>')
        out.append(f'<text x="{lx + 11:.1f}" y="{ly - 3}" font-size="9">{escape(name[:34] if per_row == 1 else name[:26])}</text>')
    return out


def render(dump: dict[str, Any], title: str, note: str) -> str:
    panels = dump["panels"]
    start = float(dump["start"])
    end = max([t for p in panels for _, pts in series(p) for t, _ in pts] + [start + 1])
    rows = math.ceil(len(panels) / COLUMNS)
    width, height = COLUMNS * CELL_W, HEADER + rows * CELL_H
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="10">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="8" y="18" font-size="14" font-weight="bold">{escape(title)}</text>',
           f'<text x="8" y="34" fill="#555">{escape(note)}</text>']
    for i, panel in enumerate(panels):
        row, col = divmod(i, COLUMNS)
        out += _cell(panel, col * CELL_W, HEADER + row * CELL_H, start, end)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    dump = orjson.loads(Path(argv[0]).read_bytes())
    note = ("one worker scraped every second: sample transcript, a malformed turn, hook requests, then a "
            "database outage and its recovery; x: seconds")
    Path(argv[1]).write_text(render(dump, "volunteer-stream dashboard, from a real run", note), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
