"""The sink agent's batch logic: ``volunteered`` records -> rows in ``context_volunteer_events``.

A batch is acknowledged only after its rows are committed. While PostgreSQL is unreachable the
batch is retried with backoff and nothing is acknowledged, so offsets never pass events that are
not in the table; Faust stops fetching once its buffers fill, so memory stays bounded. Rows are
written with :func:`sinks.events.insert_events` (``ON CONFLICT DO NOTHING`` on the event identity),
so redelivered events never become duplicate rows. Records that can never be stored (not a
Volunteered record, an unstorable value) become dead letters.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

import psycopg

from pipeline.agents.batch_types import InRecord, SinkResult
from pipeline.agents.dbwriter import DurableConnection
from pipeline.agents.retry import Backoff
from sinks.events import InvalidEvent, insert_events
from topics.records import DeadLetter, InvalidRecord, Volunteered

log = logging.getLogger(__name__)


class EventWriter:
    """Decodes Volunteered records and inserts them, retrying until written (see :mod:`.dbwriter`)."""

    def __init__(self, database_url: str, topic: str) -> None:
        self.database_url = database_url
        self.topic = topic
        self.db = DurableConnection(database_url, "write events")

    @property
    def failures(self) -> int:
        return self.db.failures

    async def close(self) -> None:
        await self.db.close()

    def decode(self, records: Sequence[InRecord], now_ms: int,
               result: SinkResult) -> list[tuple[Volunteered, InRecord]]:
        events: list[tuple[Volunteered, InRecord]] = []
        for rec in records:
            try:
                if rec.value is None:
                    raise InvalidRecord("missing_value", "record has no value (tombstone)")
                events.append((Volunteered.from_json(rec.value), rec))
            except InvalidRecord as exc:
                result.dead.append((rec.key, self._letter(rec, exc.code, exc.message, now_ms)))
        return events

    def _letter(self, rec: InRecord, code: str, message: str, now_ms: int) -> bytes:
        return DeadLetter.build(key=rec.key, value=rec.value, topic=self.topic, partition=rec.partition,
                                offset=rec.offset, error=code, message=message, now_ms=now_ms).to_json()

    async def write(self, records: Sequence[InRecord], now_ms: int,
                    should_stop: Callable[[], bool] = lambda: False,
                    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> SinkResult:
        """Store a batch. Returns only once the rows are committed (or ``should_stop()`` turns true,
        in which case ``attempts`` is negative and the caller must not acknowledge)."""
        result = SinkResult()
        pairs = self.decode(records, now_ms, result)
        backoff = Backoff()
        while pairs:
            result.attempts += 1
            try:
                conn = await self.db.connection()
                result.inserted += await insert_events(conn, [ev for ev, _ in pairs])
                break
            except InvalidEvent as exc:
                for ev, rec in pairs:
                    if ev.event_id == exc.event_id:
                        result.dead.append((rec.key, self._letter(rec, "invalid_event", str(exc), now_ms)))
                pairs = [(ev, rec) for ev, rec in pairs if ev.event_id != exc.event_id]
            except (psycopg.Error, OSError) as exc:
                if await self.db.wait_after(exc, backoff, should_stop, sleep):
                    result.attempts = -1
                    return result
        result.events = len(pairs)
        return result
