"""The confidence gate (reference-behaviour.md §6, gbrain ``gateVolunteeredPointers``): pointers in, volunteered pages out.

Exclusions come first (session dedupe by slug, and slug prefixes), then the confidence is recomputed
from the arm plus the salience boost (the pointer's own confidence is ignored, so gating a gated set
is a no-op), then the threshold, then the cap. Option values are raw and clamped like the reference.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Final

from pipeline.core.brain import BrainIndex
from pipeline.core.jscompat import is_js_number
from pipeline.core.normalize import collapse_whitespace, normalize_alias
from pipeline.core.types import ARM_CONFIDENCE, Pointer, VolunteeredPage, new_page
from pipeline.core.window import WindowCandidate

DEFAULT_MAX_PAGES: Final = 3
MAX_PAGES_CAP: Final = 5
DEFAULT_MIN_CONFIDENCE: Final = 0.7
SALIENCE_BOOST: Final = 0.05
DEFAULT_WINDOW_TURNS: Final = 4
MAX_WINDOW_TURNS: Final = 64

_ARM_TEXT: Final = {
    "alias": "alias match",
    "title": "exact title match",
    "title-surname": "surname match",
    "cjk-title": "exact CJK title/slug match",
    "slug-suffix": "slug match",
}


def clamp_max_pages(raw: object) -> int:
    """Not a finite number, or < 1 (even 0.5) -> 3; otherwise floor, capped at 5."""
    if not is_js_number(raw) or not math.isfinite(raw) or raw < 1:
        return DEFAULT_MAX_PAGES
    return min(math.floor(raw), MAX_PAGES_CAP)


def clamp_min_confidence(raw: object) -> float:
    """A number in [0, 1] is used as given; anything else (NaN, 5, -1, missing) means 0.7."""
    if is_js_number(raw) and 0 <= raw <= 1:
        return float(raw)
    return DEFAULT_MIN_CONFIDENCE


def clamp_window_turns(raw: object) -> int:
    """Watch's rolling window: ``min(64, max(1, floor(x)))``; non-finite or missing -> 4."""
    if not is_js_number(raw) or not math.isfinite(raw):
        return DEFAULT_WINDOW_TURNS
    return min(MAX_WINDOW_TURNS, max(1, math.floor(raw)))


def candidates_by_norm(candidates: Iterable[WindowCandidate]) -> dict[str, WindowCandidate]:
    """norm -> candidate, first wins: how the gate joins a pointer back to its salience facts."""
    items = candidates if isinstance(candidates, list) else list(candidates)
    by_norm = {c.norm: c for c in items}
    if len(by_norm) == len(items) and "" not in by_norm:
        return by_norm  # the usual case: a merged window has one candidate per norm
    by_norm = {}
    for c in items:
        if c.norm and c.norm not in by_norm:
            by_norm[c.norm] = c
    return by_norm


def rationale_for(arm: str, display: str, cand: WindowCandidate | None, window_size: int) -> str:
    """Template text only: the arm with the matched label, then mention facts. Never free text."""
    arm_text = f'{_ARM_TEXT.get(arm, "slug match")} "{display}"'
    if cand is None:
        return arm_text
    parts = [arm_text]
    if cand.occurrences >= 2:
        parts.append(f"mentioned in {cand.occurrences} of last {window_size} turns")
    elif cand.in_newest_turn:
        parts.append("mentioned in the newest turn")
    if not cand.user_mention:
        parts.append("assistant-introduced")
    return "; ".join(parts)


def _synopsis_of(brain: BrainIndex, p: Pointer) -> str:
    """The synopsis of the live page ``p`` points at (``""`` for none, which no resolver pointer is)."""
    page = brain.live_page(p.source_id, p.slug)
    return brain.synopsis(page) if page is not None else ""


def gate(
    pointers: Iterable[Pointer],
    by_norm: Mapping[str, WindowCandidate],
    *,
    window_size: int,
    max_pages: object = None,
    min_confidence: object = None,
    exclude_slugs: Collection[str] = (),
    exclude_slug_prefixes: Sequence[str] = (),
    collapse_display: bool = True,
    brain: BrainIndex | None = None,
) -> list[VolunteeredPage]:
    """Walk pointers in resolver order; skip excluded, recompute confidence, threshold, cap.

    ``brain``: the pointers' pages are live pages of it, and their synopses are made here from it,
    for the pages let through only (the pointers' own are not read: see
    :func:`~pipeline.core.resolve.resolve_with_index`'s ``synopses``)."""
    cap = DEFAULT_MAX_PAGES if max_pages is None else clamp_max_pages(max_pages)  # None: the usual, unset
    threshold = DEFAULT_MIN_CONFIDENCE if min_confidence is None else clamp_min_confidence(min_confidence)
    prefixes = tuple(exclude_slug_prefixes)
    out: list[VolunteeredPage] = []
    for p in pointers:
        if p.slug in exclude_slugs or (prefixes and p.slug.startswith(prefixes)):
            continue
        cand = by_norm.get(p.matched_norm) if p.matched_norm else None
        if cand is None:
            cand = by_norm.get(normalize_alias(p.display))
        boost = SALIENCE_BOOST if cand is not None and (cand.occurrences >= 2 or cand.in_newest_turn) else 0
        confidence = min(0.99, ARM_CONFIDENCE[p.arm] + boost)
        if confidence < threshold:
            continue
        display = p.display
        if collapse_display:
            display = collapse_whitespace(display)
        out.append(new_page(p.slug, p.source_id, display, confidence, p.arm,
                            rationale_for(p.arm, display, cand, window_size),
                            p.synopsis if brain is None else _synopsis_of(brain, p)))
        if len(out) >= cap:
            break
    return out
