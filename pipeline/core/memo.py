"""A bounded memo that rests when it does not pay for itself.

The per-turn path memoises candidates per text, relevance per candidate list and the resolver's
answer per window. On repeated text that saves most of a turn; on text that never repeats every
entry is pure cost (building it, and the memory it keeps: a fifth more CPU per turn in replay). So a
memo that fills up with fewer hits than an eighth of its size starts over *and rests* for four times
its size in stores, then tries again. Results never depend on it.
"""

from __future__ import annotations

from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Memo(Generic[K, V]):
    """``get`` / ``put`` of at most ``size`` entries; see the module docstring for the resting."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.entries: dict[K, V] = {}
        self.hits = 0
        self.resting = 0

    def get(self, key: K) -> V | None:
        if self.resting:
            return None
        value = self.entries.get(key)
        if value is not None:
            self.hits += 1
        return value

    def put(self, key: K, value: V) -> None:
        if self.resting:
            self.resting -= 1
            return
        if len(self.entries) >= self.size:
            if self.hits * 8 < self.size:
                self.resting = 4 * self.size
            self.entries.clear()
            self.hits = 0
            if self.resting:
                return
        self.entries[key] = value

    def rest_one(self) -> bool:
        """While resting: count one store as made and answer True, so a caller can skip building
        the key of a lookup that must miss (``get`` would return ``None``, ``put`` would drop it)."""
        if self.resting:
            self.resting -= 1
            return True
        return False

    def clear(self) -> None:
        """Forget everything, resting included (benchmarks measuring a first pass)."""
        self.entries.clear()
        self.hits = 0
        self.resting = 0

    def __len__(self) -> int:
        return len(self.entries)
