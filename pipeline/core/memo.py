"""A bounded memo that rests when it does not pay for itself.

The per-turn path memoises candidates per text, relevance per candidate list and the resolver's
answer per window. On repeated text that saves most of a turn; on text that never repeats every
entry is pure cost (building it, and the memory it keeps: a fifth more CPU per turn in replay). So a
memo that fills up with fewer hits than an eighth of its size starts over *and rests* for four times
its size in stores, then tries again. Results never depend on it.

The try after a rest is a short trial: an eighth of the size in stores, with the same hit ratio to
pass. A memo that once filled without paying would otherwise store a whole size of entries that are
never hit in every round, and those are what the garbage collector then walks (every entry holds
containers: lists, tuples, a dict of merged candidates). A trial that pays makes it a full memo again,
its entries kept. A memo that pays from the start (the whole-process replay: it never rests) is
unchanged.
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
        self.limit = size
        """Entries at which the hits are judged: ``size``, or an eighth of it for the trial after a rest."""

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
        if len(self.entries) >= self.limit:
            if self.hits * 8 < self.limit:
                self.resting = 4 * self.size
                self.limit = max(1, self.size // 8)  # the next try is a trial
                self.entries.clear()
                self.hits = 0
                return
            if self.limit < self.size:
                self.limit = self.size  # the trial paid: a full memo again, its entries kept
            else:
                self.entries.clear()
                self.hits = 0
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
        self.limit = self.size

    def __len__(self) -> int:
        return len(self.entries)
