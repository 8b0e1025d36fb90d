"""What a table recovery that stopped receiving changelog records was waiting on, in one log line.

Issue 27's campaign saw a worker whose recovery logged "Restoring state ... Resuming flow..." and
then received no changelog record for five minutes (Faust's own "No event received for active tp
... since recovery start"), so its streams were never resumed; the run's logs could not tell which
of the parts between the broker and the recovery held the records back. :func:`report` reads every
one of them at the moment :mod:`pipeline.compat.recovery_retry` decides the recovery is stalled, so
the next occurrence names its cause:

- per changelog partition still to read: its offset and highwater (Faust's recovery), whether
  Faust reads it (active, paused, buffered), and what aiokafka has for it (assigned, paused, its
  fetch position, records fetched and not taken);
- the consumer: its flow (Faust's ``flow_active``, ``suspend_flow``), Faust's flow control, the
  Fetcher service and its drain task, aiokafka's fetcher (Fetch requests in flight, pending
  tasks, a reassignment in progress), and the changelog queue's length.

Only reads; a part this Faust or aiokafka does not have is reported as ``?``, since a diagnostic
that raised would turn a stalled recovery into a crashed one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from pipeline.compat import reassignment


def _safe(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception:  # diagnostics only (module doc)
        return "?"


def _tp_state(client: Any, tp: Any) -> str:
    if client is None:
        return "aiokafka ?"
    subscription = client._subscription.subscription
    assignment = None if subscription is None else subscription.assignment
    if assignment is None:
        return "aiokafka: no assignment"
    from aiokafka.structs import TopicPartition

    state = assignment.state_value(TopicPartition(tp.topic, tp.partition))
    if state is None:
        return "aiokafka: not assigned"
    buffered = TopicPartition(tp.topic, tp.partition) in client._fetcher._records
    return (f"aiokafka: {'paused' if state.paused else 'fetching'}, position {state.position}, "
            f"highwater {state.highwater}{', records not taken' if buffered else ''}")


def _faust_view(consumer: Any, tp: Any) -> str:
    views = []
    if tp in consumer._active_partitions:
        views.append("active")
    if tp in consumer._paused_partitions:
        views.append("paused")
    if tp in consumer._buffered_partitions:
        views.append("buffered")
    return "faust: " + ("/".join(views) or "not read")


def _partition_line(recovery: Any, client: Any, tp: Any) -> str:
    offset, highwater = recovery.active_offsets.get(tp), recovery.active_highwaters.get(tp)
    faust = _safe(functools.partial(_faust_view, recovery.app.consumer, tp))
    aiokafka = _safe(functools.partial(_tp_state, client, tp))
    return f"{tp.topic}[{tp.partition}] at {offset}/{highwater}: {faust}; {aiokafka}"


def report(recovery: Any) -> str:
    """The stalled recovery's partitions still to read and the consumer's state (module doc); never raises."""
    try:
        return _report(recovery)
    except Exception as exc:  # diagnostics only (module doc)
        return f"stall report failed: {type(exc).__name__}: {exc}"


def _report(recovery: Any) -> str:
    app = recovery.app
    consumer = app.consumer
    client = _safe(lambda: reassignment.aiokafka_client(app))
    remaining = _safe(lambda: {tp: n for tp, n in recovery.active_remaining().items() if n > 0})
    parts = []
    if isinstance(remaining, dict):
        for tp in sorted(remaining, key=str):
            parts.append(_safe(functools.partial(_partition_line, recovery, client, tp)))
    else:
        parts.append("partitions to read: ?")
    fetcher = _safe(lambda: app._fetcher)
    fetcher_state = _safe(lambda: f"started {fetcher._started.is_set()}, crashed {fetcher._crashed.is_set()}, "
                                  f"tasks running {sum(1 for f in fetcher._futures if not f.done())}")
    parts.append(f"consumer flow {'active' if _safe(lambda: consumer.flow_active) is True else 'stopped'} "
                 f"(suspend_flow {_safe(lambda: consumer.suspend_flow.is_set())}), flow control "
                 f"{_safe(lambda: app.flow_control.is_active())}, fetcher service {fetcher_state}")
    parts.append(f"aiokafka fetcher: in flight {_safe(lambda: len(client._fetcher._in_flight))}, pending tasks "
                 f"{_safe(lambda: len(client._fetcher._pending_tasks))}, reassignment in progress "
                 f"{_safe(lambda: client._subscription.reassignment_in_progress)}, buffered partitions "
                 f"{_safe(lambda: len(client._fetcher._records))}")
    parts.append(f"changelog queue {_safe(lambda: app.tables.changelog_queue.qsize())}")
    return "; ".join(parts)
