"""The database half every writing agent shares: one durable connection and retry-with-backoff
(the delays are :class:`pipeline.agents.retry.Backoff`, the same as the broker retries').

An agent acknowledges its records once its statement returns, so that commit must survive a
PostgreSQL crash (``synchronous_commit`` on, whatever the server default), and while the database
is away the agent must wait — retrying with backoff, acknowledging nothing — rather than crash or
spin. Keeping this in one place is what keeps the sink and the page-opens agent equally safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import psycopg

from pipeline.agents.retry import Backoff
from sinks.db import redact

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

