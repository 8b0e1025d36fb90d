"""What the agents may use of their worker: :class:`AgentContext`, a narrow view of ``StreamApp``.

The agents, the hook endpoint, the probes and the metrics are handed the worker's app, but they
are typed against this protocol, not against :class:`pipeline.app.StreamApp`, so none of them
imports the app module and the import graph stays one-way (app -> wiring -> agents -> this
module; tests/unit/test_import_graph.py). The protocol lists exactly the members they use, read
only: an agent changes what it is given (counters, the table), it never rebinds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import astuple, dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import faust

    from pipeline.agents.answer_board import AnswerBoard
    from pipeline.agents.batch_types import BatchOutput, OpensResult, SinkResult
    from pipeline.agents.brain_holder import BrainHolder
    from pipeline.agents.fastlane import FastLane
    from pipeline.agents.session_table import SessionTable
    from pipeline.agents.sink import EventWriter
    from pipeline.agents.statecrypt import StateCipher
    from pipeline.agents.window_batch import WindowProcessor
    from pipeline.settings import Settings


@dataclass
class Counters:
    """Running totals for the periodic progress line (never logged per event)."""

    turns: int = 0
    skipped: int = 0
    volunteered: int = 0
    dead_letters: int = 0
    rows: int = 0
    expired: int = 0
    purged: int = 0

    def snapshot(self) -> tuple[int, ...]:
        """Every total, in field order (derived, so a new counter cannot be left out of it)."""
        return astuple(self)


class BatchMetrics(Protocol):
    """The batch hooks of :class:`pipeline.worker_metrics.WorkerMetrics` that the agents call."""

    def window_batch(self, records: int, out: BatchOutput, seconds: float) -> None: ...

    def sink_batch(self, records: int, result: SinkResult, seconds: float) -> None: ...

    def page_opens_batch(self, result: OpensResult) -> None: ...

    def hook_request(self, outcome: str, pages: int) -> None:
        """One ``/volunteer/hook/turns`` request answered, with its outcome and the items returned."""
        ...

    def watch_writer(self, name: str, writer: CountsFailures) -> None:
        """Export ``writer``'s failed (retried) database attempts as ``writer=name``."""
        ...


class CountsFailures(Protocol):
    """A database writer's running count of failed attempts (:class:`pipeline.agents.dbwriter.BatchWriter`)."""

    @property
    def failures(self) -> int: ...


class AgentContext(Protocol):
    """One worker's shared parts, as the agents see them (``StreamApp`` provides them)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def app(self) -> faust.App: ...

    @property
    def table(self) -> SessionTable: ...

    @property
    def processor(self) -> WindowProcessor: ...

    @property
    def writer(self) -> EventWriter: ...

    @property
    def brain(self) -> BrainHolder: ...

    @property
    def cipher(self) -> StateCipher: ...

    @property
    def counters(self) -> Counters: ...

    @property
    def metrics(self) -> BatchMetrics: ...

    @property
    def answers(self) -> AnswerBoard: ...

    @property
    def lane(self) -> FastLane: ...

    @property
    def partitions(self) -> int: ...

    @property
    def topics(self) -> Mapping[str, Any]:
        """The Faust topic of every topic in agents/topology.py, by its ``Settings`` field."""
        ...

    @property
    def token(self) -> str: ...

    @property
    def advertised_url(self) -> str: ...

    @property
    def forward_ssl(self) -> Any: ...

    def assigned_partitions(self, topic: str) -> set[int]:
        """Partitions of ``topic`` this worker currently owns."""
        ...
