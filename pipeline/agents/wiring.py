"""The composition module: attaches the worker's agents, timers and ready log to its Faust app.

Nothing here decides anything. The agents are the entries of :data:`pipeline.agents.topology.AGENTS`
(input topic, batching, commit protocol object), each run by :func:`register_agent`; the order and
the awaits of a batch's commit are in :mod:`pipeline.agents.commit_protocol`; the timers are in
:mod:`pipeline.agents.timers`. Agents never import this module (the app does; the demo, tests and
benches read :data:`READY_MARK`), so the import graph stays one-way (tests/unit/test_import_graph.py).
"""

from __future__ import annotations

import logging
from typing import Any, cast

from pipeline.agents.context import AgentContext
from pipeline.agents.timers import register_timers
from pipeline.agents.topology import AGENTS, AgentSpec

log = logging.getLogger(__name__)

READY_MARK = "ready: owns partitions"
"""Logged (INFO) after every rebalance once recovery is done; the demo and tests wait for it."""


def register_agent(ctx: AgentContext, spec: AgentSpec) -> None:
    """One Faust agent: batches of ``spec.input``, each committed by ``spec.commit``; the agent
    returns when a commit reports the worker stopping with nothing acknowledged."""
    commit = spec.commit(ctx)
    topic = ctx.topics[spec.input]
    direct = spec.batching.direct(ctx.app, topic, ctx.settings)  # registered before anything is fetched

    async def agent(stream: Any) -> None:
        batches = direct if direct is not None else spec.batching.open(stream, ctx.settings)
        async for events in batches:
            if not await commit.commit(events, batches):
                return

    # Faust labels an agent (logs, crash reports) by its function's qualified name: one per agent
    agent.__name__ = agent.__qualname__ = spec.name.replace("-", "_")
    ctx.app.agent(topic, name=spec.name)(agent)


def register_ready_log(ctx: AgentContext) -> None:
    async def on_ready(sender: Any, **_: Any) -> None:
        owned = sorted(ctx.assigned_partitions(ctx.settings.topic_turns))
        log.info("%s %s of %s (%d sessions in the table)", READY_MARK, owned, ctx.settings.topic_turns,
                 len(ctx.table.data))

    ctx.app.on_rebalance_complete.connect(cast(Any, on_ready))


def register_all(ctx: AgentContext) -> None:
    for spec in AGENTS:
        register_agent(ctx, spec)
    register_timers(ctx)
    register_ready_log(ctx)
