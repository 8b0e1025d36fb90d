"""The sink agent's batch logic: ``volunteered`` records -> rows in ``context_volunteer_events``.

A batch is acknowledged only after its rows are committed. While PostgreSQL is unreachable the
batch is retried with backoff and nothing is acknowledged, so offsets never pass events that are
not in the table; Faust stops fetching once its buffers fill, so memory stays bounded. Rows are
written with :func:`sinks.events.insert_events` (``ON CONFLICT DO NOTHING`` on the event identity),
so redelivered events never become duplicate rows. Records that can never be stored (not a
Volunteered record, an unstorable value) become dead letters.
"""

from __future__ import annotations

import psycopg

from pipeline.agents.batch_types import InRecord, SinkResult
from pipeline.agents.dbwriter import BatchWriter
from sinks.events import InvalidEvent, insert_events
from topics.records import InvalidRecord, Volunteered

Pair = tuple[Volunteered, InRecord]
"""An event and the record it came from (whose place the dead letter names)."""


class EventWriter(BatchWriter[Pair, SinkResult]):
    """Decodes Volunteered records and inserts them, retrying until written (see :mod:`.dbwriter`)."""

    what = "write events"

    def new_result(self) -> SinkResult:
        return SinkResult()

    def decode_one(self, rec: InRecord) -> Pair:
        if rec.value is None:
            raise InvalidRecord("missing_value", "record has no value (tombstone)")
        return Volunteered.from_json(rec.value), rec

    async def store(self, conn: psycopg.AsyncConnection, items: list[Pair], result: SinkResult,
                    now_ms: int) -> list[Pair]:
        """One INSERT of the batch; an event PostgreSQL could never store is dead-lettered and the
        rest is tried again (nothing was written: the check runs before the statement)."""
        try:
            result.inserted += await insert_events(conn, [ev for ev, _ in items])
        except InvalidEvent as exc:
            for ev, rec in items:
                if ev.event_id == exc.event_id:
                    self.dead_letter(result, rec, "invalid_event", str(exc), now_ms)
            return [(ev, rec) for ev, rec in items if ev.event_id != exc.event_id]
        result.events = len(items)
        return []
