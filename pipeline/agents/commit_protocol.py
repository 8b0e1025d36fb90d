"""The commit protocol: how a batch of consumed records becomes durable, and why a crash is safe.

Delivery into the worker is at least once: after a crash, every record whose offset was not
committed is delivered again, while the session table's changelog and the database may already
hold what the first delivery wrote (docs/contracts.md, "Crash consistency"). A batch is therefore
committed in phases, each awaited before the next begins, and the records are acknowledged last.
The order of the phases, and the awaits between them, are the crash-safety guarantee
(docs/guarantees.md); this module is the one place that holds them.

:class:`WindowCommit` (the window agent, on ``turns``):

1. **decide**: every record is decoded and stepped against its session's *saved* state (loaded
   once per batch); nothing is written;
2. **publish**: the batch's Volunteered records and dead letters are sent and their delivery is
   awaited;
3. **save**: each touched session's state, with the partition and offset of the last record
   applied, is written once to the changelog-backed table and awaited;
4. **acknowledge**: the hooks waiting for these turns are woken, then the records are
   acknowledged (their offsets may now be committed).

A crash before 3 leaves the saved states as they were before the batch, so the redelivered batch
is decided again from them and re-emits exactly the same records (same ``event_id``; the sink
ignores repeats). A crash after 3 redelivers records at or before the offset saved with their
session; they are skipped, their outputs having been delivered in 2. A transport failure in 2
retries 1 and 2 together (nothing is saved yet, so deciding again is exact); in 3 it retries the
save. Any other error propagates and crashes the agent (:mod:`pipeline.agents.retry`).

:class:`WriteCommit` (the sink on ``volunteered`` and the page-opens writer on ``page-opens``) is
the same protocol for an agent whose state lives in PostgreSQL instead of the table:

1. **write**: the writer decides (records that can never be stored become dead letters) and
   writes the rest in one transaction, retried while the database is away; this is the window
   protocol's decide and save in one call, the committed transaction being the saved state;
2. **publish**: the dead letters are sent and awaited, retried while the broker is away;
3. **acknowledge**: the records are acknowledged.

A crash before 3 redelivers the batch; the write is idempotent (``ON CONFLICT DO NOTHING``, the
5-minute throttle) and the same dead letters are published again. A worker that starts stopping
while the database or the broker is away returns from 1 or 2 without acknowledging anything.

The hook lane (:mod:`pipeline.agents.hooklane`) is not a protocol of its own: its delivery records
ride ``turns`` and are applied in the window commit's decide phase, and its proposals are handed
to the waiting hooks in step 4, after the states that hold them are saved. The hook endpoint's
fast lane (:mod:`pipeline.agents.fastlane`) runs steps 1 to 3 of this same protocol on the records
a hook request just published, when they are the next ones of their partition; the agent then
skips them like a redelivered batch. The idle-session
sweep (:mod:`pipeline.agents.timers`) consumes no records and so has nothing to acknowledge.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from pipeline.agents.batch_types import BatchOutput, InRecord, OpensResult, SinkResult
from pipeline.agents.context import AgentContext
from pipeline.agents.page_open_writer import OpenWriter
from pipeline.agents.publishing import now_ms, publish_all, publish_retrying
from pipeline.agents.retry import Backoff, is_transport_error

log = logging.getLogger(__name__)


class Acknowledger(Protocol):
    """What a batch iterator offers to read and acknowledge its batches (:mod:`pipeline.agents.batching`)."""

    def records(self, events: Sequence[Any]) -> list[InRecord]: ...

    async def ack(self, events: Sequence[Any]) -> None: ...


class Commit(Protocol):
    """One agent's commit of a batch: True when acknowledged, False when the worker is stopping
    and nothing was acknowledged (the agent then returns)."""

    ACK_RULE: ClassVar[str]

    def __init__(self, ctx: AgentContext) -> None: ...

    async def commit(self, events: Sequence[Any], batches: Acknowledger) -> bool: ...


class WindowCommit:
    """The window agent's commit of one batch of ``turns`` records (module docstring).

    :meth:`commit` runs, in this order:

    1. :meth:`decide` — the batch's outputs and new states, from the saved states;
    2. :meth:`publish` — send the outputs and await their delivery; on a transport failure back
       off and go back to 1;
    3. :meth:`save` — write each owned session's state once and await its changelog record; then
       the batch is counted (progress counters, metrics);
    4. :meth:`acknowledge` — wake the hooks waiting for these turns, then acknowledge the records.
    """

    ACK_RULE: ClassVar[str] = "after its outputs are delivered and its states saved"

    def __init__(self, ctx: AgentContext) -> None:
        self.ctx = ctx

    async def commit(self, events: Sequence[Any], batches: Acknowledger) -> bool:
        records = batches.records(events)
        # The hook endpoint's fast lane may be committing records of these partitions itself
        # (agents/fastlane.py): wait for it, then decide from the states it saved.
        lane, generation = self.ctx.lane, self.ctx.app.rebalancing_count
        await lane.before_batch(records, generation)
        out = await self.make_durable(records)
        lane.after_batch(records, generation)
        await self.acknowledge(events, out, batches)
        return True

    async def make_durable(self, records: Sequence[InRecord]) -> BatchOutput:
        """Steps 1 to 3: once this returns, the batch's outputs are delivered and its states saved."""
        started = time.perf_counter()
        backoff = Backoff()
        out = self.decide(records)
        while not await self.publish(out, backoff):
            out = self.decide(records)
        await self.save(out)
        self._count(len(records), out, time.perf_counter() - started)
        return out

    def decide(self, records: Sequence[InRecord]) -> BatchOutput:
        """Step 1: decode and step every record against its session's saved state; writes nothing."""
        ctx = self.ctx
        return ctx.processor.process(records, ctx.brain.index, ctx.table.reader(), now_ms())

    async def publish(self, out: BatchOutput, backoff: Backoff) -> bool:
        """Step 2: send the Volunteered records and dead letters with one wait for the broker.

        False after a transport failure (and its backoff): nothing is saved yet, so the caller
        decides again from the saved states, which is exact. Any other error, or a failure while
        stopping, propagates.
        """
        settings = self.ctx.settings
        try:
            await publish_all(self.ctx, ((settings.topic_volunteered, out.volunteered),
                                         (settings.topic_dlq, out.dead)))
        except Exception as exc:
            if not is_transport_error(exc) or self.ctx.app.should_stop:
                raise  # not the broker (a bug: crash loudly), or stopping
            delay = backoff.next()
            log.warning("publishing a batch failed (%s); retrying in %.2fs", exc, delay)
            await asyncio.sleep(delay)
            return False
        return True

    async def save(self, out: BatchOutput) -> None:
        """Step 3: store each touched session's state once and wait for its changelog record.

        Only partitions this worker still owns are saved: a partition revoked during the batch
        belongs to another worker now, which reprocesses these records from the saved state and
        emits the same events.
        """
        ctx = self.ctx
        owned = ctx.assigned_partitions(ctx.settings.topic_turns)
        processor = ctx.processor
        saves = []
        for key, record in out.states.items():
            if record.partition in owned:
                value = processor.encode(key, record)
                saves.append((key, value, record.partition))
                processor.saved(key, value, record)
        await save_states(ctx, saves)

    def _count(self, records: int, out: BatchOutput, seconds: float) -> None:
        counters = self.ctx.counters
        counters.turns += out.turns
        counters.skipped += out.skipped
        counters.volunteered += len(out.volunteered)
        counters.dead_letters += len(out.dead)
        self.ctx.metrics.window_batch(records, out, seconds)

    async def acknowledge(self, events: Sequence[Any], out: BatchOutput, batches: Acknowledger) -> None:
        """Step 4: hand the proposals to the hooks waiting for them, then acknowledge the records."""
        self.ctx.answers.resolve(out.proposals)
        await batches.ack(events)


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


