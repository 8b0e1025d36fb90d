"""Send a batch's records with one delivery future per partition, not one per record.

Each ``producer.send`` of aiokafka looks the topic's partitions up (a new set per call), creates a
future and a callback per record, and the caller then gathers them all: in a profile of a worker
under load (docs/performance.md) that was about a tenth of its CPU, for records that the window
agent already holds as a batch. :func:`send_all` groups the records by topic and partition, fills
aiokafka batch builders (``create_batch`` / ``send_batch``, public API), and waits for one future
per builder.

Records land exactly where ``send`` would put them: an explicit partition is kept, a keyed record
goes where aiokafka's own partitioner sends its key (the same function, the same partition list),
a record without key and partition goes to a random available partition. Per partition, records
keep their order. The wait raises if any batch fails, like gathering the per-record futures did.

The aiokafka internals this needs (the producer inside Faust's, its partitioner, the metadata
wait) are read through :func:`pipeline.internals.internals`, which the app's start-up fills in
(:mod:`pipeline.compat.faust_internals`; a missing part is a :class:`~pipeline.internals.CompatError`).
A producer that is not Faust's aiokafka one (a stand-in in a unit test) gets the per-record path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka

from pipeline.internals import internals

Record = tuple[str, bytes | None, bytes | None, int | None]
"""(topic, key, value, partition or None)"""


async def _send_one_by_one(faust_producer: Any, records: Iterable[Record]) -> None:
    futures = [await faust_producer.send(topic, key, value, partition, None, None)
               for topic, key, value, partition in records]
    if futures:
        await asyncio.gather(*futures)


async def send_all(faust_producer: Any, records: Iterable[Record]) -> None:
    """Send ``records`` and return once the broker has every one (raises on a send failure)."""
    if not isinstance(faust_producer, faust_aiokafka.Producer):
        await _send_one_by_one(faust_producer, records)
        return
    access = internals()
    producer = access.batch_producer(faust_producer)
    grouped: dict[tuple[str, int], list[tuple[bytes | None, bytes | None]]] = {}
    partitions_of: dict[str, tuple[list[int], list[int]]] = {}
    partitioner = access.partitioner(producer)
    for topic, key, value, partition in records:
        if partition is None:
            known = partitions_of.get(topic)
            if known is None:
                known = partitions_of[topic] = await access.partitions(producer, topic)
            partition = partitioner(key, known[0], known[1])
        grouped.setdefault((topic, partition), []).append((key, value))
    if not grouped:
        return
    futures = []
    for (topic, partition), items in grouped.items():
        batch = producer.create_batch()
        for key, value in items:
            if batch.append(key=key, value=value, timestamp=None) is None:  # full: send it, start another
                batch.close()  # closed, so producer.send() cannot add to it either
                futures.append(await producer.send_batch(batch, topic, partition=partition))
                batch = producer.create_batch()
                batch.append(key=key, value=value, timestamp=None)  # a builder takes its first record whatever its size
        batch.close()
        futures.append(await producer.send_batch(batch, topic, partition=partition))
    await asyncio.gather(*futures)
