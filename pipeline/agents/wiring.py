"""The composition module: attaches the agents and timers to the worker's Faust app.

Agents never import it (the app does; the demo, tests and benches read :data:`READY_MARK`); what they share lives
in leaf modules they import instead (:mod:`.publishing`, :mod:`.retry`, :mod:`.batch_types`,
:mod:`.context`), so the import graph stays one-way (tests/unit/test_import_graph.py).

- window agent (``turns``): adaptive batches (:mod:`pipeline.agents.batching`) acknowledged only
  after the batch's outputs are delivered and its states saved (the order is explained in
  :mod:`pipeline.agents.window_batch`);
- sink agent (``volunteered``): adaptive batches of up to ``sink_batch_size``, acknowledged only
  after the rows are committed;
- idle-session sweep, brain refresh (every ``brain_refresh_seconds``), leader-only purge
  (``purge_cron``), and a progress line every 30 s at INFO (nothing is logged per event).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any, cast

from pipeline.agents.batch_types import BatchOutput, InRecord, in_records
from pipeline.agents.batching import AdaptiveBatches
from pipeline.agents.context import AgentContext
from pipeline.agents.expiry import is_idle, sweep_interval
from pipeline.agents.page_open_writer import register_page_opens_agent
from pipeline.agents.publishing import now_ms, publish_all, publish_retrying
from pipeline.agents.retry import Backoff, is_transport_error
from pipeline.agents.window_batch import WINDOW_BATCH_MAX

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 30.0
SWEEP_CHUNK = 5000


async def save_states(ctx: AgentContext, items: Sequence[tuple[bytes, bytes, int]]) -> None:
    """Store a batch's session states and wait for their changelog records, retrying until the
    broker takes them (the records are not acknowledged before)."""
    backoff = Backoff()
    while True:
        try:
            await ctx.table.save_many(items)
            return
        except Exception as exc:
            if not is_transport_error(exc) or ctx.app.should_stop:
                raise  # not the broker (a bug: crash loudly), or stopping
            delay = backoff.next()
            log.warning("saving session states failed (%s); retrying in %.2fs", exc, delay)
            await asyncio.sleep(delay)


async def handle_window_batch(ctx: AgentContext, records: Sequence[InRecord]) -> BatchOutput:
    """Decide, publish, save: retried as a whole (from the saved states) until the broker takes it."""
    backoff = Backoff()
    started = time.perf_counter()
    while True:
        table = ctx.table
        out = ctx.processor.process(records, ctx.brain.index, table.get, now_ms())
        try:
            await publish_all(ctx, ((ctx.settings.topic_volunteered, out.volunteered),
                                    (ctx.settings.topic_dlq, out.dead)))
        except Exception as exc:  # broker trouble: nothing saved yet, so retrying is exact
            if not is_transport_error(exc) or ctx.app.should_stop:
                raise  # not the broker (a bug: crash loudly), or stopping
            delay = backoff.next()
            log.warning("publishing a batch failed (%s); retrying in %.2fs", exc, delay)
            await asyncio.sleep(delay)
            continue
        owned = ctx.assigned_partitions(ctx.settings.topic_turns)
        processor = ctx.processor
        saves = []
        for key, record in out.states.items():
            # A partition revoked during this batch belongs to another worker now; its new owner
            # reprocesses these records from the saved state and emits the same events.
            if record.partition in owned:
                value = processor.encode(key, record)
                saves.append((key, value, record.partition))
                processor.saved(key, value, record)
        await save_states(ctx, saves)
        counters = ctx.counters
        counters.turns += out.turns
        counters.skipped += out.skipped
        counters.volunteered += len(out.volunteered)
        counters.dead_letters += len(out.dead)
        ctx.metrics.window_batch(len(records), out, time.perf_counter() - started)
        return out


def register_window_agent(ctx: AgentContext) -> None:
    @ctx.app.agent(ctx.turns_topic, name="volunteer-window")
    async def window_agent(stream: Any) -> None:
        batches = AdaptiveBatches(stream, WINDOW_BATCH_MAX)
        async for events in batches:
            out = await handle_window_batch(ctx, in_records(events))
            ctx.answers.resolve(out.proposals)  # wake the hooks waiting for these turns
            await batches.ack(events)


def register_sink_agent(ctx: AgentContext) -> None:
    settings = ctx.settings

    @ctx.app.agent(ctx.volunteered_topic, name="volunteer-sink")
    async def sink_agent(stream: Any) -> None:
        batches = AdaptiveBatches(stream, settings.sink_batch_size)
        async for events in batches:
            records = in_records(events)
            started = time.perf_counter()
            result = await ctx.writer.write(records, now_ms(), should_stop=lambda: bool(ctx.app.should_stop))
            if not result.committed:
                return  # stopping while the database is down: acknowledge nothing
            ctx.metrics.sink_batch(len(records), result, time.perf_counter() - started)
            if not await publish_retrying(ctx, settings.topic_dlq, result.dead, "dead-lettering"):
                return
            ctx.counters.rows += result.inserted
            ctx.counters.dead_letters += len(result.dead)
            await batches.ack(events)


def register_timers(ctx: AgentContext) -> None:
    app, settings = ctx.app, ctx.settings

    @app.timer(sweep_interval(settings.session_idle_seconds), name="volunteer-expire-sessions")
    async def expire_sessions() -> None:
        await sweep_idle_sessions(ctx)

    if ctx.brain.refreshable:
        @app.timer(settings.brain_refresh_seconds, name="volunteer-brain-refresh")
        async def refresh_brain() -> None:
            await ctx.brain.refresh()

    @app.crontab(settings.purge_cron, on_leader=True, timezone=ctx.app.conf.timezone)
    async def purge_old_events() -> None:
        await run_purge(ctx)

    last: list[tuple[int, ...]] = [ctx.counters.snapshot()]

    @app.timer(PROGRESS_EVERY_S, name="volunteer-progress")
    async def progress() -> None:
        snap = ctx.counters.snapshot()
        if snap != last[0]:
            last[0] = snap
            c = ctx.counters
            log.info("progress: %d turns, %d pages volunteered, %d rows written, %d dead letters, "
                     "%d skipped, %d sessions expired", c.turns, c.volunteered, c.rows, c.dead_letters,
                     c.skipped, c.expired)


async def sweep_idle_sessions(ctx: AgentContext) -> int:
    """Delete sessions idle longer than ``session_idle_seconds`` from partitions owned here."""
    owned = ctx.assigned_partitions(ctx.settings.topic_turns)
    if not owned:
        return 0
    cutoff = now_ms() - int(ctx.settings.session_idle_seconds * 1000)
    store = ctx.table.data
    keys = list(store.keys())
    deleted = 0
    for start in range(0, len(keys), SWEEP_CHUNK):
        for key in keys[start:start + SWEEP_CHUNK]:
            value = store.get(key)
            if value is None:
                continue
            partition = is_idle(value, cutoff, owned)
            if partition is not None:
                ctx.table.delete_in_partition(key, partition)
                deleted += 1
        await asyncio.sleep(0)  # let the stream run between chunks
    if deleted:
        ctx.counters.expired += deleted
        log.info("expired %d idle sessions", deleted)
    return deleted


async def run_purge(ctx: AgentContext) -> int:
    from sinks.purge import purge_events_async

    settings = ctx.settings
    try:
        deleted = await purge_events_async(settings.database_url, settings.purge_retention_days,
                                           settings.purge_batch_size)
    except Exception as exc:
        log.warning("purge failed: %s", str(exc).strip()[:200])
        return 0
    ctx.counters.purged += deleted
    log.info("purge: deleted %d events older than %g days", deleted, settings.purge_retention_days)
    return deleted


READY_MARK = "ready: owns partitions"
"""Logged (INFO) after every rebalance once recovery is done; the demo and tests wait for it."""


def register_ready_log(ctx: AgentContext) -> None:
    async def on_ready(sender: Any, **_: Any) -> None:
        owned = sorted(ctx.assigned_partitions(ctx.settings.topic_turns))
        log.info("%s %s of %s (%d sessions in the table)", READY_MARK, owned, ctx.settings.topic_turns,
                 len(ctx.table.data))

    ctx.app.on_rebalance_complete.connect(cast(Any, on_ready))


def register_all(ctx: AgentContext) -> None:
    register_window_agent(ctx)
    register_sink_agent(ctx)
    register_page_opens_agent(ctx)
    register_timers(ctx)
    register_ready_log(ctx)
