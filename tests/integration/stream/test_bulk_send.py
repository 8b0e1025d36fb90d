"""``send_all`` (agents/bulk_send.py) on a real broker with Faust's real producer: every record once,
where aiokafka's own ``send`` puts it, in order within a partition, at the offsets it returns."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import faust
import pytest
from faust.transport.drivers import aiokafka as faust_aiokafka

from pipeline.agents.bulk_send import Placed, Record, _send_one_by_one, send_all
from pipeline.compat import faust_internals, tansu_transport
from tests.integration.stream.harness import run
from tests.services.broker import TestNames, settings_for
from topics import tansu_client
from topics.clients import make_admin
from topics.io import read_all

pytestmark = pytest.mark.integration

PARTITIONS = 4


def workload(topic: str) -> list[Record]:
    records: list[Record] = []
    for i in range(400):
        key = f"session-{i % 37}".encode() if i % 9 else None  # mostly keyed, some without key
        partition = i % PARTITIONS if i % 50 == 7 else None  # a few with an explicit partition
        value = b"%06d:" % i + (b"x" * 60_000 if i == 123 else b"v" * (i % 300))  # one over a batch
        records.append((topic, key, value, partition))
    return records


Placements = dict[str, list[Placed]]


async def produce_and_read(broker: str, names: TestNames) -> tuple[dict[str, list[tuple[int, bytes | None, bytes]]],
                                                                   dict[str, dict[bytes, tuple[int, int]]], Placements]:
    settings = settings_for(broker, names, topic_partitions=PARTITIONS)
    tansu_transport.install()
    faust_internals.install()  # the producer internals send_all reads (the app's start-up does this)
    bulk, single = names.topic("bulk"), names.topic("single")
    admin = make_admin(settings)
    await admin.start()
    try:
        from aiokafka.admin import NewTopic

        await admin.create_topics([NewTopic(bulk, PARTITIONS, 1), NewTopic(single, PARTITIONS, 1)])
    finally:
        await admin.close()
    app = faust.App(names.app_id, broker=settings.broker, **tansu_client.faust_settings(settings))
    producer = app.producer
    assert isinstance(producer, faust_aiokafka.Producer)  # so send_all takes the batch path, not per record
    await producer.start()
    try:
        placed = {bulk: await send_all(producer, workload(bulk)),
                  single: await _send_one_by_one(producer, workload(single))}
    finally:
        await producer.stop()
    out: dict[str, list[tuple[int, bytes | None, bytes]]] = {}
    where: dict[str, dict[bytes, tuple[int, int]]] = {}
    for topic in (bulk, single):
        records = await read_all(settings, topic, expect=400)
        out[topic] = [(r.partition, r.key, r.value or b"") for r in records]
        where[topic] = {r.value or b"": (r.partition, r.offset) for r in records}
    return out, where, placed


def by_value(rows: Sequence[tuple[int, bytes | None, bytes]]) -> dict[bytes, tuple[int, bytes | None]]:
    return {value: (partition, key) for partition, key, value in rows}


def test_bulk_send_matches_per_record_send(module_broker_url: str, names: TestNames) -> None:
    out, where, placed = run(produce_and_read(module_broker_url, names))
    bulk, single = out[names.topic("bulk")], out[names.topic("single")]
    sent = workload("x")
    assert len(bulk) == len(sent) == len(single)  # every record once
    assert len({value for _, _, value in bulk}) == len(sent)
    bulk_at, single_at = by_value(bulk), by_value(single)
    for _, key, value, partition in sent:
        got_partition, got_key = bulk_at[value]
        assert got_key == key
        if partition is not None:
            assert got_partition == partition
        elif key is not None:
            assert got_partition == single_at[value][0]  # the partition aiokafka's send chose for the key
    # order within a partition is the order of the input
    positions = {value: i for i, (_, _, value, _) in enumerate(sent)}
    per_partition: dict[int, list[int]] = defaultdict(list)
    for partition, _, value in bulk:
        per_partition[partition].append(positions[value])
    assert all(seq == sorted(seq) for seq in per_partition.values())
    assert len(per_partition) == PARTITIONS
    # what send_all returns says where each record is: per partition, consecutive offsets in input order
    for topic in (names.topic("bulk"), names.topic("single")):
        given: dict[int, list[bytes]] = defaultdict(list)
        for _, _, sent_value, _ in sent:
            value = sent_value or b""
            given[where[topic][value][0]].append(value)
        returned: dict[int, list[int]] = defaultdict(list)
        for placed_topic, partition, first, count in placed[topic]:
            assert placed_topic == topic and count >= 1
            returned[partition].extend(range(first, first + count))
        assert {p: [where[topic][v][1] for v in values] for p, values in given.items()} == dict(returned)
