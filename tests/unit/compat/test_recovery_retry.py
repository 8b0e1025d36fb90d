"""The recovery-retry patch: a recovery step that timed out (mode reports it as "stopped") or failed
with a retriable broker error starts the recovery again, with the streams paused; a real stop and
any other error end it as before; applied once, refused when Faust's helper changed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import errors as kafka_errors
from faust.tables.recovery import RebalanceAgain, Recovery, ServiceStopped
from faust.types import TP

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
        self._generation_id = 0


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


# ---------------------------------------------------------------- the wait for the end of the read


CL1 = TP("sessions-changelog", 1)


class ReadingConsumer:
    """The consumer parts ``read_again`` uses, recording the calls."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls
        self.flow_active = True

    def stop_flow(self) -> None:
        self.calls.append("stop_flow")

    def resume_flow(self) -> None:
        self.calls.append("resume_flow")

    async def seek_wait(self, offsets: dict[str, int]) -> None:
        self.calls.append(f"seek {sorted(offsets.items())}")

    def resume_partitions(self, tps: set[str]) -> None:
        self.calls.append(f"resume {sorted(tps)}")

    def assignment(self) -> set[TP]:
        return {CL1}


class ReadingRecovery:
    """A recovery in its changelog read: one partition with ``left`` records still to read."""

    def __init__(self, left: int) -> None:
        self.calls: list[str] = []
        consumer = ReadingConsumer(self.calls)
        calls = self.calls

        class FlowControl:
            def resume(self) -> None:
                calls.append("flow_control.resume")

        class Fetcher:
            async def maybe_start(self) -> None:
                calls.append("fetcher.maybe_start")

        self.app = SimpleApp(consumer, FlowControl(), Fetcher())
        self.should_stop = False
        self._stopped = asyncio.Event()
        self._crashed = asyncio.Event()
        self.signal_recovery_start = asyncio.Event()
        self.signal_recovery_end = asyncio.Event()
        self.active_tps = {CL1}
        self.active_offsets: dict[TP, int | None] = {CL1: 100}
        self.active_highwaters = {CL1: 100 + left}
        self._active_events_received_at: dict[TP, float] = {}

    def need_recovery(self) -> bool:
        return any(self.active_highwaters[tp] - (self.active_offsets[tp] or 0) > 0 for tp in self.active_tps)

    def active_remaining(self) -> dict[TP, int]:
        return {tp: self.active_highwaters[tp] - (self.active_offsets[tp] or 0) for tp in self.active_tps}

    def take(self, offset: int) -> None:
        """A changelog record reached the recovery."""
        self.active_offsets[CL1] = offset
        self._active_events_received_at[CL1] = asyncio.get_running_loop().time()


class SimpleApp:
    def __init__(self, consumer: Any, flow_control: Any, fetcher: Any) -> None:
        self.consumer = consumer
        self.flow_control = flow_control
        self._fetcher = fetcher
        self.conf = type("Conf", (), {"broker_request_timeout": 5.0})()
        self.tables = None  # the stall report reads what it can and says "?" for the rest


async def _faust_wait(self: Any, coro: Any, timeout: Any = None) -> None:
    await coro  # Faust's own helper, reduced to waiting for the coroutine


@pytest.fixture
def quick_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recovery_retry, "STALL_S", 0.3)
    monkeypatch.setattr(recovery_retry, "CHECK_S", 0.02)


def test_a_read_that_keeps_receiving_records_is_left_to_end(quick_watch: None) -> None:
    recovery = ReadingRecovery(left=20)

    async def go() -> None:
        wait = recovery_retry.retry_timed_out_steps(_faust_wait)
        waiting = asyncio.ensure_future(wait(recovery, recovery.signal_recovery_end.wait()))
        for offset in range(101, 121):
            await asyncio.sleep(0.05)  # slower than a check, quicker than the stall time
            recovery.take(offset)
        recovery.signal_recovery_end.set()
        await asyncio.wait_for(waiting, 5)

    asyncio.run(go())
    assert recovery.calls == []


