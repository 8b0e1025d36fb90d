"""Fixtures of the MCP tests."""

from __future__ import annotations

import pytest

from pipeline.braindir import iter_brain_dir
from sinks.brain_import import import_brain
from tests.integration.mcp.helpers import SAMPLES


@pytest.fixture
def brain_db(migrated_database_url: str) -> str:
    """A migrated database holding the sample brain (pages and aliases)."""
    pages, aliases = iter_brain_dir(SAMPLES / "brain")
    import_brain(migrated_database_url, pages, aliases)
    return migrated_database_url
