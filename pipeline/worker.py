"""Start a worker: check the services, create the topics, load the brain, then run the Faust app.

Everything that can be wrong with the set-up (broker unreachable, database unreachable or not
migrated, bad brain directory) is found before Faust starts and reported as one
:class:`WorkerSetupError` line, instead of as a stack trace from inside the framework.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from pathlib import Path
from typing import NoReturn

import psycopg

from pipeline.agents.brain_holder import BrainHolder, BrainLoadError
from pipeline.agents.statecrypt import StateKeyError, cipher_from
from pipeline.app import StreamApp
from pipeline.core.session import DecisionOptions
from pipeline.gcpause import tune_for_worker
from pipeline.settings import Settings
from sinks.db import redact

log = logging.getLogger(__name__)

SETUP_TIMEOUT_S = 20.0


class WorkerSetupError(RuntimeError):
    """The worker cannot start; the message says what to fix."""


def check_database(settings: Settings) -> None:
    """The database answers and has the events table (``volunteer migrate`` creates it)."""
    url = settings.database_url
    try:
        with psycopg.connect(url, connect_timeout=10, autocommit=True) as conn:
            row = conn.execute("SELECT to_regclass('context_volunteer_events') IS NOT NULL").fetchone()
    except psycopg.Error as exc:
        detail = " ".join(line.strip() for line in str(exc).strip().splitlines()) or type(exc).__name__
        raise WorkerSetupError(f"cannot reach the database at {redact(url)}: {detail}") from None
    if not row or not row[0]:
        raise WorkerSetupError(
            f"the database {redact(url)} has no context_volunteer_events table; run: volunteer migrate "
            f"--database-url '{redact(url)}'"
        )


def prepare_topics(settings: Settings) -> int:
    """Create missing topics; return the partition count of ``turns`` (the table follows it)."""
    from topics.definitions import ensure_topics

    async def run() -> dict[str, int]:
        return await asyncio.wait_for(ensure_topics(settings), SETUP_TIMEOUT_S)

    client_log = logging.getLogger("aiokafka")
    level = client_log.level
    client_log.setLevel(logging.CRITICAL)  # the failure is reported below, in one line
    try:
        counts = asyncio.run(run())
    except (TimeoutError, OSError) as exc:
        detail = str(exc) or f"no answer within {SETUP_TIMEOUT_S:g} s"  # a TimeoutError has no text
        raise WorkerSetupError(f"cannot reach the broker at {settings.broker}: {detail}{_security_hint(settings)}") from None
    except Exception as exc:
        if type(exc).__module__.startswith("aiokafka"):
            raise WorkerSetupError(f"cannot reach the broker at {settings.broker}: {exc}{_security_hint(settings)}") from None
        raise
    finally:
        client_log.setLevel(level)
    return counts[settings.topic_turns]


def _security_hint(settings: Settings) -> str:
    """A TLS or SASL mismatch looks like a dead broker: say which security settings were used."""
    protocol = settings.kafka_security_protocol.upper()
    if protocol == "PLAINTEXT":
        return ""
    return f" (connecting with VOLUNTEER_KAFKA_SECURITY_PROTOCOL={protocol}: does the broker listen that way?)"


def load_worker_brain(settings: Settings, brain_dir: str | Path | None) -> BrainHolder:
    try:
        if brain_dir is not None:
            return BrainHolder.from_directory(brain_dir)
        return BrainHolder.from_database(settings.database_url)
    except BrainLoadError as exc:
        raise WorkerSetupError(str(exc)) from None


def setup_logging(settings: Settings, level: str | None = None) -> None:
    """Logs in ``VOLUNTEER_LOG_FORMAT`` (see :mod:`pipeline.logging_setup`); a bad value is a setup error."""
    from pipeline.logging_setup import LogSettingError, configure_logging

    try:
        configure_logging(settings.log_format, level or settings.log_level)
    except LogSettingError as exc:
        raise WorkerSetupError(str(exc)) from None


def serve_metrics(stream_app: StreamApp) -> int | None:
    """Start the Prometheus endpoint (unless ``VOLUNTEER_METRICS_PORT=0``); returns its port."""
    from pipeline.worker_metrics import MetricsPortError, serve_metrics_for

    settings = stream_app.settings
    try:
        bound = serve_metrics_for(stream_app.metrics, settings)
    except MetricsPortError as exc:
        raise WorkerSetupError(str(exc)) from None
    if bound is not None:
        log.info("metrics on http://%s:%d/metrics", settings.metrics_host, bound)
    return bound


def build_worker(settings: Settings, *, brain_dir: str | Path | None = None, options: DecisionOptions | None = None,
                 web_enabled: bool = False, web_port: int | None = None) -> StreamApp:
    """All pre-flight checks, then the app (not started; its metrics endpoint already answers)."""
    setup_logging(settings)
    try:
        cipher = cipher_from(settings.state_key, settings.state_key_file)
    except StateKeyError as exc:
        raise WorkerSetupError(str(exc)) from None
    from pipeline.agents.edge import EdgeSetupError, choose_web_port
    from pipeline.compat import CompatError

    if web_enabled:  # a taken port fails here, before any topic is created (the edge checks it again)
        try:
            choose_web_port(settings, web_port)
        except EdgeSetupError as exc:
            raise WorkerSetupError(str(exc)) from None
    check_database(settings)
    partitions = prepare_topics(settings)
    brain = load_worker_brain(settings, brain_dir)
    gc.freeze()  # the brain (and the imported code) lives as long as the worker: keep it out of full collections
    tune_for_worker(settings.gc_young_threshold)  # pipeline/gcpause.py; docs/performance.md, goal 2

    try:
        stream_app = StreamApp(settings, brain, options=options, partitions=partitions, web_enabled=web_enabled,
                               web_port=web_port, state_cipher=cipher)
    except (EdgeSetupError, CompatError) as exc:  # CompatError: a patch's target changed (pipeline/compat)
        raise WorkerSetupError(str(exc)) from None
    serve_metrics(stream_app)
    return stream_app


def run_worker(stream_app: StreamApp, *, loglevel: str = "info") -> NoReturn:
    """Run until SIGTERM / Ctrl-C (then leave the group, flush, commit and exit 0)."""
    import faust

    settings = stream_app.settings
    brain = stream_app.brain
    kind = "embedded Tansu" if settings.broker_is_embedded else "Kafka"

    @stream_app.app.task
    async def announce() -> None:  # runs once logging is set up
        log.info("worker %s on %s (%s): %d partitions, topics %s -> %s (dead letters: %s), brain from %s "
                 "(%d pages), events to %s", settings.app_id, settings.broker, kind, stream_app.partitions,
                 settings.topic_turns, settings.topic_volunteered, settings.topic_dlq, brain.origin,
                 brain.index.live_page_count, redact(settings.database_url))

    setup_logging(settings, loglevel)  # Faust keeps it: override_logging=False
    worker = faust.Worker(stream_app.app, loglevel=loglevel, quiet=True, redirect_stdouts=False,
                          override_logging=False)
    worker.spinner = None  # its cursor escapes end up in log files
    worker.execute_from_commandline()
