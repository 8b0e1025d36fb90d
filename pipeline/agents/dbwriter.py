"""The database half every writing agent shares: :class:`BatchWriter` (decode, write, retry) over
one :class:`DurableConnection` (the delays are :class:`pipeline.agents.retry.Backoff`, the same as
the broker retries').

An agent acknowledges its records once its statement returns, so that commit must survive a
PostgreSQL crash (``synchronous_commit`` on, whatever the server default), and while the database
is away the agent must wait — retrying with backoff, acknowledging nothing — rather than crash or
spin. Keeping this in one place is what keeps the sink (:class:`pipeline.agents.sink.EventWriter`)
and the page-opens agent (:class:`pipeline.agents.page_open_writer.OpenWriter`) equally safe: each
says only how its records decode and how a batch is stored; the loop, the backoff, the dead
letters and the outcome the agent acknowledges by (:class:`~pipeline.agents.batch_types.WriteOutcome`)
are written once, here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import psycopg

from pipeline.agents.batch_types import InRecord, WriteOutcome, WriteResult
from pipeline.agents.retry import Backoff
from sinks.db import redact
from topics.records import DeadLetter, InvalidRecord

log = logging.getLogger(__name__)

WARN_EVERY_S = 10.0


class DurableConnection:
    """One long-lived autocommit connection with durable commits, reopened after failures."""

    def __init__(self, database_url: str, what: str) -> None:
        self.database_url = database_url
        self.what = what  # e.g. "write events", for the warning line
        self.failures = 0
        self._conn: psycopg.AsyncConnection | None = None
        self._last_warning = 0.0

    async def connection(self) -> psycopg.AsyncConnection:
        if self._conn is None or self._conn.closed:
            from sinks.db import connect_async

            conn = await connect_async(self.database_url, autocommit=True)
            # With the server's synchronous_commit=off a PostgreSQL crash drops rows whose records
            # were already acknowledged (found by tests/reliability/test_db_outage.py).
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

    async def wait_after(self, exc: BaseException, backoff: Backoff, should_stop: Callable[[], bool],
                         sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> bool:
        """Handle a failed attempt: drop the connection, warn (rate-limited), back off.

        Returns True when the caller should give up because the worker is stopping: it must then
        acknowledge nothing.
        """
        self.failures += 1
        await self.close()
        now = time.monotonic()
        if now - self._last_warning > WARN_EVERY_S:
            self._last_warning = now
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.warning("cannot %s in %s (%s); retrying, nothing is acknowledged meanwhile",
                        self.what, redact(self.database_url), first)
        if should_stop():
            return True
        await sleep(backoff.next())
        return False


R = TypeVar("R", bound=WriteResult)
T = TypeVar("T")


class BatchWriter(ABC, Generic[T, R]):
    """A batch of consumed records -> rows, committed before :meth:`write` returns.

    A subclass decodes a record into an item of type ``T`` (:meth:`decode_one`; what can never be
    stored becomes a dead letter) and stores a list of them in one statement (:meth:`store`).
    :meth:`write` runs that statement until it commits, retrying with backoff while PostgreSQL is away; its
    result's ``outcome`` says whether the agent may acknowledge the batch.
    """

    what = "write"
    """What the writer does, for the warning line while the database is away ("cannot <what> in ...")."""

    def __init__(self, database_url: str, topic: str) -> None:
        self.database_url = database_url
        self.topic = topic  # the consumed topic, named in the dead letters
        self.db = DurableConnection(database_url, self.what)

    @property
    def failures(self) -> int:
        """Failed attempts since start (connection lost, server down)."""
        return self.db.failures

    async def close(self) -> None:
        await self.db.close()

    @abstractmethod
    def new_result(self) -> R:
        """An empty result of this writer's type."""

    @abstractmethod
    def decode_one(self, rec: InRecord) -> T:
        """The item of one record; raises :class:`~topics.records.InvalidRecord` for one that can
        never be stored (it becomes a dead letter with the error's code)."""

    def decode(self, records: Sequence[InRecord], now_ms: int, result: R) -> list[T]:
        """The storable items of ``records``; the others go to ``result`` as dead letters."""
        items: list[T] = []
        for rec in records:
            try:
                items.append(self.decode_one(rec))
            except InvalidRecord as exc:
                self.dead_letter(result, rec, exc.code, exc.message, now_ms)
        return items

    @abstractmethod
    async def store(self, conn: psycopg.AsyncConnection, items: list[T], result: R, now_ms: int) -> list[T]:
        """Store ``items`` in one statement and count it in ``result``; return the items still to store.

        Normally that is ``[]``. A writer that finds an unstorable item only once it tries returns
        the others (and dead-letters that one), and :meth:`write` tries again. Psycopg errors and
        ``OSError`` propagate: the statement must be idempotent, so retrying it is always safe.
        """

    def dead_letter(self, result: R, rec: InRecord, code: str, message: str, now_ms: int) -> None:
        """Route ``rec`` to the dead-letter topic with a reason."""
        letter = DeadLetter.build(key=rec.key, value=rec.value, topic=self.topic, partition=rec.partition,
                                  offset=rec.offset, error=code, message=message, now_ms=now_ms)
        result.dead.append((rec.key, letter.to_json()))
        result.dead_reasons.append(code)

    async def write(self, records: Sequence[InRecord], now_ms: int,
                    should_stop: Callable[[], bool] = lambda: False,
                    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> R:
        """Store a batch. Returns once its rows are committed (``outcome`` COMMITTED), or, when
        ``should_stop()`` turns true while the database is away, with ``outcome`` STOPPED: the
        caller must then acknowledge nothing."""
        result = self.new_result()
        items = self.decode(records, now_ms, result)
        backoff = Backoff()
        while items:
            result.attempts += 1
            try:
                conn = await self.db.connection()
                items = await self.store(conn, items, result, now_ms)
            except (psycopg.Error, OSError) as exc:
                if await self.db.wait_after(exc, backoff, should_stop, sleep):
                    result.outcome = WriteOutcome.STOPPED
                    return result
        return result
