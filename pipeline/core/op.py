"""The one-shot op (reference-behaviour.md §8, gbrain ``volunteer_context``) and the shared decision over a window.

``decide`` is the whole pipeline over already-extracted turns; the op, the stream step and replay all
call it, so they cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Final

from pipeline.core.brain import BrainIndex
from pipeline.core.extract import Candidate, extract_candidates
from pipeline.core.gate import gate
from pipeline.core.jscompat import is_js_number
from pipeline.core.memo import Memo
from pipeline.core.normalize import JS_WHITESPACE
from pipeline.core.resolve import RESOLVER_POOL, could_resolve, resolve_with_index, turn_relevance
from pipeline.core.tally import DecisionTally
from pipeline.core.types import Pointer, VolunteeredPage
from pipeline.core.window import WindowCandidate, merge_window, merged_count, parse_window

WINDOW_REQUIRED: Final = "window is required unless stats: true"


class InvalidParams(ValueError):
    """The op's ``invalid_params`` error: a missing, non-string or blank window."""

    code: Final = "invalid_params"

    def __init__(self, message: str = WINDOW_REQUIRED) -> None:
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict[str, str]:
        return {"error": self.code, "message": self.message}


def decide(
    turns: Sequence[tuple[str, Sequence[Candidate]]],
    brain: BrainIndex,
    *,
    source_ids: Sequence[str],
    prior_context: str | None = None,
    max_pages: object = None,
    min_confidence: object = None,
    lexical_arms: bool = True,
    exclude_slugs: Collection[str] = (),
    exclude_slug_prefixes: Sequence[str] = (),
    collapse_display: bool = True,
    tally: DecisionTally | None = None,
    resolvable: bool | None = None,
    keep: AbstractSet[str] | None = None,
) -> list[VolunteeredPage]:
    """``volunteerContext`` over turns given as ``(role, cached candidates)``, oldest first.

    ``tally``, when given, counts candidates, pointers and drops (metrics); it never changes the result.
    ``resolvable``: the caller's :func:`could_resolve` of these turns, when it already knows it.
    ``keep``: the norms of these turns that can matter (the union of their
    :func:`~pipeline.core.resolve.turn_relevance`), so only those are merged and resolved.
    """
    if not turns or not source_ids:
        return []
    if resolvable is None:
        resolvable = could_resolve(turns, brain)
    if not resolvable:  # what the merge and the resolver would conclude, without running them
        if tally is not None:
            tally.record(merged_count(turns), (), exclude_slugs, ())
        return []
    if tally is None:  # a tally counts the merge, so it always runs it
        if _window_memo.rest_one():  # resting: a key would be built for nothing
            pointers, by_norm = _resolve_window(turns, brain, source_ids, prior_context, lexical_arms, keep)
        else:
            key = (brain.token, prior_context, lexical_arms, tuple(source_ids),
                   tuple([(role, id(cands)) for role, cands in turns]))
            hit = _window_memo.get(key)
            if hit is not None and all(a is b for a, (_role, b) in zip(hit[0], turns, strict=True)):
                pointers, by_norm = hit[1], hit[2]
            else:
                pointers, by_norm = _resolve_window(turns, brain, source_ids, prior_context, lexical_arms, keep)
                _window_memo.put(key, (tuple([cands for _role, cands in turns]), pointers, by_norm))
        if not pointers:
            return []
        return gate(pointers, by_norm, window_size=len(turns), max_pages=max_pages, min_confidence=min_confidence,
                    exclude_slugs=exclude_slugs, exclude_slug_prefixes=exclude_slug_prefixes,
                    collapse_display=collapse_display, brain=brain)
    candidates = merge_window(turns, keep)
    if not candidates:
        tally.record(0 if keep is None else merged_count(turns), (), exclude_slugs, ())
        return []
    pointers, by_norm = resolve_with_index(
        candidates,
        brain,
        source_ids,
        prior_context=prior_context,
        lexical_arms=lexical_arms,
        max_pointers=RESOLVER_POOL,
        synopses=False,
    )
    if not pointers:
        tally.record(len(candidates) if keep is None else merged_count(turns), (), exclude_slugs, ())
        return []
    pages = gate(
        pointers,
        by_norm,
        window_size=len(turns),
        max_pages=max_pages,
        min_confidence=min_confidence,
        exclude_slugs=exclude_slugs,
        exclude_slug_prefixes=exclude_slug_prefixes,
        collapse_display=collapse_display,
        brain=brain,
    )
    tally.record(len(candidates) if keep is None else merged_count(turns), pointers, exclude_slugs, pages)
    return pages


