"""The port the shell reads Faust internals through: refused before the start-up installed it, and
with the real Faust classes the reads the session table and the metrics rely on."""

from __future__ import annotations

from typing import Any

import faust
import pytest
from faust.stores.memory import Store as MemoryStore

from pipeline import internals
from pipeline.compat import faust_internals
from pipeline.internals import CompatError


def test_the_port_refuses_before_the_start_up_installed_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(internals, "_current", None)
    with pytest.raises(CompatError, match=r"pipeline\.compat\.install\(app, settings\) runs at the app's start-up"):
        internals.internals()
    faust_internals.install()
    assert isinstance(internals.internals(), faust_internals.FaustInternals)


def test_reads_of_a_real_app_table_and_memory_store() -> None:
    access = faust_internals.FaustInternals()
    app = faust.App("internals-unit", broker="kafka://127.0.0.1:1", store="memory://")
    table = app.Table("t", key_type=bytes, value_type=bytes, partitions=2)
    assert access.created_consumer(app) is None  # reading it does not create it
    assert access.created_store(table) is None
    store: Any = table.data  # now it exists
    assert isinstance(store, MemoryStore) and access.created_store(table) is store
    tracked = access.key_partitions(store)
    assert tracked is not None
    tracked[b"k"] = 1  # the map the store forgets revoked partitions' keys by
    assert store._key_partition == {b"k": 1}
    assert access.key_partitions(object()) is None  # a store kind without such a map: said, not guessed


def test_the_memory_store_values_are_the_stores_own_mapping() -> None:
    access = faust_internals.FaustInternals()
    app = faust.App("internals-unit-values", broker="kafka://127.0.0.1:1", store="memory://")
    table = app.Table("t3", key_type=bytes, value_type=bytes, partitions=2)
    store: Any = table.data
    values = access.store_values(store)
    assert values is store.data
    store[b"k"] = b"v"
    assert values.get(b"k") == table.get(b"k") == b"v"
    assert values.get(b"other") is table.get(b"other") is None
    assert access.store_values(object()) is None  # a store kind that keeps none: the caller uses table.get


def test_a_memory_store_without_its_values_is_refused() -> None:
    app = faust.App("internals-unit-novalues", broker="kafka://127.0.0.1:1", store="memory://")
    store: Any = app.Table("t4", key_type=bytes, value_type=bytes, partitions=2).data
    del store.data
    with pytest.raises(CompatError, match=r"compat patch faust-internals: faust\.stores\.memory\.Store instance has no data"):
        faust_internals.FaustInternals().store_values(store)


def test_a_memory_store_without_its_key_map_is_refused() -> None:
    app = faust.App("internals-unit-missing", broker="kafka://127.0.0.1:1", store="memory://")
    store: Any = app.Table("t2", key_type=bytes, value_type=bytes, partitions=2).data
    del store._key_partition
    with pytest.raises(CompatError, match=r"compat patch faust-internals: faust\.stores\.memory\.Store instance has no "
                                          r"_key_partition"):
        faust_internals.FaustInternals().key_partitions(store)


def test_newest_fetch_of_a_real_app_consumer() -> None:
    """Faust's consumer keeps no aiokafka consumer before it starts (None: no Fetch answer yet); a
    consumer without the thread attribute is refused, not read as silent."""
    access = faust_internals.FaustInternals()
    app = faust.App("internals-fetch", broker="kafka://127.0.0.1:1", store="memory://")
    consumer = app.consumer  # created here, not started: its thread has no aiokafka consumer yet
    assert access.newest_fetch_ms(consumer) is None
    with pytest.raises(CompatError, match="has no _thread"):
        access.newest_fetch_ms(object())
