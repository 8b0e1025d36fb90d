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
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import psycopg

from pipeline.agents.window import InRecord
from sinks.db import redact
from sinks.events import InvalidEvent, insert_events
from topics.records import DeadLetter, InvalidRecord, Volunteered

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 5.0


@dataclass(slots=True)
class SinkResult:
    inserted: int = 0
    events: int = 0
    dead: list[tuple[bytes | None, bytes]] = field(default_factory=list)
    attempts: int = 0


class EventWriter:
    """One long-lived autocommit connection, reopened after failures; retries until written."""

    def __init__(self, database_url: str, topic: str) -> None:
        self.database_url = database_url
        self.topic = topic
        self._conn: psycopg.AsyncConnection | None = None
        self._last_warning = 0.0
        self.failures = 0

    async def _connection(self) -> psycopg.AsyncConnection:
        if self._conn is None or self._conn.closed:
            from sinks.db import connect_async

            conn = await connect_async(self.database_url, autocommit=True)
            # Offsets are committed once a batch's INSERT returns, so that commit must be durable:
            # with the server's synchronous_commit=off a PostgreSQL crash drops acknowledged rows.
            try:
                await conn.execute("SET synchronous_commit TO on")
            except BaseException:
                await conn.close()
                raise
            self._conn = conn
        return self._conn

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()

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
        backoff = 0.05
        while pairs:
            result.attempts += 1
            try:
                conn = await self._connection()
                result.inserted += await insert_events(conn, [ev for ev, _ in pairs])
                break
            except InvalidEvent as exc:
                for ev, rec in pairs:
                    if ev.event_id == exc.event_id:
                        result.dead.append((rec.key, self._letter(rec, "invalid_event", str(exc), now_ms)))
                pairs = [(ev, rec) for ev, rec in pairs if ev.event_id != exc.event_id]
            except (psycopg.Error, OSError) as exc:
                self.failures += 1
                await self.close()
                now = time.monotonic()
                if now - self._last_warning > 10:
                    self._last_warning = now
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                    log.warning("cannot write events to %s (%s); retrying, nothing is acknowledged meanwhile",
                                redact(self.database_url), first)
                if should_stop():
                    result.attempts = -1
                    return result
                await sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
        result.events = len(pairs)
        return result
