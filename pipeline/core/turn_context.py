"""The hook lane's turn context: reflex pointers first, then volunteered pages (docs/reference-behaviour.md §13.1).

A harness prompt gets two kinds of items, computed over the same window:

1. **Pointers**: the resolver's pointers for the window (same candidates, arms and order as the
   volunteer path), with slug-only suppression of what the session was already given, capped at
   ``reflex_max_pointers`` (default 3) and **no confidence gate**: a slug-suffix match (0.6) can be a
   pointer. Each carries its arm's *base* confidence and the reflex rationale ``<arm> match
   "<display>"`` (§10, what the reference logs for pointers).
2. **Pages**: the ordinary volunteer gate (threshold, boost, ``max_pages``) over the resolver pool
   of 10, with the pointer slugs excluded, so a turn naming four or five entities gets all of them
   at once: 3 pointers and 1-2 pages.

Both are returned as :class:`VolunteeredPage` records (the record the events table and the
``volunteered`` topic already carry). Pure: built on the public resolver and gate.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from pipeline.core.brain import BrainIndex
from pipeline.core.extract import Candidate
from pipeline.core.gate import gate
from pipeline.core.jscompat import is_js_number
from pipeline.core.normalize import collapse_whitespace
from pipeline.core.resolve import RESOLVER_POOL, resolve_with_index
from pipeline.core.tally import DecisionTally
from pipeline.core.types import Pointer, VolunteeredPage, new_page
from pipeline.core.window import WindowCandidate, merge_window

__all__ = [
    "DEFAULT_REFLEX_MAX_POINTERS",
    "TurnContext",
    "clamp_reflex_max_pointers",
    "reflex_pointers",
    "reflex_rationale",
    "turn_context",
]

DEFAULT_REFLEX_MAX_POINTERS = 3
"""The reference's ``retrieval_reflex_max_pointers``."""

MAX_REFLEX_POINTERS = RESOLVER_POOL
"""Upper bound of the pointer cap: the resolver pool of the volunteer path."""


def clamp_reflex_max_pointers(raw: object) -> int:
    """Not a finite number, or < 1 -> 3; otherwise floor, capped at 10 (like ``max_pages``' clamp)."""
    if not is_js_number(raw) or not math.isfinite(raw) or raw < 1:
        return DEFAULT_REFLEX_MAX_POINTERS
    return min(math.floor(raw), MAX_REFLEX_POINTERS)


def reflex_rationale(arm: str, display: str) -> str:
    """``<arm> match "<display>"``, e.g. ``title match "Alice Example"`` (the reference's reflex text)."""
    return f'{arm} match "{display}"'


@dataclass(frozen=True, slots=True)
class TurnContext:
    """What one harness prompt is given: ``pointers`` (reflex) then ``pages`` (volunteered)."""

    pointers: list[VolunteeredPage]
    pages: list[VolunteeredPage]

    @property
    def slugs(self) -> list[str]:
        return [p.slug for p in self.pointers] + [p.slug for p in self.pages]


def _walk(
    turns: Sequence[tuple[str, Sequence[Candidate]]],
    brain: BrainIndex,
    source_ids: Sequence[str],
    pool: int,
    lexical_arms: bool,
    exclude_slugs: Collection[str],
) -> tuple[int, list[Pointer], dict[str, WindowCandidate]]:
    """``(candidates, resolver pointers in order, norm map)``: enough pointers that ``pool`` of them
    survive the exclusion (a slug can appear once per source)."""
    if not turns or not source_ids:
        return 0, [], {}
    candidates = merge_window(turns)
    if not candidates:
        return 0, [], {}
    wanted = pool + len(exclude_slugs) * len(source_ids)
    pointers, by_norm = resolve_with_index(candidates, brain, source_ids, lexical_arms=lexical_arms,
                                           max_pointers=wanted)
    return len(candidates), pointers, by_norm


