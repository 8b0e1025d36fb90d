"""Fixtures of the client tests: Settings on the module's real broker, with this test's own topics."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pipeline.settings import Settings
from tests.integration.client.helpers import run
from topics.definitions import ensure_topics


@pytest.fixture
def client_settings(stream_settings: Callable[..., Settings]) -> Settings:
    """Unique ``turns`` / ``volunteered`` / ``turns-dlq`` topics (4 partitions), created up front."""
    settings = stream_settings()
    run(ensure_topics(settings))
    return settings