def test_a_read_that_receives_nothing_is_set_going_again_within_the_recovery(quick_watch: None,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    """The stall issue 27's campaign saw: "Resuming flow..." and then no changelog record for minutes.
    Without the watch this wait never ends (the test's timeout fails it); raising RebalanceAgain here
    instead would be swallowed by Faust, which would then resume the streams on a half-read table."""
    recovery = ReadingRecovery(left=5)

    async def go() -> None:
        wait = recovery_retry.retry_timed_out_steps(_faust_wait)
        waiting = asyncio.ensure_future(wait(recovery, recovery.signal_recovery_end.wait()))
        while "resume_flow" not in recovery.calls:  # nothing arrives until the read is set going again
            assert not waiting.done()
            await asyncio.sleep(0.02)
        for offset in range(101, 106):
            recovery.take(offset)
        recovery.signal_recovery_end.set()
        await asyncio.wait_for(waiting, 5)  # ends normally: no RebalanceAgain, no ServiceStopped

    with caplog.at_level("WARNING", logger=recovery_retry.__name__):
        asyncio.run(asyncio.wait_for(go(), 10))
    assert recovery.calls[:6] == ["stop_flow", f"seek {[(CL1, 100)]}", f"resume {[CL1]}", "flow_control.resume",
                                  "resume_flow", "fetcher.maybe_start"]
    warning = next(r.getMessage() for r in caplog.records if "no changelog record" in r.getMessage())
    assert "sessions-changelog[1] at 100/105" in warning  # the stall report names the partition and its read
    assert not recovery.signal_recovery_start.is_set()  # the same recovery goes on, not a new one


def test_a_quiet_read_with_nothing_left_is_not_touched(quick_watch: None) -> None:
    recovery = ReadingRecovery(left=0)

    async def go() -> None:
        wait = recovery_retry.retry_timed_out_steps(_faust_wait)
        waiting = asyncio.ensure_future(wait(recovery, recovery.signal_recovery_end.wait()))
        await asyncio.sleep(0.8)
        recovery.signal_recovery_end.set()
        await asyncio.wait_for(waiting, 5)

    asyncio.run(go())
    assert recovery.calls == []


def test_other_waits_are_not_watched(quick_watch: None) -> None:
    recovery = ReadingRecovery(left=5)

    async def go() -> None:
        wait = recovery_retry.retry_timed_out_steps(_faust_wait)
        await wait(recovery, asyncio.sleep(0.8))  # e.g. the recovery delay: quiet, but not the read

    asyncio.run(go())
    assert recovery.calls == []


# ---------------------------------------------------------------- a retry while the group rebalances


class Group:
    """aiokafka's parts the rebalance checks read: the reassignment flag and the coordinator."""

    def __init__(self) -> None:
        self.reassignment_in_progress = True
        self.rejoins = 0

    def request_rejoin(self) -> None:
        self.rejoins += 1


def _in_a_rebalance(recovery: Any, group: Group) -> None:
    client = type("Client", (), {"_subscription": group, "_coordinator": group})()
    recovery.app.consumer._thread = type("Thread", (), {"_consumer": client,
                                                        "thread_loop": asyncio.get_running_loop()})()
    recovery._generation_id = 7


@pytest.fixture
def quick_follow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recovery_retry, "STALL_S", 0.2)
    monkeypatch.setattr(recovery_retry, "CHECK_S", 0.02)
    monkeypatch.setattr(recovery_retry, "REASSIGNMENT_S", 0.3)


def test_a_step_that_timed_out_during_a_rebalance_leaves_the_recovery_to_the_new_assignment(
        quick_follow: None) -> None:
    """Seed 1561812524: the retry started the recovery of the old assignment while the group was
    rebalancing, and aiokafka then handed it no changelog record. The retry now waits for the new
    assignment, whose ``on_rebalance`` (generation 8 and the start signal) ends the watch."""
    recovery, group = FakeRecovery(), Group()

    async def go() -> tuple[bool, bool]:
        _in_a_rebalance(recovery, group)
        with pytest.raises(RebalanceAgain):
            await recovery_retry.retry_timed_out_steps(_waiting(ServiceStopped()))(recovery, "highwaters", 5.0)
        started_at_once = recovery.signal_recovery_start.is_set()
        await asyncio.sleep(0.1)
        group.reassignment_in_progress = False  # the new assignment arrives: Faust's on_rebalance
        recovery._generation_id = 8
        recovery.signal_recovery_start.set()
        follower = getattr(recovery, recovery_retry._FOLLOWER)
        await asyncio.wait_for(follower, 2)
        recovery.signal_recovery_start.clear()  # Faust's loop takes the signal
        await asyncio.sleep(0.4)  # longer than the settle time: the watch must not start another
        return started_at_once, recovery.signal_recovery_start.is_set()

    started_at_once, started_again = asyncio.run(go())
    assert not started_at_once  # stock retry: True, a recovery on the old assignment
    assert not started_again and group.rejoins == 0


def test_a_rebalance_that_never_finishes_asks_to_rejoin(quick_follow: None,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    recovery, group = FakeRecovery(), Group()

    async def go() -> None:
        _in_a_rebalance(recovery, group)
        with pytest.raises(RebalanceAgain):
            await recovery_retry.retry_timed_out_steps(_waiting(ServiceStopped()))(recovery, "highwaters", 5.0)
        await asyncio.sleep(0.45)
        getattr(recovery, recovery_retry._FOLLOWER).cancel()

    with caplog.at_level("WARNING", logger=recovery_retry.__name__):
        asyncio.run(go())
    assert group.rejoins == 1
    assert any("asking to join the group again" in r.getMessage() for r in caplog.records)
    assert not recovery.signal_recovery_start.is_set()


def test_a_group_that_settles_without_an_assignment_gets_its_recovery_started(quick_follow: None) -> None:
    recovery, group = FakeRecovery(), Group()

    async def go() -> None:
        _in_a_rebalance(recovery, group)
        with pytest.raises(RebalanceAgain):
            await recovery_retry.retry_timed_out_steps(_waiting(ServiceStopped()))(recovery, "highwaters", 5.0)
        group.reassignment_in_progress = False  # and no on_rebalance follows
        await asyncio.wait_for(getattr(recovery, recovery_retry._FOLLOWER), 2)

    asyncio.run(go())
    assert recovery.signal_recovery_start.is_set()  # never left without a recovery


def test_a_quiet_read_during_a_rebalance_is_not_read_again_but_rejoins_when_it_lasts(
        quick_watch: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recovery_retry, "REASSIGNMENT_S", 0.5)
    recovery, group = ReadingRecovery(left=5), Group()

    async def go() -> None:
        _in_a_rebalance(recovery, group)
        wait = recovery_retry.retry_timed_out_steps(_faust_wait)
        waiting = asyncio.ensure_future(wait(recovery, recovery.signal_recovery_end.wait()))
        while not group.rejoins:
            assert not waiting.done()
            await asyncio.sleep(0.02)
        recovery.signal_recovery_end.set()
        await asyncio.wait_for(waiting, 5)

    asyncio.run(asyncio.wait_for(go(), 10))
    assert "seek" not in " ".join(recovery.calls)  # no read again: aiokafka hands nothing out meanwhile
    assert group.rejoins == 1
