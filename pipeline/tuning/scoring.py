"""Push precision and recall, micro-averaged over labelled turns, overall and per arm.

Per labelled turn, ``V`` is the set of slugs volunteered *at that turn*, ``E`` its expected slugs and
``A`` its acceptable ones. Summed over labelled turns:

- precision = Σ|V ∩ (E ∪ A)| / Σ|V|   (null when nothing was volunteered on labelled turns)
- recall    = Σ|V ∩ E| / Σ|E|          (null when no turn expects anything)

Per arm, the same sums restricted to the pages that arm volunteered: an arm's recall is the share of
all expected slugs that this arm delivered, so the arms' recalls add up to the overall recall.
Everything is an integer count until the end, which is what makes merging partial results from
several processes exact.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.types import ARMS, VolunteeredPage
from pipeline.tuning.labels import Labels


def ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def f1(precision: float | None, recall: float | None) -> float | None:
    if precision is None or recall is None:
        return None
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


@dataclass
class Tally:
    """Counts for one setting. ``pages_by_arm`` covers every turn; the ``scored_*``, ``correct_*``
    and ``hits_*`` counters only labelled turns."""

    turns: int = 0
    labelled_turns: int = 0
    expected: int = 0
    pages_by_arm: Counter[str] = field(default_factory=Counter)
    scored_by_arm: Counter[str] = field(default_factory=Counter)
    correct_by_arm: Counter[str] = field(default_factory=Counter)
    hits_by_arm: Counter[str] = field(default_factory=Counter)

    def add_turn(self, pages: Sequence[VolunteeredPage], labels: Labels | None) -> None:
        """One replayed turn and the pages volunteered at it."""
        self.turns += 1
        for page in pages:
            self.pages_by_arm[page.arm] += 1
        if labels is None:
            return
        self.labelled_turns += 1
        self.expected += len(labels.expected)
        allowed = labels.allowed
        seen: set[str] = set()
        for page in pages:
            if page.slug in seen:  # the same slug from two sources counts once per turn
                continue
            seen.add(page.slug)
            self.scored_by_arm[page.arm] += 1
            if page.slug in allowed:
                self.correct_by_arm[page.arm] += 1
            if page.slug in labels.expected:
                self.hits_by_arm[page.arm] += 1

    def merge(self, other: Tally) -> None:
        self.turns += other.turns
        self.labelled_turns += other.labelled_turns
        self.expected += other.expected
        self.pages_by_arm.update(other.pages_by_arm)
        self.scored_by_arm.update(other.scored_by_arm)
        self.correct_by_arm.update(other.correct_by_arm)
        self.hits_by_arm.update(other.hits_by_arm)

    # ------------------------------------------------------------------ derived figures

    @property
    def volunteered(self) -> int:
        return sum(self.pages_by_arm.values())

    @property
    def scored(self) -> int:
        return sum(self.scored_by_arm.values())

    @property
    def correct(self) -> int:
        return sum(self.correct_by_arm.values())

    @property
    def hits(self) -> int:
        return sum(self.hits_by_arm.values())

    @property
    def labelled(self) -> bool:
        return self.labelled_turns > 0

    @property
    def precision(self) -> float | None:
        return ratio(self.correct, self.scored) if self.labelled else None

    @property
    def recall(self) -> float | None:
        return ratio(self.hits, self.expected) if self.labelled else None

    @property
    def f1(self) -> float | None:
        return f1(self.precision, self.recall)

    def arm_figures(self, arm: str) -> dict[str, Any]:
        return {
            "volunteered": self.pages_by_arm[arm],
            "scored": self.scored_by_arm[arm],
            "correct": self.correct_by_arm[arm],
            "hits": self.hits_by_arm[arm],
            "precision": ratio(self.correct_by_arm[arm], self.scored_by_arm[arm]) if self.labelled else None,
            "recall": ratio(self.hits_by_arm[arm], self.expected) if self.labelled else None,
        }

    def arms_used(self) -> list[str]:
        """Arms with any page, in the core's arm order (unknown arms last, sorted)."""
        known = [arm for arm in ARMS if self.pages_by_arm[arm]]
        return known + sorted(arm for arm in self.pages_by_arm if arm not in ARMS and self.pages_by_arm[arm])

    def to_dict(self, arms: Iterable[str] | None = None) -> dict[str, Any]:
        """Figures for ``--json``: totals, ratios (null without labels) and a per-arm breakdown."""
        return {
            "turns": self.turns,
            "labelled_turns": self.labelled_turns,
            "volunteered": self.volunteered,
            "scored": self.scored,
            "correct": self.correct,
            "expected": self.expected,
            "hits": self.hits,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "arms": {arm: self.arm_figures(arm) for arm in (ARMS if arms is None else arms)},
        }
