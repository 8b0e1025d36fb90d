"""Raw transport limit of the broker: aiokafka producing and consuming the pipeline's Turn records,
no processing at all. The end-to-end figures are read against it (their ratio to this limit).

Three figures on one embedded broker, with the records the end-to-end bench sends (copies of the
conformance watch sessions, keyed by session, 8 partitions):

- produce: one aiokafka producer (linger 5 ms, like the load generator) sends N records;
- consume: a group consumer in another process (the embedded-broker settings a worker uses)
  reads N records that are already there, timed from the moment it owns its partitions (what it
  prefetched while joining counts);
- both at once: the consumer is joined and waiting, the producer sends N records; records/s from
  the first send to the last record read. This is the limit an end-to-end run is compared with.

    .venv/bin/python -m bench.transport_bench [--turns 60000]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import time
import uuid
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from bench.common import load_note, loadavg, produce_at_rate
from bench.pipeline_bench import make_turns, settings_for
from pipeline.embedded.tansu import EmbeddedBroker
from pipeline.settings import Settings
from topics.clients import make_consumer, start_consumer
from topics.definitions import ensure_topics


@dataclass(frozen=True)
class TransportResult:
    records: int
    produce_per_s: float
    consume_per_s: float
    both_per_s: float
    load: float


async def _consume(settings: Settings, total: int, conn: Connection | None) -> tuple[float, float]:
    consumer = make_consumer(settings, settings.topic_turns, group_id=f"transport-{uuid.uuid4().hex[:8]}")
    await start_consumer(consumer, settings)
    try:
        while not consumer.assignment():
            await consumer.getmany(timeout_ms=100)
        if conn is not None:
            conn.send("ready")
        got, first = 0, time.time()  # from the moment the consumer owns its partitions
        while got < total:
            batch = await consumer.getmany(timeout_ms=200, max_records=20_000)
            got += sum(len(records) for records in batch.values())
        return first, time.time()
    finally:
        await consumer.stop()


def _consumer_process(settings: Settings, total: int, conn: Connection) -> None:
    first, last = asyncio.run(_consume(settings, total, conn))
    conn.send((first, last))
    conn.close()


def _spawn_consumer(settings: Settings, total: int) -> tuple[Any, Connection]:
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_consumer_process, args=(settings, total, child), daemon=True)
    proc.start()
    return proc, parent


def measure(broker: EmbeddedBroker, turns_wanted: int = 60_000, partitions: int = 8) -> TransportResult:
    load = loadavg()
    turns = make_turns(turns_wanted, "transport")
    n = len(turns)

    # produce only, then consume what is there
    settings = settings_for(broker, "postgresql://unused", "transport-a", partitions)
    asyncio.run(ensure_topics(settings))
    first, last = asyncio.run(produce_at_rate(settings, turns, 0, stamp=False))
    produce = n / (last - first)
    proc, conn = _spawn_consumer(settings, n)
    assert conn.recv() == "ready"
    c_first, c_last = conn.recv()
    proc.join(30)
    consume = n / max(c_last - c_first, 1e-6)

    # both at once, the consumer waiting before the first record is sent
    settings = settings_for(broker, "postgresql://unused", "transport-b", partitions)
    asyncio.run(ensure_topics(settings))
    proc, conn = _spawn_consumer(settings, n)
    assert conn.recv() == "ready"
    first, _ = asyncio.run(produce_at_rate(settings, turns, 0, stamp=False))
    _, c_last = conn.recv()
    proc.join(30)
    both = n / (c_last - first)
    return TransportResult(n, produce, consume, both, load)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=60_000)
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args()
    print(f"transport bench: {load_note()}")
    with EmbeddedBroker() as broker:
        r = measure(broker, args.turns, args.partitions)
    print(f"{r.records} Turn records: produce {r.produce_per_s:,.0f}/s, consume {r.consume_per_s:,.0f}/s, "
          f"produce+consume at once {r.both_per_s:,.0f}/s  [{load_note()}]")


if __name__ == "__main__":
    main()
