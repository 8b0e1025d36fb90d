"""What of the changelog the session table holds in memory (``ChangelogCoverage``), and the recovery
start it gives Faust (``SessionTable.persisted_offset``): a partition kept or regained without
being forgotten is read from where the memory's copy ends, never past a record it has not seen."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import faust
import pytest

from pipeline import internals
from pipeline.agents.session_table import ChangelogCoverage, SessionTable
from pipeline.compat import faust_internals


def test_nothing_is_held_before_a_recovery_has_read_the_partition() -> None:
    coverage = ChangelogCoverage()
    coverage.wrote(0, 0, 10)  # own writes alone prove nothing: the partition may hold older records
    assert coverage.through(0) is None


def test_a_read_then_contiguous_own_writes_are_held() -> None:
    coverage = ChangelogCoverage()
    coverage.read_to(0, -1)  # an empty partition, read to its end
    coverage.wrote(0, 0, 10)
    coverage.wrote(0, 10, 5)
    assert coverage.through(0) == 14


def test_a_record_of_another_writer_in_between_stops_the_advance() -> None:
    coverage = ChangelogCoverage()
    for offset in range(100):
        coverage.applied(3, offset)
    coverage.wrote(3, 101, 20)  # offset 100 is someone else's (a late write): it must be read
    coverage.wrote(3, 121, 5)
    assert coverage.through(3) == 99
    coverage.applied(3, 100)  # a recovery read past the gap
    coverage.applied(3, 125)
    assert coverage.through(3) == 125


def test_batches_acknowledged_out_of_order_are_not_counted_past_the_gap() -> None:
    coverage = ChangelogCoverage()
    coverage.read_to(1, 9)
    coverage.wrote(1, 20, 5)  # the later batch first
    coverage.wrote(1, 10, 10)
    assert coverage.through(1) == 19  # 20-24 are read again by the next recovery: safe, not lost


def test_forgotten_partitions_are_read_whole_again() -> None:
    coverage = ChangelogCoverage()
    coverage.read_to(0, 50)
    coverage.read_to(1, 70)
    coverage.keep_only([1])
    assert coverage.through(0) is None and coverage.through(1) == 70


def test_a_read_never_moves_the_start_back() -> None:
    coverage = ChangelogCoverage()
    coverage.read_to(2, 40)
    coverage.applied(2, 12)  # a re-read of older records
    coverage.read_to(2, 30)
    assert coverage.through(2) == 40


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> SessionTable:
    monkeypatch.setattr(internals, "_current", faust_internals.FaustInternals())
    app = faust.App("coverage-unit", broker="kafka://127.0.0.1:1", store="memory://")
    made = SessionTable(app=app, name="sessions", key_type=bytes, value_type=bytes, partitions=4)
    app.tables.add(made)
    return made


def _event(partition: int, offset: int, key: bytes, value: bytes | None) -> Any:
    message = SimpleNamespace(partition=partition, offset=offset, value=value, key=key, timestamp=None)
    return SimpleNamespace(key=key, value=value, message=message)


def test_the_table_tells_faust_where_its_copy_ends(table: SessionTable) -> None:
    changelog = table.changelog_topic.get_topic_name()
    tp = SimpleNamespace(topic=changelog, partition=2)
    assert table.persisted_offset(tp) is None  # never read: Faust reads it from its start
    table.apply_changelog_batch([_event(2, 0, b"k", None), _event(2, 1, b"j", None)])
    assert table.persisted_offset(tp) == 1
    assert table.persisted_offset(SimpleNamespace(topic="turns", partition=2)) is None
