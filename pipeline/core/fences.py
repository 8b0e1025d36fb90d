"""Privacy fences in page bodies (reference-behaviour.md §7.2 steps 3-4): takes removed, facts kept world-only.

A page body may carry a takes table and a facts table between HTML-comment markers. Neither may
leak into a synopsis: takes are cut out whole; the facts table is parsed and re-rendered with only
its ``world`` rows, exactly as gbrain's ``stripFactsFence(body, {keepVisibility: ['world']})`` does
(which is why an empty re-rendered header can become a synopsis, reference-behaviour.md §16.16).

The reference strips only the *first* fence of each kind, and only when it is closed: a second
takes fence, or a takes fence whose end marker is missing, reaches the synopsis whole. Synopses use
:func:`strip_every_takes_fence` and :func:`strip_every_facts_fence_world` instead, which strip every
fence and treat an unterminated one as running to the end of the body: a deliberate divergence
(docs/decision-core.md, "Deliberate divergences from the reference"). The reference's first-fence
functions stay here, tested, as the reference's behaviour.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.core.jscompat import js_number_str, js_parse_float, js_parse_int, js_to_fixed
from pipeline.core.normalize import JS_WHITESPACE

TAKES_BEGIN = "<!--- gbrain:takes:begin -->"
TAKES_END = "<!--- gbrain:takes:end -->"
FACTS_BEGIN = "<!--- gbrain:facts:begin -->"
FACTS_END = "<!--- gbrain:facts:end -->"

_KINDS = frozenset({"event", "preference", "commitment", "belief", "fact"})
_VISIBILITIES = frozenset({"private", "world"})
_NOTABILITIES = frozenset({"high", "medium", "low"})
_SEPARATOR_CELL = re.compile(f"[-:{re.escape(JS_WHITESPACE)}]+")
_STRUCK = re.compile(r"~~([^\n\r\u2028\u2029]+?)~~\Z")

HEADER_10 = "| # | claim | kind | confidence | visibility | notability | valid_from | valid_until | source | context |"
SEPARATOR_10 = "|---|-------|------|------------|------------|------------|------------|-------------|--------|---------|"
HEADER_14 = HEADER_10 + " claim_metric | claim_value | claim_unit | claim_period |"
SEPARATOR_14 = SEPARATOR_10 + "--------------|-------------|------------|--------------|"


def strip_takes_fence(body: str) -> str:
    """Remove the first takes fence, markers included; unchanged if either marker is missing."""
    begin = body.find(TAKES_BEGIN)
    if begin == -1:
        return body
    end = body.find(TAKES_END, begin + len(TAKES_BEGIN))
    if end == -1:
        return body
    return body[:begin] + body[end + len(TAKES_END) :]


def _replace_every_fence(body: str, begin_marker: str, end_marker: str, keep: Callable[[str], str]) -> str:
    """Every ``begin … end`` fence replaced by ``keep(fence)``; an unterminated one is cut to the end."""
    out: list[str] = []
    pos = 0
    while True:
        begin = body.find(begin_marker, pos)
        if begin == -1:
            out.append(body[pos:])
            return "".join(out)
        out.append(body[pos:begin])
        end = body.find(end_marker, begin + len(begin_marker))
        if end == -1:
            return "".join(out)
        out.append(keep(body[begin : end + len(end_marker)]))
        pos = end + len(end_marker)


def strip_every_takes_fence(body: str) -> str:
    """Remove every takes fence, markers included; an unterminated one runs to the end of the body."""
    return _replace_every_fence(body, TAKES_BEGIN, TAKES_END, lambda fence: "")


def _trim(text: str) -> str:
    return text.strip(JS_WHITESPACE)


def parse_row_cells(line: str) -> list[str] | None:
    """Cells of a ``| a | b |`` row (``\\|`` is an escaped pipe), or ``None`` if not a table row."""
    trimmed = _trim(line)
    if not trimmed.startswith("|") or trimmed.find("|", 1) == -1:
        return None
    inner = trimmed[1:]
    if inner.endswith("|"):
        inner = inner[:-1]
    if "\\|" not in inner:  # no escaped pipe (most rows): every pipe ends a cell
        return [_trim(cell) for cell in inner.split("|")]
    return _escaped_row_cells(inner)


def _escaped_row_cells(inner: str) -> list[str]:
    """:func:`parse_row_cells` of a row's ``inner`` text, character by character: a ``\\|`` is a
    pipe inside its cell. (This walk was two thirds of parsing a facts table, hence the split for
    the rows without an escaped pipe, which ``tests/unit/core/test_properties.py`` compares with it.)"""
    cells: list[str] = []
    cell: list[str] = []
    i = 0
    while i < len(inner):
        ch = inner[i]
        if ch == "\\" and inner[i + 1 : i + 2] == "|":
            cell.append("|")
            i += 2
            continue
        if ch == "|":
            cells.append(_trim("".join(cell)))
            cell = []
        else:
            cell.append(ch)
        i += 1
    cells.append(_trim("".join(cell)))
    return cells


def _string_cell(raw: str) -> str | None:
    trimmed = _trim(raw)
    return trimmed or None


def _escape_cell(text: str) -> str:
    return text.replace("|", "\\|")


@dataclass(slots=True)
class Fact:
    """One parsed facts row; only the fields the re-render prints."""

    row_num: float
    claim: str
    kind: str
    confidence: float
    visibility: str
    notability: str
    valid_from: str | None
    valid_until: str | None
    source: str | None
    context: str | None
    active: bool
    claim_metric: str | None
    claim_value: float | None
    claim_unit: str | None
    claim_period: str | None

    @property
    def typed(self) -> bool:
        return any(
            v is not None for v in (self.claim_metric, self.claim_value, self.claim_unit, self.claim_period)
        )


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def parse_facts(body: str) -> list[Fact]:
    """The rows of the first facts fence; malformed rows are skipped, as upstream does."""
    begin = body.find(FACTS_BEGIN)
    end = body.find(FACTS_END, begin + len(FACTS_BEGIN))
    if begin == -1 or end == -1 or end < begin:
        return []
    facts: list[Fact] = []
    saw_header = False
    seen_rows: set[float] = set()
    for line in body[begin + len(FACTS_BEGIN) : end].split("\n"):
        if not _trim(line):
            continue
        cells = parse_row_cells(line)
        if cells is None:
            continue
        if not saw_header:
            lower = [c.lower() for c in cells]
            if "claim" in lower and "kind" in lower:
                saw_header = True
            continue
        if cells and all(_SEPARATOR_CELL.fullmatch(c) for c in cells):
            continue
        if len(cells) < 9:
            continue
        cells = cells + [""] * (14 - len(cells))
        row_num = js_parse_int(cells[0])
        if math.isnan(row_num) or row_num <= 0 or row_num in seen_rows:
            continue
        seen_rows.add(row_num)
        kind, visibility, notability = (_trim(cells[i]).lower() for i in (2, 4, 5))
        if kind not in _KINDS or visibility not in _VISIBILITIES or notability not in _NOTABILITIES:
            continue
        confidence = _finite_or_none(js_parse_float(_trim(cells[3]))) if _trim(cells[3]) else None
        if confidence is None:
            continue
        struck = _STRUCK.match(cells[1])
        claim = _trim(struck.group(1)) if struck else cells[1]
        value_text = _trim(cells[11]).replace(",", "")
        facts.append(
            Fact(
                row_num=row_num,
                claim=claim,
                kind=kind,
                confidence=confidence,
                visibility=visibility,
                notability=notability,
                valid_from=_string_cell(cells[6]),
                valid_until=_string_cell(cells[7]),
                source=_string_cell(cells[8]),
                context=_string_cell(cells[9]),
                active=struck is None,
                claim_metric=_string_cell(cells[10]),
                claim_value=_finite_or_none(js_parse_float(value_text)) if value_text else None,
                claim_unit=_string_cell(cells[12]),
                claim_period=_string_cell(cells[13]),
            )
        )
    return facts


def _format_confidence(value: float) -> str:
    if value.is_integer():
        return js_to_fixed(value, 1)
    return js_number_str(float(js_to_fixed(value, 2)))


def render_facts_table(facts: list[Fact]) -> str:
    """The fence as gbrain renders it: 14 columns when any row has a typed-claim field, else 10."""
    typed = any(f.typed for f in facts)
    lines = ["", HEADER_14 if typed else HEADER_10, SEPARATOR_14 if typed else SEPARATOR_10]
    for f in facts:
        claim = f.claim if f.active else f"~~{f.claim}~~"
        row = (
            f"| {js_number_str(f.row_num)} | {_escape_cell(claim)} | {f.kind} | {_format_confidence(f.confidence)}"
            f" | {f.visibility} | {f.notability} | {_escape_cell(f.valid_from or '')}"
            f" | {_escape_cell(f.valid_until or '')} | {_escape_cell(f.source or '')}"
            f" | {_escape_cell(f.context or '')} |"
        )
        if typed:
            value = "" if f.claim_value is None else js_number_str(f.claim_value)
            row += (
                f" {_escape_cell(f.claim_metric or '')} | {_escape_cell(value)} | {_escape_cell(f.claim_unit or '')}"
                f" | {_escape_cell(f.claim_period or '')} |"
            )
        lines.append(row)
    lines.append("")
    return FACTS_BEGIN + "\n".join(lines) + FACTS_END


def strip_facts_fence_world(body: str) -> str:
    """Replace the first facts fence by its world-only re-rendering; unchanged if markers are missing."""
    begin = body.find(FACTS_BEGIN)
    if begin == -1:
        return body
    end = body.find(FACTS_END, begin + len(FACTS_BEGIN))
    if end == -1:
        return body
    kept = [f for f in parse_facts(body) if f.visibility == "world"]
    return body[:begin] + render_facts_table(kept) + body[end + len(FACTS_END) :]


def strip_every_facts_fence_world(body: str) -> str:
    """Every facts fence replaced by its world-only re-rendering; an unterminated one (whose rows
    cannot be told from the prose after it) is cut to the end of the body."""
    return _replace_every_fence(
        body, FACTS_BEGIN, FACTS_END,
        lambda fence: render_facts_table([f for f in parse_facts(fence) if f.visibility == "world"]),
    )
