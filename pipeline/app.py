"""The Faust app of a worker: topics, the per-session table and the agents, built from :class:`Settings`.

``StreamApp(settings, brain)`` declares everything; ``pipeline.worker.run_worker`` runs it. The app
is built per process (no module-level singleton) so a test or the demo can build one with its own
settings. Every patch of Faust, mode and aiokafka internals is installed here, by the one call to
:func:`pipeline.compat.install` (the embedded broker's Faust transport among them); the Tansu
configuration comes from :mod:`topics.tansu_client`.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC
from pathlib import Path
from typing import Any

import faust

from pipeline import compat
from pipeline.agents import edge, topology, wiring
from pipeline.agents.answer_board import AnswerBoard
from pipeline.agents.answers import register_views
from pipeline.agents.brain_holder import BrainHolder
from pipeline.agents.context import Counters
from pipeline.agents.fastlane import FastLane
from pipeline.agents.session_table import SESSION_TABLE, SessionTable
from pipeline.agents.sink import EventWriter
from pipeline.agents.statecrypt import StateCipher, cipher_from
from pipeline.agents.window_batch import WindowProcessor, decision_options
from pipeline.core.session import DecisionOptions
from pipeline.settings import EMBEDDED_BROKER_SCHEME, Settings
from pipeline.worker_metrics import WorkerMetrics
from topics import tansu_client
from topics.clients import faust_credentials
from topics.definitions import RAW

log = logging.getLogger(__name__)

def faust_broker_urls(settings: Settings) -> list[str]:
    scheme = EMBEDDED_BROKER_SCHEME if settings.broker_is_embedded else "kafka"
    return [f"{scheme}://{server}" for server in settings.bootstrap_servers]


class StreamApp:
    """One worker's Faust app and everything its agents share (they see it as
    :class:`pipeline.agents.context.AgentContext`)."""

    def __init__(self, settings: Settings, brain: BrainHolder, *, options: DecisionOptions | None = None,
                 partitions: int | None = None, web_enabled: bool = False, web_port: int | None = None,
                 state_cipher: StateCipher | None = None) -> None:
        self.settings = settings
        # the session table's values are sealed (agents/statecrypt.py); raises StateKeyError
        self.cipher = state_cipher or cipher_from(settings.state_key, settings.state_key_file)
        self.brain = brain
        self.options = options if options is not None else decision_options(settings)
        self.partitions = partitions or settings.topic_partitions
        self.counters = Counters()
        self.started_monotonic = time.monotonic()
        datadir = Path(settings.data_dir) / settings.app_id
        datadir.parent.mkdir(parents=True, exist_ok=True)
        conf: dict[str, Any] = {
            "broker": faust_broker_urls(settings),
            "store": "memory://",
            "datadir": str(datadir),
            "autodiscover": False,
            "topic_partitions": self.partitions,
            "topic_replication_factor": settings.topic_replication,
            # Standbys would double the changelog traffic on two cores; a taken-over partition is
            # recovered from its changelog instead.
            "table_standby_replicas": 0,
            "consumer_auto_offset_reset": "earliest",
            "processing_guarantee": "at_least_once",
            "web_enabled": web_enabled,
            "web_bind": settings.web_host,
            "web_host": settings.web_host,
            "producer_linger_ms": 1,
            # a window batch's states in one batch a partition, not ~5 of Faust's 16 KiB (agents/bulk_send.py)
            "producer_max_batch_size": settings.producer_batch_bytes,
            "timezone": UTC,
        }
        self.token = ""
        self.advertised_url = ""
        self.guard: edge.EdgeGuard | None = None
        self.forward_ssl: Any = None
        self.registration: edge.Registration | None = None  # the hooks' registry entry, with the web server
        if web_enabled:  # the agent edge (agents/edge.py): port, address, TLS, credential, checks
            port = edge.choose_web_port(settings, web_port)
            self.token = edge.worker_token(settings)
            self.guard = edge.EdgeGuard(self.token, loopback=edge.binds_loopback(settings.web_host))
            self.advertised_url = edge.advertised_url(settings, port)
            self.forward_ssl = edge.client_ssl_context(settings) if settings.web_tls_cafile else None
            conf.update(edge.faust_web_settings(settings, port, self.guard))
        credentials = faust_credentials(settings)
        if credentials is not None:
            conf["broker_credentials"] = credentials
        conf.update(tansu_client.faust_settings(settings))
        self.app = faust.App(settings.app_id, **conf)
        compat.install(self.app, settings)  # every patch of third-party internals (pipeline/compat)

        # topics and tables as declared in agents/topology.py (wiring attaches its agents)
        self.topics = {field: self._topic(getattr(settings, field)) for field in topology.topic_fields()}
        self.tables = {spec.name: self._table(spec) for spec in topology.TABLES}
        self.table = self.tables[SESSION_TABLE]
        self.processor = WindowProcessor(settings, self.options, cipher=self.cipher)
        self.writer = EventWriter(settings.database_url, settings.topic_volunteered)
        self.answers = AnswerBoard()  # pages proposed to waiting hooks (agents/answers.py)
        self.lane = FastLane()  # hook records committed by their request (agents/fastlane.py)
        self.metrics = WorkerMetrics()  # served by run_worker when VOLUNTEER_METRICS_PORT is set
        self.metrics.bind(self)
        self.metrics.watch_writer("events", self.writer)

        wiring.register_all(self)
        if web_enabled:
            self.registration = register_views(self)  # the hooks' answer endpoint

    def _table(self, spec: topology.TableSpec) -> SessionTable:
        table = SessionTable(app=self.app, name=spec.name, key_type=bytes, value_type=bytes,
                             partitions=self.partitions, beacon=self.app.tables.beacon, help=spec.help)
        self.app.tables.add(table)
        return table

    def _topic(self, name: str) -> Any:
        return self.app.topic(name, key_type=bytes, value_type=bytes, key_serializer=RAW, value_serializer=RAW,
                              partitions=self.partitions, internal=False)

    def assigned_partitions(self, topic: str) -> set[int]:
        """Partitions of ``topic`` this worker currently owns."""
        try:
            assignment = self.app.consumer.assignment()
        except Exception:
            return set()
        return {tp.partition for tp in assignment if tp.topic == topic}
