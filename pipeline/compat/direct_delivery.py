"""Hand the records of the batch agents' topics to them a fetch at a time, past Faust's per-record path.

Faust moves every fetched record through the conductor (a lock, the flow-control and producer
waits, the topic's schema decoding key and value, an ``Event``, the stream's queue), then the
stream's iterator (sensors, the current-event context), then our batch iterator, which gathers the
records back into a list; acknowledging goes back through the event and the stream (two more
sensor calls per record). The window and sink agents only want the raw key, value, partition and
offset of a batch of records, and acknowledge the batch as a whole. In a worker's burst profile
those layers were about a fifth of its CPU (docs/performance.md, goal 2).

A :class:`DirectFeed` is registered for such a topic while the agents are wired (:func:`feed`,
reached through :meth:`pipeline.internals.Internals.direct_feed`), before the consumer exists, and
:func:`pipeline.compat.fastdrain.drain_messages` puts each record of that topic into the feed
instead of calling the conductor. What the stock path does that matters is kept:

- a record goes into a feed only while the consumer's flow *and* Faust's flow control are active.
  One fetched while either is stopped is dropped, as the stock path drops (or holds) it, and is
  fetched again: every suspension ends with Faust seeking the stream partitions to their committed
  offsets (:mod:`pipeline.compat.recovery_order` makes that seek cover every partition);
- a feed is cleared whenever Faust clears its stream queues (it is one of the queues of
  ``app.flow_control``: at a rebalance and when a recovery completes), so queued records that Faust
  would throw away are thrown away here too, and fetched again after the seek;
- a record handed to the agent is tracked as unacknowledged (``consumer.unacked``, which a
  rebalance waits on, exactly as a stream tracks what it takes from its queue) and stamps the
  stream's inbound time (Faust's slow-processing check reads it);
- acknowledging is ``Message.ack``: the consumer's own offset bookkeeping decides what is
  committed, so commits, gaps and the livelock checks stay Faust's;
- a feed holds at most ``max_queued`` records; at that size the drain loop waits (raced against the
  flow stopping, as for a full stream queue) until the agent has taken a batch.

A topic with a feed has no other reader in the worker: its agent's Faust stream is never fed (the
topology gives each input topic one agent). :func:`feed` refuses an app whose consumer is not the
fastdrain one: without that loop nothing would reach the feed, and the topic would silently stall.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any

from pipeline.internals import CompatError, installed_versions, require

PATCH = "direct-delivery"

ROUTES_ATTR = "_volunteer_direct_feeds"
"""The app's ``{topic name: DirectFeed}``, read by the fastdrain loop."""

ENABLED_ATTR = "_volunteer_direct_enabled"
"""Set on an app whose consumer will run the fastdrain loop (by :func:`enable`)."""

QUEUED_PER_BATCH = 4
"""A feed holds up to this many batches of records before the drain loop waits."""


