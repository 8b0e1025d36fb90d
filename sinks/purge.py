"""Retention: delete volunteer events older than N days (reference: 90), in bounded batches.

The reference deletes in one statement, which after a long gap can run into a pooler's statement
timeout and then never make progress (a filed upstream TODO). Here each batch is its own short
transaction: it takes the next ``batch_size`` expired ids in id order, after the last id it
deleted, so every batch uses the primary key and the whole purge reads the table once. The cutoff
is fixed when the purge starts, so it always ends.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime

import psycopg
from psycopg import errors

from sinks.db import AsyncConnOrInfo, ConnOrInfo, borrowed, borrowed_async

DEFAULT_RETENTION_DAYS = 90.0
DEFAULT_BATCH_SIZE = 5000

CUTOFF_SQL = "SELECT now() - %s * interval '1 day'"
BATCH_SQL = """
WITH doomed AS (
  SELECT id FROM context_volunteer_events
   WHERE id > %(after)s AND volunteered_at < %(cutoff)s
   ORDER BY id
   LIMIT %(limit)s
), gone AS (
  DELETE FROM context_volunteer_events e USING doomed d WHERE e.id = d.id RETURNING e.id
)
SELECT count(*), coalesce(max(id), 0) FROM gone
"""

Progress = Callable[[int], None]
"""Called after every batch with the running total of deleted rows."""


def _check(retention_days: float, batch_size: int) -> None:
    if isinstance(retention_days, bool) or not math.isfinite(retention_days) or retention_days <= 0:
        raise ValueError(f"retention_days must be a positive number, got {retention_days!r}")
    if isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size!r}")


def _require_idle(status: psycopg.pq.TransactionStatus) -> None:
    if status != psycopg.pq.TransactionStatus.IDLE:
        raise ValueError("purge needs a connection outside any transaction: every batch commits on its own")


def purge_events(
    target: ConnOrInfo,
    retention_days: float = DEFAULT_RETENTION_DAYS,
    batch_size: int = DEFAULT_BATCH_SIZE,
    *,
    progress: Progress | None = None,
) -> int:
    """Delete events with ``volunteered_at < now() - retention_days``; returns how many.

    A missing ``context_volunteer_events`` table gives 0 (as the reference, reference-behaviour.md §12). A given
    connection must not be inside a transaction: every batch commits on its own.
    """
    _check(retention_days, batch_size)
    total = 0
    with borrowed(target) as conn:
        _require_idle(conn.info.transaction_status)
        try:
            with conn.transaction():
                row = conn.execute(CUTOFF_SQL, (float(retention_days),)).fetchone()
            assert row is not None
            cutoff: datetime = row[0]
            after = 0
            while True:
                with conn.transaction():
                    res = conn.execute(BATCH_SQL, {"after": after, "cutoff": cutoff, "limit": batch_size}).fetchone()
                assert res is not None
                deleted, after = int(res[0]), int(res[1])
                total += deleted
                if progress is not None and deleted:
                    progress(total)
                if deleted < batch_size:
                    return total
        except errors.UndefinedTable:
            return total


async def purge_events_async(
    target: AsyncConnOrInfo,
    retention_days: float = DEFAULT_RETENTION_DAYS,
    batch_size: int = DEFAULT_BATCH_SIZE,
    *,
    progress: Progress | None = None,
) -> int:
    """:func:`purge_events` for the worker's event loop (the leader-only scheduled task)."""
    _check(retention_days, batch_size)
    total = 0
    async with borrowed_async(target) as conn:
        _require_idle(conn.info.transaction_status)
        try:
            async with conn.transaction():
                cur = await conn.execute(CUTOFF_SQL, (float(retention_days),))
                row = await cur.fetchone()
            assert row is not None
            cutoff: datetime = row[0]
            after = 0
            while True:
                async with conn.transaction():
                    cur = await conn.execute(BATCH_SQL, {"after": after, "cutoff": cutoff, "limit": batch_size})
                    res = await cur.fetchone()
                assert res is not None
                deleted, after = int(res[0]), int(res[1])
                total += deleted
                if progress is not None and deleted:
                    progress(total)
                if deleted < batch_size:
                    return total
        except errors.UndefinedTable:
            return total



def count_expired(target: ConnOrInfo, retention_days: float = DEFAULT_RETENTION_DAYS) -> int:
    """How many events a purge with this retention would delete now (0 without the table)."""
    _check(retention_days, 1)
    with borrowed(target) as conn:
        try:
            with conn.transaction():
                row = conn.execute(
                    "SELECT count(*) FROM context_volunteer_events WHERE volunteered_at < now() - %s * interval '1 day'",
                    (float(retention_days),),
                ).fetchone()
        except errors.UndefinedTable:
            return 0
    return int(row[0]) if row else 0
