"""Replaying Turn records through the worker's per-session logic, in-process: the library half of
``volunteer replay``, also used by the tuning sweep, the demo, the reliability verifier and the benches.

Each session gets its own :class:`SessionState` and every turn goes through
:func:`pipeline.core.session.step` with the same turn-number check the worker applies
(:func:`step_in_session`), so replay, the sweep and the worker cannot drift apart: the sweep used
to carry its own copy of this loop.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pipeline.core.brain import BrainIndex
from pipeline.core.session import DecisionOptions, SessionState, StepResult, step
from pipeline.core.tally import DecisionTally
from pipeline.core.types import ARMS, VolunteeredPage
from topics.records import DEFAULT_MAX_TEXT_BYTES, InvalidRecord, check_turn_number, decode_turn_fields

__all__ = ["DEFAULT_SOURCE", "ErrorSink", "PageSink", "ReplaySummary", "replay_lines", "step_in_session"]

DEFAULT_SOURCE = "default"
"""The brain source of turns that name none, unless the caller says otherwise (the settings' default)."""


def step_in_session(states: dict[str, SessionState], session_id: str, role: str, text: str, brain: BrainIndex, *,
                    source_id: str, options: DecisionOptions, turn_no: int | None, now_ms: int | None,
                    tally: DecisionTally | None = None) -> StepResult:
    """One turn of ``session_id`` (its state created on first use), as the worker applies it.

    Raises :class:`InvalidRecord` (``turn_overflow``) for an unnumbered turn that cannot be numbered,
    exactly where the worker dead-letters it; the state is then left alone.
    """
    state = states.get(session_id)
    if state is None:
        state = states[session_id] = SessionState()
    check_turn_number(state.last_turn, turn_no)
    return step(state, role, text, brain, source_id=source_id, options=options, turn_no=turn_no, now_ms=now_ms,
                tally=tally)


PageSink = Callable[[str, int, VolunteeredPage], None]
ErrorSink = Callable[[int, InvalidRecord], None]


@dataclass
class ReplaySummary:
    """What a replay did: counts of lines, turns, sessions and pages per arm."""

    lines: int = 0
    turns: int = 0
    blank: int = 0
    duplicates: int = 0
    bad: int = 0
    sessions: int = 0
    pages_by_arm: Counter[str] = field(default_factory=Counter)

    @property
    def pages(self) -> int:
        return sum(self.pages_by_arm.values())

    def render(self) -> str:
        lines = [
            f"replayed {self.turns} turn(s) in {self.sessions} session(s)"
            f" — {self.duplicates} duplicate(s) ignored, {self.blank} blank, {self.bad} bad line(s)",
            f"volunteered {self.pages} page(s)" + (":" if self.pages else ""),
        ]
        for arm in ARMS:
            if self.pages_by_arm[arm]:
                lines.append(f"  {arm:<14} {self.pages_by_arm[arm]}")
        return "\n".join(lines) + "\n"


def replay_lines(
    lines: Iterable[bytes],
    brain: BrainIndex,
    *,
    options: DecisionOptions,
    default_source: str = DEFAULT_SOURCE,
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
    on_page: PageSink | None = None,
    on_error: ErrorSink | None = None,
) -> ReplaySummary:
    """Run JSON-line Turn records through per-session :func:`step`, in file order."""
    summary = ReplaySummary()
    states: dict[str, SessionState] = {}
    for lineno, raw in enumerate(lines, start=1):
        if not raw or raw.isspace():  # a blank line (bytes.isspace: the whitespace bytes.strip strips)
            continue
        summary.lines += 1
        try:
            turn = decode_turn_fields(raw, max_text_bytes=max_text_bytes)
        except InvalidRecord as exc:
            summary.bad += 1
            if on_error is not None:
                on_error(lineno, exc)
            continue
        if turn is None:
            summary.blank += 1
            continue
        session_id, role, text, turn_no, ts_ms, source_id, _channel = turn
        try:
            result = step_in_session(states, session_id, role, text, brain, source_id=source_id or default_source,
                                     options=options, turn_no=turn_no, now_ms=ts_ms)
        except InvalidRecord as exc:
            summary.bad += 1
            if on_error is not None:
                on_error(lineno, exc)
            continue
        if result.duplicate:
            summary.duplicates += 1
            continue
        if result.skipped:
            summary.blank += 1
            continue
        summary.turns += 1
        for page in result.pages:
            summary.pages_by_arm[page.arm] += 1
            if on_page is not None:
                on_page(session_id, result.turn, page)
    summary.sessions = len(states)
    return summary
