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
