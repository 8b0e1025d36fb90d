"""AdaptiveBatches: what is queued goes out together, and an open batch never waits forever.

The stream here is a stand-in with the three things AdaptiveBatches uses (``noack()``,
``events()``, ``channel.queue``); the real thing runs in the stream and reliability tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pipeline.agents.batching import SETTLE_S, AdaptiveBatches


class QueueStream:
    """Events come from an asyncio queue; None ends the stream."""

    def __init__(self) -> None:
        self.channel = type("Channel", (), {})()
        self.channel.queue = asyncio.Queue()

    def noack(self) -> QueueStream:
        return self

    async def events(self) -> AsyncIterator[Any]:
        while True:
            item = await self.channel.queue.get()
            if item is None:
                return
            yield item


class ClearedStream(QueueStream):
    """One event, then the queue says it holds more but nothing ever comes: Faust cleared it."""

    async def events(self) -> AsyncIterator[Any]:
        self.channel.queue.put_nowait("phantom")  # not empty when the batch checks it
        yield "first"
        self.channel.queue.get_nowait()  # ...then cleared
        await asyncio.Event().wait()
        yield "never"  # pragma: no cover


async def take(batches: AdaptiveBatches, n: int) -> list[list[Any]]:
    out = []
    async for batch in batches:
        out.append(batch)
        if len(out) == n:
            break
    return out


def test_everything_queued_goes_in_one_batch_up_to_the_maximum() -> None:
    async def run() -> list[list[Any]]:
        stream = QueueStream()
        for i in range(7):
            stream.channel.queue.put_nowait(i)
        stream.channel.queue.put_nowait(None)
        return [b async for b in AdaptiveBatches(stream, 5)]

    assert asyncio.run(run()) == [[0, 1, 2, 3, 4], [5, 6]]


def test_an_open_batch_is_handed_over_when_its_queue_is_cleared() -> None:
    """Without this the worker hung on SIGTERM: Faust waits for taken records to be acknowledged."""

    async def run() -> list[list[Any]]:
        return await asyncio.wait_for(take(AdaptiveBatches(ClearedStream(), 100), 1), SETTLE_S * 40)

    assert asyncio.run(run()) == [["first"]]


def test_a_late_record_still_arrives_in_the_next_batch() -> None:
    async def run() -> list[list[Any]]:
        stream = QueueStream()
        batches = AdaptiveBatches(stream, 100)
        stream.channel.queue.put_nowait("a")
        stream.channel.queue.put_nowait("b")

        async def later() -> None:
            await asyncio.sleep(SETTLE_S * 3)
            stream.channel.queue.put_nowait("c")
            stream.channel.queue.put_nowait(None)

        task = asyncio.ensure_future(later())
        out = [b async for b in batches]
        await task
        return out

    assert asyncio.run(run()) == [["a", "b"], ["c"]]


def test_max_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        AdaptiveBatches(QueueStream(), 0)


# ----------------------------------------------------------------------------- on a stream with flow control


class FlowStream:
    """The parts of a Faust stream the listening batches use: ``app.flow_control`` (mode's, real),
    ``channel.queue`` (mode's ThrowableQueue, real, managed by that flow control as Faust's are),
    ``__aiter__`` yielding values and setting ``current_event`` (None for a non-event value)."""

    def __init__(self) -> None:
        from mode.utils.queues import FlowControlEvent, ThrowableQueue

        flow_control = FlowControlEvent(initially_suspended=False)
        self.app = type("App", (), {"flow_control": flow_control})()
        self.channel = type("Channel", (), {})()
        self.channel.queue = ThrowableQueue(maxsize=100, flow_control=flow_control, clear_on_resume=True)
        self.current_event: Any = None
        self.iterated = 0

    def noack(self) -> FlowStream:
        return self

    async def __aiter__(self) -> AsyncIterator[Any]:
        while True:
            item = await self.channel.queue.get()
            self.iterated += 1
            if item is None:
                return
            self.current_event = item if isinstance(item, str) else None  # events are strings here
            yield item


def test_with_flow_control_queued_events_go_out_together_without_timed_waits() -> None:
    async def run() -> list[list[Any]]:
        stream = FlowStream()
        for i in range(7):
            stream.channel.queue.put_nowait(f"e{i}")
        stream.channel.queue.put_nowait(None)
        batches = AdaptiveBatches(stream, 5)
        assert batches._listener is not None  # the listening path, not the timed one
        return [b async for b in batches]

    assert asyncio.run(run()) == [["e0", "e1", "e2", "e3", "e4"], ["e5", "e6"]]


class ClearableStream(FlowStream):
    """Like Faust's stream iterator, which yields to the loop before reading its queue: here for
    long enough that a clear lands in between."""

    async def __aiter__(self) -> AsyncIterator[Any]:
        first = True
        while True:
            if not first:
                await asyncio.sleep(0.05)
            first = False
            item = await self.channel.queue.get()
            if item is None:
                return
            self.current_event = item if isinstance(item, str) else None
            yield item


def test_a_flow_control_clear_hands_an_open_batch_over_at_once() -> None:
    """Faust clears its stream queues on a rebalance or a stop, then waits for the taken records to be
    acknowledged: an open batch must not wait for a record that will never come (the worker hung on
    SIGTERM before). Here "second" is queued when the batch decides to wait for it, then cleared."""

    async def run() -> tuple[list[Any], list[Any], int]:
        stream = ClearableStream()
        queue = stream.channel.queue
        queue.put_nowait("first")
        queue.put_nowait("second")
        it = AdaptiveBatches(stream, 100).__aiter__()

        async def clear_soon() -> None:
            await asyncio.sleep(0.01)
            stream.app.flow_control.clear()

        clearing = asyncio.ensure_future(clear_soon())
        first = await asyncio.wait_for(it.__anext__(), 5)  # hangs if nobody wakes the batch
        await clearing
        queue.put_nowait("later")
        later = await asyncio.wait_for(it.__anext__(), 5)
        return first, later, queue.qsize()

    first, later, left = asyncio.run(run())
    assert first == ["first"]
    assert later == ["later"]  # the marker did not end the stream or join a batch
    assert left == 0


def test_a_clear_with_no_batch_open_puts_no_marker() -> None:
    async def run() -> int:
        stream = FlowStream()
        batches = AdaptiveBatches(stream, 100)
        assert batches._listener is not None
        stream.app.flow_control.clear()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return stream.channel.queue.qsize()

    assert asyncio.run(run()) == 0


def test_on_a_real_faust_stream_the_batches_listen_to_its_flow_control() -> None:
    """The wiring against Faust's own classes (no broker needed): registered with the app's flow
    control, and a clear while a batch waits puts the marker into the queue the stream reads."""
    import faust

    from pipeline.agents.batching import WAKE

    async def run() -> tuple[bool, int, bool]:
        app = faust.App("t-batching", broker="kafka://127.0.0.1:1")
        stream = app.stream(app.topic("x", value_serializer="raw"))
        batches = AdaptiveBatches(stream, 10)
        registered = batches._listener in set(app.flow_control._queues)
        batches._waiting = True  # as while an open batch awaits its next record
        app.flow_control.clear()
        await asyncio.sleep(0)
        queue = batches.stream.channel.queue
        return registered, queue.qsize(), queue.get_nowait() is WAKE

    assert asyncio.run(run()) == (True, 1, True)
