"""Human rendering shared by ``context``, ``replay`` and ``watch`` (reference-behaviour.md §7.3, gbrain ``formatResult``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.core.jscompat import js_number_str, js_to_fixed
from pipeline.core.types import VolunteeredPage

NOTHING_VOLUNTEERED = "Nothing volunteered (no entity cleared the confidence gate).\n"


def format_page(page: VolunteeredPage | Mapping[str, Any]) -> str:
    """``<display> → <slug> (<confidence, 2 decimals>, <arm>) — <rationale>`` [+ ``\\n    <synopsis>``]."""
    p = page.to_dict() if isinstance(page, VolunteeredPage) else page
    line = f"{p['display']} → {p['slug']} ({js_to_fixed(float(p['confidence']), 2)}, {p['arm']}) — {p['rationale']}"
    synopsis = p.get("synopsis") or ""
    return f"{line}\n    {synopsis}" if synopsis else line


def format_stats(result: Mapping[str, Any]) -> str:
    """The ``--stats`` summary: header, totals, one line per arm/channel (precision as a JS number)."""
    lines = [
        f"volunteered-context precision — last {result['days']} day(s) ({result['note']})",
        f"total: {result['total_volunteered']} volunteered, {result['total_used']} used",
    ]
    for row in result["by_arm"]:
        lines.append(
            f"  {row['match_arm']}/{row['channel']}: {row['used']}/{row['volunteered']} used"
            f" (precision {js_number_str(row['precision'])})"
        )
    if not result["by_arm"]:
        lines.append("  (no volunteer events in the window)")
    return "\n".join(lines) + "\n"


def format_result(result: Mapping[str, Any]) -> str:
    """An op result (or a stats result) as the reference CLI prints it, newline-terminated."""
    if result.get("approximate") is True and isinstance(result.get("by_arm"), list):
        return format_stats(result)
    pages = result.get("pages") or []
    if not pages:
        return NOTHING_VOLUNTEERED
    return "\n".join(format_page(p) for p in pages) + "\n"
