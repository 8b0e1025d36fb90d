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
from tests.integration.stream.test_tansu_quirks import create_topic, run
from topics import tansu_client

pytestmark = pytest.mark.integration

HOLD_MS = 1_500


def test_records_come_at_once_and_the_next_fetch_waits_for_the_interval(embedded_broker: EmbeddedBroker) -> None:
    async def scenario() -> tuple[list[bytes], bool, list[bytes], list[bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=embedded_broker.bootstrap)
        consumer = AIOKafkaConsumer(bootstrap_servers=embedded_broker.bootstrap,
                                    fetch_max_wait_ms=tansu_client.FETCH_MAX_WAIT_MS, enable_auto_commit=False)
        await producer.start()
        await consumer.start()
        try:
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
        finally:
            await consumer.stop()
            await producer.stop()

    run(create_topic(embedded_broker.bootstrap, "fi", 1))
    first, held, during, after = run(scenario())
    assert first == [b"first"]
    assert held
    assert during == []  # produced during the hold: waits for the next Fetch
    assert after == [b"second"]


def test_an_unassignment_cancels_a_held_fetch(embedded_broker: EmbeddedBroker) -> None:
    async def scenario() -> tuple[bool, bool]:
        producer = AIOKafkaProducer(bootstrap_servers=embedded_broker.bootstrap)
        consumer = AIOKafkaConsumer(bootstrap_servers=embedded_broker.bootstrap,
                                    fetch_max_wait_ms=tansu_client.FETCH_MAX_WAIT_MS, enable_auto_commit=False)
        await producer.start()
        await consumer.start()
        try:
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
        finally:
            await consumer.stop()
            await producer.stop()

    run(create_topic(embedded_broker.bootstrap, "fi-unassign", 1))
    held, cancelled = run(scenario())
    assert held
    assert cancelled  # never the whole minute: the hold is cancelled with its task
