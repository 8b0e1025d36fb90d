"""Start a table recovery again when one of its broker steps times out, instead of ending it for good.

Faust (faust-streaming 0.15.3) runs every table recovery in one long-lived task,
``Recovery._restart_recovery``, and awaits each of its broker steps (flush the producer, read the
changelog ends and starts, seek, and at the end seek the streams to their committed offsets) with
``Recovery._wait(step, timeout=broker_request_timeout)``. That helper uses mode's ``wait_first``,
which reports a timeout exactly like a stopping service (``WaitResults(stopped=True)``), so a step
that outlasts the timeout raises ``ServiceStopped`` and the task leaves its loop (``break``): this
and every later recovery of the process never run. The worker stays in its group and keeps its
partitions (the consumer heartbeats on its own), but its streams are never resumed, so it delivers
no record again and logs nothing about it: rows stop arriving until the process is restarted. A
step that fails with a broker error instead (aiokafka's own request timeout, a lost connection)
propagates out of the task and crashes the recovery service.

On the embedded broker the timeout is 5 s (``REQUEST_TIMEOUT_S`` in ``topics/tansu_client.py``,
lowered from Faust's 90 s so a worker reconnects soon after a network partition heals), which a
step can take on two cores at a load average of 9 to 12, where rows were seen to stop arriving in
the two-worker crash run. ``tests/reliability/test_slow_recovery.py`` holds one step's answer 7 s:
without this no worker is ever ready again.

:func:`install` wraps ``Recovery._wait``: when a step timed out while the service is not stopping,
or failed with a retriable broker error, it logs a warning, pauses every assigned partition and
stops the consumer's flow (as Faust does when an assignment arrives), and raises Faust's own
``RebalanceAgain`` with the recovery's start signal set, so the same task starts the recovery of
the same assignment again a second later. Nothing read so far is lost: the changelog read goes on
from the offsets already applied. A stopping or crashed service ends the task as before.

**A retry during a rebalance.** A step often times out because the group is rebalancing (a broker
that froze, a member that left). If the consumer is by then between two assignments
(:func:`pipeline.compat.reassignment.reassigning`), the retry does not start the recovery of the
old assignment: aiokafka would hand it no changelog record until the new assignment arrives (the
campaign's seed 1561812524), and that assignment starts a recovery of its own. The retry leaves
Faust's loop waiting for it (:func:`follow_reassignment`), asks the group to be joined again when
the rebalance has not finished within ``REASSIGNMENT_S``, and starts the recovery itself only if
the group settles with no new assignment, so no path leaves the worker without a recovery. The
read watch below likewise does not read again while the group is between assignments.

**A recovery that receives nothing.** The wait for the changelog read to end
(``_wait(signal_recovery_end.wait())``) has no timeout in Faust: a recovery whose changelog records
never arrive waits for ever, its streams stay paused, and rows stop arriving without an error
(issue 27's campaign saw it once: 5 minutes of Faust's "No event received for active tp ... since
recovery start" after a two-worker run's zombie pause and rebalances under load, with the rows
exact only because the producer had finished). :func:`install` therefore watches that wait: when
no changelog record has reached the recovery (Faust's per-partition receive times) for
``STALL_S`` while records remain to be read, it logs what every part between the broker and the
recovery held (:func:`pipeline.compat.recovery_stall.report`) and sets the read going again within
the same recovery (:func:`read_again`): the consumer's flow is stopped and resumed, the changelogs
are sought again to the offsets the recovery has taken and resumed in Faust and, through the next
fetch, in aiokafka (:mod:`pipeline.compat.changelog_pause`), so whichever of those parts held the
records back is set going again. A recovery that is merely slow (a frozen broker, a loaded machine)
costs one more seek of a read that goes on where it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import errors as kafka_errors
from faust.tables import recovery as faust_recovery
from faust.tables.recovery import Recovery

from pipeline.compat import reassignment, recovery_stall
from pipeline.internals import CompatError, installed_versions, require

PATCH = "recovery-retry"

RETRY_DELAY_S = 1.0
"""Pause before a recovery starts again, so a broker that refuses at once is not asked in a loop."""

STALL_S = 5.0
"""How long a recovery with records still to read may receive no changelog record before it is
started again: the embedded broker's request timeout, within which a Fetch is answered even on two
loaded cores (an empty one after its wait), so a healthy read is never this quiet."""

CHECK_S = 0.5
"""How often the wait for the end of the changelog read looks at the recovery's progress."""

