"""The "used" signal: ``pages.last_retrieved_at`` written from page opens, with the reference throttle.

gbrain writes ``last_retrieved_at = now()`` when a page is read, but only when the stored value is
NULL or more than 5 minutes old (reference-behaviour.md §1.2), so hot pages do not pile up row versions; ``volunteer
stats`` counts a volunteered page as used when that column is later than the event (§11). Here a
whole batch of opens is one ``UPDATE ... FROM unnest(...)``:

- the time written is the open's own time (``opened_at``) or, without one, the transaction's
  ``now()``; never later than ``now()`` (a client clock ahead of the database cannot block the
  throttle for longer than it should);
- the throttle compares against that time: ``last_retrieved_at < at - interval '5 minutes'``, which
  with ``at = now()`` is the reference condition exactly; the column therefore never moves
  backwards, and applying the same open twice changes nothing (idempotent under redelivery);
- deleted pages (``deleted_at IS NOT NULL``) and unknown pages are left alone;
- opens of one page in one batch are merged first (the latest time wins), so the statement touches
  each row once, in ``(source_id, slug)`` order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg

THROTTLE_SQL_INTERVAL = "5 minutes"

UPDATE_SQL = f"""
WITH o AS (
  SELECT source_id, slug, least(coalesce(opened_at, now()), now()) AS at
    FROM unnest(%b::text[], %b::text[], %b::timestamptz[]) AS t(source_id, slug, opened_at)
)
UPDATE pages p
   SET last_retrieved_at = o.at
  FROM o
 WHERE p.source_id = o.source_id
   AND p.slug = o.slug
   AND p.deleted_at IS NULL
   AND (p.last_retrieved_at IS NULL OR p.last_retrieved_at < o.at - interval '{THROTTLE_SQL_INTERVAL}')
"""


@dataclass(frozen=True, slots=True)
class Open:
    """One open to apply: which page, and when (None = now)."""

    source_id: str
    slug: str
    opened_at_ms: int | None = None


def merge_opens(opens: Iterable[Open]) -> list[Open]:
    """One entry per page, in ``(source_id, slug)`` order; the latest time wins, "now" beats any time."""
    latest: dict[tuple[str, str], int | None] = {}
    for item in opens:
        key = (item.source_id, item.slug)
        if key not in latest:
            latest[key] = item.opened_at_ms
            continue
        have = latest[key]
        if have is None or item.opened_at_ms is None:
            latest[key] = None
        elif item.opened_at_ms > have:
            latest[key] = item.opened_at_ms
    return [Open(src, slug, at) for (src, slug), at in sorted(latest.items())]


def _params(opens: Sequence[Open]) -> list[list[object]]:
    sources: list[object] = []
    slugs: list[object] = []
    times: list[object] = []
    for item in opens:
        sources.append(item.source_id)
        slugs.append(item.slug)
        times.append(None if item.opened_at_ms is None else datetime.fromtimestamp(item.opened_at_ms / 1000, UTC))
    return [sources, slugs, times]


async def mark_retrieved(conn: psycopg.AsyncConnection, opens: Iterable[Open]) -> int:
    """Apply a batch of opens; returns how many page rows changed (throttled or unknown pages: 0).

    Psycopg errors propagate unchanged: the statement is idempotent, so the caller may retry the
    whole batch.
    """
    merged = merge_opens(opens)
    if not merged:
        return 0
    async with conn.cursor() as cur:
        await cur.execute(UPDATE_SQL, _params(merged))
        return max(cur.rowcount, 0)


def mark_retrieved_sync(conn: psycopg.Connection, opens: Iterable[Open]) -> int:
    """:func:`mark_retrieved` for sync code (CLI, tests)."""
    merged = merge_opens(opens)
    if not merged:
        return 0
    with conn.cursor() as cur:
        cur.execute(UPDATE_SQL, _params(merged))
        return max(cur.rowcount, 0)