class WrittenBatch(Protocol):
    """What a database writer returns for a batch (:class:`SinkResult`, :class:`OpensResult`)."""

    @property
    def dead(self) -> list[tuple[bytes | None, bytes]]: ...

    @property
    def committed(self) -> bool: ...


R = TypeVar("R", bound=WrittenBatch)
R_co = TypeVar("R_co", bound=WrittenBatch, covariant=True)


class WritesBatches(Protocol[R_co]):
    """A database writer: decodes a batch and writes it, returning once committed or stopping."""

    async def write(self, records: Sequence[InRecord], now_ms: int, should_stop: Callable[[], bool]) -> R_co: ...


def stopped_unwritten(result: WrittenBatch) -> bool:
    """The writer gave up because the worker is stopping while the database is away."""
    return not result.committed


class WriteCommit(Generic[R]):
    """The commit of one batch by a database writer (module docstring).

    :meth:`commit` runs, in this order:

    1. :meth:`write` — decode and write the batch, retried until committed; :meth:`measure` it
       (its time); if the worker is stopping meanwhile, return without acknowledging;
    2. :meth:`publish` — publish the dead letters and await them, retried while the broker is
       away; if the worker is stopping meanwhile, return without acknowledging;
    3. :meth:`acknowledge` — :meth:`count` the batch (progress counters), then acknowledge the
       records.
    """

    ACK_RULE: ClassVar[str] = "after its rows are committed and its dead letters delivered"
    WHAT: ClassVar[str] = "dead-lettering"
    """How a failing dead-letter publish is named in the warning."""

    def __init__(self, ctx: AgentContext, writer: WritesBatches[R]) -> None:
        self.ctx = ctx
        self.writer = writer

    async def commit(self, events: Sequence[Any], batches: Acknowledger) -> bool:
        records = batches.records(events)
        result = await self.write(records)
        if result is None:
            return False
        if not await self.publish(result):
            return False
        await self.acknowledge(events, result, batches)
        return True

    async def write(self, records: Sequence[InRecord]) -> R | None:
        """Step 1: the writer decodes and writes; None when it stopped with nothing written."""
        started = time.perf_counter()
        result = await self.writer.write(records, now_ms(), should_stop=lambda: bool(self.ctx.app.should_stop))
        if stopped_unwritten(result):
            return None  # stopping while the database is down: acknowledge nothing
        self.measure(len(records), result, time.perf_counter() - started)
        return result

    async def publish(self, result: R) -> bool:
        """Step 2: the dead letters, retried while the broker is away; False if stopping meanwhile."""
        return await publish_retrying(self.ctx, self.ctx.settings.topic_dlq, result.dead, self.WHAT)

    async def acknowledge(self, events: Sequence[Any], result: R, batches: Acknowledger) -> None:
        """Step 3: count the batch, then acknowledge its records."""
        self.count(result)
        await batches.ack(events)

    def measure(self, records: int, result: R, seconds: float) -> None:
        """The batch's metrics, once written (before its dead letters are published)."""

    def count(self, result: R) -> None:
        """The batch's progress counters, once it is about to be acknowledged."""
        self.ctx.counters.dead_letters += len(result.dead)


class SinkCommit(WriteCommit[SinkResult]):
    """The sink agent: ``volunteered`` records into ``context_volunteer_events``."""

    def __init__(self, ctx: AgentContext) -> None:
        super().__init__(ctx, ctx.writer)

    def measure(self, records: int, result: SinkResult, seconds: float) -> None:
        self.ctx.metrics.sink_batch(records, result, seconds)

    def count(self, result: SinkResult) -> None:
        self.ctx.counters.rows += result.inserted
        super().count(result)


class PageOpensCommit(WriteCommit[OpensResult]):
    """The page-opens agent: ``page-opens`` records into ``pages.last_retrieved_at``."""

    WHAT: ClassVar[str] = "dead-lettering page opens"

    def __init__(self, ctx: AgentContext) -> None:
        writer = OpenWriter(ctx.settings.database_url, ctx.settings.topic_page_opens)
        super().__init__(ctx, writer)
        ctx.metrics.watch_writer("page_opens", writer)  # its retries while PostgreSQL is away

    def count(self, result: OpensResult) -> None:
        super().count(result)
        self.ctx.metrics.page_opens_batch(result)  # what was applied, counted with the progress counters
