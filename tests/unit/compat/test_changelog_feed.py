"""The changelog feed applies a recovery's records as Faust's recovery loop would: newer offsets
into the table's buffer (applied at its buffer size), older ones skipped, the end of the read
signalled once nothing is left; anything that is not an active partition of a recovery in progress
is left to the stock path."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import pytest
from faust.tables.recovery import Recovery
from faust.types import TP

from pipeline.compat import changelog_feed
from pipeline.internals import CompatError

CL0, CL1, OTHER = TP("sessions-changelog", 0), TP("sessions-changelog", 1), TP("other-changelog", 0)


class Table:
    key_serializer = value_serializer = "raw"
    recovery_buffer_size = 3

    def __init__(self) -> None:
        self.applied: list[list[tuple[Any, Any, int]]] = []

    def apply_changelog_batch(self, batch: list[Any]) -> None:
        self.applied.append([(r.key, r.value, r.message.offset) for r in batch])


class Message:
    def __init__(self, tp: TP, offset: int, key: bytes, value: bytes | None) -> None:
        self.tp, self.topic, self.partition, self.offset, self.key, self.value = tp, tp.topic, tp.partition, offset, key, value


class FakeRecovery:
    """The parts of Faust's Recovery the feed reads and calls; highwaters say what is left."""

    def __init__(self, table: Table, highwaters: dict[TP, int]) -> None:
        self.in_recovery = True
        self.active_tps = set(highwaters)
        self.active_offsets: dict[TP, int | None] = {tp: -1 for tp in highwaters}
        self.active_highwaters = highwaters
        self.tp_to_table = {tp: table for tp in highwaters}
        self.buffers: defaultdict[Any, list[Any]] = defaultdict(list)
        self._active_events_received_at: dict[TP, float] = {}
        self.signal_recovery_end = asyncio.Event()
        self.ended = 0

    def need_recovery(self) -> bool:
        return any(-1 if self.active_offsets[tp] is None else self.active_offsets[tp] < hw - 1  # type: ignore[operator]
                   for tp, hw in self.active_highwaters.items())

    def flush_buffers(self) -> None:
        for table, buffer in self.buffers.items():
            if buffer:
                table.apply_changelog_batch(buffer)
                buffer.clear()

    def _set_recovery_ended(self) -> None:
        self.in_recovery = False
        self.ended += 1

    def _set_recovery_started(self) -> None:  # what Faust calls as each recovery begins
        self.in_recovery = True

    def restart(self, highwaters: dict[TP, int]) -> None:
        """A new assignment's recovery, the way Faust begins it: new partitions, then started."""
        self.active_tps = set(highwaters)
        self.active_offsets = {tp: -1 for tp in highwaters}
        self.active_highwaters = highwaters
        self.tp_to_table = {tp: next(iter(self.tp_to_table.values())) for tp in highwaters}
        self._set_recovery_started()


def _app(table: Table, recovery: FakeRecovery | None, tables: dict[str, Any] | None = None) -> Any:
    manager = type("Tables", (), {"_changelogs": tables or {"sessions-changelog": table}, "_recovery": recovery})()
    return type("App", (), {"tables": manager})()


