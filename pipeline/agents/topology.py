"""The worker's topology as data: which agent reads which topic, writes where, keeps which table,
batches how, and acknowledges when.

:data:`AGENTS` and :data:`TABLES` are the one declaration of it. ``pipeline/app.py`` creates the
topics (:func:`topic_fields`) and tables by iterating it, and :mod:`pipeline.agents.wiring` attaches
one Faust agent per entry, each committing its batches with the protocol object the entry names
(:mod:`pipeline.agents.commit_protocol`). The table in docs/architecture.md, "Topology", is
:func:`markdown_table` (``python -m pipeline.agents.topology`` prints it), and
tests/unit/agents/test_topology.py fails when the two differ.

Topics are named by the :class:`pipeline.settings.Settings` field that holds their name
(``topic_turns`` -> ``turns`` by default), so a deployment can rename them without touching this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pipeline.agents.batching import AdaptiveBatches, DirectBatches, TimedBatches
from pipeline.agents.commit_protocol import Commit, PageOpensCommit, SinkCommit, WindowCommit
from pipeline.agents.page_open_writer import PAGE_OPENS_BATCH_MAX
from pipeline.agents.session_table import SESSION_TABLE
from pipeline.agents.window_batch import WINDOW_BATCH_MAX
from pipeline.internals import internals
from pipeline.settings import Settings


@dataclass(frozen=True, slots=True)
class Batching:
    """How an agent cuts its stream into batches.

    ``adaptive``: whatever is queued, up to ``max_records``, leaving as soon as the queue is empty
    (:class:`pipeline.agents.batching.AdaptiveBatches` over the Faust stream, or, with
    ``direct_delivery`` on, :class:`pipeline.agents.batching.DirectBatches` over the topic's direct
    feed); ``timed``: up to ``max_records`` or what
    arrived within ``within`` seconds (:class:`pipeline.agents.batching.TimedBatches`).
    ``max_records`` and ``within`` are a number or the name of the ``Settings`` field holding it.
    """

    mode: Literal["adaptive", "timed"]
    max_records: int | str
    within: str | None = None

    def size(self, settings: Settings) -> int:
        value = self.max_records if isinstance(self.max_records, int) else getattr(settings, self.max_records)
        return int(value)

    def open(self, stream: Any, settings: Settings) -> AdaptiveBatches | TimedBatches:
        """The batch iterator over ``stream`` (it acknowledges too)."""
        if self.mode == "adaptive":
            return AdaptiveBatches(stream, self.size(settings))
        if self.within is None:
            raise ValueError("timed batching needs `within`")
        return TimedBatches(stream, self.size(settings), float(getattr(settings, self.within)))

    def direct(self, app: Any, topic: Any, settings: Settings) -> DirectBatches | None:
        """The batches of ``topic``'s direct feed, registered now (before the consumer fetches), for
        an adaptive agent when ``settings.direct_delivery`` is on; None: read the Faust stream."""
        if self.mode != "adaptive" or not settings.direct_delivery:
            return None
        return DirectBatches(internals().direct_feed(app, topic, self.size(settings)))

    def describe(self) -> str:
        size = str(self.max_records) if isinstance(self.max_records, int) else f"`{self.max_records}`"
        if self.mode == "adaptive":
            return f"adaptive, up to {size}"
        return f"up to {size} within `{self.within}`"


@dataclass(frozen=True, slots=True)
class TableSpec:
    """A changelog-backed Faust table, keyed and partitioned like the input of the agent that writes it."""

    name: str
    help: str


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """One Faust agent of the worker."""

    name: str
    """The Faust agent's name (also in its logs)."""
    label: str
    """What the picture in docs/architecture.md calls it."""
    input: str
    """``Settings`` field of the topic it consumes."""
    outputs: tuple[str, ...]
    """``Settings`` fields of the topics it publishes to."""
    table: str | None
    """The table whose values it writes, if any."""
    batching: Batching
    commit: type[Commit]
    """The commit protocol object of its batches (it fixes the acknowledgement rule)."""

    @property
    def ack(self) -> str:
        """When a batch's records are acknowledged."""
        return self.commit.ACK_RULE


TABLES: tuple[TableSpec, ...] = (
    TableSpec(SESSION_TABLE, help="Per-session window state (header + SessionState bytes)."),
)

AGENTS: tuple[AgentSpec, ...] = (
    AgentSpec("volunteer-window", "window agent", input="topic_turns", outputs=("topic_volunteered", "topic_dlq"),
              table=SESSION_TABLE, batching=Batching("adaptive", WINDOW_BATCH_MAX), commit=WindowCommit),
    AgentSpec("volunteer-sink", "sink agent", input="topic_volunteered", outputs=("topic_dlq",), table=None,
              batching=Batching("adaptive", "sink_batch_size"), commit=SinkCommit),
    AgentSpec("volunteer-page-opens", "opens agent", input="topic_page_opens", outputs=("topic_dlq",), table=None,
              batching=Batching("timed", PAGE_OPENS_BATCH_MAX, within="sink_flush_seconds"),
              commit=PageOpensCommit),
)


def topic_fields() -> tuple[str, ...]:
    """The ``Settings`` fields of every topic the agents read or write, in order of first mention."""
    seen: dict[str, None] = {}
    for agent in AGENTS:
        for field in (agent.input, *agent.outputs):
            seen.setdefault(field, None)
    return tuple(seen)


def default_topic(field: str) -> str:
    """The topic's name under the default settings (``topic_turns`` -> ``turns``)."""
    return str(Settings.model_fields[field].default)


def markdown_table() -> str:
    """The table of docs/architecture.md, "Topology" (topic names as in the default settings)."""
    lines = ["| agent | consumes | publishes | table | batches | commit | acknowledges a batch |",
             "|---|---|---|---|---|---|---|"]
    for agent in AGENTS:
        outputs = ", ".join(f"`{default_topic(field)}`" for field in agent.outputs)
        table = f"`{agent.table}`" if agent.table else "none"
        lines.append(f"| `{agent.name}` | `{default_topic(agent.input)}` | {outputs} | {table} | "
                     f"{agent.batching.describe()} | `{agent.commit.__name__}` | {agent.ack} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
