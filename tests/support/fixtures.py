"""Pytest fixtures for the real harness CLIs (a plugin listed in ``tests/conftest.py``).

- ``claude_code_cli`` / ``codex_cli`` / ``opencode_cli`` (session): the pinned binary's path, installed into the
  cache on first use; the test skips when npm is missing and fails when the install is broken.
- ``stand_in_model`` (function): a started :class:`~tests.support.harness_cli.StandInModel`.
- ``harness_home`` (function): a temporary HOME with ``.claude`` and ``.codex``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.harness_cli import CLAUDE_CODE, CODEX, OPENCODE, StandInModel, make_home, require


@pytest.fixture(scope="session")
def claude_code_cli() -> Path:
    return require(CLAUDE_CODE)


@pytest.fixture(scope="session")
def codex_cli() -> Path:
    return require(CODEX)


@pytest.fixture
def stand_in_model() -> Iterator[StandInModel]:
    with StandInModel() as model:
        yield model


@pytest.fixture
def harness_home(tmp_path: Path) -> Path:
    return make_home(tmp_path)


@pytest.fixture(scope="session")
def opencode_cli() -> Path:
    return require(OPENCODE)
