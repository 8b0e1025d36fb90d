"""The growing fetch wait (pipeline.compat.fetch_wait) on a real embedded broker: an idle consumer
sends a few Fetch requests a second instead of ~43, a record produced after a silence still
arrives within about half the grown wait, and the wait is back at its base once records came."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiokafka import TopicPartition

from pipeline.compat import fetch_wait
from pipeline.embedded.tansu import EmbeddedBroker
from tests.integration.stream.fetch_clients import fetch_clients
from tests.integration.stream.test_tansu_quirks import create_topic, run
from topics import tansu_client

pytestmark = pytest.mark.integration

MAX_MS = 160


def test_an_idle_consumer_fetches_rarely_and_a_record_after_a_silence_still_comes_soon(
        embedded_broker: EmbeddedBroker) -> None:
    async def scenario() -> tuple[float, int, float, int]:
        async with fetch_clients(embedded_broker) as (producer, consumer):
            tps = [TopicPartition("fw", p) for p in range(4)]
            consumer.assign(tps)
            ends = await tansu_client.end_offsets(consumer, tps, embedded=True)
            for tp in tps:
                consumer.seek(tp, ends[tp])
            fetcher: Any = consumer._fetcher
            wait = fetch_wait.attach(fetcher, MAX_MS)
            assert wait is not None
            sent = [0]
            proc = fetcher._proc_fetch_request

            async def counted(*args: Any) -> Any:
                sent[0] += 1
                return await proc(*args)

            fetcher._proc_fetch_request = counted
            began = time.monotonic()
            while time.monotonic() - began < 2.0:  # idle: nothing to fetch
                assert not await consumer.getmany(timeout_ms=200)
            idle_rate = sent[0] / (time.monotonic() - began)
            grown = wait.current_ms
            produced = time.monotonic()
            await producer.send_and_wait("fw", b"x", partition=1)
            got: dict[Any, Any] = {}
            while not got:
                got = await consumer.getmany(timeout_ms=2_000)
            delay = time.monotonic() - produced
            for _ in range(50):  # the Fetch after the one that brought the record asks with the base wait
                if wait.current_ms == tansu_client.FETCH_MAX_WAIT_MS:
                    break
                await asyncio.sleep(0.005)
            return idle_rate, grown, delay, wait.current_ms

    run(create_topic(embedded_broker.bootstrap, "fw", 4))
    idle_rate, grown, delay, after = run(scenario())
    assert grown == MAX_MS
    assert idle_rate < 20, idle_rate  # a fixed 20 ms wait sends ~43/s (docs/performance.md)
    assert delay < 0.5, delay  # about half the grown wait at most, with room for a loaded machine
    assert after == tansu_client.FETCH_MAX_WAIT_MS
