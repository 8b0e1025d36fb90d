"""The changelog-pause patch: aiokafka's pause state of the changelog partitions follows what Faust
reads (its active and buffered partitions), on a real (unstarted) aiokafka consumer; stream
partitions are never touched; nothing changes while Faust's flow is stopped; the wrapper runs before
Faust's own fetch and is applied once; a changed Faust is refused."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from pipeline.compat import changelog_pause
from pipeline.internals import CompatError

STREAM = [TopicPartition("turns", p) for p in range(2)]
CHANGELOG = [TopicPartition("app-sessions-changelog", p) for p in range(2)]
TOPICS = {"app-sessions-changelog"}


def with_client(body: Callable[[AIOKafkaConsumer], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        client = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1")
        client.assign(STREAM + CHANGELOG)
        try:
            return await body(client)
        finally:
            await client.stop()

    return asyncio.run(main())


def test_changelogs_faust_does_not_read_are_paused_and_resumed_when_it_reads_them() -> None:
    async def body(client: AIOKafkaConsumer) -> None:
        reads = {TP("app-sessions-changelog", 1)}  # Faust's own TP tuples, as in its active set
        assert changelog_pause.mirror(client, reads.__contains__, TOPICS) == ([CHANGELOG[0]], [])
        assert client.paused() == {CHANGELOG[0]}
        assert changelog_pause.mirror(client, reads.__contains__, TOPICS) == ([], [])  # nothing to change
        reads = {TP("app-sessions-changelog", 0)}  # e.g. a recovery reads partition 0 again
        paused, resumed = changelog_pause.mirror(client, reads.__contains__, TOPICS)
        assert (paused, resumed) == ([CHANGELOG[1]], [CHANGELOG[0]])
        assert client.paused() == {CHANGELOG[1]}
        changelog_pause.mirror(client, lambda tp: True, TOPICS)  # a standby: read all the time
        assert client.paused() == set()

    with_client(body)


def test_stream_partitions_are_never_paused() -> None:
    async def body(client: AIOKafkaConsumer) -> None:
        changelog_pause.mirror(client, lambda tp: False, TOPICS)
        assert client.paused() == set(CHANGELOG)

    with_client(body)


class FakeConsumer:
    """The Faust consumer parts mirror_faust reads."""

    def __init__(self, flow_active: bool, buffered: set[Any]) -> None:
        self.flow_active = flow_active
        self._buffered_partitions = buffered
        self.app = type("App", (), {})()
        self.app.tables = type("Tables", (), {"changelog_topics": TOPICS})()


class FakeThread:
    def __init__(self, consumer: FakeConsumer) -> None:
        self.consumer = consumer


def test_faust_active_and_buffered_partitions_are_read_and_a_stopped_flow_changes_nothing() -> None:
    async def body(client: AIOKafkaConsumer) -> None:
        stopped = FakeThread(FakeConsumer(flow_active=False, buffered=set()))
        changelog_pause.mirror_faust(stopped, client, set())
        assert client.paused() == set()  # mid-rebalance: Faust's set is in flux
        thread = FakeThread(FakeConsumer(flow_active=True, buffered={TP("app-sessions-changelog", 1)}))
        changelog_pause.mirror_faust(thread, client, None)  # a client-only app: no active set at all
        assert client.paused() == set()
        changelog_pause.mirror_faust(thread, client, {TP("turns", 0)})
        assert client.paused() == {CHANGELOG[0]}

    with_client(body)


def test_a_faust_consumer_without_a_read_part_is_refused() -> None:
    async def body(client: AIOKafkaConsumer) -> None:
        consumer = FakeConsumer(flow_active=True, buffered=set())
        del consumer._buffered_partitions
        with pytest.raises(CompatError, match=r"compat patch changelog-pause: .*has no _buffered_partitions"):
            changelog_pause.mirror_faust(FakeThread(consumer), client, set())

    with_client(body)


def test_the_mirror_runs_before_fausts_fetch() -> None:
    calls: list[str] = []

    async def fetch_records(self: Any, consumer: Any, active: Any, timeout: float | None = None,
                            max_records: int | None = None) -> dict[Any, Any]:
        calls.append(f"fetch {sorted(consumer.paused())} {timeout} {max_records}")
        return {}

    async def body(client: AIOKafkaConsumer) -> None:
        thread = FakeThread(FakeConsumer(flow_active=True, buffered=set()))
        await changelog_pause.pausing(fetch_records)(thread, client, {TP("app-sessions-changelog", 0)},
                                                     timeout=1.0, max_records=5)

    with_client(body)
    assert calls == [f"fetch {[CHANGELOG[1]]} 1.0 5"]


def test_install_patches_faust_once() -> None:
    changelog_pause.install()
    patched = faust_aiokafka.AIOKafkaConsumerThread._fetch_records
    assert changelog_pause.installed()
    changelog_pause.install()
    assert faust_aiokafka.AIOKafkaConsumerThread._fetch_records is patched


def test_a_changed_fetch_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async def changed(self: Any, consumer: Any, active_partitions: Any) -> None:  # a later Faust
        return None

    monkeypatch.setattr(faust_aiokafka.AIOKafkaConsumerThread, "_fetch_records", changed)
    with pytest.raises(CompatError, match=r"compat patch changelog-pause: .*_fetch_records is not the coroutine"):
        changelog_pause.install()
    assert faust_aiokafka.AIOKafkaConsumerThread._fetch_records is changed  # left alone
    monkeypatch.delattr(faust_aiokafka.AIOKafkaConsumerThread, "_fetch_records")
    with pytest.raises(CompatError, match=r"AIOKafkaConsumerThread has no own _fetch_records\(\)"):
        changelog_pause.install()
