"""Prometheus metrics of a worker (``VOLUNTEER_METRICS_PORT``; 0 = off), all named ``volunteer_*``.

Cheap on the hot path by construction: the decision core fills a plain-integer
:class:`~pipeline.core.tally.DecisionTally` per batch, the agents hand over whole batches, and
everything that is a running total or a current value (turns, pages per arm, sessions, brain,
consumer lag) is read only when Prometheus scrapes, by :class:`_WorkerCollector`. Only the batch
histograms are observed as they happen, once per batch. Every worker has its own registry, so
several apps in one process (tests) never share or clash on metrics. docs/observability.md lists
the metrics with PromQL examples.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import orjson
from prometheus_client import CollectorRegistry, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.exposition import start_http_server

from pipeline.agents.lag import consumer_lag
from pipeline.core.tally import DecisionTally
from pipeline.internals import internals

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from pipeline.agents.batch_types import BatchOutput, OpensResult, SinkResult
    from pipeline.agents.context import AgentContext, CountsFailures
    from pipeline.settings import Settings

log = logging.getLogger(__name__)

SIZE_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

STAGE_WINDOW = "window"
STAGE_SINK = "sink"
STAGE_PAGE_OPENS = "page_opens"

HOOK_OUTCOMES = ("answered", "empty", "timeout", "duplicate", "published", "forwarded", "refused", "error")
"""Outcomes of a hook ``/turns`` request, each exported from the start (at 0) so ``increase()`` and
the alert rules see the first one: pages answered, an answer with none, no answer within ``wait_ms``,
a repeated turn, records published without waiting, handed to the owning worker, refused (400/409),
the broker failing the publish (503)."""


class MetricsPortError(RuntimeError):
    """The metrics port cannot be used; the message says what to change."""


def serve_metrics_for(metrics: WorkerMetrics, settings: Settings) -> int | None:
    """Serve ``metrics`` on the configured port; the bound port, or None when metrics are off (0).

    Same rule as the Faust web port (quirk 7): with the embedded broker, where several workers share
    one host, a busy port falls back to a free one with a warning; against Kafka a busy port is a
    configuration error (each worker process needs its own port, or its own network namespace).
    The port is bound, not tested first: two workers started together both saw the port free and
    the slower one died binding it (found by ``python -m bench``, which starts two at once).
    """
    port = settings.metrics_port
    if port == 0:
        return None
    host = settings.metrics_host
    try:
        return metrics.serve(host, port)
    except MetricsPortError:
        if not settings.broker_is_embedded:
            raise MetricsPortError(
                f"metrics port {port} on {host} is in use; give each worker process its own "
                "VOLUNTEER_METRICS_PORT (or 0 to turn metrics off)") from None
    bound = metrics.serve(host, 0)
    log.warning("metrics port %d is in use; this worker serves metrics on port %d instead", port, bound)
    return bound


def _dead_reason(letter: bytes) -> str:
    try:
        reason = orjson.loads(letter).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return "unknown"
    return str(reason) if reason else "unknown"


class WorkerMetrics:
    """The metrics of one worker: batch hooks for the agents, a collector for scrapes, the HTTP server."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.tally = DecisionTally()
        self.dead_letters: dict[tuple[str, str], int] = {}
        self.page_opens = 0
        self.page_open_updates = 0
        self.hook_requests = dict.fromkeys(HOOK_OUTCOMES, 0)
        self.hook_pages = 0
        self._writers: dict[str, list[CountsFailures]] = {}
        self._lock = threading.Lock()  # the scrape thread copies what the event loop adds to
        self._app: AgentContext | None = None
        self._server: WSGIServer | None = None
        self.port: int | None = None
        self.sink_batch_size = Histogram(
            "volunteer_sink_batch_size", "Volunteered records per sink batch (one INSERT).",
            buckets=SIZE_BUCKETS, registry=self.registry)
        self.sink_batch_seconds = Histogram(
            "volunteer_sink_batch_seconds", "Time to store one sink batch, retries included.",
            buckets=SECONDS_BUCKETS, registry=self.registry)
        self.window_batch_size = Histogram(
            "volunteer_window_batch_size", "Turn records per window-agent batch.",
            buckets=SIZE_BUCKETS, registry=self.registry)
        self.window_batch_seconds = Histogram(
            "volunteer_window_batch_seconds", "Time to decide and publish one window batch, retries included.",
            buckets=SECONDS_BUCKETS, registry=self.registry)
        self.registry.register(_WorkerCollector(self))
        ProcessCollector(registry=self.registry)

    def bind(self, app: AgentContext) -> None:
        """Read the app's counters, table, brain and consumer at scrape time."""
        self._app = app

    # ------------------------------------------------------------------ batch hooks (event loop)

    def _count_dead(self, stage: str, reasons: Iterable[str]) -> None:
        with self._lock:
            for reason in reasons:
                key = (stage, reason)
                self.dead_letters[key] = self.dead_letters.get(key, 0) + 1

    def window_batch(self, records: int, out: BatchOutput, seconds: float) -> None:
        with self._lock:
            self.tally.add(out.tally)
        if out.dead:
            self._count_dead(STAGE_WINDOW, (_dead_reason(letter) for _, letter in out.dead))
        self.window_batch_size.observe(records)
        self.window_batch_seconds.observe(seconds)

    def sink_batch(self, records: int, result: SinkResult, seconds: float) -> None:
        if result.dead:
            self._count_dead(STAGE_SINK, (_dead_reason(letter) for _, letter in result.dead))
        self.sink_batch_size.observe(records)
        self.sink_batch_seconds.observe(seconds)

    def page_opens_batch(self, result: OpensResult) -> None:
        with self._lock:
            self.page_opens += result.opens
            self.page_open_updates += result.updated
        if result.dead_reasons:
            self._count_dead(STAGE_PAGE_OPENS, result.dead_reasons)

    def hook_request(self, outcome: str, pages: int) -> None:
        with self._lock:
            self.hook_requests[outcome] = self.hook_requests.get(outcome, 0) + 1
            self.hook_pages += pages

    def watch_writer(self, name: str, writer: CountsFailures) -> None:
        """Read ``writer.failures`` at scrape time: live while a batch still waits for PostgreSQL,
        which a count taken when the batch commits would not be."""
        with self._lock:
            self._writers.setdefault(name, []).append(writer)

    # ------------------------------------------------------------------ HTTP endpoint

    def serve(self, host: str, port: int) -> int:
        """Start the ``/metrics`` endpoint in a daemon thread; returns the bound port."""
        try:
            server, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise MetricsPortError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
        self._server = server
        self.port = int(server.server_port)
        return self.port

    def stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            server.shutdown()
            server.server_close()


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


