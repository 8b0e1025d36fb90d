"""Turns of a conversation window and their merged, salience-ordered candidates (reference-behaviour.md §3, §4.2, §9).

``parse_window`` is the op's lenient ``role: text`` grammar (continuation lines allowed);
``parse_watch_line`` is the streaming grammar where every line is its own turn. ``merge_window``
combines the cached per-turn candidate lists of a window exactly like gbrain's
``extractCandidatesFromWindow``, without re-reading any text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Any, NamedTuple

from pipeline.core.extract import MAX_CANDIDATES, MAX_WEAK_CANDIDATES, Candidate, extract_candidates
from pipeline.core.jscompat import JS_LINE_TERMINATORS, JS_WS
from pipeline.core.normalize import JS_WHITESPACE

TURN_PREFIX_RE = re.compile(
    f"([Uu][Ss][Ee][Rr]|[Aa][Ss][Ss][Ii][Ss][Tt][Aa][Nn][Tt])[{JS_WS}]*:[{JS_WS}]?([^{JS_LINE_TERMINATORS}]*)\\Z"
)
"""``/^(user|assistant)\\s*:\\s?(.*)$/i`` with JS meaning: ASCII-only case folding, ``.`` stops at any
line terminator, ``$`` is the end of the input. Use with ``.match``."""

_LINE_SPLIT_RE = re.compile(r"\r?\n")

ROLES = ("user", "assistant")


def parse_window(text: object) -> list[tuple[str, str]]:
    """``role: text`` lines -> ``[(role, text)]`` oldest first; unprefixed lines continue a turn."""
    if not isinstance(text, str) or not text.strip(JS_WHITESPACE):
        return []
    turns: list[list[str]] = []
    current: list[str] | None = None
    for raw_line in _LINE_SPLIT_RE.split(text):
        m = TURN_PREFIX_RE.match(raw_line)
        if m:
            if current is not None:
                turns.append(current)
            current = [m.group(1).lower(), m.group(2)]
        elif current is not None:
            current[1] = current[1] + "\n" + raw_line if current[1] else raw_line
        elif raw_line.strip(JS_WHITESPACE):
            current = ["user", raw_line]
    if current is not None:
        turns.append(current)
    out = []
    for role, body in turns:
        trimmed = body.strip(JS_WHITESPACE)
        if trimmed:
            out.append((role, trimmed))
    return out


def parse_watch_line(line: str) -> tuple[str, str] | None:
    """One streamed line -> ``(role, text)``, or ``None`` when it is not a turn (blank / empty body)."""
    if line.endswith("\r"):
        line = line[:-1]
    if not line.strip(JS_WHITESPACE):
        return None
    m = TURN_PREFIX_RE.match(line)
    if m:
        role, text = m.group(1).lower(), m.group(2).strip(JS_WHITESPACE)
    else:
        role, text = "user", line.strip(JS_WHITESPACE)
    return (role, text) if text else None


class WindowCandidate(NamedTuple):
    """A candidate merged across the window, with the salience facts the gate and rationale read."""

    display: str
    query: str
    norm: str
    weak: bool
    occurrences: int
    in_newest_turn: bool
    user_mention: bool
    last_turn_idx: int
    order: int

    def to_dict(self) -> dict[str, object]:
        """The reference's field names (``inNewestTurn``, ``userMention``) for fixtures and debugging."""
        out: dict[str, object] = {
            "display": self.display,
            "query": self.query,
            "occurrences": self.occurrences,
            "inNewestTurn": self.in_newest_turn,
            "userMention": self.user_mention,
        }
        if self.weak:
            out["weak"] = True
        return out


_new_candidate = tuple.__new__
# Accumulator slots while merging (a list per norm, turned into a WindowCandidate at the end).
_DISPLAY, _WEAK, _OCC, _NEWEST, _USER, _LAST = 0, 3, 4, 5, 6, 7


