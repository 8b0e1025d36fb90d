"""How far behind this worker is on each input partition it owns: the readiness check and the metrics read it.

Kept in the agent layer (not in :mod:`pipeline.worker_metrics`) so that readiness
(:mod:`pipeline.agents.health`) reads it without importing the metrics module above it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeline.internals import internals

if TYPE_CHECKING:
    from pipeline.agents.context import AgentContext


def consumer_lag(app: AgentContext) -> list[tuple[str, int, int]]:
    """``(topic, partition, lag)`` for the input topics' partitions this worker owns.

    The high watermark is the one the consumer saw in its latest Fetch response, which is right on the
    embedded broker too (unlike ListOffsets, quirk 3); a partition not fetched yet is left out. Before
    the group's first commit on a partition the committed offset counts as 0.
    """
    access = internals()
    consumer: Any = access.created_consumer(app.app)
    if consumer is None:
        return []
    settings = app.settings
    topics = {settings.topic_turns, settings.topic_volunteered, settings.topic_page_opens}
    try:
        assigned = [tp for tp in consumer.assignment() if tp.topic in topics]
    except Exception:  # not started, or mid-rebalance
        return []
    committed = access.committed_offsets(consumer)
    out = []
    for tp in sorted(assigned):
        try:
            highwater = consumer.highwater(tp)
        except Exception:
            continue
        if highwater is None or highwater < 0:
            continue
        done = committed.get(tp) or 0
        out.append((tp.topic, tp.partition, max(0, int(highwater) - int(done))))
    return out