class _WorkerCollector:
    """Running totals and current values, computed when scraped (nothing on the hot path)."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        with m._lock:
            tally = DecisionTally()
            tally.add(m.tally)
            dead = dict(m.dead_letters)
            opens, updates = m.page_opens, m.page_open_updates
            hooks, hook_pages = dict(m.hook_requests), m.hook_pages
            writers = {name: list(ws) for name, ws in m._writers.items()}
        app = m._app

        if app is not None:
            c = app.counters
            yield _counter("volunteer_turns", "Turns decided (each turn of each session once).", c.turns)
            yield _counter("volunteer_turns_skipped", "Records skipped: blank text, or redelivered and already "
                           "applied.", c.skipped)
            yield _counter("volunteer_events_written", "Rows inserted into context_volunteer_events "
                           "(repeats of stored events not counted).", c.rows)
            yield _counter("volunteer_sessions_expired", "Idle sessions removed from the table.", c.expired)
            yield _counter("volunteer_events_purged", "Events deleted by the retention purge.", c.purged)
        yield _counter("volunteer_decisions", "Decisions run by the core (turns through extract, resolve, gate).",
                       tally.decisions)
        yield _counter("volunteer_candidates", "Entity candidates in decided windows (after merging).",
                       tally.candidates)
        pointers = CounterMetricFamily("volunteer_pointers", "Pages resolved before the gate, per arm.",
                                       labels=["arm"])
        for arm, n in sorted(tally.pointers.items()):
            pointers.add_metric([arm], n)
        yield pointers
        volunteered = CounterMetricFamily("volunteer_volunteered", "Pages volunteered, per arm.", labels=["arm"])
        for arm, n in sorted(tally.volunteered.items()):
            volunteered.add_metric([arm], n)
        yield volunteered
        yield _counter("volunteer_gate_dropped", "Resolved pages the gate dropped: under the confidence "
                       "threshold, an excluded slug prefix, or over the page cap.", tally.gate_dropped)
        yield _counter("volunteer_dedupe_suppressed", "Resolved pages skipped because the session already "
                       "had them (session dedupe).", tally.suppressed)
        dead_family = CounterMetricFamily("volunteer_dead_letters", "Records sent to the dead-letter topic, by "
                                          "stage and reason.", labels=["stage", "reason"])
        for (stage, reason), n in sorted(dead.items()):
            dead_family.add_metric([stage, reason], n)
        yield dead_family
        yield _counter("volunteer_page_opens", "Valid page-open records applied.", opens)
        yield _counter("volunteer_page_open_updates", "pages.last_retrieved_at rows changed by page opens "
                       "(throttled, unknown and deleted pages change none).", updates)
        hook_family = CounterMetricFamily("volunteer_hook_requests", "Hook /turns requests this worker answered, "
                                          "by outcome.", labels=["outcome"])
        for outcome, n in sorted(hooks.items()):
            hook_family.add_metric([outcome], n)
        yield hook_family
        yield _counter("volunteer_hook_pages", "Items (pointers and pages) returned to hooks in answers.", hook_pages)
        retries = CounterMetricFamily("volunteer_db_retries", "Failed database attempts of a writer, each retried "
                                      "after a backoff (PostgreSQL away or failing).", labels=["writer"])
        for name, ws in sorted(writers.items()):
            retries.add_metric([name], sum(w.failures for w in ws))
        yield retries
        if app is not None:
            yield from self._current(app)

    def _current(self, app: AgentContext) -> Iterator[Metric]:
        settings = app.settings
        info = InfoMetricFamily("volunteer_worker", "This worker's identity.")
        info.add_metric([], {"app_id": settings.app_id,
                             "broker": "tansu" if settings.broker_is_embedded else "kafka"})
        yield info
        brain = app.brain
        index = brain.index
        now = time.time()
        yield GaugeMetricFamily("volunteer_brain_pages", "Live pages in the loaded brain.",
                                value=index.live_page_count)
        yield GaugeMetricFamily("volunteer_brain_alias_rows", "Alias rows in the loaded brain.",
                                value=index.alias_row_count)
        yield GaugeMetricFamily("volunteer_brain_age_seconds", "Seconds since the loaded brain was installed.",
                                value=max(0.0, now - brain.loaded_at))
        yield GaugeMetricFamily("volunteer_brain_refresh_age_seconds", "Seconds since the brain was last "
                                "confirmed current (poll or load); grows while refreshes fail.",
                                value=max(0.0, now - brain.checked_at))
        yield _counter("volunteer_brain_reloads", "Brain reloads after a change in PostgreSQL.", brain.reloads)
        store = internals().created_store(app.table)  # not ``.data``: that would create the store from this thread
        try:
            sessions = len(store) if store is not None else 0
        except Exception:  # mid-recovery
            sessions = 0
        yield GaugeMetricFamily("volunteer_sessions", "Sessions in this worker's table (its partitions).",
                                value=sessions)
        lag = GaugeMetricFamily("volunteer_consumer_lag", "Records not yet committed by this worker's group, per "
                                "owned partition (high watermark minus committed offset).",
                                labels=["topic", "partition", "stream"])
        # ``stream``: the topic's role, whatever it is named (VOLUNTEER_TOPIC_*), for alerts and dashboards
        streams = {settings.topic_turns: "turns", settings.topic_volunteered: "volunteered",
                   settings.topic_page_opens: "page_opens"}
        for topic, partition, value in consumer_lag(app):
            lag.add_metric([topic, str(partition), streams.get(topic, "other")], value)
        yield lag
