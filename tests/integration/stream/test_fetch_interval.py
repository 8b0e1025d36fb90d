"""The fetch interval (pipeline.compat.fetch_interval) on a real embedded broker and aiokafka
consumer: the records of a Fetch reach ``getmany`` while that Fetch still holds the node's next
one, a record produced during the hold is not fetched before the hold ends, and every record
arrives, in order, once it has."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from pipeline.compat import fetch_interval
from pipeline.embedded.tansu import EmbeddedBroker
from tests.integration.stream.fetch_clients import fetch_clients
from tests.integration.stream.test_tansu_quirks import create_topic, run
from topics import tansu_client

pytestmark = pytest.mark.integration

HOLD_MS = 1_500


def test_records_come_at_once_and_the_next_fetch_waits_for_the_interval(embedded_broker: EmbeddedBroker) -> None:
    async def scenario() -> tuple[list[bytes], bool, list[bytes], list[bytes]]:
        async with fetch_clients(embedded_broker) as (producer, consumer):
            tp = TopicPartition("fi", 0)
            consumer.assign([tp])
            ends = await tansu_client.end_offsets(consumer, [tp], embedded=True)
            consumer.seek(tp, ends[tp])
            fetcher: Any = consumer._fetcher
            assert fetch_interval.attach(fetcher, HOLD_MS)
            await consumer.getmany(timeout_ms=100)  # positions settle
            await producer.send_and_wait("fi", b"first", partition=0)
            got = await consumer.getmany(timeout_ms=10_000)
            first = [m.value for m in got.get(tp, [])]
            held = bool(fetcher._in_flight)  # the Fetch that brought it is still holding the node
            await producer.send_and_wait("fi", b"second", partition=0)
            during = [m.value for m in (await consumer.getmany(timeout_ms=200)).get(tp, [])]
            after: list[bytes] = []
            while not after:
                after = [m.value for m in (await consumer.getmany(timeout_ms=10_000)).get(tp, [])]
            return first, held, during, after

    run(create_topic(embedded_broker.bootstrap, "fi", 1))
    first, held, during, after = run(scenario())
    assert first == [b"first"]
    assert held
    assert during == []  # produced during the hold: waits for the next Fetch
    assert after == [b"second"]


def test_an_unassignment_cancels_a_held_fetch(embedded_broker: EmbeddedBroker) -> None:
    async def scenario() -> tuple[bool, bool]:
        async with fetch_clients(embedded_broker) as (producer, consumer):
            tp = TopicPartition("fi-unassign", 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            fetcher: Any = consumer._fetcher
            assert fetch_interval.attach(fetcher, 60_000)
            await producer.send_and_wait("fi-unassign", b"x", partition=0)
            while not await consumer.getmany(timeout_ms=10_000):
                pass
            held = bool(fetcher._pending_tasks)
            consumer.assign([])  # what a rebalance does: the fetcher cancels its fetch tasks
            for _ in range(200):
                if not any(not task.done() for task in fetcher._pending_tasks):
                    break
                await asyncio.sleep(0.01)
            return held, all(task.done() for task in fetcher._pending_tasks)

    run(create_topic(embedded_broker.bootstrap, "fi-unassign", 1))
    held, cancelled = run(scenario())
    assert held
    assert cancelled  # never the whole minute: the hold is cancelled with its task


BACKLOG = 500


async def _fill(producer: AIOKafkaProducer, topic: str) -> None:
    """Put BACKLOG records into ``topic``'s partition 0."""
    for i in range(BACKLOG):
        await producer.send(topic, b"%d" % i, partition=0)
    await producer.flush()


async def _take_all(consumer: AIOKafkaConsumer, tp: TopicPartition, count: int) -> list[bytes]:
    taken: list[bytes] = []
    while len(taken) < count:
        taken += [m.value for m in (await consumer.getmany(tp, timeout_ms=10_000)).get(tp, [])]
    return taken


def test_the_hold_is_chosen_from_the_records_the_fetches_found(embedded_broker: EmbeddedBroker) -> None:
    async def scenario(from_rate: float) -> tuple[int, float, list[bytes], list[bytes]]:
        topic = f"fi-rate-{int(from_rate)}"
        async with fetch_clients(embedded_broker) as (producer, consumer):
            await _fill(producer, topic)
            fetcher: Any = consumer._fetcher
            tp = TopicPartition(topic, 0)
            load = fetch_interval.attach(fetcher, 60_000, from_rate=from_rate, window_s=0)
            assert load is not None
            consumer.assign([tp])
            consumer.seek(tp, 0)
            backlog = await _take_all(consumer, tp, BACKLOG)
            await producer.send_and_wait(topic, b"more", partition=0)
            if load.hold_for_s:  # held for the minute: the record waits for the next Fetch
                later = [m.value for m in (await consumer.getmany(tp, timeout_ms=300)).get(tp, [])]
            else:
                later = await _take_all(consumer, tp, 1)
            return load.found, load.hold_for_s, backlog, later

    expected = [b"%d" % i for i in range(BACKLOG)]
    run(create_topic(embedded_broker.bootstrap, "fi-rate-1", 1))
    found, hold, backlog, later = run(scenario(1))  # any backlog found in less than 500 s is over 1/s
    assert found >= BACKLOG  # each partition's high watermark past the fetch offset
    assert hold == 60.0
    assert backlog == expected
    assert later == []  # the Fetch that would bring it is held
    run(create_topic(embedded_broker.bootstrap, "fi-rate-1000000000", 1))
    found, hold, backlog, later = run(scenario(1e9))  # the same records, far below that rate
    assert found >= BACKLOG
    assert hold == 0.0
    assert backlog == expected
    assert later == [b"more"]  # fetched without a hold


def test_records_not_taken_within_the_hold_stop_the_holds(embedded_broker: EmbeddedBroker) -> None:
    async def scenario() -> tuple[float, int, float, list[bytes]]:
        topic = "fi-busy"
        async with fetch_clients(embedded_broker) as (producer, consumer):
            await _fill(producer, topic)
            fetcher: Any = consumer._fetcher
            tp = TopicPartition(topic, 0)
            # from_rate 0: the whole interval after every Fetch with records; one window: busy() sticks
            load = fetch_interval.attach(fetcher, 50, from_rate=0, window_s=3600)
            assert load is not None
            held = load.hold_for_s
            consumer.assign([tp])
            consumer.seek(tp, 0)
            for _ in range(1000):  # the first Fetch buffers records nobody takes, its hold ends with them untaken
                if not load.hold_for_s:
                    break
                await asyncio.sleep(0.01)
            return held, load.found, load.hold_for_s, await _take_all(consumer, tp, BACKLOG)

    run(create_topic(embedded_broker.bootstrap, "fi-busy", 1))
    held, found, after, taken = run(scenario())
    assert held == 0.05
    assert found >= BACKLOG  # the Fetch that brought them was held...
    assert after == 0.0  # ...and its records were still there when the hold ended: no more holds in this window
    assert taken == [b"%d" % i for i in range(BACKLOG)]
