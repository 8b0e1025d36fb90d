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

import logging
from collections.abc import Sequence

import psycopg

from pipeline.agents.batch_types import InRecord, OpensResult
from pipeline.agents.dbwriter import BatchWriter
from sinks.retrieval import Open, mark_retrieved
from topics.page_opens import decode_page_open

log = logging.getLogger(__name__)

PAGE_OPENS_BATCH_MAX = 1000


class OpenWriter(BatchWriter[Open, OpensResult]):
    """Decodes page-open records and applies them, retrying until written (see :mod:`.dbwriter`)."""

    what = "apply page opens"

    def new_result(self) -> OpensResult:
        return OpensResult()

    def decode_one(self, rec: InRecord) -> Open:
        item = decode_page_open(rec.value)
        return Open(item.source_id, item.slug, item.opened_at_ms)

    def decode(self, records: Sequence[InRecord], now_ms: int, result: OpensResult) -> list[Open]:
        opens = super().decode(records, now_ms, result)
        result.opens = len(opens)  # the valid opens, whether or not the write then goes through
        return opens

    async def store(self, conn: psycopg.AsyncConnection, items: list[Open], result: OpensResult,
                    now_ms: int) -> list[Open]:
        result.updated = await mark_retrieved(conn, items)
        return []

