"""``send_all``'s order of batches: every partition's first batch, then every partition's second, so
that one produce request can carry them all (aiokafka holds a partition's next batch until the
previous one has left). Within a partition the records keep their order, and ``Placed`` says which
records each batch holds. The real producer and broker are in tests/integration/stream/test_bulk_send.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pipeline import internals
from pipeline.agents import bulk_send
from pipeline.agents.bulk_send import send_all
from pipeline.compat import faust_internals


class Builder:
    """An aiokafka batch builder stand-in that takes ``capacity`` records."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.values: list[bytes | None] = []
        self.closed = False

    def append(self, *, key: bytes | None, value: bytes | None, timestamp: None) -> object | None:
        assert not self.closed
        if len(self.values) >= self.capacity:
            return None
        self.values.append(value)
        return object()

    def close(self) -> None:
        self.closed = True


class AioProducer:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.sent: list[tuple[str, int, list[bytes | None]]] = []
        self.offsets: dict[tuple[str, int], int] = {}

    def create_batch(self) -> Builder:
        return Builder(self.capacity)

    async def send_batch(self, batch: Builder, topic: str, *, partition: int) -> asyncio.Future[Any]:
        assert batch.closed
        self.sent.append((topic, partition, batch.values))
        first = self.offsets.get((topic, partition), 0)
        self.offsets[topic, partition] = first + len(batch.values)
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(type("Meta", (), {"offset": first})())
        return done


class FaustProducer:
    """Passes send_all's isinstance check (monkeypatched) and holds the aiokafka stand-in."""

    def __init__(self, inner: AioProducer) -> None:
        self.inner = inner


class Access(faust_internals.FaustInternals):
    def batch_producer(self, faust_producer: Any) -> Any:
        return faust_producer.inner

    def partitioner(self, producer: Any) -> Any:
        return lambda key, partitions, available: 0  # every record here names its partition


@pytest.fixture(autouse=True)
def _stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(internals, "_current", Access())
    monkeypatch.setattr(bulk_send.faust_aiokafka, "Producer", FaustProducer)


def test_batches_go_out_a_round_of_partitions_at_a_time() -> None:
    inner = AioProducer(capacity=2)
    records = [("t", b"k", b"p0-%d" % i, 0) for i in range(5)] + [("t", b"k", b"p1-%d" % i, 1) for i in range(3)] \
        + [("u", b"k", b"u2-0", 2)]
    placed = asyncio.run(send_all(FaustProducer(inner), records))
    assert [(topic, partition) for topic, partition, _ in inner.sent] == [
        ("t", 0), ("t", 1), ("u", 2),  # every partition's first batch
        ("t", 0), ("t", 1),            # then the second ones
        ("t", 0),                      # then what is left
    ]
    by_partition: dict[tuple[str, int], list[bytes | None]] = {}
    for topic, partition, values in inner.sent:
        by_partition.setdefault((topic, partition), []).extend(values)
    assert by_partition == {("t", 0): [b"p0-%d" % i for i in range(5)], ("t", 1): [b"p1-%d" % i for i in range(3)],
                            ("u", 2): [b"u2-0"]}  # in their order within each partition
    assert placed == [("t", 0, 0, 2), ("t", 1, 0, 2), ("u", 2, 0, 1), ("t", 0, 2, 2), ("t", 1, 2, 1), ("t", 0, 4, 1)]


def test_one_batch_a_partition_is_one_round() -> None:
    inner = AioProducer(capacity=100)
    placed = asyncio.run(send_all(FaustProducer(inner), [("t", b"k", b"v%d" % p, p) for p in range(4)]))
    assert [(topic, partition) for topic, partition, _ in inner.sent] == [("t", 0), ("t", 1), ("t", 2), ("t", 3)]
    assert placed == [("t", p, 0, 1) for p in range(4)]


def test_each_key_is_hashed_once_a_call_and_lands_where_the_partitioner_puts_it(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes | None] = []

    def partitioner(key: bytes | None, partitions: list[int], available: list[int]) -> int:
        calls.append(key)
        return len(calls) % 3 if key is None else sum(key) % 3

    class Keyed(Access):
        def partitioner(self, producer: Any) -> Any:
            return partitioner

        async def partitions(self, producer: Any, topic: str) -> tuple[list[int], list[int]]:
            return [0, 1, 2], [0, 1, 2]

    monkeypatch.setattr(internals, "_current", Keyed())
    inner = AioProducer(capacity=100)
    records = [("t", key, b"%s-%d" % (key, i), None) for i in range(3) for key in (b"a", b"b", b"c")]
    records += [("u", b"a", b"u", None), ("t", None, b"n1", None), ("t", None, b"n2", None)]
    asyncio.run(send_all(FaustProducer(inner), records))
    assert sorted(calls, key=repr) == sorted([b"a", b"b", b"c", b"a", None, None], key=repr)  # once per topic and key
    sent = {(topic, partition): values for topic, partition, values in inner.sent}
    for key in (b"a", b"b", b"c"):
        mine = [v for v in sent[("t", sum(key) % 3)] if v is not None and v.startswith(key + b"-")]
        assert mine == [b"%s-%d" % (key, i) for i in range(3)]  # where the partitioner puts the key, in order
    assert sent[("u", sum(b"a") % 3)] == [b"u"]
