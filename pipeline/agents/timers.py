"""The worker's timers: idle-session expiry, brain refresh, the leader's purge, the progress line,
the garbage collector's backstop.

None of them consumes records, so none follows the commit protocol
(:mod:`pipeline.agents.commit_protocol`): the expiry deletes table entries of owned partitions
(a tombstone each in the changelog), the purge deletes old rows in bounded batches, and the
progress line is logged every 30 s at INFO, only when something changed (nothing is logged per
event).
"""

from __future__ import annotations

import asyncio
import logging

from pipeline.agents.context import AgentContext
from pipeline.agents.expiry import is_idle, sweep_interval
from pipeline.agents.publishing import now_ms
from pipeline.gcpause import BACKSTOP_EVERY_S, CollectionBackstop

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 30.0
SWEEP_CHUNK = 5000


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

    if settings.gc_young_threshold > 0:  # the collector is tuned (pipeline/gcpause.py): bound how long garbage waits
        backstop = CollectionBackstop()

        @app.timer(BACKSTOP_EVERY_S, name="volunteer-gc-backstop")
        async def collect_if_quiet() -> None:
            backstop.tick()

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
                ctx.processor.forget(key)
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
