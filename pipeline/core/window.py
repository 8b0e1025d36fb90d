"""Turns of a conversation window and their merged, salience-ordered candidates (reference-behaviour.md §3, §4.2, §9).

``parse_window`` is the op's lenient ``role: text`` grammar (continuation lines allowed);
``parse_watch_line`` is the streaming grammar where every line is its own turn. ``merge_window``
combines the cached per-turn candidate lists of a window exactly like gbrain's
``extractCandidatesFromWindow``, without re-reading any text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Final, NamedTuple, TypeVar

from pipeline.core.extract import MAX_CANDIDATES, MAX_WEAK_CANDIDATES, Candidate, extract_candidates
from pipeline.core.jscompat import JS_LINE_TERMINATORS, JS_WS
from pipeline.core.normalize import JS_WHITESPACE

TURN_PREFIX_RE: Final = re.compile(
    f"([Uu][Ss][Ee][Rr]|[Aa][Ss][Ss][Ii][Ss][Tt][Aa][Nn][Tt])[{JS_WS}]*:[{JS_WS}]?([^{JS_LINE_TERMINATORS}]*)\\Z"
)
"""``/^(user|assistant)\\s*:\\s?(.*)$/i`` with JS meaning: ASCII-only case folding, ``.`` stops at any
line terminator, ``$`` is the end of the input. Use with ``.match``."""

ROLES: Final = ("user", "assistant")

_c_merge: Callable[[list[Any], frozenset[str] | None], Any] | None
_c_configure_merge: Callable[[type, int, int], None] | None
_c_parse: Callable[[str], list[tuple[str, str]]] | None
try:  # the optional C scanner (pipeline/core/_cscan.c) also parses and merges windows
    from pipeline.core._cscan import configure_merge as _c_configure_merge
    from pipeline.core._cscan import merge as _c_merge
    from pipeline.core._cscan import parse_window as _c_parse
except ImportError:  # not built, or the pure build: the Python steps answer, same results
    _c_merge = None
    _c_configure_merge = None
    _c_parse = None
_T = TypeVar("_T")


_WS_CHARS: Final = frozenset(JS_WHITESPACE)


def turn_prefix(line: str, terminators: bool = True) -> tuple[str, str] | None:
    """``TURN_PREFIX_RE.match(line)`` as ``(role, body)`` (the role lowercased), without the regex.

    Every window line went through that match, and the regex scans the whole line in its
    ``[^...]*\\Z`` group; here the role is compared on an ASCII head (the regex folds ASCII case
    only) and the body is checked for line terminators with ``str.find``. Same answers on every
    line: ``tests/unit/core/test_properties.py`` compares the two.

    ``terminators=False``: the caller knows the line holds no line terminator (a window's line with
    no ``\\r``, ``\\u2028`` or ``\\u2029`` in the whole window), so the body is not searched for one;
    those searches read every line of a window twice.
    """
    n = len(line)
    # The usual spellings first: the role in lowercase and the colon right after it.
    if line.startswith("user:"):
        role, i = "user", 5
    elif line.startswith("assistant:"):
        role, i = "assistant", 10
    else:
        head = line[:4]
        if head.isascii() and head.lower() == "user":
            role, i = "user", 4
        else:
            head = line[:9]
            if head.isascii() and head.lower() == "assistant":
                role, i = "assistant", 9
            else:
                return None
        while i < n and line[i] in _WS_CHARS:
            i += 1
        if i >= n or line[i] != ":":
            return None
        i += 1
    # ``[ws]?([^LT]*)\\Z``: whatever the optional space takes, the rest after one character may hold
    # no line terminator (every terminator is also whitespace, so a first one can only be that space).
    if terminators and i + 1 < n and (line.find("\r", i + 1) != -1 or line.find("\n", i + 1) != -1 or (
            not line.isascii() and (line.find("\u2028", i + 1) != -1 or line.find("\u2029", i + 1) != -1))):
        return None
    if i < n and line[i] in _WS_CHARS:
        i += 1
    return (role, line[i:])


def _split_lines(text: str) -> list[str]:
    """``re.split(r"\\r?\\n", text)``: split on ``\\n``, then one ``\\r`` before each ``\\n`` dropped."""
    lines = text.split("\n")
    if "\r" in text:
        last = len(lines) - 1
        lines = [line[:-1] if k < last and line.endswith("\r") else line for k, line in enumerate(lines)]
    return lines


def parse_window(text: object) -> list[tuple[str, str]]:
    """``role: text`` lines -> ``[(role, text)]`` oldest first; unprefixed lines continue a turn.

    The C scanner's ``parse_window`` takes these steps on the characters where it is built."""
    if not isinstance(text, str):
        return []
    if _c_parse is not None:
        return _c_parse(text)
    return _parse_window_python(text)


