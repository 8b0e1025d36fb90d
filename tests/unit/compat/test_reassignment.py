"""Reading whether the group is between two assignments from aiokafka's own subscription state, and
asking its coordinator to rejoin on the consumer's loop; neither raises without a consumer."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka.consumer.subscription_state import SubscriptionState
from aiokafka.structs import TopicPartition

from pipeline.compat import reassignment


class Coordinator:
    def __init__(self) -> None:
        self.rejoins: list[asyncio.AbstractEventLoop] = []

    def request_rejoin(self) -> None:
        self.rejoins.append(asyncio.get_running_loop())


def _app(subscription: Any, coordinator: Any, loop: Any) -> Any:
    client = type("Client", (), {"_subscription": subscription, "_coordinator": coordinator})()
    thread = type("Thread", (), {"_consumer": client, "thread_loop": loop})()
    consumer = type("Consumer", (), {"_thread": thread})()
    return type("App", (), {"consumer": consumer})()


def test_a_revoked_assignment_reads_as_reassigning_until_the_new_one_is_installed() -> None:
    async def go() -> list[bool]:
        subscription = SubscriptionState()
        app = _app(subscription, Coordinator(), asyncio.get_running_loop())
        seen = []
        subscription.subscribe({"turns"})
        seen.append(reassignment.reassigning(app))  # subscribed, nothing assigned yet
        subscription.assign_from_subscribed({TopicPartition("turns", 0)})
        seen.append(reassignment.reassigning(app))
        subscription.begin_reassignment()  # aiokafka, on a rebalance: partitions revoked
        seen.append(reassignment.reassigning(app))
        return seen

    assert asyncio.run(go()) == [True, False, True]


def test_without_a_consumer_it_is_not_reassigning_and_asks_nothing() -> None:
    app = type("App", (), {"consumer": object()})()
    assert reassignment.reassigning(app) is False
    assert reassignment.request_rejoin(app) is False


def test_a_rejoin_is_asked_on_the_consumers_own_loop() -> None:
    coordinator = Coordinator()

    async def go() -> bool:
        app = _app(None, coordinator, asyncio.get_running_loop())
        asked = reassignment.request_rejoin(app)
        assert coordinator.rejoins == []  # queued for the consumer's loop, not run by the caller
        await asyncio.sleep(0)
        return asked

    assert asyncio.run(go()) is True
    assert len(coordinator.rejoins) == 1
