"""The embedded broker's CPU per empty Fetch, by the number of partitions a Fetch names and its wait.

An idle worker's consumer sends one Fetch after another (an empty one is answered when its max
wait ends, quirk 4 in docs/streaming.md), and at low rates most of them find nothing, so what one
empty Fetch costs the broker is most of the pipeline's fixed CPU. This bench measures it alone:
one aiokafka consumer assigned ``N`` empty partitions, fetching for a few seconds per case; the
broker's CPU seconds (``/proc``) are divided by the Fetch requests it answered (counted at the
consumer's connection). Nothing else talks to that broker.

    .venv/bin/python -m bench.fetch_cost_bench                       # 1, 8, 16, 25, 33, 41 partitions
    .venv/bin/python -m bench.fetch_cost_bench --partitions 25,41 --waits 20,40 --seconds 4
    .venv/bin/python -m bench.fetch_cost_bench --partitions 25,33 --grow-to 160   # the worker's growing wait

``--stored N,M,...`` measures instead what a Fetch that returns records costs by the length of the
partition it reads: one partition is filled to N one-record batches, then a producer and a consumer
take turns (one record produced, the Fetch that returns it); the broker's CPU per round minus that
of as many produces alone is the Fetch's. Tansu's memory engine lists every stored batch of a
partition for each Fetch that finds new records in it (docs/performance.md, goal 2), so the cost
grows with N, not with the one record returned.

    .venv/bin/python -m bench.fetch_cost_bench --stored 0,1000,3000

``--grow-to MS`` gives the consumer the worker's growing fetch wait (pipeline.compat.fetch_wait:
doubling on empty fetches from the wait of the case up to MS), so a case shows what an idle
worker's Fetch rate and broker CPU come to with it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.conn import AIOKafkaConnection

from bench.common import cpu_seconds
from pipeline.compat import fetch_wait
from pipeline.embedded.tansu import EmbeddedBroker

_fetches = [0]


def _count_fetches() -> None:
    """Count the Fetch requests this process sends (bench only; aiokafka's public connection class)."""
    original = AIOKafkaConnection.send

    def send(self: Any, request: Any, expect_response: bool = True) -> Any:
        if type(request).__name__ == "FetchRequest":
            _fetches[0] += 1
        return original(self, request, expect_response)

    AIOKafkaConnection.send = send


async def one_case(broker: EmbeddedBroker, partitions: int, wait_ms: int, seconds: float,
                   grow_to: int = 0) -> tuple[float, float]:
    """(Fetch requests per second, broker CPU milliseconds per Fetch) for one case."""
    topic = f"fetch-cost-{partitions}-{wait_ms}-{grow_to}"
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, fetch_max_wait_ms=wait_ms,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        await consumer.getmany(timeout_ms=500)  # connections and positions settle first
        if grow_to:
            fetch_wait.attach(consumer._fetcher, grow_to)
        fetches, cpu, began = _fetches[0], cpu_seconds(broker.pid), time.monotonic()
        while time.monotonic() - began < seconds:
            await consumer.getmany(timeout_ms=200)
        wall = time.monotonic() - began
        answered = _fetches[0] - fetches
        return answered / wall, 1000 * (cpu_seconds(broker.pid) - cpu) / max(answered, 1)
    finally:
        await consumer.stop()


STORED_ROUNDS = 150
"""Rounds (a produce, or a produce and the Fetch that returns it) per measurement of ``--stored``."""


async def stored_cases(stored: list[int]) -> None:
    """Print the broker's CPU per Fetch that returns one record, by the batches stored in its partition."""
    with EmbeddedBroker() as broker:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic("fetch-length", 1, 1)])
        finally:
            await admin.close()
        tp = TopicPartition("fetch-length", 0)
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, fetch_max_wait_ms=5, enable_auto_commit=False)
        await producer.start()
        await consumer.start()
        try:
            consumer.assign([tp])
            batches = 0
            for target in stored:
                while batches < target:  # one record a request: one batch object each
                    await producer.send_and_wait(tp.topic, b"x" * 200, partition=0)
                    batches += 1
                await consumer.seek_to_end(tp)
                await consumer.getmany(tp, timeout_ms=200)
                cpu = cpu_seconds(broker.pid)
                for _ in range(STORED_ROUNDS):
                    await producer.send_and_wait(tp.topic, b"y" * 200, partition=0)
                produce = cpu_seconds(broker.pid) - cpu
                cpu = cpu_seconds(broker.pid)
                for _ in range(STORED_ROUNDS):
                    await producer.send_and_wait(tp.topic, b"y" * 200, partition=0)
                    while not (await consumer.getmany(tp, timeout_ms=1000)).get(tp):
                        pass
                both = cpu_seconds(broker.pid) - cpu
                print(f"{batches:6d} batches stored: broker {1000 * (both - produce) / STORED_ROUNDS:.2f} ms CPU per "
                      f"Fetch of one new record (a produce {1000 * produce / STORED_ROUNDS:.2f} ms)  "
                      f"[load {os.getloadavg()[0]:.1f}]", flush=True)
                batches += 2 * STORED_ROUNDS
        finally:
            await consumer.stop()
            await producer.stop()


async def run(partitions: list[int], waits: list[int], seconds: float, grow_to: int = 0) -> None:
    _count_fetches()
    with EmbeddedBroker() as broker:
        for wait_ms in waits:
            for count in partitions:
                rate, ms = await one_case(broker, count, wait_ms, seconds, grow_to)
                grown = f", growing to {grow_to}" if grow_to else ""
                print(f"{count:3d} partitions, max wait {wait_ms} ms{grown}: {rate:5.1f} Fetch/s, broker {ms:.2f} ms CPU "
                      f"per Fetch ({rate * ms / 1000:.3f} core)  [load {os.getloadavg()[0]:.1f}]", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", default="1,8,16,25,33,41", help="partition counts (comma-separated)")
    parser.add_argument("--waits", default="20", help="fetch max waits in ms (comma-separated)")
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per case")
    parser.add_argument("--grow-to", type=int, default=0, metavar="MS",
                        help="double the wait on empty fetches up to MS (the worker's fetch_wait_max_ms; 0: fixed)")
    parser.add_argument("--stored", default="", metavar="N,M",
                        help="instead: the cost of a Fetch with records by the batches stored in its partition")
    args = parser.parse_args()
    if args.stored:
        asyncio.run(stored_cases([int(x) for x in args.stored.split(",")]))
        return
    asyncio.run(run([int(x) for x in args.partitions.split(",")], [int(x) for x in args.waits.split(",")],
                    args.seconds, args.grow_to))


if __name__ == "__main__":
    main()