def _parse_window_python(text: str) -> list[tuple[str, str]]:
    """:func:`parse_window` of a str in Python steps."""
    if not text.strip(JS_WHITESPACE):
        return []
    turns: list[tuple[str, list[str]]] = []  # (role, lines of the turn)
    current: list[str] | None = None
    # ``\\n`` ends every line; the other terminators are looked for once in the whole window.
    terminators = "\r" in text or (not text.isascii() and ("\u2028" in text or "\u2029" in text))
    for raw_line in _split_lines(text):
        m = turn_prefix(raw_line, terminators)
        if m is not None:
            current = [m[1]]
            turns.append((m[0], current))
        elif current is not None:
            current.append(raw_line)
        elif raw_line.strip(JS_WHITESPACE):
            current = [raw_line]
            turns.append(("user", current))
    out = []
    for role, lines in turns:
        trimmed = _join_body(lines).strip(JS_WHITESPACE)
        if trimmed:
            out.append((role, trimmed))
    return out


def _join_body(lines: list[str]) -> str:
    """A turn's lines as the reference appends them: ``body + "\\n" + line``, except that an empty
    body so far is replaced by the line (so leading empty lines vanish, later ones stay)."""
    if len(lines) == 1:
        return lines[0]
    k = 0
    while k < len(lines) - 1 and not lines[k]:
        k += 1
    return "\n".join(lines[k:])


def parse_watch_line(line: str) -> tuple[str, str] | None:
    """One streamed line -> ``(role, text)``, or ``None`` when it is not a turn (blank / empty body)."""
    if line.endswith("\r"):
        line = line[:-1]
    if not line.strip(JS_WHITESPACE):
        return None
    m = turn_prefix(line)
    if m is not None:
        role, text = m[0], m[1].strip(JS_WHITESPACE)
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


_new_candidate: Final = tuple.__new__
# Accumulator slots while merging (a list per norm, turned into a WindowCandidate at the end).
_DISPLAY: Final = 0
_NORM: Final = 2
_WEAK: Final = 3
_OCC: Final = 4
_NEWEST: Final = 5
_USER: Final = 6
_LAST: Final = 7
_ORDER: Final = 8


def merge_window(turns: Sequence[tuple[str, Sequence[Candidate]]],
                 keep: AbstractSet[str] | None = None) -> list[WindowCandidate]:
    """Merge per-turn candidates (oldest first) by norm; strong first, each list salience-ordered.

    ``turns`` holds ``(role, candidates_of_that_turn)``. Weight = recency + min(occurrences, 4)·0.1
    + 0.15 for a user mention, computed in the reference's operation order so float ties agree.
    Runs on every turn of every session, hence plain lists and no per-candidate function calls.

    ``keep``: only these norms are wanted (the ones that can matter to the resolver,
    :func:`pipeline.core.resolve.turn_relevance`); the others are left out, which changes nothing
    for the kept ones while the window has no more distinct norms of each kind than the merge keeps
    of it (12 strong, 32 weak; :func:`_crowded`). When it has more, the others could push a kept one
    out of its list, so the whole window is merged, and then the kept norms of that merge are
    returned, in its order: the others only ever took places in the salience order, which the whole
    merge has settled. (The ``order`` field of a kept candidate counts kept norms only; it is a tie
    break read by nothing but the sort, and the relative order of kept norms is the same.)
    """
    n = len(turns)
    if not n:
        return []
    rows = as_list(turns)
    kept: frozenset[str] | None = keep if keep is None or isinstance(keep, frozenset) else frozenset(keep)
    if _c_merge is not None:  # the C scanner's merge: the same steps, or None for inputs of another shape
        merged: list[WindowCandidate] | None = _c_merge(rows, kept)
        if merged is not None:
            return merged
    return _merge_python(rows, kept)


def _merge_python(rows: list[tuple[str, Sequence[Candidate]]], kept: frozenset[str] | None) -> list[WindowCandidate]:
    """:func:`merge_window` of a non-empty window in Python steps (where the C scanner is not built)."""
    n = len(rows)
    acc, strong_seen, weak_seen = _accumulate(rows, kept)
    if kept is not None and (strong_seen > MAX_CANDIDATES or weak_seen > MAX_WEAK_CANDIDATES) and _crowded(rows):
        # Only the kept candidates of the whole merge are built: it used to build every candidate
        # (up to 44), then keep the kept ones.
        return _salience_ordered(_accumulate(rows, None)[0], n, kept)
    return _salience_ordered(acc, n, None)


