"""pytest plugin: a real Kafka-compatible broker, and unique names so tests never share topics or groups.

Where the broker comes from, in order: ``VOLUNTEER_TEST_BROKER`` (any broker URL, e.g.
``kafka://127.0.0.1:9092``); a testcontainers Redpanda when a Docker daemon answers; else an
:class:`EmbeddedBroker` (Tansu, ~65 ms to start). With the embedded broker,
``module_broker_url`` is a fresh broker per test module (its memory use only grows, and a
wedged consumer group cannot leak into other modules); with an external broker it is the shared one.

``names`` gives each test unique topic names and a unique app id (= consumer group), and
``stream_settings`` a :class:`Settings` wired to them.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from pipeline.embedded.tansu import EmbeddedBroker
from pipeline.settings import EMBEDDED_BROKER_SCHEME, Settings, load_settings
from tests.services.docker_daemon import docker_available


@dataclass
class BrokerService:
    url: str
    origin: str  # "env" | "testcontainers" | "embedded"

    @property
    def embedded(self) -> bool:
        return self.url.strip().lower().startswith(EMBEDDED_BROKER_SCHEME + "://")



@pytest.fixture(scope="session")
def _broker_service() -> Iterator[BrokerService]:
    env_url = os.environ.get("VOLUNTEER_TEST_BROKER", "").strip()
    if env_url:
        yield BrokerService(env_url, "env")
        return
    if docker_available():
        try:
            from testcontainers.community.kafka import RedpandaContainer

            container: Any = RedpandaContainer()
            container.start()
        except Exception:
            container = None
        if container is not None:
            try:
                yield BrokerService("kafka://" + str(container.get_bootstrap_server()), "testcontainers")
            finally:
                container.stop()
            return
    with EmbeddedBroker(cluster_id="volunteer-tests") as broker:
        yield BrokerService(broker.url, "embedded")


@pytest.fixture(scope="session")
def broker_url(_broker_service: BrokerService) -> str:
    """The session's broker URL (``tansu://...`` for the embedded one)."""
    return _broker_service.url


@pytest.fixture(scope="module")
def module_broker_url(_broker_service: BrokerService) -> Iterator[str]:
    """A fresh embedded broker for this module, or the shared external broker."""
    if _broker_service.origin != "embedded":
        yield _broker_service.url
        return
    with EmbeddedBroker(cluster_id="volunteer-tests-module") as broker:
        yield broker.url


@pytest.fixture
def embedded_broker() -> Iterator[EmbeddedBroker]:
    """A fresh embedded Tansu broker for this test only (tests of Tansu itself use this)."""
    with EmbeddedBroker(cluster_id="volunteer-tests-own") as broker:
        yield broker


_counter = itertools.count(1)


@dataclass(frozen=True)
class TestNames:
    """Unique names for one test: ``names.topic("turns")`` -> ``t-3f2a9c-7-turns``."""

    __test__ = False  # not a test class, despite the name
    prefix: str

    def topic(self, base: str) -> str:
        return f"{self.prefix}-{base}"

    @property
    def app_id(self) -> str:
        return f"{self.prefix}-app"

    def group(self, base: str = "group") -> str:
        return f"{self.prefix}-{base}"


def new_names() -> TestNames:
    return TestNames(f"t{uuid.uuid4().hex[:6]}-{next(_counter)}")


@pytest.fixture
def names() -> TestNames:
    return new_names()


def settings_for(broker: str, names: TestNames, **overrides: Any) -> Settings:
    """Settings pointing at ``broker`` with this test's own topics and app id (= consumer group)."""
    values: dict[str, Any] = {
        "broker": broker,
        "topic_turns": names.topic("turns"),
        "topic_volunteered": names.topic("volunteered"),
        "topic_dlq": names.topic("dlq"),
        "app_id": names.app_id,
        "topic_partitions": 4,
    }
    values.update(overrides)
    return load_settings(**values)


@pytest.fixture
def stream_settings(module_broker_url: str, names: TestNames) -> Callable[..., Settings]:
    """``stream_settings(**overrides)`` -> Settings on this module's broker with unique names."""

    def make(**overrides: Any) -> Settings:
        return settings_for(module_broker_url, names, **overrides)

    return make
