"""The recovery-retry patch: a recovery step that timed out (mode reports it as "stopped") or failed
with a retriable broker error starts the recovery again, with the streams paused; a real stop and
any other error end it as before; applied once, refused when Faust's helper changed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import errors as kafka_errors
from faust.tables.recovery import RebalanceAgain, Recovery, ServiceStopped

from pipeline.compat import recovery_retry
from pipeline.internals import CompatError


class Consumer:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def stop_flow(self) -> None:
        self.calls.append("stop_flow")

    def assignment(self) -> set[str]:
        return {"turns-0", "turns-0-changelog"}

    def pause_partitions(self, tps: set[str]) -> None:
        self.calls.append(f"pause {sorted(tps)}")


class FakeRecovery:
    def __init__(self, *, stopping: bool = False) -> None:
        self.calls: list[str] = []
        self.app = type("App", (), {})()
        self.app.consumer = Consumer(self.calls)
        self.should_stop = stopping
        self._stopped = asyncio.Event()
        self._crashed = asyncio.Event()
        self.signal_recovery_start = asyncio.Event()


def _waiting(raises: BaseException | None) -> Any:
    async def wait(self: Any, coro: Any, timeout: Any = None) -> None:
        self.calls.append(f"step {coro} timeout={timeout}")
        if raises is not None:
            raise raises
    return wait


@pytest.fixture(autouse=True)
def _no_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recovery_retry, "RETRY_DELAY_S", 0.0)


def _run(recovery: FakeRecovery, raises: BaseException | None) -> None:
    async def go() -> None:
        await recovery_retry.retry_timed_out_steps(_waiting(raises))(recovery, "highwaters", 5.0)
    asyncio.run(go())


def test_a_step_that_answers_is_left_alone() -> None:
    recovery = FakeRecovery()
    _run(recovery, None)
    assert recovery.calls == ["step highwaters timeout=5.0"]
    assert not recovery.signal_recovery_start.is_set()


@pytest.mark.parametrize("failure", [ServiceStopped(), kafka_errors.KafkaTimeoutError(),
                                     kafka_errors.RequestTimedOutError(), TimeoutError()])
def test_a_timed_out_step_starts_the_recovery_again_with_the_streams_paused(failure: BaseException) -> None:
    recovery = FakeRecovery()
    with pytest.raises(RebalanceAgain):
        _run(recovery, failure)
    assert recovery.calls == ["step highwaters timeout=5.0", "stop_flow", "pause ['turns-0', 'turns-0-changelog']"]
    assert recovery.signal_recovery_start.is_set()  # the recovery loop starts over at once


def test_a_real_stop_still_ends_the_recovery() -> None:
    recovery = FakeRecovery(stopping=True)
    with pytest.raises(ServiceStopped):
        _run(recovery, ServiceStopped())
    assert "stop_flow" not in recovery.calls and not recovery.signal_recovery_start.is_set()


@pytest.mark.parametrize("failure", [TypeError("a bug"), kafka_errors.IllegalStateError(), RebalanceAgain()])
def test_other_errors_propagate(failure: BaseException) -> None:
    recovery = FakeRecovery()
    with pytest.raises(type(failure)):
        _run(recovery, failure)
    assert "stop_flow" not in recovery.calls


def test_install_patches_faust_once() -> None:
    recovery_retry.install()
    patched = Recovery._wait
    assert recovery_retry.installed()
    recovery_retry.install()
    assert Recovery._wait is patched


def test_a_changed_wait_helper_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async def changed(self: Any, coro: Any) -> None:  # a later Faust with another signature
        return None

    monkeypatch.setattr(Recovery, "_wait", changed)
    with pytest.raises(CompatError, match=r"recovery-retry: .*_wait is not the coroutine"):
        recovery_retry.install()
    assert Recovery._wait is changed
