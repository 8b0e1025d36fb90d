"""The answers waiting hooks get: the proposals of recent hook-channel turns, and the requests
waiting for them.

The window agent fills the board after each batch (:mod:`pipeline.agents.hooklane` makes the
proposals); the hook endpoint (:mod:`pipeline.agents.answers`) waits on it. Results are kept for a
minute, so an answer that is ready before its request starts waiting is not missed.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Iterable

from pipeline.agents.hooklane import Proposal

KEEP_RESULTS_S = 60.0
MAX_RESULTS = 8192

Key = tuple[str, int]


class AnswerBoard:
    """Proposals of recent hook-channel turns, and the requests waiting for them."""

    def __init__(self, keep_s: float = KEEP_RESULTS_S, max_results: int = MAX_RESULTS) -> None:
        self.keep_s = keep_s
        self.max_results = max_results
        self._results: OrderedDict[Key, tuple[float, Proposal]] = OrderedDict()
        self._waiters: dict[Key, list[asyncio.Future[Proposal]]] = {}

    def resolve(self, proposals: Iterable[Proposal]) -> None:
        now = time.monotonic()
        for proposal in proposals:
            key = (proposal.session_id, proposal.turn)
            self._results[key] = (now, proposal)
            self._results.move_to_end(key)
            for future in self._waiters.pop(key, ()):
                if not future.done():
                    future.set_result(proposal)
        self._expire(now)

    def forget(self, session_id: str, turn: int) -> None:
        """Drop a kept result before the same turn number is published again."""
        self._results.pop((session_id, turn), None)

    def _expire(self, now: float) -> None:
        results = self._results
        while results:
            key, (at, _) = next(iter(results.items()))
            if now - at <= self.keep_s and len(results) <= self.max_results:
                break
            del results[key]

    def busy(self, session_id: str, turn: int) -> bool:
        """Is a request already waiting for this turn? (A second one would get the first one's pages.)"""
        return bool(self._waiters.get((session_id, turn)))

    async def wait(self, session_id: str, turn: int, timeout_s: float) -> Proposal | None:
        key = (session_id, turn)
        kept = self._results.get(key)
        if kept is not None:
            return kept[1]
        if timeout_s <= 0:
            return None
        future: asyncio.Future[Proposal] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, []).append(future)
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return None
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                if future in waiters:
                    waiters.remove(future)
                if not waiters:
                    del self._waiters[key]

    @property
    def waiting(self) -> int:
        return sum(len(w) for w in self._waiters.values())
