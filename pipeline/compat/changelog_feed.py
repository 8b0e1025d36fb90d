"""Apply a table recovery's changelog records a fetch at a time, past Faust's per-record path.

A fresh worker taking over a million sessions reads every changelog record ever written for them
(two million after two turns each: the embedded broker does not compact). Faust moves each one
through the conductor (the topic's schema decoding key and value, an ``Event``, the changelog
queue), then its recovery loop (``Recovery._slurp_changelogs``: a ``wait_for`` task per record,
buffer bookkeeping, and a test of the whole recovery's remaining records after each record). In
issue 28's bench that came to about 120 us of worker CPU per record, 230 s for the million
(docs/performance.md, "A million sessions"); the broker served the same reads in a fraction of it.

:class:`ChangelogFeed` does what that loop does for a record, as the record is fetched: the
fastdrain consumer hands it each fetch before Faust's ``getmany`` sees it
(:func:`pipeline.compat.fastdrain.take_changelog_first`), and :meth:`ChangelogFeed.take_fetch`
applies the changelog partitions it serves straight from aiokafka's records, a partition at a time,
and takes them out of the fetch, so no Faust message is made of them (``getmany``'s message and
high-watermark read per record were more of the recovery's CPU than the apply; docs/performance.md,
"A million sessions"). For each record:

- a record newer than the recovery's offset for its partition moves that offset and goes into
  the table's recovery buffer, which is applied (``Table.apply_changelog_batch``: the session
  table's newest-state rule, ``pipeline/agents/session_table.py``) whenever it reaches the table's
  ``recovery_buffer_size``, exactly as Faust buffers it; an older one is skipped, as Faust skips it;
- the partition's receive time is stamped (Faust's "no event received" check and the read watch of
  :mod:`pipeline.compat.recovery_retry` read it);
- after each fetch, once nothing is left to read (Faust's own ``need_recovery``), the buffers are
  flushed and the end of the read is signalled, as Faust's loop does after a record.

Only for what Faust's loop would apply: a record of an *active* changelog partition of a recovery
in progress, of a table whose keys and values are raw bytes (the session table: its key and value
are the record's bytes, with no schema to run). Anything else (a standby partition, a record
outside a recovery, another kind of table) stays in the fetch for the stock path. A partition is
taken only when the stock path would deliver it: the consumer's flow active and not suspended, the
partition one ``getmany`` reads, and only its records at or after the consumer's read offset, which
then moves to the last of them, as the stock loop moves it.

The end of a read is a level, not a pulse: Faust's recovery waits on ``signal_recovery_end``, and
its own loop clears that event at the top of every turn, right after it set it. The feed sets it
from the fetch path, where Faust's loop is not turning (it waits up to 5 s for a changelog event
that never comes, the feed having taken them), so the event stayed set. A recovery that began
within those 5 s (a second rebalance right after the first, issue 27's seed 2067250784: 2.8 s)
found it set, ended at once with a whole partition unread, and the worker then decided that
partition's turns on missing states: pages volunteered again, turns numbered from 1. So each
recovery the feed serves clears the event as it starts (:func:`clear_end_on_start`, on Faust's
``_set_recovery_started``, before the flow is resumed, so no end of this read can be lost).
"""

from __future__ import annotations

import logging
import time
from typing import Any, NamedTuple

from pipeline.internals import require

PATCH = "changelog-feed"

RECOVERY_PARTS = ("in_recovery", "active_tps", "active_offsets", "tp_to_table", "buffers",
                  "_active_events_received_at", "signal_recovery_end")
RECOVERY_METHODS = ("need_recovery", "flush_buffers", "_set_recovery_ended", "_set_recovery_started")
RAW = "raw"
APPLIED_LOG = "table recovery: changelog records applied as fetched:"
"""Logged at the end of each read this feed ended, with its count (the recovery tests look for it)."""

log = logging.getLogger(__name__)


class ChangelogRecord(NamedTuple):
    """The parts of Faust's ``Event`` a raw table's changelog apply reads: key, value, message."""

    key: Any
    value: Any
    message: Any


