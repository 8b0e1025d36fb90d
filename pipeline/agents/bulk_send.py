"""Send a batch's records with one delivery future per partition, not one per record.

Each ``producer.send`` of aiokafka looks the topic's partitions up (a new set per call), creates a
future and a callback per record, and the caller then gathers them all: in a profile of a worker
under load (docs/performance.md) that was about a tenth of its CPU, for records that the window
agent already holds as a batch. :func:`send_all` groups the records by topic and partition, fills
aiokafka batch builders (``create_batch`` / ``send_batch``, public API), and waits for one future
per builder. The builders go to the producer in rounds, one per partition at a time, so that one
produce request carries every partition (see :func:`send_all`); the worker's batches are up to
``producer_batch_bytes`` (256 KiB) instead of Faust's 16 KiB, so a window batch's states usually
fit in one builder a partition.

Records land exactly where ``send`` would put them: an explicit partition is kept, a keyed record
goes where aiokafka's own partitioner sends its key (the same function, the same partition list),
a record without key and partition goes to a random available partition. Per partition, records
keep their order. The wait raises if any batch fails, like gathering the per-record futures did.
It returns where the records went (:class:`Placed`, one per batch), which the hook endpoint's
fast lane needs (:mod:`pipeline.agents.fastlane`); the other callers ignore it.

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

Placed = tuple[str, int, int, int]
"""(topic, partition, offset of the first record, number of records): records at consecutive
offsets from the first, in the order they were given."""


async def _send_one_by_one(faust_producer: Any, records: Iterable[Record]) -> list[Placed]:
    records_list = list(records)
    futures = [await faust_producer.send(topic, key, value, partition, None, None)
               for topic, key, value, partition in records_list]
    if not futures:
        return []
    metas = await asyncio.gather(*futures)
    return [(topic, partition if partition is not None else getattr(meta, "partition", -1), getattr(meta, "offset", -1), 1)
            for (topic, _, _, partition), meta in zip(records_list, metas, strict=True)]


def _build(producer: Any, items: list[tuple[bytes | None, bytes | None]]) -> list[tuple[Any, int]]:
    """One partition's records in closed batch builders (as many as the producer's batch size needs)
    and the number of records in each, in their order."""
    batches: list[tuple[Any, int]] = []
    batch = producer.create_batch()
    count = 0
    for key, value in items:
        if batch.append(key=key, value=value, timestamp=None) is None:  # full: close it, start another
            batch.close()  # closed, so producer.send() cannot add to it either
            batches.append((batch, count))
            batch = producer.create_batch()
            batch.append(key=key, value=value, timestamp=None)  # a builder takes its first record whatever its size
            count = 0
        count += 1
    batch.close()
    batches.append((batch, count))
    return batches


async def send_all(faust_producer: Any, records: Iterable[Record]) -> list[Placed]:
    """Send ``records`` and return once the broker has every one (raises on a send failure), with
    where they went."""
    if not isinstance(faust_producer, faust_aiokafka.Producer):
        return await _send_one_by_one(faust_producer, records)
    access = internals()
    producer = access.batch_producer(faust_producer)
    grouped: dict[tuple[str, int], list[tuple[bytes | None, bytes | None]]] = {}
    partitions_of: dict[str, tuple[list[int], list[int]]] = {}
    partitioner = access.partitioner(producer)
    # A keyed record's partition depends only on its topic and key (the partitioner hashes the key
    # with aiokafka's pure-Python murmur2, ~1.6 % of a worker's main thread at 3,000 turns/s), and a
    # window batch publishes several pages per session: each key is hashed once per call. A record
    # without a key goes to a random partition each time, so it is never remembered.
    placed_keys: dict[tuple[str, bytes], int] = {}
    for topic, key, value, partition in records:
        if partition is None:
            known = partitions_of.get(topic)
            if known is None:
                known = partitions_of[topic] = await access.partitions(producer, topic)
            if key is None:
                partition = partitioner(key, known[0], known[1])
            else:
                found = placed_keys.get((topic, key))
                if found is None:
                    found = placed_keys[(topic, key)] = partitioner(key, known[0], known[1])
                partition = found
        grouped.setdefault((topic, partition), []).append((key, value))
    if not grouped:
        return []
    built = [(topic, partition, _build(producer, items)) for (topic, partition), items in grouped.items()]
    futures = []
    placed: list[tuple[str, int, int]] = []  # (topic, partition, records) of each future
    # In rounds: every partition's first batch, then every partition's second, ... A partition's
    # next batch waits in send_batch until its previous one has left in a request, and aiokafka has
    # one request in flight per broker; sent partition by partition, a save of a 1,000-turn batch
    # went out as ~40 requests of one partition each, one after the other.
    for round_no in range(max(len(batches) for _, _, batches in built)):
        for topic, partition, batches in built:
            if round_no < len(batches):
                batch, count = batches[round_no]
                futures.append(await producer.send_batch(batch, topic, partition=partition))
                placed.append((topic, partition, count))
    results = await asyncio.gather(*futures)  # each a batch's metadata: the offset of its first record
    # -1: the broker gave no offset (acks=0: no metadata)
    return [(topic, partition, getattr(meta, "offset", -1), count)
            for (topic, partition, count), meta in zip(placed, results, strict=True)]
