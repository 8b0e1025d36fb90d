"""Producing Turn records and reading topics from outside a worker (feed, watch, demo, tests, bench).

Reading uses explicit partition assignment (no consumer group): a reader never joins the workers'
group, never commits, and "from the end" means the true log end, also on the embedded broker
(quirk 3, :func:`pipeline.embedded.tansu_client.end_offsets`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from pipeline.settings import Settings
from topics import tansu_client
from topics.clients import make_consumer, make_producer
from topics.records import Turn


async def send_records(producer: AIOKafkaProducer, topic: str, items: Iterable[tuple[bytes | None, bytes]],
                       *, window: int = 10_000) -> int:
    """Send ``(key, value)`` pairs, waiting for delivery every ``window`` records; returns the count."""
    pending: list[asyncio.Future[Any]] = []
    count = 0
    for key, value in items:
        pending.append(await producer.send(topic, value, key=key))
        count += 1
        if len(pending) >= window:
            await asyncio.gather(*pending)
            pending.clear()
    if pending:
        await asyncio.gather(*pending)
    return count


def turn_items(turns: Iterable[Turn]) -> Iterable[tuple[bytes, bytes]]:
    for turn in turns:
        yield turn.session_id.encode("utf-8"), turn.to_json()


async def produce_turns(settings: Settings, turns: Iterable[Turn]) -> int:
    """Send Turn records to ``settings.topic_turns`` keyed by session id; returns how many."""
    producer = make_producer(settings)
    await producer.start()
    try:
        return await send_records(producer, settings.topic_turns, turn_items(turns))
    finally:
        await producer.stop()


@dataclass(frozen=True, slots=True)
class Received:
    """One record read from a topic."""

    key: bytes | None
    value: bytes | None
    partition: int
    offset: int
    timestamp_ms: int


class TopicReader:
    """Reads every partition of one topic by assignment. ``async with TopicReader(...) as r``."""

    def __init__(self, settings: Settings, topic: str, *, from_beginning: bool = True) -> None:
        self.settings = settings
        self.topic = topic
        self.from_beginning = from_beginning
        self.consumer: AIOKafkaConsumer | None = None
        self.partitions: list[TopicPartition] = []

    async def __aenter__(self) -> TopicReader:
        consumer = make_consumer(self.settings, enable_auto_commit=False, auto_offset_reset="earliest")
        try:
            await consumer.start()
        except BaseException:
            await consumer.stop()
            raise
        self.consumer = consumer
        try:
            parts = await self._wait_for_partitions(consumer)
            self.partitions = [TopicPartition(self.topic, p) for p in sorted(parts)]
            consumer.assign(self.partitions)
            if self.from_beginning:
                await consumer.seek_to_beginning(*self.partitions)
            else:
                ends = await tansu_client.end_offsets(consumer, self.partitions, self.settings.broker_is_embedded)
                for tp in self.partitions:
                    consumer.seek(tp, ends[tp])
        except BaseException:
            await consumer.stop()
            self.consumer = None
            raise
        return self

    async def _wait_for_partitions(self, consumer: AIOKafkaConsumer) -> set[int]:
        for _ in range(50):
            await consumer.topics()  # refreshes the metadata
            parts = consumer.partitions_for_topic(self.topic)
            if parts:
                return set(parts)
            await asyncio.sleep(0.1)
        raise LookupError(f"topic {self.topic!r} does not exist on {self.settings.broker}")

    async def __aexit__(self, *exc: object) -> None:
        if self.consumer is not None:
            await self.consumer.stop()
            self.consumer = None

    async def batches(self, timeout_ms: int = 200) -> AsyncIterator[list[Received]]:
        """Yield lists of records as they arrive (an empty list after ``timeout_ms`` of silence)."""
        assert self.consumer is not None, "use 'async with'"
        while True:
            got = await self.consumer.getmany(timeout_ms=timeout_ms, max_records=5000)
            batch = [Received(r.key, r.value, r.partition, r.offset, r.timestamp)
                     for records in got.values() for r in records]
            yield batch


async def read_all(settings: Settings, topic: str, *, expect: int | None = None, idle_s: float = 1.0,
                   timeout_s: float = 60.0) -> list[Received]:
    """Everything in ``topic``: stops at ``expect`` records, or after ``idle_s`` without new ones."""
    out: list[Received] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    last_new = loop.time()
    async with TopicReader(settings, topic, from_beginning=True) as reader:
        async for batch in reader.batches(timeout_ms=100):
            if batch:
                out.extend(batch)
                last_new = loop.time()
            now = loop.time()
            if expect is not None and len(out) >= expect:
                break
            if expect is None and now - last_new >= idle_s:
                break
            if now > deadline:
                break
    return out
