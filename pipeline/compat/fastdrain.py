"""Hand fetched records to the streams without four asyncio tasks per record.

Faust's ``Consumer._drain_messages`` delivers every fetched record with
``await self.wait_first(callback(message), self.suspend_flow.wait())``: four tasks (the callback,
the flow event, the consumer's stopped and crashed events), an ``asyncio.wait`` and three
cancellations per record. A profile of a worker under load (bench, docs/performance.md) put that
dispatch plus the event-loop churn it causes at about a third of the worker's CPU, and because every
record went through the event loop on its own, the window agent saw batches of four to six records
and paid a delivery round trip for each.

:func:`drain_messages` is the same loop, except that the callback (Faust's conductor) first runs
inline. It almost never waits: it only moves the record into a stream's queue. When it does wait
(flow suspended for a rebalance, a full stream buffer, a full producer buffer), the rest of it runs
exactly as before, raced against ``suspend_flow`` by ``wait_first``, so a rebalance still abandons a
blocked delivery; after a delivery that waited for room in a full stream queue, the loop waits once
(also raced against ``suspend_flow``) until that queue is down to 40 % (:func:`queues_drained`),
so a backlog does not send every record through the slow path. Read offsets, gaps,
``commit_every`` and the yield every 100 records are unchanged. Records now reach the queues a
fetch at a time, so batches grow with the load. Records of a topic with a direct feed
(:mod:`pipeline.compat.direct_delivery`: the window and sink agents' inputs) skip the conductor and
the stream altogether and go into the feed, under the same flow checks.

It needs :mod:`pipeline.compat.recovery_order`. Delivering a whole fetch at once widened Faust's
end-of-recovery race (faust-streaming #596: records queued between the resume of the stream
partitions and the queue clear are thrown away unacknowledged) until the long crash run lost and
invented rows in 3 of 4 runs; with the consumer's flow stopped for that step it passed 16 of 16,
and 6 of 6 produced faster than the workers keep up (1 and 2 workers, 50,000 turns, 8 or more
SIGKILLs each; docs/guarantees.md).

After a fetch that delivered records, the loop pauses ``fetch_pause_ms`` (settings; 5 ms by
default) before fetching again. Delivered inline, a fetch is handed over in well under a
millisecond, so under moderate load the loop fetched again at once and got a handful of records
per request: the embedded broker then spent more CPU per turn on requests than the worker spent on
the turn (e.g. 430 vs 230 us at 2,000 turns/s), on a machine they share. With the pause each fetch
collects a few milliseconds of records; in the end-to-end bench (docs/performance.md) the one-worker
ladder went from keeping up at 4,000 turns/s to 5,000, median latency at 4,000 turns/s from 204 to
55 ms, and at 500 turns/s from 22 to 17 ms (the broker answers an empty fetch only after half its
wait, so a fetch that finds records waiting is also the quicker one). An idle stream does not
pause: an empty fetch already waited at the broker.

:func:`install` switches it on for one app (both ``kafka://`` and ``tansu://``). It refuses
(:class:`~pipeline.internals.CompatError`) when :mod:`pipeline.compat.recovery_order` is not
installed, since that combination lost rows in the crash runs, and when any Faust or mode internal
it uses is missing: the class parts at install, the consumer's own attributes when the app creates
its consumer. It never falls back to the stock loop.
"""

from __future__ import annotations

import asyncio
import functools
import types
from collections.abc import Awaitable, Coroutine
from typing import Any

from faust.tables.recovery import Recovery
from faust.transport import consumer as faust_consumer
from mode.utils.queues import FlowControlEvent, ThrowableQueue

from pipeline.compat import changelog_feed, direct_delivery, recovery_order
from pipeline.internals import CompatError, installed_versions, require

PATCH = "fastdrain"

PAUSE_ATTR = "_volunteer_fetch_pause_s"
CHANGELOG_ATTR = "_volunteer_changelog_direct"
FEED_ATTR = "_volunteer_changelog_feed"

CLASS_PARTS = ("_add_gap", "getmany", "wait_first", "commit", "sleep", "_drain_messages")
"""Methods of Faust's ``Consumer`` class the loop calls (or replaces), checked at install."""

INSTANCE_PARTS = ("_read_offset", "suspend_flow", "_commit_every", "diag", "callback", "_stopped",
                  "consumer_stopped_errors", "_n_acked", "app", "transport", "unacked")
"""Attributes a Faust consumer sets in its constructor, checked on the consumer the app creates."""


async def _until_done(fut: Awaitable[Any]) -> None:
    """Wait for ``fut`` without taking its result: the coroutine that awaited it reads that."""
    future = asyncio.ensure_future(fut)
    if future.done():
        return
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake(_: asyncio.Future[Any]) -> None:
        if not waiter.done():
            waiter.set_result(None)

    future.add_done_callback(wake)
    try:
        await waiter
    finally:
        future.remove_done_callback(wake)


