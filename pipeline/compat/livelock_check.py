"""Faust's livelock detector skips a partition whose position aiokafka is still looking up.

Every ``commit_interval x 2.5`` (7.5 s by default) Faust's consumer runs its livelock detector
(``Consumer._commit_livelock_detector``), which calls ``AIOKafkaConsumerThread.verify_event_path``
for every assigned partition. Past its first checks that method reads the partition's consumer
position as ``tp_state.position`` and treats ``None`` as "not known yet". In aiokafka 0.14 that
property is not optional: it *asserts* that a position exists. A partition has none from its
assignment until its committed offset has been fetched (or reset), and that lookup is one request
to the group coordinator: usually milliseconds, but as long as the broker takes to answer.

Issue 27's fault campaign found it (seed 369652182: two workers paused beyond the session timeout
and the broker frozen for 5.8 s): after the group settled, a worker's offset lookup was held by the
frozen broker when the detector ran; the ``AssertionError`` crashed Faust's consumer service and
the worker exited by itself, at 12:02:09, while its "Failed fetch offsets ... RequestTimedOutError"
came at 12:02:11. Nothing was lost (the worker's records were committed only after their outputs),
but a worker must not die because its broker was slow for a few seconds.

The detector only logs (slow fetches, idle streams, late commits); with no position there is
nothing for it to compare, which is what Faust's own ``committed_offset is not None`` test means.
So :func:`install` wraps ``verify_event_path`` (on ``kafka://`` and ``tansu://`` alike: the
assertion is aiokafka's) to return at once for a partition that has no valid position, or that
aiokafka does not hold (the assignment changing under the timer), and to run Faust's checks
unchanged for every other partition.
"""

from __future__ import annotations

import inspect
from typing import Any

from aiokafka import TopicPartition
from faust.transport.drivers import aiokafka as faust_aiokafka

from pipeline.internals import CompatError, installed_versions, require

PATCH = "livelock-check"
SIGNATURE = ["self", "now", "tp"]
_MARK = "_volunteer_skips_unknown_positions"


def position_known(thread: Any, tp: Any) -> bool:
    """Whether aiokafka holds ``tp`` with a valid position in ``thread``'s consumer (never raises
    on the parts that come and go: no consumer yet, no subscription or assignment between two)."""
    consumer = thread._consumer
    if consumer is None:
        return False
    require(PATCH, consumer, "_subscription")
    subscription = consumer._subscription.subscription
    assignment = subscription.assignment if subscription is not None else None
    if assignment is None:
        return False
    state = assignment.state_value(TopicPartition(tp.topic, tp.partition))
    return state is not None and bool(state.has_valid_position)


def installed() -> bool:
    return bool(getattr(faust_aiokafka.AIOKafkaConsumerThread.verify_event_path, _MARK, False))


def install() -> None:
    """Wrap Faust's ``AIOKafkaConsumerThread.verify_event_path`` once per process (module doc)."""
    if installed():
        return
    thread = faust_aiokafka.AIOKafkaConsumerThread
    require(PATCH, thread, "_consumer", own_methods=("verify_event_path",))
    from aiokafka.consumer.subscription_state import Assignment, SubscriptionState, TopicPartitionState

    require(PATCH, SubscriptionState, "subscription")
    require(PATCH, Assignment, methods=("state_value",))
    require(PATCH, TopicPartitionState, "has_valid_position")
    current = thread.verify_event_path
    if list(inspect.signature(current).parameters) != SIGNATURE:
        raise CompatError(f"compat patch {PATCH}: faust's AIOKafkaConsumerThread.verify_event_path does not take "
                          f"({', '.join(SIGNATURE)}) ({installed_versions()})")

    def verify_event_path(self: Any, now: float, tp: Any) -> None:
        if not position_known(self, tp):
            return None  # its position is being looked up: nothing to verify yet (module doc)
        current(self, now, tp)
        return None

    setattr(verify_event_path, _MARK, True)
    verify_event_path.__wrapped__ = current  # type: ignore[attr-defined]  # Faust's own (its tests call it)
    setattr(thread, "verify_event_path", verify_event_path)  # noqa: B010 (a method, patched)
