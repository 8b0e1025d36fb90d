"""The commit protocol's order: every phase is awaited before the next, and acknowledging is last.

The order is the crash-safety guarantee (pipeline/agents/commit_protocol.py); the crash runs in
tests/reliability show that it holds against real brokers and real kills. Here the parts the
protocol calls are stand-ins that write into one log, so the order itself is pinned: decide,
publish, save, wake the hooks, acknowledge; a transport failure while publishing decides again;
a writer that stops with nothing written acknowledges nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

from aiokafka import errors as kafka_errors

from pipeline.agents.batch_types import (
    BatchOutput,
    InRecord,
    OpensResult,
    SinkResult,
    WriteOutcome,
    in_records,
)
from pipeline.agents.commit_protocol import PageOpensCommit, SinkCommit, WindowCommit
from pipeline.agents.context import Counters
from pipeline.agents.fastlane import FastLane
from pipeline.agents.session_table import SessionRecord


class Log(list[str]):
    pass


class Producer:
    """Delivers at once (a future already done), after failing with ``failures`` in turn."""

    def __init__(self, log: Log, *failures: BaseException) -> None:
        self.log = log
        self.failures = list(failures)
        self.sent: list[tuple[str, bytes | None, bytes | None]] = []

    async def send(self, topic: str, key: bytes | None, value: bytes | None, *_: Any) -> asyncio.Future[None]:
        if self.failures:
            self.log.append("publish failed")
            raise self.failures.pop(0)
        self.log.append(f"publish {topic}")
        self.sent.append((topic, key, value))
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future


class Batches:
    def __init__(self, log: Log) -> None:
        self.log = log
        self.acked: list[Any] = []

    def records(self, events: Sequence[Any]) -> list[InRecord]:
        return in_records(events)

    async def ack(self, events: Sequence[Any]) -> None:
        await asyncio.sleep(0)
        self.log.append("ack")
        self.acked.extend(events)


def event(key: bytes, partition: int, offset: int) -> Any:
    return SimpleNamespace(message=SimpleNamespace(key=key, value=b"{}", partition=partition, offset=offset))


def window_context(log: Log, producer: Producer, owned: set[int]) -> Any:
    saved: list[Any] = []

    def process(records: Sequence[InRecord], index: Any, load: Callable[[bytes], bytes | None],
                now: int) -> BatchOutput:
        log.append("decide")
        out = BatchOutput(volunteered=[(b"s1", b"event")], turns=len(records))
        for rec in records:
            assert rec.key is not None
            out.states[rec.key] = SessionRecord(partition=rec.partition, offset=rec.offset)
        return out

    async def save_many(items: Sequence[tuple[bytes, bytes, int]]) -> None:
        await asyncio.sleep(0)
        log.append("save")
        saved.extend(items)

    processor = SimpleNamespace(process=process, encode=lambda key, record: b"value-of-" + key,
                                saved=lambda key, value, record: log.append("cache"))
    return SimpleNamespace(
        app=SimpleNamespace(producer=producer, should_stop=False, rebalancing_count=0),
        settings=SimpleNamespace(topic_volunteered="volunteered", topic_dlq="dlq", topic_turns="turns"),
        processor=processor, brain=SimpleNamespace(index=None),
        table=SimpleNamespace(reader=lambda: (lambda key: None), save_many=save_many, saved=saved),
        assigned_partitions=lambda topic: owned, counters=Counters(),
        metrics=SimpleNamespace(window_batch=lambda records, out, seconds: log.append("measure")),
        answers=SimpleNamespace(resolve=lambda proposals: log.append("wake hooks")), lane=FastLane())


def test_a_window_batch_is_decided_published_saved_then_acknowledged() -> None:
    log = Log()
    ctx = window_context(log, Producer(log), owned={0})
    batches = Batches(log)
    events = [event(b"s1", 0, 5), event(b"s2", 0, 6)]
    assert asyncio.run(WindowCommit(ctx).commit(events, batches)) is True
    assert log == ["decide", "publish volunteered", "cache", "cache", "save", "measure", "wake hooks", "ack"]
    assert batches.acked == events
    assert ctx.table.saved == [(b"s1", b"value-of-s1", 0), (b"s2", b"value-of-s2", 0)]
    assert ctx.counters.turns == 2 and ctx.counters.volunteered == 1


def test_a_transport_failure_while_publishing_decides_the_batch_again() -> None:
    log = Log()
    ctx = window_context(log, Producer(log, kafka_errors.KafkaConnectionError("down")), owned={0})
    asyncio.run(WindowCommit(ctx).commit([event(b"s1", 0, 5)], Batches(log)))
    assert log == ["decide", "publish failed", "decide", "publish volunteered", "cache", "save", "measure",
                   "wake hooks", "ack"]


def test_states_of_a_partition_revoked_during_the_batch_are_not_saved() -> None:
    log = Log()
    ctx = window_context(log, Producer(log), owned={0})
    asyncio.run(WindowCommit(ctx).commit([event(b"s1", 0, 5), event(b"s2", 1, 9)], Batches(log)))
    assert ctx.table.saved == [(b"s1", b"value-of-s1", 0)]


def sink_context(log: Log, producer: Producer, result: SinkResult) -> Any:
    async def write(records: Sequence[InRecord], now_ms: int, should_stop: Callable[[], bool]) -> SinkResult:
        await asyncio.sleep(0)
        log.append("write")
        return result

    return SimpleNamespace(
        app=SimpleNamespace(producer=producer, should_stop=False), settings=SimpleNamespace(topic_dlq="dlq"),
        writer=SimpleNamespace(write=write), counters=Counters(),
        metrics=SimpleNamespace(sink_batch=lambda records, result, seconds: log.append("measure")))


def test_a_sink_batch_is_written_then_dead_lettered_then_acknowledged() -> None:
    log = Log()
    result = SinkResult(inserted=3, events=3, dead=[(b"k", b"letter")], attempts=1)
    ctx = sink_context(log, Producer(log), result)
    batches = Batches(log)
    assert asyncio.run(SinkCommit(ctx).commit([event(b"k", 0, 1)], batches)) is True
    assert log == ["write", "measure", "publish dlq", "ack"]
    assert (ctx.counters.rows, ctx.counters.dead_letters) == (3, 1)


def test_a_sink_stopping_while_the_database_is_away_acknowledges_nothing() -> None:
    log = Log()
    ctx = sink_context(log, Producer(log), SinkResult(outcome=WriteOutcome.STOPPED))
    batches = Batches(log)
    assert asyncio.run(SinkCommit(ctx).commit([event(b"k", 0, 1)], batches)) is False
    assert log == ["write"] and batches.acked == []


def test_a_sink_stopping_while_the_broker_is_away_acknowledges_nothing() -> None:
    log = Log()
    producer = Producer(log, kafka_errors.KafkaConnectionError("down"))
    ctx = sink_context(log, producer, SinkResult(inserted=1, dead=[(b"k", b"letter")], attempts=1))
    ctx.app.should_stop = True
    batches = Batches(log)
    assert asyncio.run(SinkCommit(ctx).commit([event(b"k", 0, 1)], batches)) is False
    assert log == ["write", "measure", "publish failed"] and batches.acked == []
    assert ctx.counters.rows == 0


def test_page_opens_are_counted_only_once_their_dead_letters_are_delivered() -> None:
    log = Log()
    result = OpensResult(opens=2, updated=1, dead=[(b"k", b"letter")], dead_reasons=["bad"], attempts=1)

    async def write(records: Sequence[InRecord], now_ms: int, should_stop: Callable[[], bool]) -> OpensResult:
        log.append("write")
        return result

    ctx = SimpleNamespace(
        app=SimpleNamespace(producer=Producer(log), should_stop=False), counters=Counters(),
        settings=SimpleNamespace(topic_dlq="dlq", database_url="postgresql://127.0.0.1:9/x", topic_page_opens="po"),
        metrics=SimpleNamespace(page_opens_batch=lambda result: log.append("measure"),
                                watch_writer=lambda name, writer: None))
    commit = PageOpensCommit(ctx)
    commit.writer = SimpleNamespace(write=write)
    batches = Batches(log)
    assert asyncio.run(commit.commit([event(b"k", 0, 1)], batches)) is True
    assert log == ["write", "publish dlq", "measure", "ack"]
    assert ctx.counters.dead_letters == 1
