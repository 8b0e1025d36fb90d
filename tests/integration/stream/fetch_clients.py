"""The clients the fetch-patch tests share: a started producer and a plain aiokafka consumer that
fetches with the embedded broker's short wait (docs/streaming.md, quirk 4), so each test attaches
only the patch it is about to that consumer's fetcher."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from pipeline.embedded.tansu import EmbeddedBroker
from topics import tansu_client


@asynccontextmanager
async def fetch_clients(broker: EmbeddedBroker) -> AsyncIterator[tuple[AIOKafkaProducer, AIOKafkaConsumer]]:
    """``(producer, consumer)``, both started, stopped on the way out (the consumer first)."""
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap,
                                fetch_max_wait_ms=tansu_client.FETCH_MAX_WAIT_MS, enable_auto_commit=False)
    await producer.start()
    try:
        await consumer.start()
        try:
            yield producer, consumer
        finally:
            await consumer.stop()
    finally:
        await producer.stop()
