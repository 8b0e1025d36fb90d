"""The page-opens agent: ``page-opens`` records -> ``pages.last_retrieved_at`` (the "used" signal).

Applications publish a :class:`topics.page_opens.PageOpen` when a user or agent opens a page (see
``volunteer opened``); this agent applies them in batches with :func:`sinks.retrieval.mark_retrieved`
(the reference's 5-minute throttle, idempotent), so ``volunteer stats`` precision reflects real use.
Like the event sink, a batch is acknowledged only after its UPDATE committed; while PostgreSQL is
down it is retried with backoff and nothing is acknowledged. Records that are not page opens become
dead letters (topic ``turns-dlq``) with a reason; an open of an unknown or deleted page is not an
error, it simply changes no row.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from pipeline.agents.batch_types import InRecord, OpensResult, in_records
from pipeline.agents.dbwriter import BatchWriter
from pipeline.agents.publishing import now_ms, publish_retrying
from sinks.retrieval import Open, mark_retrieved
from topics.page_opens import decode_page_open

if TYPE_CHECKING:
    from pipeline.agents.context import AgentContext

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


def register_page_opens_agent(ctx: AgentContext) -> None:
    """The Faust agent on ``page-opens``: batch, write, dead-letter, then acknowledge."""
    settings = ctx.settings
    writer = OpenWriter(settings.database_url, settings.topic_page_opens)

    @ctx.app.agent(ctx.page_opens_topic, name="volunteer-page-opens")
    async def page_opens_agent(stream: Any) -> None:
        async for events in stream.noack_take(PAGE_OPENS_BATCH_MAX, within=settings.sink_flush_seconds):
            result = await writer.write(in_records(events), now_ms(), should_stop=lambda: bool(ctx.app.should_stop))
            if not result.committed:
                return  # stopping while the database is down: acknowledge nothing
            if not await publish_retrying(ctx, settings.topic_dlq, result.dead, "dead-lettering page opens"):
                return
            ctx.counters.dead_letters += len(result.dead)
            ctx.metrics.page_opens_batch(result)
            for event in events:
                await stream.ack(event)
