"""Kubernetes-style health endpoints on the worker's web server: ``/livez`` and ``/readyz``.

- ``GET /livez`` — liveness: the worker's event loop answered (200). A probe that gets no answer
  within its timeout means the process is wedged and should be restarted. It checks nothing else on
  purpose: a broker or database outage must not make an orchestrator kill workers that would
  recover by themselves (docs/guarantees.md, the outage runs).
- ``GET /readyz`` — readiness: 200 when the worker owns partitions of ``turns``, is not in the middle
  of a rebalance or table recovery, is within ``VOLUNTEER_READY_MAX_LAG`` records of the end of the
  partitions it owns, has heard from the broker within :data:`BROKER_SILENCE_S` (a Fetch answer
  for any partition it owns), and has a brain loaded; else 503. Without the broker check a worker
  cut off from the broker answered 200 for the whole cut: its lag and assignment are its own last
  view, which a partition freezes. Each check is listed with its outcome, so a
  probe log says which one failed. A worker that is not ready keeps running (and catching up).

Neither needs the hook credential: probes (kubelet, compose, a load balancer) usually cannot send
one, and the answers hold only booleans and counts (no topic, group, URL, session or brain name),
so there is nothing to protect.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from pipeline.internals import CompatError, internals

if TYPE_CHECKING:
    from pipeline.agents.context import AgentContext

LIVE_PATH = "/livez"
READY_PATH = "/readyz"
PROBE_PATHS: tuple[str, ...] = (LIVE_PATH, READY_PATH)
"""Answered without the hook credential by the edge guard (agents/edge.py)."""

BROKER_SILENCE_S = 5.0
"""Readiness fails when the newest Fetch answer for any owned partition is older than this. A worker
that talks to its broker gets one every fetch wait (20 ms on the embedded broker, 1.5 s on Kafka)
for its idle partitions at least; 5 s is also the embedded broker's request timeout, after which a
worker cut off from the broker has given up its requests (topics/tansu_client.py, REQUEST_TIMEOUT_S)."""


@dataclass(frozen=True, slots=True)
class Readiness:
    partitions: int
    recovering: bool
    lag: int
    max_lag: int
    brain_pages: int | None  # None: no brain installed
    broker_silence_s: float | None = 0.0  # since the newest Fetch answer; None: none yet

    @property
    def checks(self) -> dict[str, bool]:
        return {
            "partitions": self.partitions > 0,
            "recovered": not self.recovering,
            "caught_up": self.lag <= self.max_lag,
            "broker": self.broker_silence_s is not None and self.broker_silence_s <= BROKER_SILENCE_S,
            "brain": self.brain_pages is not None,
        }

    @property
    def ready(self) -> bool:
        return all(self.checks.values())

    def to_json(self) -> bytes:
        return orjson.dumps({
            "status": "ready" if self.ready else "not_ready",
            "checks": self.checks,
            "partitions": self.partitions, "lag": self.lag, "max_lag": self.max_lag,
            "brain_pages": self.brain_pages,
            "broker_silence_s": None if self.broker_silence_s is None else round(self.broker_silence_s, 1),
        })


def readiness(ctx: AgentContext) -> Readiness:
    """The readiness of this worker now (cheap: no request to the broker or the database)."""
    from pipeline.agents.lag import consumer_lag

    app: Any = ctx.app
    owned = ctx.assigned_partitions(ctx.settings.topic_turns)
    recovering = bool(app.rebalancing or app.in_recovery)
    lag = sum(value for _, _, value in consumer_lag(ctx))
    index = ctx.brain.index
    pages = None if index is None else int(index.live_page_count)
    return Readiness(len(owned), recovering, lag, ctx.settings.ready_max_lag, pages, broker_silence_s(app))


def broker_silence_s(app: Any) -> float | None:
    """Seconds since the consumer's newest Fetch answer for any partition it owns, None if none yet.
    A changed internal raises (:class:`pipeline.internals.CompatError`), as every guarded read does."""
    access = internals()
    try:
        consumer = access.created_consumer(app)
        newest = None if consumer is None else access.newest_fetch_ms(consumer)
    except CompatError:
        raise
    except Exception:  # not started, or mid-rebalance
        return None
    return None if newest is None else max(0.0, time.time() - newest / 1000)


def register_health_views(ctx: AgentContext) -> None:
    """Add ``/livez`` and ``/readyz`` to the worker's Faust web server."""
    from faust import web

    json_type = "application/json"

    class Live(web.View):
        async def get(self, request: Any) -> Any:
            return self.bytes(b'{"status":"ok"}', content_type=json_type, status=200)

    class Ready(web.View):
        async def get(self, request: Any) -> Any:
            state = readiness(ctx)
            return self.bytes(state.to_json(), content_type=json_type, status=200 if state.ready else 503)

    ctx.app.page(LIVE_PATH)(Live)
    ctx.app.page(READY_PATH)(Ready)
