"""Per-session streaming decisions: gbrain ``watch`` semantics, one turn at a time (reference-behaviour.md §9).

:class:`SessionState` is everything a worker keeps per session: the rolling window as *cached
candidates* (never raw text: the state goes to a changelog topic), which turn surfaced each slug
(session dedupe), the emissions of recent turns (so a redelivered turn re-emits exactly what it first
emitted), the last turn number and the last activity time. :func:`step` advances it by one turn.
Pure: no clock, no I/O; the caller passes ``now_ms``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import FrozenInstanceError, dataclass, field
from typing import Any, Final

import orjson

from pipeline.core.brain import BrainIndex
from pipeline.core.extract import Candidate, extract_candidates
from pipeline.core.gate import clamp_window_turns
from pipeline.core.normalize import JS_WHITESPACE, normalize_alias
from pipeline.core.op import decide
from pipeline.core.resolve import turn_relevance
from pipeline.core.tally import DecisionTally
from pipeline.core.turn_context import DEFAULT_REFLEX_MAX_POINTERS, turn_context
from pipeline.core.types import VolunteeredPage
from pipeline.core.window import ROLES, parse_watch_line

__all__ = [
    "EMISSIONS_KEPT_TURNS",
    "DecisionOptions",
    "SessionState",
    "StepResult",
    "parse_watch_line",
    "step",
]

EMISSIONS_KEPT_TURNS: Final = 64
"""Emissions are kept for turns within this many turn numbers of the newest (or in the window, if
longer), so a turn redelivered after a crash re-emits its pages even if the window moved on."""

_STATE_VERSION: Final = 1
_STATE_VERSION_POINTERS: Final = 2
"""Written only by a state that holds reflex pointers (key ``p``); version 1 states read as before."""


@dataclass(frozen=True, slots=True)
class DecisionOptions:
    """Per-session knobs, raw as configured; clamped like the reference when used."""

    window_turns: Any = 4
    max_pages: Any = None
    min_confidence: Any = None
    lexical_arms: bool = True
    exclude_slug_prefixes: tuple[str, ...] = ()
    collapse_display: bool = True
    reflex: bool = False
    """Turn context (docs/reference-behaviour.md §13.1): reflex pointers first, then the pages."""
    reflex_max_pointers: Any = DEFAULT_REFLEX_MAX_POINTERS
    effective_window_turns: int = field(init=False, repr=False, compare=False)
    """``min(64, max(1, floor(window_turns)))``; non-finite -> 4 (computed once)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "effective_window_turns", clamp_window_turns(self.window_turns))
        object.__setattr__(self, "exclude_slug_prefixes", tuple(self.exclude_slug_prefixes))


@dataclass(slots=True)
class _WindowTurn:
    turn: int
    role: str
    candidates: list[Candidate]
    checked: Any = field(default=None, compare=False, repr=False)
    """``token`` of the brain ``live`` was computed against (a swapped brain is checked again); never
    serialised, and no reference to the brain, which must be freed once swapped out."""
    live: bool = field(default=False, compare=False, repr=False)
    """Whether one of ``candidates`` has something in ``checked`` to resolve to (``could_resolve``)."""
    relevant: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    """The norms of ``candidates`` that can matter to a decision against ``checked`` (``turn_relevance``)."""
    encoded: Any = field(default=None, compare=False, repr=False)
    """This turn's part of :meth:`SessionState.to_bytes` (the list orjson writes), once built. A
    window turn never changes once appended, and a worker saves a session's state after every
    batch, so each turn's list is built once instead of at every save of its window. Not an
    ``orjson.Fragment`` of its bytes: ``orjson.dumps`` returns bytes in a ~4 KiB allocation, which
    kept 20,000 sessions' worker at ~8 KiB a session (tests/reliability/test_limits.py)."""