def test_records_are_buffered_applied_at_the_buffer_size_and_the_read_ends_when_nothing_is_left() -> None:
    async def go() -> tuple[Table, FakeRecovery, changelog_feed.ChangelogFeed]:
        table = Table()
        recovery = FakeRecovery(table, {CL0: 4, CL1: 1})
        feed = changelog_feed.feed(_app(table, recovery))
        assert feed is not None and feed.topics == {"sessions-changelog"}
        for offset in range(3):
            assert feed.take(CL0, Message(CL0, offset, b"s%d" % offset, b"state"))
        assert table.applied == [[(b"s0", b"state", 0), (b"s1", b"state", 1), (b"s2", b"state", 2)]]
        feed.end_of_fetch()
        assert not recovery.signal_recovery_end.is_set()  # CL0's offset 3 and CL1's 0 are still to read
        assert feed.take(CL0, Message(CL0, 1, b"s1", b"older"))  # fetched again after a seek: skipped
        assert feed.take(CL0, Message(CL0, 3, b"s0", None))  # a tombstone goes in like any record
        assert feed.take(CL1, Message(CL1, 0, b"t0", b"state"))
        feed.end_of_fetch()
        return table, recovery, feed

    table, recovery, feed = asyncio.run(go())
    assert table.applied[1] == [(b"s0", None, 3), (b"t0", b"state", 0)]  # flushed at the end of the read
    assert recovery.signal_recovery_end.is_set() and recovery.ended == 1 and not recovery.in_recovery
    assert feed.applied == 5 and set(recovery._active_events_received_at) == {CL0, CL1}


def test_what_is_not_an_active_partition_of_a_recovery_in_progress_takes_the_stock_path() -> None:
    async def go() -> list[bool]:
        table = Table()
        recovery = FakeRecovery(table, {CL0: 10})
        feed = changelog_feed.feed(_app(table, recovery))
        assert feed is not None
        taken = [feed.take(CL1, Message(CL1, 0, b"k", b"v"))]  # a standby or unassigned partition
        recovery.in_recovery = False
        taken.append(feed.take(CL0, Message(CL0, 0, b"k", b"v")))  # outside a recovery
        feed.end_of_fetch()
        return [*taken, recovery.signal_recovery_end.is_set(), bool(table.applied)]

    assert asyncio.run(go()) == [False, False, False, False]


def test_without_a_recovery_yet_nothing_is_taken() -> None:
    table = Table()
    feed = changelog_feed.feed(_app(table, None))
    assert feed is not None and feed.take(CL0, Message(CL0, 0, b"k", b"v")) is False


def test_a_table_with_a_schema_is_left_to_faust() -> None:
    table, schema_table = Table(), Table()
    schema_table.value_serializer = "json"
    assert changelog_feed.feed(_app(table, None, {"other-changelog": schema_table})) is None


def test_a_recovery_without_the_parts_it_uses_is_refused() -> None:
    async def go() -> None:
        table = Table()
        recovery = FakeRecovery(table, {CL0: 10})
        del recovery.buffers
        feed = changelog_feed.feed(_app(table, recovery))
        assert feed is not None
        with pytest.raises(CompatError, match="changelog-feed"):
            feed.take(CL0, Message(CL0, 0, b"k", b"v"))

    asyncio.run(go())


def test_faust_recovery_has_what_the_feed_calls() -> None:
    changelog_feed.check_recovery(Recovery)  # the pinned Faust; a later one without them is refused at install


def test_the_end_of_a_read_does_not_end_the_next_recovery() -> None:
    """Issue 27, seed 2067250784: a recovery the feed ended left ``signal_recovery_end`` set (Faust's
    loop, which clears it, was waiting for events the feed had taken), and the next recovery, 2.8 s
    later, ended at once with a whole partition unread. Now each recovery starts with it clear."""
    async def go() -> list[bool]:
        table = Table()
        recovery = FakeRecovery(table, {CL0: 2})
        feed = changelog_feed.feed(_app(table, recovery))
        assert feed is not None
        for offset in range(2):
            feed.take(CL0, Message(CL0, offset, b"s%d" % offset, b"state"))
        feed.end_of_fetch()
        seen = [recovery.signal_recovery_end.is_set()]  # the first read ended
        recovery.restart({CL1: 3})  # the next assignment, with a partition to read whole
        seen.append(recovery.signal_recovery_end.is_set())  # what Faust's wait would see: must be unset
        for offset in range(3):
            feed.take(CL1, Message(CL1, offset, b"t%d" % offset, b"state"))
        feed.end_of_fetch()
        seen.append(recovery.signal_recovery_end.is_set())  # ended by its own records
        return seen

    assert asyncio.run(go()) == [True, False, True]
