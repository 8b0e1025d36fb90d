"""Broker retries retry transport failures only: a bug (a ``TypeError``) crashes the agent at once.

Before issue 14 the loops caught ``Exception``, so a programming error became an endless retry
loop that looked like a worker waiting for its broker. The producer and table here are stand-ins
with the one method each loop calls; the real ones run in the stream and reliability tests.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import errors as kafka_errors
from faust.exceptions import ProducerSendError

from pipeline.agents.batch_types import BatchOutput, InRecord
from pipeline.agents.commit_protocol import WindowCommit, save_states
from pipeline.agents.publishing import publish_retrying
from pipeline.agents.retry import is_transport_error


class Producer:
    """Fails with the given errors in turn, then delivers; counts the sends."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.sent: list[tuple[str, bytes | None, bytes | None]] = []
        self.calls = 0

    async def send(self, topic: str, key: bytes | None, value: bytes | None, *_: Any) -> asyncio.Future[None]:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        self.sent.append((topic, key, value))
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future


def context(producer: Producer, **parts: Any) -> Any:
    return SimpleNamespace(app=SimpleNamespace(producer=producer, should_stop=False), **parts)


def test_a_type_error_propagates_from_the_dead_letter_publish_at_once() -> None:
    producer = Producer(TypeError("a bug"), TypeError("a bug"))
    with pytest.raises(TypeError, match="a bug"):
        asyncio.run(publish_retrying(context(producer), "dlq", [(b"k", b"v")], "dead-lettering"))
    assert producer.calls == 1  # not retried


def test_a_broker_failure_is_retried_until_the_records_are_delivered() -> None:
    producer = Producer(kafka_errors.KafkaConnectionError("down"),
                        kafka_errors.KafkaTimeoutError())
    assert asyncio.run(publish_retrying(context(producer), "dlq", [(b"k", b"v")], "dead-lettering")) is True
    assert producer.calls == 3
    assert producer.sent == [("dlq", b"k", b"v")]


def test_a_type_error_propagates_from_saving_states_at_once() -> None:
    calls = []

    async def save_many(items: Any) -> None:
        calls.append(items)
        raise TypeError("a bug in the table")

    ctx = context(Producer(), table=SimpleNamespace(save_many=save_many))
    with pytest.raises(TypeError, match="a bug in the table"):
        asyncio.run(save_states(ctx, [(b"k", b"v", 0)]))
    assert len(calls) == 1


def test_a_type_error_propagates_from_publishing_a_window_batch_at_once() -> None:
    producer = Producer(TypeError("a bug"), TypeError("a bug"))
    decided = []

    def process(records: Any, index: Any, load: Any, now: int) -> BatchOutput:
        decided.append(records)
        return BatchOutput(volunteered=[(b"s", b"event")])

    settings = SimpleNamespace(topic_volunteered="volunteered", topic_dlq="dlq", topic_turns="turns")
    ctx = context(producer, settings=settings, processor=SimpleNamespace(process=process),
                  brain=SimpleNamespace(index=None), table=SimpleNamespace(reader=lambda: (lambda key: None)))
    with pytest.raises(TypeError, match="a bug"):
        asyncio.run(WindowCommit(ctx).make_durable([InRecord(b"s", b"{}", 0, 0)]))
    assert len(decided) == 1 and producer.calls == 1


@pytest.mark.parametrize(("exc", "transport"), [
    (kafka_errors.KafkaConnectionError("refused"), True),
    (kafka_errors.KafkaTimeoutError(), True),  # not flagged retriable by aiokafka, still the broker
    (kafka_errors.NotLeaderForPartitionError(), True),  # flagged retriable
    (kafka_errors.RequestTimedOutError(), True),
    (ConnectionResetError("reset"), True),
    (TimeoutError(), True),
    (kafka_errors.MessageSizeTooLargeError(), False),  # retrying cannot help
    (TypeError("a bug"), False),
    (KeyError("a bug"), False),
])
def test_transport_errors_are_told_from_bugs(exc: BaseException, transport: bool) -> None:
    assert is_transport_error(exc) is transport


def test_a_client_error_wrapped_by_faust_is_still_a_transport_error() -> None:
    wrapped = ProducerSendError("Error while sending")
    wrapped.__cause__ = kafka_errors.KafkaConnectionError("refused")
    assert is_transport_error(wrapped)
    assert not is_transport_error(ProducerSendError("No transaction producer found"))