def _as_pointers(resolved: Sequence[Pointer], cap: int, exclude_slugs: Collection[str],
                 exclude_slug_prefixes: Sequence[str], collapse_display: bool) -> list[VolunteeredPage]:
    prefixes = tuple(exclude_slug_prefixes)
    out: list[VolunteeredPage] = []
    for p in resolved:
        if len(out) >= cap:
            break
        if p.slug in exclude_slugs or (prefixes and p.slug.startswith(prefixes)):
            continue
        display = p.display
        if collapse_display:
            display = collapse_whitespace(display)
        out.append(new_page(p.slug, p.source_id, display, p.confidence, p.arm, reflex_rationale(p.arm, display),
                            p.synopsis))
    return out


def reflex_pointers(
    turns: Sequence[tuple[str, Sequence[Candidate]]],
    brain: BrainIndex,
    *,
    source_ids: Sequence[str],
    max_pointers: object = DEFAULT_REFLEX_MAX_POINTERS,
    lexical_arms: bool = True,
    exclude_slugs: Collection[str] = (),
    exclude_slug_prefixes: Sequence[str] = (),
    collapse_display: bool = True,
) -> list[VolunteeredPage]:
    """The window's resolver pointers in resolver order, minus excluded slugs, capped; no gate.

    Suppression is by slug only and comes before the cap, as the reference suppresses inside the
    resolver's walk (§5.5), so excluded slugs never crowd out the cap.
    """
    cap = clamp_reflex_max_pointers(max_pointers)
    _, resolved, _ = _walk(turns, brain, source_ids, cap, lexical_arms, exclude_slugs)
    return _as_pointers(resolved, cap, exclude_slugs, exclude_slug_prefixes, collapse_display)


def turn_context(
    turns: Sequence[tuple[str, Sequence[Candidate]]],
    brain: BrainIndex,
    *,
    source_ids: Sequence[str],
    max_pointers: object = DEFAULT_REFLEX_MAX_POINTERS,
    max_pages: object = None,
    min_confidence: object = None,
    lexical_arms: bool = True,
    exclude_slugs: Collection[str] | Mapping[str, int] = (),
    exclude_slug_prefixes: Sequence[str] = (),
    collapse_display: bool = True,
    tally: DecisionTally | None = None,
) -> TurnContext:
    """Pointers, then the volunteer gate over the resolver pool with the pointer slugs excluded.

    Like the reference hook lane, the slugs already given are suppressed inside the resolver walk
    for both arms (before the pointer cap and before the pool of 10 the gate sees); the pointer
    slugs of this turn are then excluded by the gate, before its threshold and cap (§13.1, §6).
    One resolution serves both arms: the pool is a prefix of the same walk.
    """
    cap = clamp_reflex_max_pointers(max_pointers)
    count, resolved, by_norm = _walk(turns, brain, source_ids, max(cap, RESOLVER_POOL), lexical_arms,
                                     exclude_slugs)
    if not resolved:
        if tally is not None and count:
            tally.record(count, (), exclude_slugs, ())
        return TurnContext([], [])
    pointers = _as_pointers(resolved, cap, exclude_slugs, exclude_slug_prefixes, collapse_display)
    walked: list[Pointer] = []  # the reference's walk: suppressed entries skipped until the pool is full
    kept = 0
    for p in resolved:
        if kept >= RESOLVER_POOL:
            break
        walked.append(p)
        if p.slug not in exclude_slugs:
            kept += 1
    pool = [p for p in walked if p.slug not in exclude_slugs]
    pointer_slugs = {p.slug for p in pointers}
    pages = gate(pool, by_norm, window_size=len(turns), max_pages=max_pages, min_confidence=min_confidence,
                 exclude_slugs=pointer_slugs, exclude_slug_prefixes=exclude_slug_prefixes,
                 collapse_display=collapse_display)
    if tally is not None:
        tally.record(count, walked, {*exclude_slugs, *pointer_slugs}, pages)
    return TurnContext(pointers, pages)
