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
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import errors as kafka_errors
from faust.tables import recovery as faust_recovery
from faust.tables.recovery import Recovery

from pipeline.internals import CompatError, installed_versions, require

PATCH = "recovery-retry"

RETRY_DELAY_S = 1.0
"""Pause before a recovery starts again, so a broker that refuses at once is not asked in a loop."""

_MARK = "_volunteer_retries_steps"

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
        self.signal_recovery_start.set()
        raise faust_recovery.RebalanceAgain()

    setattr(_wait, _MARK, True)
    _wait.__wrapped__ = wait  # type: ignore[attr-defined]  # Faust's own helper, for tests
    return _wait


def installed() -> bool:
    """True once Faust's ``Recovery`` carries the retry (in this process)."""
    return bool(getattr(getattr(Recovery, "_wait", None), _MARK, False))


def install() -> None:
    """Patch Faust's ``Recovery`` once per process; :class:`CompatError` if ``_wait`` is not the
    coroutine ``(self, coro, timeout=None)`` this wraps or the loop's exceptions are missing."""
    if installed():
        return
    require(PATCH, Recovery, "signal_recovery_start", methods=("_wait", "_restart_recovery"))
    require(PATCH, faust_recovery, "ServiceStopped", "RebalanceAgain")
    current = Recovery._wait
    if not inspect.iscoroutinefunction(current) or list(inspect.signature(current).parameters) != [
            "self", "coro", "timeout"]:
        raise CompatError(f"compat patch {PATCH}: faust.tables.recovery.Recovery._wait is not the coroutine "
                          f"(self, coro, timeout) it wraps ({installed_versions()})")
    setattr(Recovery, "_wait", retry_timed_out_steps(current))  # noqa: B010 (a method, patched)
