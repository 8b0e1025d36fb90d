"""What a sweep prints: one JSON object per setting, or a table with the best setting marked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from pipeline.core.types import ARMS
from pipeline.tuning.grid import Setting
from pipeline.tuning.scoring import Tally
from pipeline.tuning.sweep import Silence, SweepResult

SILENCES_SHOWN = 20


def silent_sessions(silences: Sequence[Silence]) -> list[dict[str, Any]]:
    """``[{"session_id", "turns": [...]}]`` in order of first appearance in the file."""
    by_session: dict[str, list[int]] = {}
    for silence in sorted(silences, key=lambda s: s.lineno):
        by_session.setdefault(silence.session_id, []).append(silence.turn)
    return [{"session_id": sid, "turns": turns} for sid, turns in by_session.items()]


def setting_rows(result: SweepResult, grid: Sequence[Setting]) -> list[dict[str, Any]]:
    """One ``--json`` object per setting: the knobs, counts, ratios (null without labels), per arm."""
    silent = silent_sessions(result.silences)
    rows = []
    for setting, tally in zip(grid, result.tallies, strict=True):
        rows.append({
            **setting.to_dict(),
            "sessions": result.sessions,
            **tally.to_dict(ARMS),
            "silent_turns": len(result.silences),
            "silent_sessions": silent,
        })
    return rows


def best_index(tallies: Sequence[Tally]) -> int | None:
    """The setting with the highest F1 (ties: higher precision, then the earlier row)."""
    scored = [(t.f1, t.precision or 0.0, -i) for i, t in enumerate(tallies) if t.f1 is not None]
    if not scored:
        return None
    return -max(scored)[2]


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _arm_cell(tally: Tally, arm: str) -> str:
    count = tally.pages_by_arm[arm]
    if not tally.labelled or not count:
        return str(count)
    figures = tally.arm_figures(arm)
    return f"{count} · {_ratio(figures['precision'])} · {_ratio(figures['recall'])}"


def _knob_columns(table: Table) -> None:
    table.add_column("", width=1)
    for header in ("min_conf", "pages", "window"):
        table.add_column(header, justify="right")


def _knob_cells(setting: Setting, marked: bool) -> list[str]:
    return ["★" if marked else "", f"{setting.min_confidence:g}", str(setting.max_pages), str(setting.window_turns)]


def sweep_table(result: SweepResult, grid: Sequence[Setting]) -> Table:
    """One row per setting, in grid order: the knobs, turns, pages, precision, recall, F1."""
    best = best_index(result.tallies)
    labelled = any(t.labelled for t in result.tallies)
    table = Table(header_style="bold")
    _knob_columns(table)
    for header in ("turns", "volunteered", *(("precision", "recall", "F1") if labelled else ())):
        table.add_column(header, justify="right")
    for index, (setting, tally) in enumerate(zip(grid, result.tallies, strict=True)):
        cells = [*_knob_cells(setting, index == best), str(tally.turns), str(tally.volunteered)]
        if labelled:
            cells += [_ratio(tally.precision), _ratio(tally.recall), _ratio(tally.f1)]
        table.add_row(*cells, style="bold" if index == best else None)
    return table


def arm_table(result: SweepResult, grid: Sequence[Setting]) -> Table:
    """Per setting and arm: pages volunteered, and with labels that arm's precision and recall share."""
    arms = [arm for arm in ARMS if any(t.pages_by_arm[arm] for t in result.tallies)]
    best = best_index(result.tallies)
    table = Table(header_style="bold")
    _knob_columns(table)
    for arm in arms:
        table.add_column(arm, justify="right")
    for index, (setting, tally) in enumerate(zip(grid, result.tallies, strict=True)):
        table.add_row(*_knob_cells(setting, index == best), *[_arm_cell(tally, arm) for arm in arms],
                      style="bold" if index == best else None)
    return table


def print_report(console: Console, result: SweepResult, grid: Sequence[Setting], *, jobs: int,
                 seconds: float) -> None:
    """The human report: header line, table, best setting, silences and input notes."""
    turns = result.tallies[0].turns if result.tallies else 0
    console.print(f"swept {len(grid)} setting(s) over {turns} turn(s) in {result.sessions} session(s)"
                  f" with {jobs} process(es) in {seconds:.1f} s", highlight=False)
    console.print(sweep_table(result, grid))
    if any(t.volunteered for t in result.tallies):
        labelled = any(t.labelled for t in result.tallies)
        console.print("per arm: pages · precision · recall" if labelled else "per arm: pages", highlight=False)
        console.print(arm_table(result, grid))
    best = best_index(result.tallies)
    if best is None:
        console.print("no labelled turns, so no precision or recall: add expected_slugs to the records "
                      "(docs/tuning.md)", highlight=False)
    else:
        tally = result.tallies[best]
        console.print(f"★ best F1 {_ratio(tally.f1)}: {grid[best].label()} (precision {_ratio(tally.precision)},"
                      f" recall {_ratio(tally.recall)})", highlight=False)
    if result.silences:
        sessions = silent_sessions(result.silences)
        console.print(f"{len(result.silences)} labelled turn(s) in {len(sessions)} session(s) expect pages but their "
                      "text gave the core no candidate at all (an extraction gap, or a label on the wrong turn):",
                      highlight=False, soft_wrap=True)
        shown = ", ".join(
            f"{s['session_id']} (turn {', '.join(str(t) for t in s['turns'])})" for s in sessions[:SILENCES_SHOWN]
        )
        more = len(sessions) - SILENCES_SHOWN
        console.print("  " + shown + (f", and {more} more session(s) (--json lists all)" if more > 0 else ""),
                      highlight=False, soft_wrap=True)
    notes = []
    if result.duplicates:
        notes.append(f"{result.duplicates} duplicate turn(s) ignored")
    if result.blank:
        notes.append(f"{result.blank} blank")
    if result.bad:
        notes.append(f"{result.bad} bad line(s)")
    if result.unscored_labels:
        notes.append(f"labels on {result.unscored_labels} line(s) that were not turns were not scored")
    if notes:
        console.print("; ".join(notes), highlight=False)
