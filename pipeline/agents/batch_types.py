"""What the agents' batch logic takes and returns: :class:`InRecord` in, a result per agent out.

These are plain data, kept apart from the agents that fill them so that the Faust wiring, the
metrics (:mod:`pipeline.worker_metrics`) and the tests can all name them without importing an agent (the
import graph stays one-way: tests/unit/test_import_graph.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pipeline.agents.hooklane import Proposal
from pipeline.agents.session_table import SessionRecord
from pipeline.core.tally import DecisionTally


@dataclass(frozen=True, slots=True)
class InRecord:
    """One consumed record, as raw as it came."""

    key: bytes | None
    value: bytes | None
    partition: int
    offset: int


def message_records(messages: Sequence[Any]) -> list[InRecord]:
    """The records of a batch of Faust messages (key, value, partition and offset)."""
    return [InRecord(msg.key, msg.value, msg.partition, msg.offset) for msg in messages]


def in_records(events: Sequence[Any]) -> list[InRecord]:
    """The records of a batch of Faust events (their messages')."""
    return message_records([event.message for event in events])


@dataclass(slots=True)
class BatchOutput:
    """What one window batch produces: records to publish, then session states to save."""

    volunteered: list[tuple[bytes, bytes]] = field(default_factory=list)  # (key, value)
    dead: list[tuple[bytes | None, bytes]] = field(default_factory=list)  # (original key, dead letter)
    states: dict[bytes, SessionRecord] = field(default_factory=dict)  # session key -> new record
    turns: int = 0
    skipped: int = 0  # blank turns, redeliveries already applied
    tally: DecisionTally = field(default_factory=DecisionTally)  # what the core decided (metrics)
    proposals: list[Proposal] = field(default_factory=list)  # hook-channel turns, for the waiting hooks


class WriteOutcome(Enum):
    """How a database batch write ended: the one thing the agent reads before acknowledging."""

    COMMITTED = "committed"
    """Every storable record of the batch is in the table (or there was none): acknowledge."""
    STOPPED = "stopped"
    """The worker is stopping while the database is away: nothing was written, acknowledge nothing."""


@dataclass(slots=True)
class WriteResult:
    """What every database batch writer reports (:class:`pipeline.agents.dbwriter.BatchWriter`)."""

    dead: list[tuple[bytes | None, bytes]] = field(default_factory=list)  # (original key, dead letter)
    dead_reasons: list[str] = field(default_factory=list)  # the letters' error codes, for the metrics
    attempts: int = 0  # statements tried, failed ones included
    outcome: WriteOutcome = WriteOutcome.COMMITTED

    @property
    def committed(self) -> bool:
        """True when the batch may be acknowledged (after its dead letters are published)."""
        return self.outcome is WriteOutcome.COMMITTED


@dataclass(slots=True)
class SinkResult(WriteResult):
    """What one sink batch did: rows inserted, events stored, dead letters."""

    inserted: int = 0
    events: int = 0


@dataclass(slots=True)
class OpensResult(WriteResult):
    """What one page-opens batch did: valid opens, rows changed, dead letters."""

    opens: int = 0
    updated: int = 0
