"""Faust's table manager starts without its one-second sleep (pipeline/compat/table_start.py).

The patched ``on_start`` runs on Faust's real ``TableManager`` of a real app; its two steps are
recorded (they need a started consumer and a broker, which every stream test's worker exercises:
a worker whose tables were never registered would never subscribe). A Faust whose ``on_start`` no
longer has the steps the patch replaces is refused."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import faust
import pytest
from faust.tables.manager import TableManager

from pipeline.compat import table_start
from pipeline.internals import CompatError


def _manager(steps: list[str], *, stopping: bool = False) -> Any:
    app = faust.App("table-start-test", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
    app.Table("sessions", partitions=1)
    manager = app.tables

    async def update_channels() -> None:
        steps.append("channels")

    async def sleep(seconds: float, *args: Any, **kwargs: Any) -> None:
        steps.append(f"sleep {seconds}")

    class Recovery:
        async def start(self) -> None:
            steps.append("recovery")

    manager._update_channels = update_channels
    manager.sleep = sleep
    manager._recovery = Recovery()  # what Faust's recovery property would create
    if stopping:
        manager._stopped.set()
    return manager


def test_the_tables_are_registered_then_the_recovery_starts_without_a_sleep() -> None:
    table_start.install()
    steps: list[str] = []
    asyncio.run(_manager(steps).on_start())
    assert steps == ["channels", "recovery"]


def test_the_stock_method_sleeps_first() -> None:
    """What the patch removes: Faust's own method, on the same manager, sleeps one second first."""
    table_start.install()
    steps: list[str] = []
    asyncio.run(TableManager.on_start.__wrapped__(_manager(steps)))  # type: ignore[attr-defined]
    assert steps == ["sleep 1.0", "channels", "recovery"]


def test_a_manager_already_stopping_does_nothing() -> None:
    table_start.install()
    steps: list[str] = []
    asyncio.run(_manager(steps, stopping=True).on_start())
    assert steps == []


def test_install_is_idempotent() -> None:
    table_start.install()
    patched = TableManager.on_start
    table_start.install()
    assert TableManager.on_start is patched
    assert table_start.installed()
    assert "self.sleep(1.0)" in inspect.getsource(patched.__wrapped__)  # type: ignore[attr-defined]


def test_a_changed_faust_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async def different(self: Any) -> None:
        await self.recovery.start()

    monkeypatch.setattr(TableManager, "on_start", different)
    with pytest.raises(CompatError, match=r"table-start.*no longer does self\.sleep"):
        table_start.install()
