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
            assert feed.take_records(CL0, [Message(CL0, offset, b"s%d" % offset, b"state")])
        assert table.applied == [[(b"s0", b"state", 0), (b"s1", b"state", 1), (b"s2", b"state", 2)]]
        feed.end_of_fetch()
        assert not recovery.signal_recovery_end.is_set()  # CL0's offset 3 and CL1's 0 are still to read
        assert feed.take_records(CL0, [Message(CL0, 1, b"s1", b"older")])  # fetched again after a seek: skipped
        assert feed.take_records(CL0, [Message(CL0, 3, b"s0", None)])  # a tombstone goes in like any record
        assert feed.take_records(CL1, [Message(CL1, 0, b"t0", b"state")])
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
        taken = [feed.take_records(CL1, [Message(CL1, 0, b"k", b"v")])]  # a standby or unassigned partition
        recovery.in_recovery = False
        taken.append(feed.take_records(CL0, [Message(CL0, 0, b"k", b"v")]))  # outside a recovery
        feed.end_of_fetch()
        return [*taken, recovery.signal_recovery_end.is_set(), bool(table.applied)]

    assert asyncio.run(go()) == [False, False, False, False]


def test_without_a_recovery_yet_nothing_is_taken() -> None:
    table = Table()
    feed = changelog_feed.feed(_app(table, None))
    assert feed is not None and feed.take_records(CL0, [Message(CL0, 0, b"k", b"v")]) is False


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
            feed.take_records(CL0, [Message(CL0, 0, b"k", b"v")])

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
            feed.take_records(CL0, [Message(CL0, offset, b"s%d" % offset, b"state")])
        feed.end_of_fetch()
        seen = [recovery.signal_recovery_end.is_set()]  # the first read ended
        recovery.restart({CL1: 3})  # the next assignment, with a partition to read whole
        seen.append(recovery.signal_recovery_end.is_set())  # what Faust's wait would see: must be unset
        for offset in range(3):
            feed.take_records(CL1, [Message(CL1, offset, b"t%d" % offset, b"state")])
        feed.end_of_fetch()
        seen.append(recovery.signal_recovery_end.is_set())  # ended by its own records
        return seen

    assert asyncio.run(go()) == [True, False, True]


class Consumer:
    """The parts of Faust's consumer ``take_fetch`` reads: its flow, its read offsets, the partitions
    its ``getmany`` reads besides the active ones."""

    def __init__(self) -> None:
        self.flow_active = True
        self.suspend_flow = asyncio.Event()
        self.should_stop = False
        self._buffered_partitions: set[TP] = set()
        self._read_offset: defaultdict[TP, int | None] = defaultdict(lambda: None)


def _records(tp: TP, offsets: range, key: bytes = b"s") -> list[Message]:
    return [Message(tp, offset, key + b"%d" % offset, b"state") for offset in offsets]


def test_a_fetch_s_changelog_partitions_are_applied_and_taken_out_of_it_the_rest_left_to_getmany() -> None:
    async def go() -> tuple[Table, FakeRecovery, dict[TP, list[Message]], Consumer, changelog_feed.ChangelogFeed, int]:
        table = Table()
        recovery = FakeRecovery(table, {CL0: 10, CL1: 2})
        feed = changelog_feed.feed(_app(table, recovery, {"sessions-changelog": table, "other-changelog": Table()}))
        assert feed is not None
        consumer = Consumer()
        turns = TP("turns", 0)
        records = {CL0: _records(CL0, range(4)), CL1: _records(CL1, range(2)), turns: _records(turns, range(3))}
        feed.take_fetch(consumer, records, {CL0, CL1, turns})
        return table, recovery, records, consumer, feed, feed.end_of_fetch()

    table, recovery, records, consumer, feed, taken = asyncio.run(go())
    assert set(records) == {TP("turns", 0)}  # getmany still delivers the turns
    assert taken == 6 and feed.applied == 6
    assert consumer._read_offset[CL0] == 3 and consumer._read_offset[CL1] == 1
    # applied whenever the table's one buffer reaches its size (3), in the fetch's order
    assert table.applied == [[(b"s0", b"state", 0), (b"s1", b"state", 1), (b"s2", b"state", 2)],
                             [(b"s3", b"state", 3), (b"s0", b"state", 0), (b"s1", b"state", 1)]]
    assert recovery.buffers[table] == []


def test_a_fetch_is_left_whole_to_getmany_when_the_stock_path_would_not_deliver_it() -> None:
    """Each case is one the stock loop drops or leaves (flow not active: getmany seeks; suspended:
    dropped, fetched again after the seek; stopping): the records stay where getmany finds them."""
    def run(change: str) -> tuple[set[TP], int]:
        async def go() -> tuple[set[TP], int]:
            table = Table()
            recovery = FakeRecovery(table, {CL0: 10})
            feed = changelog_feed.feed(_app(table, recovery))
            assert feed is not None
            consumer = Consumer()
            if change == "inactive":
                consumer.flow_active = False
            elif change == "suspended":
                consumer.suspend_flow.set()
            elif change == "stopping":
                consumer.should_stop = True
            records = {CL0: _records(CL0, range(3))}
            feed.take_fetch(consumer, records, None if change == "client" else {CL0})
            return set(records), feed.applied
        return asyncio.run(go())

    for change in ("inactive", "suspended", "stopping"):
        assert run(change) == ({CL0}, 0), change
    assert run("client") == (set(), 3)  # no active-partition filter (a client-only app): taken


def test_a_partition_getmany_would_not_read_or_records_before_the_read_offset_are_not_applied() -> None:
    async def go() -> tuple[dict[TP, list[Message]], Table, Consumer]:
        table = Table()
        recovery = FakeRecovery(table, {CL0: 10, CL1: 10})
        feed = changelog_feed.feed(_app(table, recovery))
        assert feed is not None
        consumer = Consumer()
        consumer._read_offset[CL0] = 2  # delivered through offset 2 before: 0 and 1 are stale
        records = {CL0: _records(CL0, range(5)), CL1: _records(CL1, range(2))}
        feed.take_fetch(consumer, records, {CL0})  # CL1 paused: not active, not buffered
        feed.end_of_fetch()
        return records, table, consumer

    records, table, consumer = asyncio.run(go())
    assert set(records) == {CL1}
    assert [offset for batch in table.applied for _, _, offset in batch] == [2, 3, 4]
    assert consumer._read_offset[CL0] == 4


def test_a_partition_not_in_recovery_stays_in_the_fetch() -> None:
    async def go() -> dict[TP, list[Message]]:
        table = Table()
        recovery = FakeRecovery(table, {CL0: 10})
        feed = changelog_feed.feed(_app(table, recovery))
        assert feed is not None
        records = {CL1: _records(CL1, range(2))}  # a standby partition: Faust's recovery reads it
        feed.take_fetch(Consumer(), records, {CL0, CL1})
        return records

    assert set(asyncio.run(go())) == {CL1}


def test_outside_a_recovery_a_fetch_is_left_whole() -> None:
    async def go() -> tuple[set[TP], int]:
        table = Table()
        recovery = FakeRecovery(table, {CL0: 10})
        recovery.in_recovery = False  # steady state: the table is recovered
        feed = changelog_feed.feed(_app(table, recovery))
        assert feed is not None
        records = {CL0: _records(CL0, range(3))}
        feed.take_fetch(Consumer(), records, {CL0})
        return set(records), feed.end_of_fetch()

    assert asyncio.run(go()) == ({CL0}, 0)