@dataclass(slots=True)
class SessionState:
    """What a worker's table keeps for one session. Mutated by :func:`step`; see ``to_bytes``."""

    last_turn: int = 0
    window: list[_WindowTurn] = field(default_factory=list)
    surfaced: dict[str, int] = field(default_factory=dict)
    emissions: dict[int, list[VolunteeredPage]] = field(default_factory=dict)
    last_activity_ms: int | None = None
    pointers: dict[int, list[VolunteeredPage]] = field(default_factory=dict)
    """Reflex pointers emitted per turn (turn-context steps only), kept like ``emissions``."""

    # ------------------------------------------------------------------ serialisation

    def to_bytes(self) -> bytes:
        """Compact orjson: short keys, candidates as ``query`` or ``[display, query]``, no raw text."""
        version = _STATE_VERSION_POINTERS if self.pointers else _STATE_VERSION
        out: dict[str, Any] = {"v": version, "t": self.last_turn}
        if self.last_activity_ms is not None:
            out["a"] = self.last_activity_ms
        if self.window:
            out["w"] = [wt.encoded if wt.encoded is not None else _enc_turn(wt) for wt in self.window]
        if self.surfaced:
            out["s"] = self.surfaced
        if self.emissions:
            out["e"] = _enc_emitted(self.emissions)
        if self.pointers:
            out["p"] = _enc_emitted(self.pointers)
        return orjson.dumps(out)

    @classmethod
    def from_bytes(cls, data: bytes) -> SessionState:
        """Inverse of :meth:`to_bytes`; raises ``ValueError`` naming what is wrong."""
        try:
            obj = orjson.loads(data)
            if not isinstance(obj, dict) or obj.get("v") not in (_STATE_VERSION, _STATE_VERSION_POINTERS):
                raise ValueError(f"unsupported session state version {obj.get('v') if isinstance(obj, dict) else None!r}")
            state = cls(last_turn=int(obj["t"]), last_activity_ms=obj.get("a"))
            for turn, role, strong, weak in obj.get("w", ()):
                cands = [_dec_cand(c, False) for c in strong] + [_dec_cand(c, True) for c in weak]
                state.window.append(_WindowTurn(int(turn), ROLES[role], cands))
            state.surfaced = {str(k): int(v) for k, v in obj.get("s", {}).items()}
            state.emissions = _dec_emitted(obj.get("e", {}))
            state.pointers = _dec_emitted(obj.get("p", {}))
            return state
        except ValueError as exc:
            raise ValueError(f"invalid session state: {exc}") from None
        except (KeyError, TypeError, IndexError) as exc:
            raise ValueError(f"invalid session state: {type(exc).__name__}: {exc}") from None

    @property
    def window_turns(self) -> list[int]:
        """Turn numbers currently in the rolling window, oldest first."""
        return [wt.turn for wt in self.window]


def _enc_emitted(emitted: dict[int, list[VolunteeredPage]]) -> dict[str, list[list[Any]]]:
    return {
        str(turn): [[p.slug, p.source_id, p.display, p.confidence, p.arm, p.rationale, p.synopsis] for p in pages]
        for turn, pages in emitted.items()
    }


def _dec_emitted(raw: Any) -> dict[int, list[VolunteeredPage]]:
    return {
        int(turn): [VolunteeredPage(s, src, d, float(c), a, r, syn) for s, src, d, c, a, r, syn in pages]
        for turn, pages in raw.items()
    }


def _enc_turn(wt: _WindowTurn) -> list[Any]:
    """``[turn, role, strong candidates, weak candidates]``, kept on the turn (``encoded``)."""
    encoded = [
        wt.turn,
        0 if wt.role == "user" else 1,
        [_enc_cand(c) for c in wt.candidates if not c[3]],
        [_enc_cand(c) for c in wt.candidates if c[3]],
    ]
    wt.encoded = encoded
    return encoded


def _enc_cand(c: Candidate) -> str | list[str]:
    return c[1] if c[0] == c[1] else [c[0], c[1]]


def _dec_cand(raw: Any, weak: bool) -> Candidate:
    if isinstance(raw, str):
        display = query = raw
    else:
        display, query = raw
    norm = normalize_alias(query)
    if not norm:
        raise ValueError(f"candidate {query!r} has an empty norm")
    return (display, query, norm, weak)


@dataclass(frozen=True, slots=True)
class StepResult:
    """The pages volunteered at ``turn``. ``duplicate``: a redelivered turn (pages are the first
    processing's, state untouched). ``skipped``: blank text, not a turn (nothing counted).
    ``pointers``: the reflex pointers of a turn-context step (``options.reflex``), before the pages."""

    turn: int
    pages: list[VolunteeredPage]
    duplicate: bool
    skipped: bool = False
    pointers: list[VolunteeredPage] = field(default_factory=list)


def _bare_result_settable() -> bool:
    """Like :data:`pipeline.core.types.BARE_FIELDS`, for :class:`StepResult`: True in the compiled core.
    Not one shared probe taking the class: ``setattr`` goes through the frozen ``__setattr__`` in both
    builds, so only a direct assignment, as the builder itself makes, tells what the builder can do."""
    result = StepResult.__new__(StepResult)
    try:
        result.turn = 0  # type: ignore[misc]
    except FrozenInstanceError:
        return False
    return True


_BARE_RESULT: Final = _bare_result_settable()


def _result(turn: int, pages: list[VolunteeredPage], duplicate: bool, skipped: bool,
            pointers: list[VolunteeredPage]) -> StepResult:
    """``StepResult(...)``, without the dataclass' interpreted ``__init__`` in the compiled core (a
    tenth of a turn's own code there); the same object either way."""
    if not _BARE_RESULT:
        return StepResult(turn, pages, duplicate, skipped, pointers)
    result = StepResult.__new__(StepResult)
    result.turn = turn  # type: ignore[misc]
    result.pages = pages  # type: ignore[misc]
    result.duplicate = duplicate  # type: ignore[misc]
    result.skipped = skipped  # type: ignore[misc]
    result.pointers = pointers  # type: ignore[misc]
    return result


