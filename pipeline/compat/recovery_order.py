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
:mod:`pipeline.compat.fastdrain` refuses to install unless this did (:func:`installed`).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from faust.tables.recovery import Recovery

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


def installed() -> bool:
    """True once Faust's ``Recovery`` carries the correction (in this process)."""
    return bool(getattr(getattr(Recovery, "on_recovery_completed", None), _MARK, False))


def install() -> None:
    """Patch Faust's ``Recovery`` once per process; :class:`CompatError` if the step is not the
    coroutine ``on_recovery_completed(self, generation_id=0)`` this corrects."""
    if installed():
        return
    require(PATCH, Recovery, methods=("on_recovery_completed",))
    current = Recovery.on_recovery_completed
    if not inspect.iscoroutinefunction(current) or list(inspect.signature(current).parameters) != [
            "self", "generation_id"]:
        raise CompatError(f"compat patch {PATCH}: faust.tables.recovery.Recovery.on_recovery_completed is not "
                          f"the coroutine (self, generation_id) it corrects ({installed_versions()})")
    setattr(Recovery, "on_recovery_completed", stop_flow_first(current))  # noqa: B010 (a method, patched)
