"""Pause in aiokafka the changelog partitions Faust has paused, so the worker's Fetch leaves them out.

Faust's ``Consumer.pause_partitions`` / ``resume_partitions`` (faust-streaming 0.15.3) keep only
Faust's own bookkeeping (``_active_partitions``, ``_paused_partitions``); Faust's getmany then drops
what the aiokafka consumer returns for a partition that is not active. The aiokafka consumer itself
is never paused, and its background fetcher puts every assigned partition with nothing buffered in
each Fetch. After a table's recovery Faust pauses the active table's changelog partitions (the worker
writes them and never reads them back), so a worker's Fetch still named them: 8 of its 33 partitions
(docs/performance.md, goal 2), each costing the embedded broker about 0.03 ms of CPU per Fetch,
most of them empty when the worker is idle. Once the worker had written a changelog partition, the
fetcher fetched those records (holding the node's next Fetch back for its 100 ms prefetch backoff)
and kept them, never asked for, in its buffer for the rest of the generation (up to 1 MiB per
partition); a partition with buffered records is left out of the Fetch, which is the only reason a
worker with traffic behind it named 25.

:func:`mirror` runs first in every ``AIOKafkaConsumerThread._fetch_records`` (the consumer
thread's half of Faust's getmany, so on the loop that owns the aiokafka consumer, with Faust's
active set of that moment) and makes aiokafka's pause state of the changelog partitions follow
Faust's: an assigned changelog partition Faust does not read is paused, one Faust reads (an active
table's during its recovery, a standby's all the time, a buffered one) is resumed. Faust's
bookkeeping stays the only truth; nothing of the stream partitions changes. aiokafka keeps a
paused partition's position and refetches from it on resume (buffered records it drops are
fetched again). A rebalance gives aiokafka a fresh assignment with nothing paused, so a recovery
after a rebalance starts exactly as before; a recovery started again without one
(:mod:`pipeline.compat.recovery_retry`) gets its changelogs resumed by the next getmany, at most one
getmany timeout (1 s) later. While the flow is stopped (a rebalance, the end of a recovery) Faust's
set is in flux, and nothing is changed.

:func:`install` patches Faust's ``AIOKafkaConsumerThread._fetch_records`` once per process, on
every broker, after checking its signature and the aiokafka and Faust parts :func:`mirror` uses;
anything missing is a :class:`~pipeline.internals.CompatError`, never a silent skip.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Container
from typing import Any

from aiokafka import AIOKafkaConsumer
from faust.transport import consumer as faust_consumer
from faust.transport.drivers import aiokafka as faust_aiokafka

from pipeline.internals import CompatError, installed_versions, require

PATCH = "changelog-pause"

_MARK = "_volunteer_pauses_changelogs"

_CHECKED = "_volunteer_changelog_pause_checked"

INSTANCE_PARTS = ("flow_active", "_buffered_partitions", "app")
"""Attributes of the Faust consumer :func:`mirror_faust` reads, checked on each thread's first fetch."""

SIGNATURE = ["self", "consumer", "active_partitions", "timeout", "max_records"]
"""``AIOKafkaConsumerThread._fetch_records``'s parameters in the pinned Faust."""


def mirror(client: Any, reads: Callable[[Any], bool], changelog_topics: Container[str]) -> tuple[list[Any], list[Any]]:
    """Pause the aiokafka ``client``'s assigned changelog partitions Faust does not read, resume those
    it reads (``reads(tp)``); returns (paused, resumed), only the partitions that changed."""
    already = client.paused()
    pause: list[Any] = []
    resume: list[Any] = []
    for tp in client.assignment():
        if tp.topic not in changelog_topics:
            continue
        if reads(tp):
            if tp in already:
                resume.append(tp)
        elif tp not in already:
            pause.append(tp)
    if pause:
        client.pause(*pause)
    if resume:
        client.resume(*resume)
    return pause, resume


def mirror_faust(thread: Any, client: Any, active: Any) -> None:
    """:func:`mirror` with the Faust consumer's view: ``active`` (the set its getmany passed) and its
    buffered partitions are read; nothing while Faust's flow is stopped or every partition is read."""
    consumer = thread.consumer
    if not getattr(thread, _CHECKED, False):
        require(PATCH, consumer, *INSTANCE_PARTS)
        require(PATCH, consumer.app.tables, "changelog_topics")
        setattr(thread, _CHECKED, True)
    if active is None or not consumer.flow_active:
        return
    buffered = consumer._buffered_partitions
    mirror(client, lambda tp: tp in active or tp in buffered, consumer.app.tables.changelog_topics)


def pausing(fetch_records: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Wrap ``AIOKafkaConsumerThread._fetch_records`` so aiokafka's pauses follow Faust's first."""

    async def _fetch_records(self: Any, consumer: Any, active_partitions: Any, timeout: float | None = None,
                             max_records: int | None = None) -> Any:
        mirror_faust(self, consumer, active_partitions)
        return await fetch_records(self, consumer, active_partitions, timeout=timeout, max_records=max_records)

    setattr(_fetch_records, _MARK, True)
    _fetch_records.__wrapped__ = fetch_records  # type: ignore[attr-defined]  # Faust's own, for tests
    return _fetch_records


def installed() -> bool:
    """True once Faust's aiokafka consumer thread carries the mirror (in this process)."""
    return bool(getattr(getattr(faust_aiokafka.AIOKafkaConsumerThread, "_fetch_records", None), _MARK, False))


def install() -> None:
    """Patch Faust's aiokafka consumer thread once per process (module doc)."""
    if installed():
        return
    thread = faust_aiokafka.AIOKafkaConsumerThread
    require(PATCH, thread, own_methods=("_fetch_records",))
    require(PATCH, AIOKafkaConsumer, methods=("pause", "resume", "paused", "assignment"))
    require(PATCH, faust_consumer.Consumer, "flow_active")  # the instance parts: on the first fetch
    current = thread._fetch_records
    if not inspect.iscoroutinefunction(current) or list(inspect.signature(current).parameters) != SIGNATURE:
        raise CompatError(f"compat patch {PATCH}: faust's AIOKafkaConsumerThread._fetch_records is not the "
                          f"coroutine ({', '.join(SIGNATURE)}) it wraps ({installed_versions()})")
    setattr(thread, "_fetch_records", pausing(current))  # noqa: B010 (a method, patched)
