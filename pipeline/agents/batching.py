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
tests/reliability/test_limits.py). On a Faust stream, the batches listen for that clear: they
register with the app's flow control, which clears the queues it manages, and when a clear finds
a batch waiting for its next record they put a wake-up marker into the emptied queue; the stream
yields it like a value without an event, and the batch is handed over as it is. Waiting for the
next record is then a plain await: a task and a timed wait per record cost ~10 us of the ~135 us
a worker spends per turn. A stream without flow control (a stand-in in a test) gets the timed
wait instead: the next record is awaited for at most :data:`SETTLE_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from pipeline.agents.batch_types import InRecord, in_records, message_records
from pipeline.internals import DirectFeed

SETTLE_S = 0.05
"""Longest wait for the next queued record while a batch is open, on a stream without flow
control (only a cleared queue waits)."""

WAKE = object()
"""What a cleared queue receives while a batch waits on it: the stream yields it without an event."""


class _ClearListener:
    """Registered with Faust's flow control as if it were a queue: its ``clear`` is our signal."""

    def __init__(self, batches: AdaptiveBatches) -> None:
        self.batches = batches

    def clear(self) -> None:
        self.batches._queue_cleared()


class AdaptiveBatches:
    """``async for events in AdaptiveBatches(stream, 500): ...; await batches.ack(events)``."""

    def __init__(self, stream: Any, max_size: int) -> None:
        if max_size < 1:
            raise ValueError("max_size must be at least 1")
        self.max_size = max_size
        self.stream = stream.noack()
        self._waiting = False  # a batch is open and its next record is being awaited
        self._wake_scheduled = False
        self._listener: _ClearListener | None = None
        flow_control: Any = getattr(getattr(self.stream, "app", None), "flow_control", None)
        if hasattr(flow_control, "manage_queue") and self._queue() is not None:
            self._listener = _ClearListener(self)  # held here: flow control keeps a weak reference
            flow_control.manage_queue(self._listener)

    def _queue(self) -> Any:
        return getattr(getattr(self.stream, "channel", None), "queue", None)

    def _queue_empty(self) -> bool:
        queue = self._queue()
        return queue is None or bool(queue.empty())

    def _queue_cleared(self) -> None:
        # Flow control clears its queues one by one, ours may not be done yet: wake after the clear.
        if self._waiting and not self._wake_scheduled:
            self._wake_scheduled = True
            asyncio.get_running_loop().call_soon(self._wake)

    def _wake(self) -> None:
        self._wake_scheduled = False
        queue = self._queue()
        if self._waiting and queue is not None and queue.empty():
            getattr(queue, "force_put_nowait", queue.put_nowait)(WAKE)

    def __aiter__(self) -> AsyncIterator[list[Any]]:
        return self._listening() if self._listener is not None else self._timed()

    async def _listening(self) -> AsyncIterator[list[Any]]:
        stream = self.stream
        values = stream.__aiter__()
        batch: list[Any] = []
        while True:
            self._waiting = bool(batch)
            try:
                await values.__anext__()
            except StopAsyncIteration:
                if batch:
                    yield batch
                return
            finally:
                self._waiting = False
            event = stream.current_event
            if event is None:  # the wake-up marker: the queue was cleared under an open batch
                if batch:
                    yield batch
                    batch = []
                continue
            batch.append(event)
            if len(batch) >= self.max_size or self._queue_empty():
                yield batch
                batch = []

    async def _timed(self) -> AsyncIterator[list[Any]]:
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

    def records(self, events: Sequence[Any]) -> list[InRecord]:
        return in_records(events)

    async def ack(self, events: Sequence[Any]) -> None:
        for event in events:
            await self.stream.ack(event)


class DirectBatches:
    """The batches of a topic's direct feed (``settings.direct_delivery``): Faust's messages, handed
    over a fetch at a time without an event, a stream or the conductor per record
    (:mod:`pipeline.compat.direct_delivery`, reached through :func:`pipeline.internals.internals`).
    Batches leave as :class:`AdaptiveBatches` ones do: whatever is queued, up to the maximum, at once."""

    def __init__(self, feed: DirectFeed) -> None:
        self.feed = feed

    def __aiter__(self) -> AsyncIterator[list[Any]]:
        return self.feed.__aiter__()

    def records(self, batch: Sequence[Any]) -> list[InRecord]:
        return message_records(batch)

    async def ack(self, batch: Sequence[Any]) -> None:
        await self.feed.ack(batch)


class TimedBatches:
    """``stream.noack_take(max_size, within=within)``: up to ``max_size`` records or whatever came
    within ``within`` seconds, acknowledged by :meth:`ack` like :class:`AdaptiveBatches`. For an
    agent whose batches do not have to leave at once (the page opens)."""

    def __init__(self, stream: Any, max_size: int, within: float) -> None:
        if max_size < 1:
            raise ValueError("max_size must be at least 1")
        self.stream = stream
        self.max_size = max_size
        self.within = within

    def __aiter__(self) -> AsyncIterator[list[Any]]:
        batches: AsyncIterator[list[Any]] = self.stream.noack_take(self.max_size, within=self.within).__aiter__()
        return batches

    def records(self, events: Sequence[Any]) -> list[InRecord]:
        return in_records(events)

    async def ack(self, events: Sequence[Any]) -> None:
        for event in events:
            await self.stream.ack(event)