class DirectFeed:
    """One topic's records, fetched and not yet taken, and the batches the agent takes of them.

    Drain side (the consumer's fetch loop, same event loop): :meth:`put`, :meth:`room`. Faust's
    flow control: :meth:`clear`. Agent side: ``async for batch in feed`` and :meth:`ack`.
    """

    def __init__(self, app: Any, topic: str, max_batch: int, max_queued: int) -> None:
        if max_batch < 1 or max_queued < max_batch:
            raise ValueError("a feed needs max_batch >= 1 and max_queued >= max_batch")
        self.app = app
        self.topic = topic
        self.max_batch = max_batch
        self.max_queued = max_queued
        self._queue: deque[Any] = deque()
        self._reader: asyncio.Future[None] | None = None  # the agent waiting for records
        self._room: asyncio.Future[None] | None = None  # the drain loop waiting for room
        self.cleared = 0  # records thrown away by flow-control clears (tests, logs)

    def __len__(self) -> int:
        return len(self._queue)

    # ---------------------------------------------------------------- the drain loop's side

    def put(self, message: Any) -> bool:
        """Queue one fetched record; True when the feed is now full (await :meth:`room`)."""
        queue = self._queue
        queue.append(message)
        reader = self._reader
        if reader is not None and not reader.done():
            reader.set_result(None)
        return len(queue) >= self.max_queued

    def room(self) -> asyncio.Future[None]:
        """A future set once the feed is below ``max_queued`` again (already set if it is)."""
        room = self._room
        if room is None or room.done():
            room = self._room = asyncio.get_running_loop().create_future()
        if len(self._queue) < self.max_queued:
            room.set_result(None)
        return room

    def _wake_drain(self) -> None:
        room = self._room
        if room is not None and not room.done() and len(self._queue) < self.max_queued:
            room.set_result(None)

    # ---------------------------------------------------------------- Faust's flow control

    def clear(self) -> None:
        """Drop every queued record (called by ``app.flow_control`` with its stream queues)."""
        self.cleared += len(self._queue)
        self._queue.clear()
        self._wake_drain()

    # ---------------------------------------------------------------- the agent's side

    def __aiter__(self) -> AsyncIterator[list[Any]]:
        return self._batches()

    async def _batches(self) -> AsyncIterator[list[Any]]:
        loop = asyncio.get_running_loop()
        queue = self._queue
        while True:
            while not queue:
                reader = self._reader = loop.create_future()
                try:
                    await reader
                finally:
                    self._reader = None
            yield self.take()

    def take(self) -> list[Any]:
        """Up to ``max_batch`` queued records, now tracked as unacknowledged (empty if none)."""
        queue = self._queue
        popleft = queue.popleft
        batch = [popleft() for _ in range(min(len(queue), self.max_batch))]
        self._wake_drain()
        if batch:
            consumer = self.app.consumer
            track = consumer.unacked.add
            for message in batch:
                track(message)
            inbound = self.app.monitor.stream_inbound_time
            now = time.monotonic()
            for tp in {message.tp for message in batch}:
                inbound[tp] = now
        return batch

    async def ack(self, batch: Sequence[Any]) -> None:
        """Acknowledge a batch taken from this feed (its offsets may now be committed)."""
        consumer = self.app.consumer
        for message in batch:
            message.ack(consumer)


def feeds(app: Any) -> dict[str, DirectFeed]:
    """The app's feeds by topic name (empty when none is registered)."""
    found: dict[str, DirectFeed] | None = getattr(app, ROUTES_ATTR, None)
    return found if found is not None else {}


def enable(app: Any) -> None:
    """Mark ``app`` as one whose consumer runs the fastdrain loop (called by its install)."""
    setattr(app, ENABLED_ATTR, True)
    if not hasattr(app, ROUTES_ATTR):
        setattr(app, ROUTES_ATTR, {})


def feed(app: Any, topic: Any, max_batch: int) -> DirectFeed:
    """Register and return the feed of ``topic`` (a Faust topic with one name) for one batch agent."""
    if not getattr(app, ENABLED_ATTR, False):
        raise CompatError(f"compat patch {PATCH}: the app's consumer does not run the fastdrain loop, so no "
                          f"record would reach a direct feed ({installed_versions()})")
    require(PATCH, type(app), "monitor", "consumer")  # on the class: reading them would create them now
    require(PATCH, app, "flow_control")
    require(PATCH, app.flow_control, methods=("manage_queue", "is_active"))
    require(PATCH, topic, "topics")
    names = tuple(topic.topics)
    if len(names) != 1:
        raise CompatError(f"compat patch {PATCH}: a direct feed reads one topic, not {names!r}")
    name = names[0]
    routes: dict[str, DirectFeed] = getattr(app, ROUTES_ATTR)  # made by enable()
    if name in routes:
        raise CompatError(f"compat patch {PATCH}: topic {name!r} already has a direct feed (one reader per topic)")
    buffer = int(getattr(app.conf, "stream_buffer_maxsize", 0) or 0)
    created = DirectFeed(app, name, max_batch, max(QUEUED_PER_BATCH * max_batch, buffer))
    app.flow_control.manage_queue(created)  # a weak reference there: ``routes`` keeps the feed alive
    routes[name] = created
    return created
