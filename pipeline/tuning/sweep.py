"""One process's share of a sweep: its sessions, decoded once, through every setting of the grid.

Each setting replays the sessions from scratch (fresh :class:`SessionState` per session, the
worker's :func:`~pipeline.core.session.step`), so every setting sees exactly what the worker would
do with those knobs. What does not depend on the knobs (decoding, labels, bad lines, duplicate
turn numbers, turns whose own text yields no candidate) is worked out once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from pipeline.core.brain import BrainIndex
from pipeline.core.session import DecisionOptions, SessionState
from pipeline.replay import step_in_session
from pipeline.tuning.grid import Setting
from pipeline.tuning.labels import LabelError, Labels, labels_from_line
from pipeline.tuning.scoring import Tally
from topics.records import InvalidRecord, Turn, decode_turn

Progress = Callable[[int], None]
PROGRESS_EVERY = 2048
"""Turns between two progress reports (a report crosses a process boundary, so not every turn)."""


@dataclass(frozen=True, slots=True)
class Problem:
    """A line-level problem, reported once per line (not per setting)."""

    lineno: int
    code: str
    message: str

    def render(self) -> str:
        return f"line {self.lineno}: {self.code}: {self.message}"


@dataclass(frozen=True, slots=True, order=True)
class Silence:
    """A labelled turn that expects pages but whose text gave the core no candidate at all: no
    setting can volunteer anything from it (an extraction gap, or a label on the wrong turn)."""

    session_id: str
    turn: int
    lineno: int


@dataclass
class SweepResult:
    """Everything a sweep found, for one process's sessions or (merged) for all of them."""

    tallies: list[Tally]
    lines: int = 0
    bad: int = 0
    blank: int = 0
    duplicates: int = 0
    unscored_labels: int = 0
    sessions: int = 0
    problems: list[Problem] = field(default_factory=list)
    silences: list[Silence] = field(default_factory=list)

    @classmethod
    def empty(cls, settings: int) -> SweepResult:
        return cls(tallies=[Tally() for _ in range(settings)])

    def merge(self, other: SweepResult) -> None:
        """Add another partition's result. Sessions never span partitions, so counts simply add."""
        if len(other.tallies) != len(self.tallies):
            raise ValueError("cannot merge sweep results over different grids")
        for mine, theirs in zip(self.tallies, other.tallies, strict=True):
            mine.merge(theirs)
        self.lines += other.lines
        self.bad += other.bad
        self.blank += other.blank
        self.duplicates += other.duplicates
        self.unscored_labels += other.unscored_labels
        self.sessions += other.sessions
        self.problems = sorted([*self.problems, *other.problems], key=lambda p: (p.lineno, p.code))
        self.silences = sorted([*self.silences, *other.silences], key=lambda s: s.lineno)


@dataclass(frozen=True, slots=True)
class _Item:
    lineno: int
    turn: Turn
    labels: Labels | None


def decode_lines(lines: Iterable[tuple[int, bytes]], result: SweepResult, max_text_bytes: int) -> list[_Item]:
    """Turn records with their labels; bad lines and bad labels become :class:`Problem` s."""
    items: list[_Item] = []
    for lineno, raw in lines:
        if not raw.strip():
            continue
        result.lines += 1
        try:
            labels = labels_from_line(raw)
        except LabelError as exc:
            result.problems.append(Problem(lineno, exc.code, exc.message + " (the turn replays unlabelled)"))
            labels = None
        try:
            turn = decode_turn(raw, max_text_bytes=max_text_bytes)
        except InvalidRecord as exc:
            result.bad += 1
            result.problems.append(Problem(lineno, exc.code, exc.message))
            result.unscored_labels += labels is not None
            continue
        if turn is None:
            result.blank += 1
            result.unscored_labels += labels is not None
            continue
        items.append(_Item(lineno, turn, labels))
    return items


def run_partition(
    lines: Iterable[tuple[int, bytes]],
    brain: BrainIndex,
    grid: Sequence[Setting],
    base: DecisionOptions,
    *,
    default_source: str = "default",
    max_text_bytes: int = 5_000_000,
    progress: Progress | None = None,
) -> SweepResult:
    """Replay ``(line number, raw line)`` pairs once per setting of ``grid``.

    The lines must hold whole sessions (every line of a session present, in file order).
    """
    result = SweepResult.empty(len(grid))
    items = decode_lines(lines, result, max_text_bytes)
    pending = 0
    for index, setting in enumerate(grid):
        first = index == 0
        options = setting.options(base)
        tally = result.tallies[index]
        states: dict[str, SessionState] = {}
        for item in items:
            turn = item.turn
            try:  # replay's own per-session step: a turn that cannot be numbered is bad, as in the worker
                step_result = step_in_session(states, turn.session_id, turn.role, turn.text, brain,
                                              source_id=turn.source_id or default_source, options=options,
                                              turn_no=turn.turn, now_ms=turn.ts_ms)
            except InvalidRecord as exc:
                if first:
                    result.bad += 1
                    result.problems.append(Problem(item.lineno, exc.code, exc.message))
                    result.unscored_labels += item.labels is not None
                continue
            state = states[turn.session_id]
            pending += 1
            if progress is not None and pending >= PROGRESS_EVERY:
                progress(pending)
                pending = 0
            if step_result.duplicate or step_result.skipped:
                if first:
                    result.duplicates += step_result.duplicate
                    result.blank += step_result.skipped
                    result.unscored_labels += item.labels is not None
                continue
            tally.add_turn(step_result.pages, item.labels)
            if first and item.labels is not None and item.labels.expected and not state.window[-1].candidates:
                # step appended this turn last; its cached candidates are the turn's own extraction.
                result.silences.append(Silence(turn.session_id, step_result.turn, item.lineno))
        if first:
            result.sessions = len(states)
    if progress is not None and pending:
        progress(pending)
    return result
