"""Faust's table manager starts without its fixed one-second sleep.

``faust.tables.TableManager.on_start`` begins with ``await self.sleep(1.0)``, then registers the
tables' changelog channels, starts the recovery service and sets the event the conductor waits for
before it subscribes the consumer. The second gives agents that declare tables while they start a
chance to do so before the set is closed (after it, ``TableManager.add`` raises "Too late to add
tables"). This app declares every table in :class:`pipeline.app.StreamApp`'s constructor, before
Faust starts (``agents/topology.py``), so the second is pure waiting: every worker start, and
therefore every replacement of a killed worker, subscribed one second later than it could.

Issue 27's campaign measured what that costs: with one worker killed, no row can be written until
its replacement has started, joined the group (quirk 1) and recovered, all inside the 13 s bound;
the second is a fixed part of that at any load (``docs/guarantees.md``, "Ninth campaign").

:func:`install` replaces ``on_start`` with the same steps without the sleep. A table added after
the start still fails loudly, as it would a second later with stock Faust.
"""

from __future__ import annotations

import inspect
from typing import Any

from faust.tables.manager import TableManager

from pipeline.internals import CompatError, installed_versions, require

PATCH = "table-start"
_MARK = "_volunteer_starts_without_sleep"
_STOCK_STEPS = ("self.sleep(1.0)", "self._update_channels()", "self.recovery.start()")
"""What the stock ``on_start`` does, in its source: the patch refuses a Faust whose method differs."""


def installed() -> bool:
    return bool(getattr(TableManager.on_start, _MARK, False))


def install() -> None:
    """Replace ``TableManager.on_start`` once per process (module doc)."""
    if installed():
        return
    require(PATCH, TableManager, "recovery", own_methods=("on_start", "_update_channels"))
    stock = TableManager.on_start
    source = inspect.getsource(stock)
    missing = [step for step in _STOCK_STEPS if step not in source]
    if missing:
        raise CompatError(f"compat patch {PATCH}: faust's TableManager.on_start no longer does "
                          f"{', '.join(missing)} ({installed_versions()})")

    async def on_start(self: Any) -> None:
        if not self.should_stop:  # the stock method's steps, without the second before them
            await self._update_channels()
            await self.recovery.start()

    setattr(on_start, _MARK, True)
    on_start.__wrapped__ = stock  # type: ignore[attr-defined]
    setattr(TableManager, "on_start", on_start)  # noqa: B010 (a method, patched)
