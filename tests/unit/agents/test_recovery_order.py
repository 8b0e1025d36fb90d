"""The recovery-order patch: the consumer's flow is stopped before Faust's last recovery step runs
(that step resumes it after seeking and clearing), applied once, only to the pinned Faust."""

from __future__ import annotations

import asyncio
from typing import Any

from faust.tables.recovery import Recovery

from pipeline.agents import recovery_order


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
    assert recovery_order.install()
    patched = Recovery.on_recovery_completed
    assert getattr(patched, "_volunteer_flow_stopped", False)
    assert recovery_order.install()
    assert Recovery.on_recovery_completed is patched
