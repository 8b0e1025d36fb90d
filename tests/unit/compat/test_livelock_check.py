"""Faust's livelock detector on a partition whose position aiokafka is still looking up (issue 27,
seed 369652182): Faust's real ``verify_event_path`` on aiokafka's real subscription state raises
the ``AssertionError`` that crashed the worker; with the patch it skips that partition and still
checks the others."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.consumer.subscription_state import SubscriptionState
from aiokafka.structs import TopicPartition
from faust.transport.drivers import aiokafka as faust_aiokafka

from pipeline.compat import livelock_check
from pipeline.internals import CompatError

TURNS_0, TURNS_1 = TopicPartition("turns", 0), TopicPartition("turns", 1)


class _Monitor:
    def __init__(self) -> None:
        self.stream_inbound_time: dict[Any, float] = {}


def _thread(subscription: SubscriptionState | None, checked: list[Any]) -> Any:
    """What Faust's ``verify_event_path`` reads of its consumer thread, around aiokafka's real state."""
    fetcher = type("Fetcher", (), {"_subscriptions": subscription})()
    client = None if subscription is None else type("Client", (), {"_subscription": subscription,
                                                                    "_fetcher": fetcher})()
    topics = type("Topics", (), {"acks_enabled_for": staticmethod(lambda topic: True)})()
    app = type("App", (), {"monitor": _Monitor(), "topics": topics})()
    consumer = type("Consumer", (), {"app": app})()

    class Thread:
        _consumer = client
        time_started = 0.0
        tp_stream_timeout_secs = tp_commit_timeout_secs = 1e9  # nothing is late: no log, no other path

        def __init__(self) -> None:
            self.consumer = consumer
            self.tp_last_committed_at: dict[Any, float] = {}

        def _ensure_consumer(self) -> Any:
            return client

        def _verify_aiokafka_event_path(self, now: float, tp: Any) -> bool:
            checked.append(tp)
            return False  # its fetch checks passed: Faust goes on to read the position

    return Thread()


async def _assigned(positions: dict[TopicPartition, int | None]) -> SubscriptionState:
    subscription = SubscriptionState()
    subscription.subscribe({"turns"})
    subscription.assign_from_subscribed(set(positions))
    for tp, position in positions.items():
        state = subscription.subscription.assignment.state_value(tp)
        state.highwater = 50
        if position is not None:
            state.seek(position)  # looked up; the other is still awaiting its committed offset
    return subscription


def _verify(method: Any, thread: Any, tp: TopicPartition) -> None:
    method(thread, 100.0, tp)


@pytest.fixture
def original(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Faust's own method (also when an app in this process installed the patch already), and the
    patch installed for this test only."""
    current = faust_aiokafka.AIOKafkaConsumerThread.verify_event_path
    stock = getattr(current, "__wrapped__", current)
    monkeypatch.setattr(faust_aiokafka.AIOKafkaConsumerThread, "verify_event_path", stock)
    return stock


def test_without_the_patch_a_partition_without_a_position_crashes_the_detector(original: Any) -> None:
    async def go() -> None:
        subscription = await _assigned({TURNS_0: 40, TURNS_1: None})
        thread = _thread(subscription, [])
        _verify(original, thread, TURNS_0)  # a position: Faust's checks run and pass
        with pytest.raises(AssertionError):
            _verify(original, thread, TURNS_1)

    asyncio.run(go())


def test_with_the_patch_that_partition_is_skipped_and_the_others_still_checked(original: Any) -> None:
    livelock_check.install()
    patched = faust_aiokafka.AIOKafkaConsumerThread.verify_event_path
    assert patched is not original and livelock_check.installed()

    async def go() -> list[Any]:
        subscription = await _assigned({TURNS_0: 40, TURNS_1: None})
        checked: list[Any] = []
        thread = _thread(subscription, checked)
        _verify(patched, thread, TURNS_1)  # no AssertionError: nothing to verify yet
        _verify(patched, thread, TURNS_0)
        subscription.subscription.assignment.state_value(TURNS_1).seek(12)  # its lookup came back
        _verify(patched, thread, TURNS_1)
        _verify(patched, thread, TopicPartition("turns", 7))  # not aiokafka's (the assignment moved on)
        _verify(patched, _thread(None, checked), TURNS_0)  # no consumer yet
        return checked

    assert asyncio.run(go()) == [TURNS_0, TURNS_1]  # Faust's checks ran exactly where a position exists
    livelock_check.install()  # once per process
    assert faust_aiokafka.AIOKafkaConsumerThread.verify_event_path is patched


def test_a_changed_method_is_refused(original: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def other(self: Any, tp: Any) -> None: ...

    monkeypatch.setattr(faust_aiokafka.AIOKafkaConsumerThread, "verify_event_path", other)
    with pytest.raises(CompatError, match="livelock-check"):
        livelock_check.install()