async def finish(coro: Coroutine[Any, Any, Any], yielded: Any) -> Any:
    """Drive ``coro`` to the end after its first step (run by the caller) yielded ``yielded``.

    What a Task would do: wait for the future the coroutine is blocked on, then resume it; a
    cancellation is thrown into the coroutine, which decides what happens.
    """
    while True:
        try:
            try:
                if yielded is None:  # a bare yield (asyncio.sleep(0))
                    await asyncio.sleep(0)
                else:
                    await _until_done(yielded)
            except asyncio.CancelledError:
                yielded = coro.throw(asyncio.CancelledError())
                continue
            yielded = coro.send(None)
        except StopIteration as stop:
            return stop.value


def run_inline(coro: Coroutine[Any, Any, Any]) -> tuple[Any] | None:
    """Run ``coro``'s first step now: None if it finished, else a 1-tuple of what it is blocked on
    (which may itself be None, for a bare yield)."""
    try:
        yielded = coro.send(None)
    except StopIteration:
        return None
    return (yielded,)


def queues_drained(app: Any, tp: Any) -> asyncio.Future[None] | None:
    """A future set once every stream queue fed by ``tp`` is down to its pressure-drop size (40 %
    of ``stream_buffer_maxsize``), or None if they already are.

    A delivery that had to wait found its stream's queue full; the next record would wait too, and
    so would every record after it, each through ``wait_first``'s four tasks, for as long as the
    stream is the bottleneck (a backlog after a restart). Waiting once until the queue has room
    for many records lets the following ones go inline again.
    """
    for channel in app.topics._tp_index.get(tp, ()):
        queue: Any = channel.queue
        if queue.qsize() <= queue.pressure_drop_size:
            continue
        pending = queue._pending_pressure_drop_callbacks
        drained: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        pending.add(functools.partial(_wake, drained))  # called when a read brings it to the drop size
        return drained
    return None


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def drain_messages(self: Any, fetcher: Any) -> None:
    """``faust.transport.consumer.Consumer._drain_messages`` with inline delivery (see module doc)."""
    callback = self.callback
    getmany = self.getmany
    consumer_should_stop = self._stopped.is_set
    fetcher_should_stop = fetcher._stopped.is_set
    get_read_offset = self._read_offset.__getitem__
    set_read_offset = self._read_offset.__setitem__
    flag_consumer_fetching = faust_consumer.CONSUMER_FETCHING
    set_flag = self.diag.set_flag
    unset_flag = self.diag.unset_flag
    commit_every = self._commit_every
    acks_enabled_for = self.app.topics.acks_enabled_for
    suspend_flow = self.suspend_flow
    flow_suspended = suspend_flow.is_set
    streams_active = self.app.flow_control.is_active
    feeds = direct_delivery.feeds(self.app)  # the batch agents' topics (compat/direct_delivery.py)
    changelog = changelog_feed.feed(self.app) if getattr(self, CHANGELOG_ATTR, False) else None
    setattr(self, FEED_ATTR, changelog)  # what take_changelog_first hands each fetch to

    yield_every = 100
    num_since_yield = 0
    sleep = asyncio.sleep
    pause_s = getattr(self, PAUSE_ATTR, 0.0)

    try:
        while not (consumer_should_stop() or fetcher_should_stop()):
            set_flag(flag_consumer_fetching)
            ait = getmany(timeout=1.0)
            await self.sleep(0)
            delivered = 0
            if not self.should_stop:
                async for tp, message in ait:
                    delivered += 1
                    num_since_yield += 1
                    if num_since_yield > yield_every:
                        await sleep(0)
                        num_since_yield = 0
                    offset = message.offset
                    r_offset = get_read_offset(tp)
                    if r_offset is None or offset >= r_offset:
                        gap = offset - (r_offset or 0)
                        if gap > 1 and r_offset and acks_enabled_for(message.topic):
                            await self._add_gap(tp, r_offset + 1, offset)
                        if commit_every is not None and self._n_acked >= commit_every:
                            self._n_acked = 0
                            await self.commit()
                        # With the flow suspended the record is dropped, as when wait_first's flow
                        # event won: it is fetched again after the rebalance's seek.
                        feed = feeds.get(message.topic) if feeds else None
                        if feed is not None:
                            # Faust's stream queues take nothing while its flow control is suspended
                            # either: the record is fetched again after the seek that ends it.
                            if not flow_suspended() and streams_active() and feed.put(message):
                                await self.wait_first(feed.room(), suspend_flow.wait())
                        elif not flow_suspended():
                            coro = callback(message)
                            blocked = run_inline(coro)
                            if blocked is not None:
                                await self.wait_first(finish(coro, blocked[0]), suspend_flow.wait())
                                drained = queues_drained(self.app, tp)
                                if drained is not None and not flow_suspended():
                                    await self.wait_first(drained, suspend_flow.wait())
                        set_read_offset(tp, offset)
                if changelog is not None:
                    delivered += changelog.end_of_fetch()  # the records it took before getmany
                unset_flag(flag_consumer_fetching)
            if delivered and pause_s:
                await sleep(pause_s)  # let the next fetch collect more (see the module doc)
    except self.consumer_stopped_errors:
        if self.transport.app.should_stop:
            self.log.info("Broker stopped consumer, shutting down...")
            return
        raise
    except asyncio.CancelledError:
        if self.transport.app.should_stop:
            self.log.info("Consumer shutting down for user cancel.")
            return
        raise
    except Exception as exc:
        self.log.exception("Drain messages raised: %r", exc)
        raise
    finally:
        unset_flag(flag_consumer_fetching)


