"""Counts of what the decision did, for metrics: filled by :func:`pipeline.core.op.decide` when given one.

Observing only: a tally never changes a decision (the property tests compare results with and
without one). It is plain integers so the hot path pays a few additions per turn; a worker keeps one
per batch and adds it to its metrics after the batch was published.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from pipeline.core.types import ARMS, Pointer, VolunteeredPage


def _per_arm() -> dict[str, int]:
    return dict.fromkeys(ARMS, 0)


@dataclass(slots=True)
class DecisionTally:
    """Running totals over decisions (one decision = one turn through extract -> resolve -> gate)."""

    decisions: int = 0
    candidates: int = 0
    """Window candidates after merging (what the resolver was asked about)."""
    pointers: dict[str, int] = field(default_factory=_per_arm)
    """Resolved pages per arm, before the gate (the resolver pool)."""
    suppressed: int = 0
    """Pointers skipped because the session already surfaced the slug (session dedupe)."""
    gate_dropped: int = 0
    """Pointers the gate did not pass: under the threshold, an excluded prefix, or over the cap."""
    volunteered: dict[str, int] = field(default_factory=_per_arm)
    """Pages volunteered per arm."""

    def record(self, candidates: int, pointers: Sequence[Pointer], exclude_slugs: Collection[str],
               pages: Sequence[VolunteeredPage]) -> None:
        self.decisions += 1
        self.candidates += candidates
        if not pointers:
            return
        per_arm = self.pointers  # every arm is a key already (the gate rejects unknown arms)
        for p in pointers:
            per_arm[p.arm] += 1
        suppressed = sum(1 for p in pointers if p.slug in exclude_slugs) if exclude_slugs else 0
        self.suppressed += suppressed
        self.gate_dropped += len(pointers) - suppressed - len(pages)
        out = self.volunteered
        for page in pages:
            out[page.arm] += 1

    def add(self, other: DecisionTally) -> None:
        """Fold ``other`` into this one."""
        self.decisions += other.decisions
        self.candidates += other.candidates
        self.suppressed += other.suppressed
        self.gate_dropped += other.gate_dropped
        for arm, n in other.pointers.items():
            self.pointers[arm] = self.pointers.get(arm, 0) + n
        for arm, n in other.volunteered.items():
            self.volunteered[arm] = self.volunteered.get(arm, 0) + n