REASSIGNMENT_S = 30.0
"""How long the group may stay between two assignments (partitions revoked, none assigned) before
the worker asks to join it again: far beyond a healthy rebalance here (a 3 s session timeout, the
broker's 2 s join hold, a 5 s request timeout twice), so only one that never finishes is touched."""

_MARK = "_volunteer_retries_steps"
_FOLLOWER = "_volunteer_follows_reassignment"

log = logging.getLogger(__name__)


def retriable(exc: BaseException) -> bool:
    """A broker error a later attempt can get past: a timeout, or one aiokafka marks retriable."""
    if isinstance(exc, (asyncio.TimeoutError, kafka_errors.KafkaTimeoutError)):
        return True
    return isinstance(exc, kafka_errors.KafkaError) and bool(getattr(exc, "retriable", False))


def retry_timed_out_steps(wait: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """Wrap ``Recovery._wait`` (module doc)."""

    async def _wait(self: Any, coro: Any, timeout: Any = None) -> None:
        try:
            if timeout is None and _is_read_end(self, coro):
                await _watched(self, wait(self, coro, timeout))
            else:
                await wait(self, coro, timeout)
            return
        except faust_recovery.ServiceStopped:
            if self.should_stop or self._stopped.is_set() or self._crashed.is_set():
                raise  # really stopping
            reason = f"no broker answer within {timeout} s"
        except Exception as exc:
            if not retriable(exc) or self.should_stop:
                raise
            reason = f"{type(exc).__name__}: {exc}"
        log.warning("table recovery: a step got no broker answer in time (%s); starting the recovery "
                    "again in %.0f s", reason, RETRY_DELAY_S)
        consumer = self.app.consumer
        consumer.stop_flow()
        consumer.pause_partitions(consumer.assignment())
        await asyncio.sleep(RETRY_DELAY_S)
        if reassignment.reassigning(self.app):
            log.warning("table recovery: the group is rebalancing; the new assignment starts the recovery")
            follow_reassignment(self)
        else:
            self.signal_recovery_start.set()
        raise faust_recovery.RebalanceAgain()

    setattr(_wait, _MARK, True)
    _wait.__wrapped__ = wait  # type: ignore[attr-defined]  # Faust's own helper, for tests
    return _wait


def _is_read_end(recovery: Any, coro: Any) -> bool:
    """Whether ``coro`` is the wait for the end of the changelog read (``signal_recovery_end.wait()``)."""
    frame = getattr(coro, "cr_frame", None)
    return frame is not None and frame.f_locals.get("self") is recovery.signal_recovery_end


def _progress(recovery: Any) -> tuple[float, int]:
    """What changes whenever a changelog record reaches the recovery: the latest receive time and
    the sum of the offsets read."""
    received = recovery._active_events_received_at
    offsets = recovery.active_offsets
    return (max(received.values(), default=0.0), sum(v for v in offsets.values() if v is not None))


async def _watched(recovery: Any, waiting: Any) -> None:
    """Run ``waiting`` (Faust's wait for the end of the read) to its end, setting the read going
    again (:func:`read_again`) whenever nothing arrived for ``STALL_S`` with records left."""
    require(PATCH, recovery, "_active_events_received_at", "active_offsets", "active_highwaters", "active_tps")
    task = asyncio.ensure_future(waiting)
    loop = asyncio.get_running_loop()
    seen, since = _progress(recovery), loop.time()
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=CHECK_S)
            if done:
                task.result()  # Faust's own outcome: the read ended, a stop, another rebalance
                return
            now = _progress(recovery)
            if now != seen:
                seen, since = now, loop.time()
                continue
            if loop.time() - since < STALL_S or recovery.should_stop or not recovery.need_recovery():
                continue
            if reassignment.reassigning(recovery.app):
                # Nothing is handed out until the new assignment, which ends this wait (Faust's own
                # RebalanceAgain); reading again would not help. One that never comes: rejoin.
                if loop.time() - since >= REASSIGNMENT_S:
                    _rejoin(recovery, loop.time() - since)
                    since = loop.time()
                continue
            log.warning("table recovery: no changelog record for %.0f s with records still to read; reading "
                        "again from the offsets applied; %s", loop.time() - since, recovery_stall.report(recovery))
            await read_again(recovery)
            seen, since = _progress(recovery), loop.time()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def follow_reassignment(recovery: Any) -> None:
    """Watch, in a task of its own, for the assignment that ends the rebalance a timed-out step's
    retry left the recovery to (module doc): nothing to do once it started a recovery (Faust's
    ``on_rebalance`` moves the recovery's generation and sets its start signal); a rejoin asked
    when it does not come within ``REASSIGNMENT_S``; and the recovery started here after all when
    the group settles without one, so the retry never leaves a worker without a recovery."""
    previous = getattr(recovery, _FOLLOWER, None)
    if previous is not None and not previous.done():
        previous.cancel()
    setattr(recovery, _FOLLOWER, asyncio.ensure_future(_await_assignment(recovery)))


