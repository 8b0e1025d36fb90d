"""At most one Fetch per interval while fetches bring records (embedded broker only).

The embedded broker's cost of a Fetch that returns records grows with the length of the partitions
it reads (a Fetch at the end of a partition that holds ~11,000 records in small batches cost it
~4 ms of CPU per partition, against ~1.3 ms for a whole empty Fetch of 8; NOTES in
docs/performance.md, goal 2), not with the records it returns. aiokafka sends the next Fetch as soon
as the previous one is answered and its records are taken, so a worker that keeps up fetched
~21 times a second at 3,000 turns/s, each Fetch reading 6-10 partitions with a few dozen new records
each, and the broker spent as much CPU on those reads as the worker on the turns.

:func:`attach` wraps one aiokafka ``Fetcher``'s ``_proc_fetch_request`` (aiokafka 0.14.0: one
coroutine per Fetch sent; the fetcher sends no other Fetch to that broker while it runs). After a
Fetch that brought records, it first wakes whoever waits for records (the worker's ``getmany``: the
records reach the agents at once, as before), then holds the coroutine until ``interval_ms`` after
that Fetch was sent. The next Fetch then collects everything that arrived meanwhile in one read per
partition. A Fetch that found nothing is not held (the broker already waited), so an idle worker and
the first record after a silence are unchanged; a worker behind (a backlog, a table recovery)
fetches up to ``max_partition_fetch_bytes`` a partition per Fetch, so the hold costs it little.

What it costs: every hop of a record through the broker (``turns`` to the window agent,
``volunteered`` to the sink) can wait up to the interval more for the Fetch that brings it. A
hook's turns do not take that hop when the endpoint's fast lane commits them (docs/hooks.md, "Speed").

It is switched on by the ``tansu://`` consumer thread (:mod:`pipeline.compat.tansu_transport`) once
its aiokafka consumer has started, when :func:`install` asked for it on the app (setting
``fetch_interval_ms``, 0: off). A real Kafka broker answers a Fetch from an index, so ``kafka://``
workers are left alone. A missing part is a :class:`~pipeline.internals.CompatError`.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from aiokafka.consumer.fetcher import Fetcher

from pipeline.internals import CompatError, installed_versions, require

PATCH = "fetch-interval"

_APP_ATTR = "_volunteer_fetch_interval_ms"

SIGNATURE = ["self", "assignment", "node_id", "request"]
"""``Fetcher._proc_fetch_request``'s parameters in the pinned aiokafka."""

FETCHER_PARTS = ("_fetch_waiters",)
"""The fetcher's set of futures that ``getmany`` waits on (woken with ``_notify``)."""


def hold_s(sent: float, now: float, interval_s: float, had_records: bool) -> float:
    """How long to hold the node's next Fetch, sent at ``sent``, answered by ``now`` (seconds)."""
    if not had_records:
        return 0.0
    return max(0.0, sent + interval_s - now)


def attach(fetcher: Any, interval_ms: float) -> bool:
    """Give one started aiokafka ``fetcher`` the interval; False (nothing changed) when it is 0."""
    require(PATCH, fetcher, *FETCHER_PARTS, methods=("_proc_fetch_request", "_notify"))
    if interval_ms <= 0:
        return False
    interval_s = interval_ms / 1000
    proc = fetcher._proc_fetch_request
    notify = fetcher._notify

    async def _proc_fetch_request(assignment: Any, node_id: Any, request: Any) -> Any:
        loop = asyncio.get_running_loop()
        sent = loop.time()
        got = await proc(assignment, node_id, request)
        hold = hold_s(sent, loop.time(), interval_s, bool(got))
        if hold > 0:
            for waiter in list(fetcher._fetch_waiters):  # the records are buffered: hand them over now
                notify(waiter)
            try:
                await asyncio.sleep(hold)
            except asyncio.CancelledError:
                # an unassignment or the consumer's close cancels the fetch task and awaits it
                # unguarded (aiokafka's close): end as aiokafka's own cancelled fetch does
                return False
        return got

    fetcher._proc_fetch_request = _proc_fetch_request
    return True


def start(client: Any, app: Any) -> bool:
    """Called with a started aiokafka consumer of ``app``: attach the interval to its fetcher if
    :func:`install` asked for it on ``app``."""
    interval_ms = getattr(app, _APP_ATTR, None)
    if not interval_ms:
        return False
    require(PATCH, client, "_fetcher")
    return attach(client._fetcher, interval_ms)


def install(app: Any, interval_ms: float) -> None:
    """Ask for the interval on ``app``'s ``tansu://`` consumer; checks the aiokafka method it wraps first."""
    require(PATCH, Fetcher, methods=("_proc_fetch_request", "_notify"))
    proc = Fetcher._proc_fetch_request
    if not inspect.iscoroutinefunction(proc) or list(inspect.signature(proc).parameters) != SIGNATURE:
        raise CompatError(f"compat patch {PATCH}: aiokafka's Fetcher._proc_fetch_request is not the coroutine "
                          f"({', '.join(SIGNATURE)}) it wraps ({installed_versions()})")
    setattr(app, _APP_ATTR, float(interval_ms))