_window_memo: Final[Memo[tuple[object, ...], tuple[tuple[Sequence[Candidate], ...], list[Pointer],
                                                   dict[str, WindowCandidate]]]] = Memo(8192)
"""The resolver's answer per window: keyed by the brain, the options the resolver reads and the
identity of each turn's candidate list (kept alive by the entry, and compared on a hit, so an id is
never mistaken for a later list's). The lists are shared between turns of the same text (the memo
of :func:`~pipeline.core.extract.extract_candidates`), so a window of texts seen before in the same
order costs only the gate, which reads what differs per session (its surfaced slugs). The pointers
are kept without synopses: the gate makes those of the pages it lets through."""


def _resolve_window(turns: Sequence[tuple[str, Sequence[Candidate]]], brain: BrainIndex, source_ids: Sequence[str],
                    prior_context: str | None, lexical_arms: bool,
                    keep: AbstractSet[str] | None) -> tuple[list[Pointer], dict[str, WindowCandidate]]:
    candidates = merge_window(turns, keep)
    if not candidates:
        return [], {}
    return resolve_with_index(candidates, brain, source_ids, prior_context=prior_context, lexical_arms=lexical_arms,
                              max_pointers=RESOLVER_POOL, synopses=False)


def volunteer_context(
    window: object,
    brain: BrainIndex,
    *,
    source_ids: Sequence[str] = ("default",),
    prior_context: object = None,
    max_pages: object = None,
    min_confidence: object = None,
    lexical_arms: bool = True,
    exclude_slug_prefixes: Sequence[str] = (),
    collapse_display: bool = True,
    exclude_slugs: Collection[str] = (),
) -> dict[str, Any]:
    """The op: parse the window, decide, return ``{"pages": [...], "count": n, "window_turns": n}``.

    Raw option values are forwarded only when they have the reference's type (a string prior
    context, numeric limits) and are clamped by the gate. Raises :class:`InvalidParams` for a
    missing, non-string or whitespace-only window.
    """
    if not isinstance(window, str) or not window.strip(JS_WHITESPACE):
        raise InvalidParams()
    turns = parse_window(window)
    cached = [(role, extract_candidates(text)) for role, text in turns]
    # What the stream does per turn: each turn's relevant norms (memoised per candidate list), so the
    # merge and the resolver handle only the norms that can matter. Merged whole, an op window's
    # weak words were most of its merge and of the resolver's loops; whether it is live comes with it.
    live = False
    relevant: list[frozenset[str]] = []
    for _role, cands in cached:
        turn_live, norms = turn_relevance(cands, brain)
        if turn_live:
            live = True
        relevant.append(norms)
    pages = decide(
        cached,
        brain,
        resolvable=live,
        keep=frozenset().union(*relevant) if live else None,
        source_ids=source_ids,
        prior_context=prior_context if isinstance(prior_context, str) else None,
        max_pages=max_pages if is_js_number(max_pages) else None,
        min_confidence=min_confidence if is_js_number(min_confidence) else None,
        lexical_arms=lexical_arms,
        exclude_slugs=exclude_slugs,
        exclude_slug_prefixes=exclude_slug_prefixes,
        collapse_display=collapse_display,
    )
    return {"pages": [p.to_dict() for p in pages], "count": len(pages), "window_turns": len(turns)}