def _window_turn(turn: int, role: str, candidates: list[Candidate]) -> _WindowTurn:
    """``_WindowTurn(turn, role, candidates)`` with its defaults, without the dataclass' ``__init__``
    (interpreted code in the compiled core; a plain slots set in both builds)."""
    wt = _WindowTurn.__new__(_WindowTurn)
    wt.turn = turn
    wt.role = role
    wt.candidates = candidates
    wt.checked = None
    wt.live = False
    wt.relevant = frozenset()
    wt.encoded = None
    return wt


def step(
    state: SessionState,
    role: str,
    text: str,
    brain: BrainIndex,
    *,
    source_id: str,
    options: DecisionOptions,
    turn_no: int | None = None,
    now_ms: int | None = None,
    tally: DecisionTally | None = None,
) -> StepResult:
    """One turn of one session, exactly like a line of gbrain ``watch``; mutates ``state``.

    The turn is numbered ``turn_no`` or ``last_turn + 1`` and appended to the rolling window (gaps in
    numbering are fine: the window is the last N turns received). The decision excludes slugs
    surfaced at earlier turns (before the gate and cap) and passes no prior context. A ``turn_no`` at
    or below ``last_turn`` is a redelivery: the state is left alone and the pages that turn emitted
    the first time are returned (``duplicate=True``). ``tally`` only counts (see :mod:`pipeline.core.tally`).
    """
    role_lc = role.lower()
    if role_lc not in ROLES:
        raise ValueError(f"role must be 'user' or 'assistant', got {role!r}")
    if turn_no is not None and turn_no <= state.last_turn:
        return _result(turn_no, list(state.emissions.get(turn_no, ())), True, False,
                       list(state.pointers.get(turn_no, ())))
    body = text.strip(JS_WHITESPACE)
    number = state.last_turn + 1 if turn_no is None else turn_no
    if not body:
        return _result(number, [], False, True, [])

    size = options.effective_window_turns
    state.window.append(_window_turn(number, role_lc, extract_candidates(body)))
    if len(state.window) > size:
        del state.window[: len(state.window) - size]

    live = False
    for wt in state.window:  # each turn is checked once per brain, not once per window it is in
        if wt.checked is not brain.token:
            wt.live, wt.relevant = turn_relevance(wt.candidates, brain)
            wt.checked = brain.token
        if wt.live:
            live = True
    # Every surfaced slug was surfaced at a turn <= last_turn < number, so the whole map is "earlier".
    window = [(wt.role, wt.candidates) for wt in state.window]
    pointers: list[VolunteeredPage] = []
    pages: list[VolunteeredPage] = []
    if options.reflex:
        context = turn_context(
            window, brain, source_ids=(source_id,), max_pointers=options.reflex_max_pointers,
            max_pages=options.max_pages, min_confidence=options.min_confidence, lexical_arms=options.lexical_arms,
            exclude_slugs=state.surfaced, exclude_slug_prefixes=options.exclude_slug_prefixes,
            collapse_display=options.collapse_display, tally=tally,
        )
        pointers, pages = context.pointers, context.pages
    elif live or tally is not None:  # with a tally, decide counts the window's candidates
        pages = decide(
            window,
            brain,
            resolvable=live,
            source_ids=(source_id,),
            max_pages=options.max_pages,
            min_confidence=options.min_confidence,
            lexical_arms=options.lexical_arms,
            exclude_slugs=state.surfaced,
            exclude_slug_prefixes=options.exclude_slug_prefixes,
            collapse_display=options.collapse_display,
            tally=tally,
            keep=frozenset().union(*[wt.relevant for wt in state.window]) if live else None,
        )
    for page in pointers:
        state.surfaced.setdefault(page.slug, number)
    for page in pages:
        state.surfaced.setdefault(page.slug, number)
    if pages:
        state.emissions[number] = pages
    if pointers:
        state.pointers[number] = pointers
    oldest_kept = min(state.window[0].turn, number - EMISSIONS_KEPT_TURNS + 1)
    if state.emissions and min(state.emissions) < oldest_kept:
        state.emissions = {t: p for t, p in state.emissions.items() if t >= oldest_kept}
    if state.pointers and min(state.pointers) < oldest_kept:
        state.pointers = {t: p for t, p in state.pointers.items() if t >= oldest_kept}
    state.last_turn = number
    if now_ms is not None:
        state.last_activity_ms = now_ms
    return _result(number, pages, False, False, pointers)


def run_lines(
    lines: Sequence[str],
    brain: BrainIndex,
    *,
    source_id: str = "default",
    options: DecisionOptions | None = None,
) -> tuple[int, list[tuple[int, VolunteeredPage]]]:
    """A whole ``watch`` session over raw lines: ``(turns counted, [(turn, page), ...])``."""
    state = SessionState()
    opts = options or DecisionOptions()
    emitted: list[tuple[int, VolunteeredPage]] = []
    for line in lines:
        parsed = parse_watch_line(line)
        if parsed is None:
            continue
        result = step(state, parsed[0], parsed[1], brain, source_id=source_id, options=opts)
        emitted.extend((result.turn, p) for p in result.pages)
    return state.last_turn, emitted
