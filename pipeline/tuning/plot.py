"""``--plot FILE``: precision and recall against ``min_confidence`` as one self-contained page.

Pure string building (inline SVG, no script, no web fonts, nothing fetched), so the file opens
offline and can be attached to a ticket. One line per combination of the other knobs
(``max_pages``, ``window_turns``); every point carries its figures as a tooltip and as ``data-*``
attributes, and the page repeats them in a table. The best-F1 setting is ringed.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.tuning.grid import Setting
from pipeline.tuning.report import best_index
from pipeline.tuning.scoring import Tally

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#7f7f7f", "#bcbd22")
DASHES = ("", "6 3", "2 3", "8 3 2 3")
PANEL_W, PANEL_H = 420, 300
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 56, 16, 34, 44
SUFFIXES = (".html", ".htm", ".svg")


class PlotError(ValueError):
    """The plot cannot be written as asked (e.g. an unsupported file type)."""


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    title: str
    value: Callable[[Tally], float | None]
    unit_range: bool  # a ratio in [0, 1]


PRECISION = Metric("precision", "Precision", lambda t: t.precision, True)
RECALL = Metric("recall", "Recall", lambda t: t.recall, True)
PAGES_PER_TURN = Metric("pages_per_turn", "Pages volunteered per turn",
                        lambda t: t.volunteered / t.turns if t.turns else None, False)


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _num(value: float) -> str:
    return f"{value:.4g}"


def _nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high]."""
    span = high - low if high > low else 1.0
    raw = span / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.floor(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        if value >= low - step * 1e-9:
            ticks.append(round(value, 10))
        value += step
    return ticks


def _y_range(values: Sequence[float], unit: bool) -> tuple[float, float]:
    if not values:
        return (0.0, 1.0)
    low, high = min(values), max(values)
    if unit:  # a ratio: zoom in, but on round tenths and never above 1
        low = max(0.0, math.floor((low - 0.02) * 10) / 10)
        high = min(1.0, math.ceil((high + 0.02) * 10) / 10)
        return (low, high) if high > low else (max(0.0, low - 0.1), min(1.0, high + 0.1))
    pad = (high - low) * 0.1 or max(abs(high) * 0.1, 0.1)
    return (max(0.0, low - pad), high + pad)


def _series(grid: Sequence[Setting]) -> list[tuple[str, list[int]]]:
    """(label, indices into grid sorted by min_confidence) per (max_pages, window_turns) combination."""
    groups: dict[tuple[int, int], list[int]] = {}
    for index, setting in enumerate(grid):
        groups.setdefault((setting.max_pages, setting.window_turns), []).append(index)
    return [
        (f"max_pages={pages} window_turns={window}", sorted(indices, key=lambda i: grid[i].min_confidence))
        for (pages, window), indices in groups.items()
    ]


def _style(number: int, count: int) -> tuple[str, str, float, float]:
    """(colour, dash, line width, point radius) of series ``number``. Earlier series are drawn wider
    and underneath, so series with identical figures stay visible as nested lines."""
    color = PALETTE[number % len(PALETTE)]
    dash = DASHES[(number // len(PALETTE)) % len(DASHES)]
    nesting = min(count - 1 - number, 3)
    return color, dash, 2.0 + 2.2 * nesting, 3.5 + 1.4 * nesting


def _panel(metric: Metric, grid: Sequence[Setting], tallies: Sequence[Tally], series: list[tuple[str, list[int]]],
           x0: float, best: int | None) -> str:
    xs = [s.min_confidence for s in grid]
    x_low, x_high = min(xs), max(xs)
    if x_high == x_low:
        x_low, x_high = x_low - 0.05, x_high + 0.05
    values = [v for v in (metric.value(t) for t in tallies) if v is not None]
    y_low, y_high = _y_range(values, metric.unit_range)
    plot_w = PANEL_W - MARGIN_L - MARGIN_R
    plot_h = PANEL_H - MARGIN_T - MARGIN_B

    def px(x: float) -> float:
        return x0 + MARGIN_L + (x - x_low) / (x_high - x_low) * plot_w

    def py(y: float) -> float:
        return MARGIN_T + plot_h - (y - y_low) / ((y_high - y_low) or 1.0) * plot_h

    out = [f'<g class="panel" data-metric="{metric.name}">',
           f'<text x="{x0 + MARGIN_L}" y="20" class="ptitle">{_esc(metric.title)}</text>',
           f'<rect x="{x0 + MARGIN_L}" y="{MARGIN_T}" width="{plot_w}" height="{plot_h}" class="frame"/>']
    for tick in _nice_ticks(y_low, y_high):
        y = py(tick)
        out.append(f'<line x1="{x0 + MARGIN_L}" x2="{x0 + MARGIN_L + plot_w}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        out.append(f'<text x="{x0 + MARGIN_L - 6}" y="{y + 4:.1f}" class="ytick">{_num(tick)}</text>')
    for tick in sorted(set(xs)):
        x = px(tick)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{MARGIN_T}" y2="{MARGIN_T + plot_h}" class="grid"/>')
        out.append(f'<text x="{x:.1f}" y="{MARGIN_T + plot_h + 16}" class="xtick">{_num(tick)}</text>')
    out.append(f'<text x="{x0 + MARGIN_L + plot_w / 2}" y="{PANEL_H - 6}" class="axis">min_confidence</text>')
    ring = ""
    for number, (label, indices) in enumerate(series):
        color, dash, width, radius = _style(number, len(series))
        points = [(grid[i].min_confidence, metric.value(tallies[i]), i) for i in indices]
        drawn = [(x, y, i) for x, y, i in points if y is not None]
        if len(drawn) > 1:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y, _ in drawn)
            dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="{width}"'
                       f' stroke-linejoin="round"{dash_attr}/>')
        for x, y, i in drawn:
            tally = tallies[i]
            tip = (f"{grid[i].label()}\n{metric.title}: {_num(y)}\nprecision {tally.precision}, "
                   f"recall {tally.recall}, volunteered {tally.volunteered}")
            out.append(
                f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="{radius}" fill="{color}" class="point" '
                f'data-series="{_esc(label)}" data-min-confidence="{x!r}" data-max-pages="{grid[i].max_pages}" '
                f'data-window-turns="{grid[i].window_turns}" data-{metric.name.replace("_", "-")}="{y!r}">'
                f"<title>{_esc(tip)}</title></circle>"
            )
            if i == best:
                ring = f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="{radius + 5}" class="best"/>'
    out.append(ring)  # last, so no later line covers it
    out.append("</g>")
    return "\n".join(out)


def render_svg(grid: Sequence[Setting], tallies: Sequence[Tally]) -> str:
    """The panels (precision and recall; pages per turn without labels) and a legend, as one SVG."""
    labelled = any(t.labelled for t in tallies)
    metrics = [PRECISION, RECALL] if labelled else [PAGES_PER_TURN]
    series = _series(grid)
    best = best_index(tallies)
    row_h = 18 if len(series) == 1 else 26
    legend_rows = len(series) + (1 if best is not None else 0) + (1 if len(series) > 1 else 0)
    width = PANEL_W * len(metrics)
    height = PANEL_H + row_h * legend_rows + 12
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">',
        "<style>.frame{fill:#fff;stroke:#888}.grid{stroke:#e3e3e3}.ptitle{font-size:14px;font-weight:bold}"
        ".ytick{text-anchor:end;fill:#444}.xtick{text-anchor:middle;fill:#444}.axis{text-anchor:middle;fill:#222}"
        ".best{fill:none;stroke:#000;stroke-width:1.5}.legend{fill:#222}.note{fill:#666;font-size:11px}</style>",
        f'<rect width="{width}" height="{height}" fill="#fff"/>',
    ]
    parts += [_panel(metric, grid, tallies, series, PANEL_W * n, best) for n, metric in enumerate(metrics)]
    y = PANEL_H + 14
    for number, (label, _) in enumerate(series):
        color, dash, line_w, radius = _style(number, len(series))
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(f'<line x1="{MARGIN_L}" x2="{MARGIN_L + 28}" y1="{y - 4}" y2="{y - 4}" stroke="{color}" '
                     f'stroke-width="{line_w}"{dash_attr}/><circle cx="{MARGIN_L + 14}" cy="{y - 4}" r="{radius}" '
                     f'fill="{color}"/><text x="{MARGIN_L + 40}" y="{y}" class="legend">{_esc(label)}</text>')
        y += row_h
    if best is not None:
        parts.append(f'<circle cx="{MARGIN_L + 14}" cy="{y - 4}" r="8" class="best"/>'
                     f'<text x="{MARGIN_L + 40}" y="{y}" class="legend">best F1: {_esc(grid[best].label())}</text>')
        y += row_h
    if len(series) > 1:
        parts.append(f'<text x="{MARGIN_L}" y="{y}" class="note">Equal lines are drawn nested: earlier ones wider, '
                     "underneath.</text>")
    parts.append("</svg>")
    return "\n".join(parts)


def _cell(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def render_html(grid: Sequence[Setting], tallies: Sequence[Tally], *, title: str, subtitle: str) -> str:
    """A page with the SVG and a table of every point (the same figures as ``--json``)."""
    best = best_index(tallies)
    rows = "\n".join(
        f'<tr{" class=best" if i == best else ""}><td>{s.min_confidence:g}</td><td>{s.max_pages}</td>'
        f"<td>{s.window_turns}</td><td>{t.turns}</td><td>{t.volunteered}</td><td>{_cell(t.precision)}</td>"
        f"<td>{_cell(t.recall)}</td><td>{_cell(t.f1)}</td></tr>"
        for i, (s, t) in enumerate(zip(grid, tallies, strict=True))
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title>
<style>body{{font-family:"DejaVu Sans",Helvetica,Arial,sans-serif;margin:24px;color:#222}}
h1{{font-size:18px;margin:0 0 4px}}p{{margin:0 0 16px;color:#555}}
table{{border-collapse:collapse;margin-top:16px;font-size:13px}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}
tr.best{{font-weight:bold;background:#f3f3f3}}</style></head>
<body><h1>{_esc(title)}</h1><p>{_esc(subtitle)}</p>
{render_svg(grid, tallies)}
<table><thead><tr><th>min_confidence</th><th>max_pages</th><th>window_turns</th><th>turns</th>
<th>volunteered</th><th>precision</th><th>recall</th><th>F1</th></tr></thead><tbody>
{rows}
</tbody></table></body></html>
"""


def check_plot_path(path: str) -> None:
    """Refuse a file type we cannot write before spending minutes on the sweep."""
    if Path(path).suffix.lower() not in SUFFIXES:
        raise PlotError(f"--plot {path}: write an .html page or an .svg image (got {Path(path).suffix or 'no suffix'})")


def write_plot(path: str, grid: Sequence[Setting], tallies: Sequence[Tally], *, title: str, subtitle: str) -> None:
    """``.svg`` gets the bare image, ``.html`` / ``.htm`` the page with the table."""
    check_plot_path(path)
    if Path(path).suffix.lower() == ".svg":
        text = '<?xml version="1.0" encoding="UTF-8"?>\n' + render_svg(grid, tallies) + "\n"
    else:
        text = render_html(grid, tallies, title=title, subtitle=subtitle)
    Path(path).write_text(text, encoding="utf-8")
