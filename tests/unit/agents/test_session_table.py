"""The session table's reader for the window agent's decide phase: the same values as ``table.get``,
read from the memory store's own mapping, and ``table.get`` itself for a store that keeps none."""

from __future__ import annotations

from typing import Any

import faust
import pytest

from pipeline import internals
from pipeline.agents.session_table import SessionTable
from pipeline.compat import faust_internals


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> SessionTable:
    monkeypatch.setattr(internals, "_current", faust_internals.FaustInternals())
    app = faust.App("session-table-unit", broker="kafka://127.0.0.1:1", store="memory://")
    made = SessionTable(app=app, name="sessions", key_type=bytes, value_type=bytes, partitions=2)
    app.tables.add(made)
    return made


def test_the_reader_returns_what_get_returns(table: SessionTable) -> None:
    store: Any = table.data  # written as save_many and a recovery write it (no changelog send: no loop here)
    store[b"a"] = b"state-a"
    read = table.reader()
    assert read(b"a") == table.get(b"a") == b"state-a"
    assert read(b"missing") is None and table.get(b"missing") is None
    store[b"a"] = b"state-a2"  # the reader sees writes made after it was taken
    assert read(b"a") == table.get(b"a") == b"state-a2"
    del store[b"a"]
    assert read(b"a") is None and table.get(b"a") is None


def test_a_store_without_an_in_memory_mapping_is_read_through_get(table: SessionTable,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    class NoValues(faust_internals.FaustInternals):
        def store_values(self, store: Any) -> None:
            return None

    monkeypatch.setattr(internals, "_current", NoValues())
    assert table.reader() == table.get