class ChangelogFeed:
    """One app's changelog records, applied as fetched (module doc)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._tables = app.tables  # Faust's cached_property, read once (it was a tenth of the feed's time per record)
        self.topics = frozenset(topic for topic, table in app.tables._changelogs.items()
                                if table.key_serializer == RAW and table.value_serializer == RAW)
        self._touched: Any = None  # the recovery a record went into since the last end of fetch
        self.applied = 0  # records applied (tests and the bench read it)
        self._fetched = 0  # records taken since the last end of fetch
        self._checked: Any = None  # the recovery whose parts were checked (Faust makes one per app)

    def take_fetch(self, consumer: Any, records: Any, active_partitions: Any) -> None:
        """Apply, from one fetch's ``records`` (partition to aiokafka records, as Faust's
        ``_wait_next_records`` returns them), every changelog partition this feed serves, and take
        them out of ``records`` so that Faust's ``getmany`` never makes messages of them.

        The stock path would deliver a record only while the consumer's flow is active and not
        suspended, for a partition Faust's ``getmany`` reads (``active_partitions`` or a buffered
        one), at or after the consumer's read offset; the same tests decide here, once per partition.
        Whatever is not taken stays in ``records`` for the stock path (module doc)."""
        recovery = self._tables._recovery
        if recovery is None or not recovery.in_recovery:
            return  # steady state: nothing of the fetch is the feed's, and no partition is looked at
        if not consumer.flow_active or consumer.suspend_flow.is_set() or consumer.should_stop:
            return
        buffered = consumer._buffered_partitions
        read_offsets = consumer._read_offset
        for tp in [tp for tp in records if tp.topic in self.topics]:
            if active_partitions is not None and tp not in active_partitions and tp not in buffered:
                continue  # Faust's getmany leaves it out too
            batch = records[tp]
            r_offset = read_offsets[tp]
            if r_offset is not None:
                batch = [record for record in batch if record.offset >= r_offset]
            if not batch:
                continue
            if self.take_records(tp, batch):
                read_offsets[tp] = batch[-1].offset
                del records[tp]

    def take_records(self, tp: Any, batch: list[Any]) -> bool:
        """Apply ``batch`` (one partition's records in offset order) as Faust's recovery would; False
        (nothing done) when they are not the recovery's to apply here and the stock path must deliver them."""
        recovery = self._tables._recovery
        if recovery is None:
            return False
        if recovery is not self._checked:
            require(PATCH, recovery, *RECOVERY_PARTS, methods=RECOVERY_METHODS)
            clear_end_on_start(recovery)
            self._checked = recovery
        if not recovery.in_recovery or tp not in recovery.active_tps:
            return False
        offsets = recovery.active_offsets
        seen = offsets.get(tp)
        recovery._active_events_received_at[tp] = time.monotonic()
        self._touched = recovery
        table = recovery.tp_to_table[tp]
        buffer = recovery.buffers[table]
        size = table.recovery_buffer_size
        applied = 0
        for record in batch:
            offset = record.offset
            if seen is not None and offset <= seen:
                continue  # fetched again after a seek: Faust skips it too
            seen = offsets[tp] = offset
            buffer.append(ChangelogRecord(record.key, record.value, record))
            if len(buffer) >= size:
                table.apply_changelog_batch(buffer)
                buffer.clear()
            applied += 1
        self.applied += applied
        self._fetched += len(batch)
        return True

    def end_of_fetch(self) -> int:
        """After a fetch's records: end the read when nothing is left (Faust's ``_maybe_signal_recovery_end``).
        Returns the records taken since the last call (the fetch loop counts them as delivered)."""
        recovery, self._touched = self._touched, None
        fetched, self._fetched = self._fetched, 0
        if recovery is None or not recovery.in_recovery or recovery.need_recovery():
            return fetched
        recovery.flush_buffers()
        recovery._set_recovery_ended()
        recovery.signal_recovery_end.set()
        log.info("%s %d (since the worker started)", APPLIED_LOG, self.applied)
        return fetched


_CLEARS = "_volunteer_clears_end_on_start"


def clear_end_on_start(recovery: Any) -> None:
    """Make ``recovery`` clear its end-of-read event whenever a recovery starts (module doc); once."""
    if getattr(recovery, _CLEARS, False):
        return
    started = recovery._set_recovery_started

    def _set_recovery_started() -> None:
        recovery.signal_recovery_end.clear()  # a read this feed ended must not end the next one
        started()

    recovery._set_recovery_started = _set_recovery_started
    setattr(recovery, _CLEARS, True)


def check_recovery(recovery_class: Any) -> None:
    """The parts of Faust's ``Recovery`` the feed uses, checked on the class at install."""
    require(PATCH, recovery_class, "signal_recovery_end", methods=RECOVERY_METHODS)


def feed(app: Any) -> ChangelogFeed | None:
    """The app's feed, or None when it has no raw table (then every record takes the stock path)."""
    require(PATCH, app.tables, "_changelogs", "_recovery")
    made = ChangelogFeed(app)
    return made if made.topics else None
