"""The page-opens agent: ``page-opens`` records -> ``pages.last_retrieved_at`` (the "used" signal).

Applications publish a :class:`topics.page_opens.PageOpen` when a user or agent opens a page (see
``volunteer opened``); this agent applies them in batches with :func:`sinks.retrieval.mark_retrieved`
(the reference's 5-minute throttle, idempotent), so ``volunteer stats`` precision reflects real use.
Like the event sink, a batch is acknowledged only after its UPDATE committed; while PostgreSQL is
down it is retried with backoff and nothing is acknowledged. Records that are not page opens become
dead letters (topic ``turns-dlq``) with a reason; an open of an unknown or deleted page is not an
error, it simply changes no row. The agent around it is the ``volunteer-page-opens`` entry of
:mod:`pipeline.agents.topology`, committed by :class:`pipeline.agents.commit_protocol.PageOpensCommit`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

import psycopg

from pipeline.agents.batch_types import InRecord, OpensResult
from pipeline.agents.dbwriter import DurableConnection
from pipeline.agents.retry import Backoff
from sinks.retrieval import Open, mark_retrieved
from topics.page_opens import decode_page_open
from topics.records import DeadLetter, InvalidRecord

log = logging.getLogger(__name__)

PAGE_OPENS_BATCH_MAX = 1000


class OpenWriter:
    """Decodes page-open records and applies them, retrying until written (see :mod:`.dbwriter`)."""

    def __init__(self, database_url: str, topic: str) -> None:
        self.database_url = database_url
        self.topic = topic
        self.db = DurableConnection(database_url, "apply page opens")

    @property
    def failures(self) -> int:
        return self.db.failures

    async def close(self) -> None:
        await self.db.close()

    def decode(self, records: Sequence[InRecord], now_ms: int, result: OpensResult) -> list[Open]:
        opens: list[Open] = []
        for rec in records:
            try:
                item = decode_page_open(rec.value)
            except InvalidRecord as exc:
                letter = DeadLetter.build(key=rec.key, value=rec.value, topic=self.topic, partition=rec.partition,
                                          offset=rec.offset, error=exc.code, message=exc.message, now_ms=now_ms)
                result.dead.append((rec.key, letter.to_json()))
                result.dead_reasons.append(exc.code)
                continue
            opens.append(Open(item.source_id, item.slug, item.opened_at_ms))
        return opens

    async def write(self, records: Sequence[InRecord], now_ms: int,
                    should_stop: Callable[[], bool] = lambda: False,
                    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> OpensResult:
        """Apply a batch; returns once the UPDATE committed (or, when ``should_stop()`` turns true while
        the database is down, with ``attempts = -1``: the caller must not acknowledge)."""
        result = OpensResult()
        opens = self.decode(records, now_ms, result)
        result.opens = len(opens)
        backoff = Backoff()
        while opens:
            result.attempts += 1
            try:
                conn = await self.db.connection()
                result.updated = await mark_retrieved(conn, opens)
                break
            except (psycopg.Error, OSError) as exc:
                if await self.db.wait_after(exc, backoff, should_stop, sleep):
                    result.attempts = -1
                    return result
        return result

