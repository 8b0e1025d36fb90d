"""The direct feeds of pipeline.compat.direct_delivery, on a real Faust app (never started: no broker).

What must hold: a batch leaves as soon as one record is queued and holds at most ``max_batch``;
what is taken is tracked as unacknowledged and stamps the stream's inbound time; Faust's flow
control clears a feed with its stream queues; the drain loop is told to wait at ``max_queued`` and
woken once the agent took a batch; acknowledging goes through the consumer's offset bookkeeping.
"""

from __future__ import annotations

import asyncio
from typing import Any

import faust
import pytest
from faust.transport.consumer import ConsumerMessage
from faust.types import TP

from pipeline.compat import direct_delivery
from pipeline.internals import CompatError


def new_app() -> Any:
    app = faust.App("direct-feed-test", broker="kafka://127.0.0.1:9", autodiscover=False)
    direct_delivery.enable(app)
    return app


def message(topic: str, partition: int, offset: int) -> ConsumerMessage:
    return ConsumerMessage(topic, partition, offset, 0.0, 0, [], b"key", b"value", None, 3, 5, TP(topic, partition))


def test_a_feed_needs_the_fastdrain_loop_and_one_reader_per_topic() -> None:
    plain = faust.App("no-fastdrain", broker="kafka://127.0.0.1:9", autodiscover=False)
    with pytest.raises(CompatError, match="fastdrain"):
        direct_delivery.feed(plain, plain.topic("turns"), 10)
    app = new_app()
    direct_delivery.feed(app, app.topic("turns"), 10)
    with pytest.raises(CompatError, match="already has a direct feed"):
        direct_delivery.feed(app, app.topic("turns"), 10)
    with pytest.raises(CompatError, match="one topic"):
        direct_delivery.feed(app, app.topic("a", "b"), 10)
    assert set(direct_delivery.feeds(app)) == {"turns"}


def test_batches_leave_at_once_hold_at_most_max_batch_and_are_tracked() -> None:
    app = new_app()
    feed = direct_delivery.feed(app, app.topic("turns"), 3)

    async def main() -> list[list[int]]:
        batches: list[list[int]] = []
        iterator = feed.__aiter__()
        waiting = asyncio.ensure_future(iterator.__anext__())
        await asyncio.sleep(0)
        assert not waiting.done()  # nothing queued: the agent waits
        feed.put(message("turns", 0, 0))
        first = await asyncio.wait_for(waiting, 1)  # one record is enough for a batch
        batches.append([m.offset for m in first])
        for offset in range(1, 6):
            feed.put(message("turns", offset % 2, offset))
        batches.append([m.offset for m in await iterator.__anext__()])
        batches.append([m.offset for m in await iterator.__anext__()])
        assert all(m in app.consumer.unacked for m in first)
        return batches

    assert asyncio.run(main()) == [[0], [1, 2, 3], [4, 5]]
    inbound = app.monitor.stream_inbound_time
    assert set(inbound) == {TP("turns", 0), TP("turns", 1)}


def test_the_drain_loop_waits_at_max_queued_until_a_batch_is_taken() -> None:
    app = new_app()
    feed = direct_delivery.feed(app, app.topic("turns"), 2)
    assert feed.max_queued >= 8  # at least QUEUED_PER_BATCH batches, or Faust's stream buffer

    async def main() -> None:
        full = [feed.put(message("turns", 0, n)) for n in range(feed.max_queued)]
        assert full[-1] and not any(full[:-1])
        room = feed.room()
        assert not room.done()
        assert len(feed.take()) == 2
        assert room.done()
        assert feed.room().done()  # below the limit: no wait at all

    asyncio.run(main())


def test_faust_flow_control_clears_a_feed_with_its_stream_queues() -> None:
    app = new_app()
    feed = direct_delivery.feed(app, app.topic("turns"), 5)

    async def main() -> None:
        for n in range(feed.max_queued):
            feed.put(message("turns", 0, n))
        room = feed.room()
        app.flow_control.clear()  # what a rebalance does
        assert len(feed) == 0 and feed.cleared == feed.max_queued
        assert room.done()  # the drain loop is not left waiting for room
        feed.put(message("turns", 0, 99))
        app.flow_control.resume()  # a completed recovery clears the queues too
        assert len(feed) == 0 and feed.take() == []

    asyncio.run(main())


def test_acknowledging_a_batch_goes_through_the_consumers_offsets() -> None:
    app = new_app()
    feed = direct_delivery.feed(app, app.topic("turns"), 10)
    consumer = app.consumer
    consumer.app.topics._acking_topics.add("turns")
    tp = TP("turns", 0)
    consumer._committed_offset[tp] = None

    async def main() -> list[ConsumerMessage]:
        for offset in range(3):
            feed.put(message("turns", 0, offset))
        batch = feed.take()
        await feed.ack(batch)
        return batch

    batch = asyncio.run(main())
    assert all(m.acked for m in batch)
    assert sorted(consumer._acked[tp]) == [0, 1, 2]
    assert not any(m in consumer.unacked for m in batch)


def test_registering_a_feed_creates_neither_the_consumer_nor_the_monitor() -> None:
    app = new_app()
    direct_delivery.feed(app, app.topic("turns"), 10)
    assert app._consumer is None and app._monitor is None  # both are made when the worker starts
