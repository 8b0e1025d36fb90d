"""Adaptive batches from a Faust stream: everything already queued, up to a maximum, at once.

``stream.take(n, within=t)`` always waits up to ``t`` for a batch to fill, so under light load every
turn pays ``t`` of latency, twice on its way to the table (window agent, then sink). Here a batch
ends as soon as the stream's queue is empty (or it is full): under light load batches are small
and leave at once; under heavy load records pile up while the previous batch is processed, so
batches grow by themselves and the per-batch costs (a delivery round trip, one table write per
session) are shared by many records.

Records are never acknowledged by the iteration (``stream.noack()``); the caller acknowledges a
batch with :meth:`AdaptiveBatches.ack` once its effects are durable.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any


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
        batch: list[Any] = []
        async for event in self.stream.events():
            batch.append(event)
            if len(batch) >= self.max_size or self._queue_empty():
                yield batch
                batch = []

    async def ack(self, events: Sequence[Any]) -> None:
        for event in events:
            await self.stream.ack(event)