def patch_consumer(consumer: Any, pause_s: float = 0.0, changelog: bool = False) -> None:
    """Give one Faust consumer the inline drain loop, pausing ``pause_s`` after every fetch that
    delivered records, and with ``changelog`` applying a recovery's changelog records as fetched
    (:mod:`pipeline.compat.changelog_feed`); :class:`CompatError` if the consumer or its app's
    conductor lacks a part."""
    require(PATCH, consumer, *INSTANCE_PARTS, methods=CLASS_PARTS)
    require(PATCH, consumer.app.topics, "_tp_index")  # the conductor queues_drained reads
    require(PATCH, consumer.app.flow_control, methods=("is_active",))
    setattr(consumer, PAUSE_ATTR, pause_s)
    setattr(consumer, CHANGELOG_ATTR, changelog)
    consumer._drain_messages = types.MethodType(drain_messages, consumer)
    if changelog:
        take_changelog_first(consumer)


def take_changelog_first(consumer: Any) -> None:
    """Hand each fetch to the consumer's changelog feed before Faust's ``getmany`` sees it.

    ``getmany`` makes a Faust message of every record and reads the partition's high watermark
    for the monitor, per record; in a fresh worker's recovery of a million sessions that was
    more of the worker's CPU than applying the records (docs/performance.md, "A million
    sessions"). Wrapping the consumer's ``_wait_next_records`` (which ``getmany`` awaits for the
    fetch) lets :meth:`~pipeline.compat.changelog_feed.ChangelogFeed.take_fetch` apply the
    changelog partitions it serves straight from aiokafka's records and take them out of the
    fetch; ``getmany`` then delivers the rest as before. Nothing is awaited in between, so the
    fetch, the generation and the flow it is judged under are those ``getmany`` would judge it by.
    One thing ``getmany`` did for those records is no longer done: Faust's monitor is not told a
    taken changelog partition's high watermark (``track_tp_end_offset``); nothing in the project
    reads the monitor's end offsets, and the recovery keeps its own highwaters."""
    require(PATCH, consumer, "_buffered_partitions", "flow_active", "should_stop",
            methods=("_wait_next_records",))
    wait = consumer._wait_next_records

    async def _wait_next_records(timeout: float) -> Any:
        records, active_partitions = await wait(timeout)
        feed = getattr(consumer, FEED_ATTR, None)
        if records and feed is not None:
            feed.take_fetch(consumer, records, active_partitions)
        return records, active_partitions

    consumer._wait_next_records = _wait_next_records


def check_faust() -> None:
    """The class-level parts: Faust's consumer methods, its fetch flag, mode's queue callbacks."""
    require(PATCH, faust_consumer.Consumer, methods=CLASS_PARTS)
    require(PATCH, faust_consumer, "CONSUMER_FETCHING")
    require(PATCH, ThrowableQueue(maxsize=1, flow_control=FlowControlEvent()), "_pending_pressure_drop_callbacks", "pressure_drop_size",
            methods=("qsize",))


def install(app: Any, pause_s: float = 0.0, changelog: bool = False) -> None:
    """Patch the consumer ``app`` creates (lazily, on first use of ``app.consumer``).

    Refuses unless the recovery-order correction is installed: inline delivery of whole fetches
    widened faust #596 until the long crash run lost and invented rows (module doc).
    """
    if not recovery_order.installed():
        raise CompatError(f"compat patch {PATCH}: refusing to install without the {recovery_order.PATCH} "
                          f"correction (inline delivery lost rows without it; {installed_versions()})")
    check_faust()
    if changelog:
        changelog_feed.check_recovery(Recovery)
    require(PATCH, app, methods=("_new_consumer",))
    original = app._new_consumer

    def _new_consumer() -> Any:
        consumer = original()
        patch_consumer(consumer, pause_s, changelog)
        return consumer

    app._new_consumer = _new_consumer
    direct_delivery.enable(app)  # this loop is what hands records to the direct feeds
