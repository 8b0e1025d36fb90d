"""Shared pytest wiring: service fixtures (broker, PostgreSQL) and the --long switch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.services.statekey import TEST_STATE_KEY

FIXTURES = Path(__file__).parent / "fixtures"
CONFORMANCE = FIXTURES / "conformance"

# Service fixtures live in tests/services/; each module is a pytest plugin.
pytest_plugins: list[str] = ["tests.services.postgres", "tests.services.broker", "tests.support.fixtures"]

# in-process apps and commands seal session states with the session's key, never a key file in ~
os.environ.setdefault("VOLUNTEER_STATE_KEY", TEST_STATE_KEY)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", default=False, help="also run the long variants (marked 'long')")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--long"):
        return
    deselected = [item for item in items if "long" in item.keywords]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if "long" not in item.keywords]