def _accumulate(rows: list[tuple[str, Sequence[Candidate]]],
                kept: frozenset[str] | None) -> tuple[dict[str, list[Any]], int, int]:
    """The merge's accumulators per norm (first-seen order) of the norms in ``kept`` (every norm for
    ``None``), and the strong and weak sightings seen (counted only with ``kept``)."""
    n = len(rows)
    acc: dict[str, list[Any]] = {}
    last_idx = n - 1
    strong_seen = weak_seen = 0
    for i in range(n):
        role, cands = rows[i]
        is_user = role == "user"
        newest = i == last_idx
        for display, query, norm, weak in as_list(cands):
            if kept is not None:
                if weak:
                    weak_seen += 1
                else:
                    strong_seen += 1
                if norm not in kept:
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
    return acc, strong_seen, weak_seen


def _salience_ordered(acc: dict[str, list[Any]], n: int, only: frozenset[str] | None) -> list[WindowCandidate]:
    """The accumulated norms of a window of ``n`` turns as candidates, strong then weak, each kind by
    salience and capped; of those, only the norms in ``only`` when it is given."""
    strong: list[tuple[float, int, list[Any]]] = []
    weak_ones: list[tuple[float, int, list[Any]]] = []
    for e in acc.values():
        occ: int = e[_OCC]  # typed locals: the compiled core does this arithmetic on C ints and doubles
        last: int = e[_LAST]
        # ``0.0``, not ``0``: an int there made the sum a generic (boxed) addition per candidate; a
        # float plus 0.0 is the same float as plus 0.
        weight: float = (last + 1) / n + (occ if occ < 4 else 4) * 0.1 + (0.15 if e[_USER] else 0.0)
        (weak_ones if e[_WEAK] else strong).append((-weight, e[_ORDER], e))
    if only is not None:
        out = _kept_in_top(strong, MAX_CANDIDATES, only)
        if weak_ones:
            out += _kept_in_top(weak_ones, MAX_WEAK_CANDIDATES, only)
        return out
    strong.sort()
    out = [_new_candidate(WindowCandidate, e) for _, _, e in strong[:MAX_CANDIDATES]]
    if weak_ones:
        weak_ones.sort()
        out += [_new_candidate(WindowCandidate, e) for _, _, e in weak_ones[:MAX_WEAK_CANDIDATES]]
    return out


def _kept_in_top(keyed: list[tuple[float, int, list[Any]]], cap: int, only: frozenset[str]) -> list[WindowCandidate]:
    """``[c for c in sorted(keyed)[:cap] if c's norm in only]`` as candidates, without sorting the
    key tuples: a crowded window (its whole merge, up to hundreds of norms) keeps only the few of
    ``only``, and the sort compared every pair of key tuples through the generic comparison. The
    weights alone sort as C doubles; the ``cap``-th smallest, ``edge``, settles every entry but those
    of that very weight, for which the entries before them are counted (keys never tie: the
    ``order`` fields differ)."""
    picked: list[tuple[float, int, list[Any]]] = []
    count = len(keyed)
    if count <= cap:
        picked = [key for key in keyed if key[2][_NORM] in only]
    else:
        weights: list[float] = sorted([key[0] for key in keyed])
        edge = weights[cap - 1]
        below = 0  # the weights smaller than edge: all of them among the first cap
        while weights[below] < edge:
            below += 1
        for key in keyed:
            if key[2][_NORM] not in only:
                continue
            w = key[0]
            if w < edge:
                picked.append(key)
            elif w == edge:
                order = key[1]
                ahead = below
                for other in keyed:
                    if other[0] == edge and other[1] < order:
                        ahead += 1
                if ahead < cap:
                    picked.append(key)
    picked.sort()
    return [_new_candidate(WindowCandidate, e) for _, _, e in picked]


def as_list(items: Sequence[_T]) -> list[_T]:
    """``items`` itself when it is a list (the stream's windows and every extracted candidate list),
    else a list of it. In the compiled core a loop over a ``list`` indexes it in C, while a loop over
    a ``Sequence`` allocates an iterator object (tracked by the garbage collector) per loop and calls
    through it per item: the merge ran two such loops per window turn."""
    return items if isinstance(items, list) else list(items)


def _crowded(turns: list[tuple[str, Sequence[Candidate]]]) -> bool:
    """Whether the whole merge would drop a norm: more distinct strong norms than it keeps, or more
    distinct weak ones (a norm with any strong sighting is strong). Asked only when the sightings
    alone exceed a cap: repeated words make many sightings of few norms."""
    strong: set[str] = set()
    weak: set[str] = set()
    for _role, cands in turns:
        for c in as_list(cands):
            if c[3]:
                weak.add(c[2])
            else:
                strong.add(c[2])
    return len(strong) > MAX_CANDIDATES or len(weak - strong) > MAX_WEAK_CANDIDATES


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


if _c_configure_merge is not None:  # what the C merge builds (this module's class) and keeps
    _c_configure_merge(WindowCandidate, MAX_CANDIDATES, MAX_WEAK_CANDIDATES)
