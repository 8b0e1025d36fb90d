"""Apply a table recovery's changelog records a fetch at a time, past Faust's per-record path.

A fresh worker taking over a million sessions reads every changelog record ever written for them
(two million after two turns each: the embedded broker does not compact). Faust moves each one
through the conductor (the topic's schema decoding key and value, an ``Event``, the changelog
queue), then its recovery loop (``Recovery._slurp_changelogs``: a ``wait_for`` task per record,
buffer bookkeeping, and a test of the whole recovery's remaining records after each record). In
issue 28's bench that came to about 120 us of worker CPU per record, 230 s for the million
(docs/performance.md, "A million sessions"); the broker served the same reads in a fraction of it.

:class:`ChangelogFeed` does what that loop does for a record, in the fastdrain loop
(:func:`pipeline.compat.fastdrain.drain_messages`) as the record is fetched:

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
outside a recovery, another kind of table) takes the stock path. The record is taken only while
the consumer's flow is active, as the stock path delivers it only then.

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
        self.topics = frozenset(topic for topic, table in app.tables._changelogs.items()
                                if table.key_serializer == RAW and table.value_serializer == RAW)
        self._touched: Any = None  # the recovery a record went into since the last end of fetch
        self.applied = 0  # records taken (tests and the bench read it)
        self._checked: Any = None  # the recovery whose parts were checked (Faust makes one per app)

    def take(self, tp: Any, message: Any) -> bool:
        """Apply ``message`` as Faust's recovery would; False (nothing done) when it is not the
        recovery's to apply here and the stock path must deliver it."""
        recovery = self.app.tables._recovery
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
        offset = message.offset
        recovery._active_events_received_at[tp] = time.monotonic()
        self._touched = recovery
        if seen is None or offset > seen:
            offsets[tp] = offset
            table = recovery.tp_to_table[tp]
            buffer = recovery.buffers[table]
            buffer.append(ChangelogRecord(message.key, message.value, message))
            if len(buffer) >= table.recovery_buffer_size:
                table.apply_changelog_batch(buffer)
                buffer.clear()
            self.applied += 1
        return True

    def end_of_fetch(self) -> None:
        """After a fetch's records: end the read when nothing is left (Faust's ``_maybe_signal_recovery_end``)."""
        recovery, self._touched = self._touched, None
        if recovery is None or not recovery.in_recovery or recovery.need_recovery():
            return
        recovery.flush_buffers()
        recovery._set_recovery_ended()
        recovery.signal_recovery_end.set()
        log.info("%s %d (since the worker started)", APPLIED_LOG, self.applied)


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
