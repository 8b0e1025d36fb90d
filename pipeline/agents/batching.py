"""Adaptive batches from a Faust stream: everything already queued, up to a maximum, at once.

``stream.take(n, within=t)`` always waits up to ``t`` for a batch to fill, so under light load every
turn pays ``t`` of latency, twice on its way to the table (window agent, then sink). Here a batch
ends as soon as the stream's queue is empty (or it is full): under light load batches are small
and leave at once; under heavy load records pile up while the previous batch is processed, so
batches grow by themselves and the per-batch costs (a delivery round trip, one table write per
session) are shared by many records.

Records are never acknowledged by the iteration (``stream.noack()``); the caller acknowledges a
batch with :meth:`AdaptiveBatches.ack` once its effects are durable.

A queue can also become empty without being read: Faust clears the stream queues when it stops
or rebalances, then waits until every record already taken is acknowledged. A batch that was
waiting for one more record would then wait forever (the worker hung on SIGTERM in
tests/reliability/test_limits.py), so while a batch is open the next record is awaited for at
most :data:`SETTLE_S` before the batch is handed over as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

SETTLE_S = 0.05
"""Longest wait for the next queued record while a batch is open (only a cleared queue waits)."""


class AdaptiveBatches:
    """``async for events in AdaptiveBatches(stream, 500): ...; await batches.ack(events)``."""

    def __init__(self, stream: Any, max_size: int) -> None:
        if max_size < 1:
            raise ValueError("max_size must be at least 1")
        self.max_size = max_size
        self.stream = stream.noack()

    def _queue_empty(self) -> bool:
        queue = getattr(self.stream.channel, "queue", None)
        return queue is None or bool(queue.empty())

    async def __aiter__(self) -> AsyncIterator[list[Any]]:
        events = self.stream.events().__aiter__()
        batch: list[Any] = []
        upcoming: asyncio.Future[Any] | None = None
        try:
            while True:
                if not batch:  # nothing held: wait as long as it takes
                    try:
                        event = await (upcoming if upcoming is not None else events.__anext__())
                    except StopAsyncIteration:
                        return
                    upcoming = None
                else:  # a batch is open and the queue was not empty: the next record is there...
                    if upcoming is None:
                        upcoming = asyncio.ensure_future(events.__anext__())
                    done, _ = await asyncio.wait((upcoming,), timeout=SETTLE_S)
                    if not done:  # ...unless the queue was cleared: hand over what is held
                        yield batch
                        batch = []
                        continue
                    try:
                        event = upcoming.result()
                    except StopAsyncIteration:
                        yield batch
                        return
                    upcoming = None
                batch.append(event)
                if len(batch) >= self.max_size or self._queue_empty():
                    yield batch
                    batch = []
        finally:
            if upcoming is not None and not upcoming.done():
                upcoming.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await upcoming

    async def ack(self, events: Sequence[Any]) -> None:
        for event in events:
            await self.stream.ack(event)
