"""Which timers a worker registers: the collector's backstop only when the collector is tuned."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from pipeline.agents.context import Counters
from pipeline.agents.timers import register_timers
from pipeline.gcpause import BACKSTOP_EVERY_S, collections_so_far
from pipeline.settings import Settings


class RecordingApp:
    """The two decorators ``register_timers`` uses, recording what they were given."""

    def __init__(self) -> None:
        self.timers: dict[str, tuple[float, Callable[[], Any]]] = {}
        self.conf = SimpleNamespace(timezone=None)

    def timer(self, interval: float, name: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
        def register(fn: Callable[[], Any]) -> Callable[[], Any]:
            self.timers[name] = (interval, fn)
            return fn
        return register

    def crontab(self, cron: str, **kwargs: Any) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
        return lambda fn: fn


def timers_for(settings: Settings) -> dict[str, tuple[float, Callable[[], Any]]]:
    app = RecordingApp()
    ctx: Any = SimpleNamespace(app=app, settings=settings, brain=SimpleNamespace(refreshable=False),
                               counters=Counters())
    register_timers(ctx)
    return app.timers


@pytest.fixture
def no_automatic_collections() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(1_000_000_000, 1_000_000_000, 1_000_000_000)
    yield
    gc.set_threshold(*before)


def test_a_tuned_worker_has_the_collectors_backstop_timer(no_automatic_collections: None) -> None:
    timers = timers_for(Settings(gc_young_threshold=20_000))
    interval, tick = timers["volunteer-gc-backstop"]
    assert interval == BACKSTOP_EVERY_S
    before = collections_so_far()
    asyncio.run(tick())  # nothing was collected since the timer was made: it collects
    assert collections_so_far() > before


def test_pythons_thresholds_have_no_backstop() -> None:
    assert "volunteer-gc-backstop" not in timers_for(Settings(gc_young_threshold=0))
    assert "volunteer-progress" in timers_for(Settings(gc_young_threshold=0))