async def _await_assignment(recovery: Any) -> None:
    loop = asyncio.get_running_loop()
    generation = recovery._generation_id
    since, settled = loop.time(), None
    while not recovery.should_stop:
        if recovery.signal_recovery_start.is_set() or recovery._generation_id != generation:
            return  # the new assignment started its recovery
        if reassignment.reassigning(recovery.app):
            settled = None
            if loop.time() - since >= REASSIGNMENT_S:
                _rejoin(recovery, loop.time() - since)
                since = loop.time()
        else:
            # The generation is unchanged, so Faust's loop waits for the start signal: setting it
            # cannot interrupt a read (which Faust would take for its end).
            settled = loop.time() if settled is None else settled
            if loop.time() - settled >= STALL_S:
                log.warning("table recovery: the group settled without a new assignment; starting the "
                            "recovery again")
                recovery.signal_recovery_start.set()
                return
        await asyncio.sleep(CHECK_S)


def _rejoin(recovery: Any, waited_s: float) -> None:
    asked = reassignment.request_rejoin(recovery.app)
    log.warning("table recovery: the group has been rebalancing for %.0f s without a new assignment; %s",
                waited_s, "asking to join the group again" if asked else "cannot ask to rejoin (no consumer)")


async def read_again(recovery: Any) -> None:
    """Set a stalled changelog read going again, within the same recovery (module doc).

    Not by raising ``RebalanceAgain`` as for a timed-out step: Faust's wait for the end of the read
    catches every exception and goes on as if the read had ended (``_restart_recovery``), which
    would resume the streams on a half-read table. Instead the consumer's flow is stopped (anything
    a delivery waits on is released, and records fetched meanwhile are dropped), the changelogs are
    sought back to the offsets the recovery has taken (what it had not taken is fetched again;
    records it sees twice it skips by offset), and the partitions and flow are resumed as the
    recovery itself does when the read begins.
    """
    app = recovery.app
    consumer = app.consumer
    tps = set(recovery.active_tps)
    consumer.stop_flow()
    await asyncio.sleep(RETRY_DELAY_S)
    offsets = {tp: max(0, recovery.active_offsets[tp] if recovery.active_offsets[tp] is not None else 0)
               for tp in tps}
    try:
        await asyncio.wait_for(consumer.seek_wait(offsets), timeout=app.conf.broker_request_timeout)
    except Exception as exc:  # the positions stay where they were; the next check tries again
        log.warning("table recovery: seeking the changelogs again failed (%s: %s)", type(exc).__name__, exc)
    consumer.resume_partitions(tps)
    app.flow_control.resume()
    consumer.resume_flow()
    await app._fetcher.maybe_start()


def installed() -> bool:
    """True once Faust's ``Recovery`` carries the retry (in this process)."""
    return bool(getattr(getattr(Recovery, "_wait", None), _MARK, False))


def install() -> None:
    """Patch Faust's ``Recovery`` once per process; :class:`CompatError` if ``_wait`` is not the
    coroutine ``(self, coro, timeout=None)`` this wraps or the loop's exceptions are missing."""
    if installed():
        return
    require(PATCH, Recovery, "signal_recovery_start", "signal_recovery_end", "_generation_id",
            methods=("_wait", "_restart_recovery", "need_recovery"))
    require(PATCH, faust_recovery, "ServiceStopped", "RebalanceAgain")
    current = Recovery._wait
    if not inspect.iscoroutinefunction(current) or list(inspect.signature(current).parameters) != [
            "self", "coro", "timeout"]:
        raise CompatError(f"compat patch {PATCH}: faust.tables.recovery.Recovery._wait is not the coroutine "
                          f"(self, coro, timeout) it wraps ({installed_versions()})")
    setattr(Recovery, "_wait", retry_timed_out_steps(current))  # noqa: B010 (a method, patched)
