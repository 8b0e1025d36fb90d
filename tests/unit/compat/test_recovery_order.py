"""The recovery-order patch: the consumer's flow is stopped before Faust's last recovery step runs
(that step resumes it after seeking and clearing), applied once, refused when Faust's step changed;
and fastdrain refuses to install without it (that combination lost rows in the crash runs)."""

from __future__ import annotations

import asyncio
from typing import Any

import faust
import pytest
from faust.tables.recovery import Recovery

from pipeline import compat
from pipeline.compat import fastdrain, recovery_order
from pipeline.internals import CompatError
from pipeline.settings import load_settings


class Consumer:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def stop_flow(self) -> None:
        self.calls.append("stop_flow")


class FakeRecovery:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.app = type("App", (), {})()
        self.app.consumer = Consumer(self.calls)


def test_the_flow_is_stopped_before_the_step() -> None:
    async def step(self: Any, generation_id: int = 0) -> None:
        self.calls.append(f"step {generation_id}")

    recovery = FakeRecovery()
    asyncio.run(recovery_order.stop_flow_first(step)(recovery, 7))
    assert recovery.calls == ["stop_flow", "step 7"]


def test_install_patches_faust_once() -> None:
    recovery_order.install()
    patched = Recovery.on_recovery_completed
    assert getattr(patched, "_volunteer_flow_stopped", False)
    assert recovery_order.installed()
    recovery_order.install()
    assert Recovery.on_recovery_completed is patched


def _stock_step() -> Any:
    """Faust's own ``on_recovery_completed`` (the patch keeps it as ``__wrapped__``)."""
    recovery_order.install()
    return Recovery.on_recovery_completed.__wrapped__  # type: ignore[attr-defined]


def test_a_changed_recovery_step_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async def changed(self: Any) -> None:  # a later Faust with another signature
        return None

    monkeypatch.setattr(Recovery, "on_recovery_completed", changed)
    with pytest.raises(CompatError, match=r"recovery-order \(faust #596\): .*on_recovery_completed is not"):
        recovery_order.install()
    assert Recovery.on_recovery_completed is changed  # left alone, not wrapped
    monkeypatch.delattr(Recovery, "on_recovery_completed")
    with pytest.raises(CompatError, match=r"Recovery has no on_recovery_completed\(\)"):
        recovery_order.install()


def test_fastdrain_refuses_when_the_recovery_order_correction_did_not_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real Faust class, its step put back to stock (undone after the test): not corrected."""
    monkeypatch.setattr(Recovery, "on_recovery_completed", _stock_step())
    assert not recovery_order.installed()
    app = faust.App("refuse-unit", broker="kafka://127.0.0.1:1")
    stock_new_consumer = app._new_consumer
    with pytest.raises(CompatError, match="compat patch fastdrain: refusing to install without the recovery-order"):
        fastdrain.install(app)
    assert app._new_consumer == stock_new_consumer  # nothing patched


def test_install_stops_at_the_first_patch_that_cannot_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the one entry: a Faust whose recovery step changed gets neither correction nor fastdrain."""
    async def changed(self: Any) -> None:
        return None

    monkeypatch.setattr(Recovery, "on_recovery_completed", changed)
    app = faust.App("refuse-install", broker="kafka://127.0.0.1:1")
    with pytest.raises(CompatError, match="recovery-order"):
        compat.install(app, load_settings(broker="kafka://127.0.0.1:1"))
    assert "_new_consumer" not in vars(app)  # fastdrain never wrapped the app's consumer factory


def test_install_checks_the_versions_on_real_kafka_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pipeline.internals.metadata.version", lambda dist: "0.0.1")
    app = faust.App("versions-kafka", broker="kafka://127.0.0.1:1")
    with pytest.raises(CompatError, match=r"found faust-streaming 0\.0\.1"):
        compat.install(app, load_settings(broker="kafka://127.0.0.1:1"))


class AioConsumer:
    """The parts of an aiokafka consumer the end-of-recovery seek uses, recording what it is asked."""

    def __init__(self, committed: dict[str, int | None]) -> None:
        self.committed = committed
        self.calls: list[str] = []

    async def seek_to_committed(self) -> dict[str, int | None]:
        self.calls.append("seek_to_committed")
        return dict(self.committed)

    def seek(self, tp: str, offset: int) -> None:
        self.calls.append(f"seek {tp} {offset}")

    async def seek_to_beginning(self, *tps: str) -> bool:
        self.calls.append(f"beginning {sorted(tps)}")
        return True

    async def seek_to_end(self, *tps: str) -> bool:
        self.calls.append(f"end {sorted(tps)}")
        return True


def _is_changelog(tp: str) -> bool:
    return tp.startswith("changelog")


def test_the_seek_moves_back_the_stream_partitions_aiokafka_leaves_alone() -> None:
    """aiokafka seeks only partitions committed above 0; the others stay where their fetcher got,
    past records Faust dropped while the flow was stopped. The changelogs are the recovery's own."""
    consumer = AioConsumer({"turns-0": 40, "turns-1": None, "turns-2": 0, "volunteered-3": None,
                            "changelog-0": None})
    committed = asyncio.run(recovery_order.seek_every_partition(consumer, "earliest", _is_changelog))
    assert committed == consumer.committed  # what Faust reads back is aiokafka's answer
    assert consumer.calls == ["seek_to_committed", "seek turns-2 0", "beginning ['turns-1', 'volunteered-3']"]


def test_the_seek_follows_the_reset_policy_and_does_nothing_more_when_all_are_committed() -> None:
    consumer = AioConsumer({"turns-0": None})
    asyncio.run(recovery_order.seek_every_partition(consumer, "latest", _is_changelog))
    assert consumer.calls == ["seek_to_committed", "end ['turns-0']"]
    consumer = AioConsumer({"turns-0": 5, "changelog-1": None})
    asyncio.run(recovery_order.seek_every_partition(consumer, "earliest", _is_changelog))
    assert consumer.calls == ["seek_to_committed"]


def test_install_patches_the_consumer_threads_seek_once() -> None:
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    recovery_order.install()
    patched = AIOKafkaConsumerThread.seek_to_committed
    assert getattr(patched, "_volunteer_flow_stopped", False)
    recovery_order.install()
    assert AIOKafkaConsumerThread.seek_to_committed is patched
