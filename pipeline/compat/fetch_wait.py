"""A fetch wait that grows while the worker's fetches come back empty (embedded broker only).

The embedded broker does not end a waiting Fetch when records arrive (quirk 4, docs/streaming.md),
so the worker's consumer asks with a short wait (``FETCH_MAX_WAIT_MS``, 20 ms); the broker answers
an empty Fetch when that wait ends. An idle worker therefore sent ~43 Fetch requests a second,
each costing the broker ~0.8 ms of CPU plus ~0.03 ms per partition named: 0.15-0.18 core of broker
and 0.08-0.10 of worker for nothing (docs/performance.md, goal 2).

:class:`GrowingWait` doubles the wait after every Fetch that brought no records, up to a maximum
(setting ``fetch_wait_max_ms``), and goes back to the base wait as soon as one brings records. So
under traffic nothing changes (a Fetch that finds records is answered at once, and the next one
asks with the base wait), and an idle worker asks ~7 times a second (160 ms). The price is the
first record after a silence: it waits for the Fetch in flight to be answered, up to the grown
wait (the broker answers an empty one when the wait ends, one into which records arrived often
sooner); the hop after it (the sink reading what the window agent published) is at the base wait
again. A hook's turns do not take that hop when the endpoint's fast lane commits them (docs/hooks.md,
"Speed").

:func:`attach` wraps one aiokafka ``Fetcher``'s ``_proc_fetch_request`` (aiokafka 0.14.0: one
coroutine per Fetch sent, returning whether it buffered records or an error) and sets the
fetcher's ``_fetch_max_wait_ms``, which the fetcher reads each time it builds a Fetch. It is called
by the ``tansu://`` consumer thread (:mod:`pipeline.compat.tansu_transport`) once its aiokafka
consumer has started, when :func:`install` asked for it on the app. A real Kafka broker ends a
waiting Fetch when records arrive, and Faust's 1.5 s wait already keeps an idle consumer's rate
low, so ``kafka://`` workers are left alone. A missing part is a
:class:`~pipeline.internals.CompatError`, never a silent fallback to the fixed wait.
"""

from __future__ import annotations

import inspect
from typing import Any

from aiokafka.consumer.fetcher import Fetcher

from pipeline.internals import CompatError, installed_versions, require

PATCH = "fetch-wait"

_APP_ATTR = "_volunteer_fetch_wait_max_ms"

SIGNATURE = ["self", "assignment", "node_id", "request"]
"""``Fetcher._proc_fetch_request``'s parameters in the pinned aiokafka."""


class GrowingWait:
    """The wait of the next Fetch: ``base_ms`` after one that brought records, else twice the last
    one, at most ``max_ms``."""

    __slots__ = ("base_ms", "current_ms", "max_ms")

    def __init__(self, base_ms: int, max_ms: int) -> None:
        if base_ms <= 0 or max_ms < base_ms:
            raise ValueError(f"fetch wait: need 0 < base ({base_ms} ms) <= max ({max_ms} ms)")
        self.base_ms = base_ms
        self.max_ms = max_ms
        self.current_ms = base_ms

    def after(self, had_records: bool) -> int:
        """Record how one Fetch ended; returns the wait for the next."""
        self.current_ms = self.base_ms if had_records else min(self.max_ms, 2 * self.current_ms)
        return self.current_ms


def attach(fetcher: Any, max_ms: int) -> GrowingWait | None:
    """Give one started aiokafka ``fetcher`` the growing wait, from its own wait up to ``max_ms``;
    None (nothing changed) when ``max_ms`` is not above that wait."""
    require(PATCH, fetcher, "_fetch_max_wait_ms", methods=("_proc_fetch_request",))
    base = int(fetcher._fetch_max_wait_ms)
    if max_ms <= base:
        return None
    wait = GrowingWait(base, max_ms)
    proc = fetcher._proc_fetch_request

    async def _proc_fetch_request(assignment: Any, node_id: Any, request: Any) -> Any:
        got = await proc(assignment, node_id, request)
        fetcher._fetch_max_wait_ms = wait.after(bool(got))
        return got

    fetcher._proc_fetch_request = _proc_fetch_request
    return wait


def start(client: Any, app: Any) -> GrowingWait | None:
    """Called with a started aiokafka consumer of ``app``: attach the growing wait to its fetcher if
    :func:`install` asked for it on ``app``."""
    max_ms = getattr(app, _APP_ATTR, None)
    if max_ms is None:
        return None
    require(PATCH, client, "_fetcher")
    return attach(client._fetcher, max_ms)


def install(app: Any, max_ms: int) -> None:
    """Ask for the growing wait, up to ``max_ms``, on ``app``'s ``tansu://`` consumer; checks the
    aiokafka method it wraps first."""
    require(PATCH, Fetcher, methods=("_proc_fetch_request",))
    proc = Fetcher._proc_fetch_request
    if not inspect.iscoroutinefunction(proc) or list(inspect.signature(proc).parameters) != SIGNATURE:
        raise CompatError(f"compat patch {PATCH}: aiokafka's Fetcher._proc_fetch_request is not the coroutine "
                          f"({', '.join(SIGNATURE)}) it wraps ({installed_versions()})")
    setattr(app, _APP_ATTR, int(max_ms))
