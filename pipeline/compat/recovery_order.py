"""Deliver no stream record while Faust finishes a table recovery (it would be thrown away).

Faust (faust-streaming 0.15.3, ``Recovery.on_recovery_completed``) ends a table recovery with:
resume the stream partitions, seek them to the committed offsets, ``flow_control.resume()`` (which
**clears every stream queue**), then ``consumer.resume_flow()``. The consumer's flow was already
running (it was resumed to read the changelogs), so records fetched between the resume of the
partitions and the clear reach the queues and are then thrown away, unacknowledged, while the
fetch position has moved past them. Later records are processed and acknowledged; the dropped ones
are never seen again by this process, so a session's turns are applied with a hole (wrong turn
numbers, wrong dedupe: rows lost and rows invented) and the group's commit stops at the hole (or,
for a one-record hole, passes it). Upstream: faust-streaming issue #596 (open). Found here by
``tests/reliability/test_limits.py::test_sigterm_drains_commits_and_reprocesses_nothing`` (12 to
325 of 607 rows lost or wrong after a restart in about half the runs); it is also what made the
inline drain of docs/performance.md lose rows in the long crash run.

:func:`install` stops the consumer's flow when that step begins. Faust itself resumes it at the
step's end, after the clear, so the first records delivered are those fetched from the committed
offsets the step has just seeked to. Nothing else of the recovery changes.

That holds only if the seek moves *every* stream partition back, and it did not: aiokafka's
``seek_to_committed`` (0.14.0) seeks a partition only when its committed offset is above 0, and
leaves one with no committed offset (or offset 0) wherever its fetcher got to. Faust also drops
the records of a fetch that returns while the flow is stopped (``Consumer.getmany`` then "seeks
back to committed offsets", the same seek), so for such a partition records were fetched, dropped
and never fetched again. A partition has no committed offset while nothing of it was acknowledged
and committed yet, e.g. a first generation shorter than the commit interval (2.8 s), which the
two-worker crash run has when the second worker joins late under load. There 3 of 4 runs at load
10-20 lost rows (62, 57 and 8) of the first turns of one or two ``volunteered`` partitions: the
topic had them, and the sinks never got them (the worker that kept two such partitions through a
rebalance started them at offsets 92 and 57, having delivered nothing of them before; in another
run a new process started one at offset 4).
:func:`install` therefore also makes Faust's ``AIOKafkaConsumerThread.seek_to_committed`` move
such stream partitions to where a new consumer would start (``consumer_auto_offset_reset``: the
beginning here), and one committed at 0 to 0 (:func:`seek_every_partition`). Changelog partitions
are left to the recovery, which seeks them itself. A rewound partition's records are delivered
again, which the window agent (saved offsets) and the sink (idempotent insert) absorb.

:mod:`pipeline.compat.fastdrain` refuses to install unless this did (:func:`installed`).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from faust.tables.recovery import Recovery
from faust.transport.drivers import aiokafka as faust_aiokafka

from pipeline.internals import CompatError, installed_versions, require

PATCH = "recovery-order (faust #596)"

_MARK = "_volunteer_flow_stopped"


def stop_flow_first(step: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """Wrap ``Recovery.on_recovery_completed`` so the consumer delivers nothing until it resumes
    the flow itself (after seeking and clearing)."""

    async def on_recovery_completed(self: Any, generation_id: int = 0) -> None:
        self.app.consumer.stop_flow()
        await step(self, generation_id)

    setattr(on_recovery_completed, _MARK, True)
    on_recovery_completed.__wrapped__ = step  # type: ignore[attr-defined]  # Faust's own step, for tests
    return on_recovery_completed


async def seek_every_partition(consumer: Any, reset: str, is_changelog: Callable[[Any], bool]) -> dict[Any, Any]:
    """aiokafka's ``seek_to_committed``, then move the stream partitions it left alone: committed
    at 0 to 0, never committed to the reset position (``reset``: ``earliest`` or ``latest``).
    Returns the committed offsets, as aiokafka does."""
    committed: dict[Any, Any] = await consumer.seek_to_committed()
    never = []
    for tp, offset in committed.items():
        if is_changelog(tp):
            continue
        if offset == 0:
            consumer.seek(tp, 0)
        elif offset is None or offset < 0:
            never.append(tp)
    if never:
        await (consumer.seek_to_end(*never) if reset == "latest" else consumer.seek_to_beginning(*never))
    return committed


def seek_all(original: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Wrap ``AIOKafkaConsumerThread.seek_to_committed`` so it seeks every stream partition."""

    async def seek_to_committed(self: Any) -> Any:
        consumer = self._ensure_consumer()
        return await self.call_thread(seek_every_partition, consumer, self.app.conf.consumer_auto_offset_reset,
                                      self.consumer._is_changelog_tp)

    setattr(seek_to_committed, _MARK, True)
    seek_to_committed.__wrapped__ = original  # type: ignore[attr-defined]
    return seek_to_committed


def _marked(owner: Any, name: str) -> bool:
    return bool(getattr(getattr(owner, name, None), _MARK, False))


def installed() -> bool:
    """True once Faust's ``Recovery`` and consumer thread carry the correction (in this process)."""
    return _marked(Recovery, "on_recovery_completed") and _marked(faust_aiokafka.AIOKafkaConsumerThread,
                                                                  "seek_to_committed")


def install() -> None:
    """Patch Faust's ``Recovery`` and aiokafka consumer thread once per process; :class:`CompatError`
    (with nothing patched) if the step is not the coroutine ``on_recovery_completed(self,
    generation_id=0)`` this corrects, or the seek not the coroutine ``seek_to_committed(self)``."""
    thread = faust_aiokafka.AIOKafkaConsumerThread
    step_done, seek_done = _marked(Recovery, "on_recovery_completed"), _marked(thread, "seek_to_committed")
    if not step_done:
        require(PATCH, Recovery, methods=("on_recovery_completed",))
        current = Recovery.on_recovery_completed
        if not inspect.iscoroutinefunction(current) or list(inspect.signature(current).parameters) != [
                "self", "generation_id"]:
            raise CompatError(f"compat patch {PATCH}: faust.tables.recovery.Recovery.on_recovery_completed is "
                              f"not the coroutine (self, generation_id) it corrects ({installed_versions()})")
    if not seek_done:
        require(PATCH, thread, methods=("seek_to_committed", "call_thread", "_ensure_consumer"))
        seek = thread.seek_to_committed
        if not inspect.iscoroutinefunction(seek) or list(inspect.signature(seek).parameters) != ["self"]:
            raise CompatError(f"compat patch {PATCH}: faust's AIOKafkaConsumerThread.seek_to_committed is not "
                              f"the coroutine (self) it wraps ({installed_versions()})")
    if not step_done:
        setattr(Recovery, "on_recovery_completed", stop_flow_first(current))  # noqa: B010 (a method, patched)
    if not seek_done:
        setattr(thread, "seek_to_committed", seek_all(seek))  # noqa: B010 (a method, patched)