def merge_window(turns: Sequence[tuple[str, Sequence[Candidate]]],
                 keep: AbstractSet[str] | None = None) -> list[WindowCandidate]:
    """Merge per-turn candidates (oldest first) by norm; strong first, each list salience-ordered.

    ``turns`` holds ``(role, candidates_of_that_turn)``. Weight = recency + min(occurrences, 4)·0.1
    + 0.15 for a user mention, computed in the reference's operation order so float ties agree.
    Runs on every turn of every session, hence plain lists and no per-candidate function calls.

    ``keep``: only these norms are wanted (the ones that can matter to the resolver,
    :func:`pipeline.core.resolve.turn_relevance`); the others are left out, which changes nothing
    for the kept ones while the window has no more sightings of each kind than the merge keeps of it
    (12 strong, 32 weak). When it has more, the others could push a kept one out of its list, so
    the whole window is merged, and then the kept norms of that merge are returned, in its order:
    the others only ever took places in the salience order, which the whole merge has settled.
    """
    n = len(turns)
    if not n:
        return []
    acc: dict[str, list[Any]] = {}
    last_idx = n - 1
    strong_seen = weak_seen = 0
    for i, (role, cands) in enumerate(turns):
        is_user = role == "user"
        newest = i == last_idx
        for display, query, norm, weak in cands:
            if keep is not None:
                if weak:
                    weak_seen += 1
                else:
                    strong_seen += 1
                if norm not in keep:
                    continue
            e = acc.get(norm)
            if e is None:
                acc[norm] = [display, query, norm, weak, 1, newest, is_user, i, len(acc)]
                continue
            e[_OCC] += 1
            e[_LAST] = i
            if newest:
                e[_NEWEST] = True
            if e[_WEAK] and not weak:
                e[_WEAK] = False
                if not e[_USER] or is_user:
                    e[_DISPLAY] = display
            if is_user and not e[_USER]:
                e[_DISPLAY] = display
                e[_USER] = True

    if keep is not None and (strong_seen > MAX_CANDIDATES or weak_seen > MAX_WEAK_CANDIDATES):
        return [c for c in merge_window(turns) if c.norm in keep]
    strong: list[tuple[float, int, list[Any]]] = []
    weak_ones: list[tuple[float, int, list[Any]]] = []
    for e in acc.values():
        occ = e[_OCC]
        weight = (e[_LAST] + 1) / n + (occ if occ < 4 else 4) * 0.1 + (0.15 if e[_USER] else 0)
        (weak_ones if e[_WEAK] else strong).append((-weight, e[8], e))
    strong.sort()
    out = [_new_candidate(WindowCandidate, e) for _, _, e in strong[:MAX_CANDIDATES]]
    if weak_ones:
        weak_ones.sort()
        out += [_new_candidate(WindowCandidate, e) for _, _, e in weak_ones[:MAX_WEAK_CANDIDATES]]
    return out


def merged_count(turns: Sequence[tuple[str, Sequence[Candidate]]]) -> int:
    """``len(merge_window(turns))`` without merging: distinct norms, strong if any sighting is
    strong, each kind capped. For the metrics of windows that skip the merge."""
    kinds: dict[str, bool] = {}  # norm -> weak so far
    for _role, cands in turns:
        for _display, _query, norm, weak in cands:
            if not weak:
                kinds[norm] = False
            elif norm not in kinds:
                kinds[norm] = True
    weak_n = sum(kinds.values())
    strong_n = len(kinds) - weak_n
    return (strong_n if strong_n < MAX_CANDIDATES else MAX_CANDIDATES) + (
        weak_n if weak_n < MAX_WEAK_CANDIDATES else MAX_WEAK_CANDIDATES)


def extract_window(turns: Sequence[tuple[str, str]]) -> list[WindowCandidate]:
    """From scratch: extract every turn, then merge (what the op does; the stream caches per turn)."""
    return merge_window([(role, extract_candidates(text)) for role, text in turns])
