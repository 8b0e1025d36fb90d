"""``build_worker``'s process set-up that no integration test can see: the collector's thresholds."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from pipeline import worker as worker_module
from pipeline.settings import Settings


@pytest.fixture(autouse=True)
def _restore_thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """``build_worker`` without a database, a broker, a brain or Faust."""
    monkeypatch.setattr(worker_module, "check_database", lambda settings: None)
    monkeypatch.setattr(worker_module, "prepare_topics", lambda settings: 8)
    monkeypatch.setattr(worker_module, "load_worker_brain", lambda settings, brain_dir: object())
    monkeypatch.setattr(worker_module, "StreamApp", lambda *args, **kwargs: ("app", args, kwargs))
    monkeypatch.setattr(worker_module, "serve_metrics", lambda app: None)
    monkeypatch.setattr(worker_module, "setup_logging", lambda settings: None)


@pytest.mark.parametrize(("young", "expected"), [(20_000, (20_000, 20, 10)), (5_000, (5_000, 20, 10))])
def test_the_worker_sets_its_collector_thresholds(offline: None, young: int, expected: tuple[int, ...]) -> None:
    gc.set_threshold(700, 10, 10)
    app: Any = worker_module.build_worker(Settings(gc_young_threshold=young))
    assert app[0] == "app"
    assert gc.get_threshold() == expected


def test_zero_leaves_pythons_thresholds(offline: None) -> None:
    gc.set_threshold(700, 10, 10)
    worker_module.build_worker(Settings(gc_young_threshold=0))
    assert gc.get_threshold() == (700, 10, 10)


def test_the_default_tunes_the_collector(offline: None) -> None:
    gc.set_threshold(700, 10, 10)
    worker_module.build_worker(Settings())
    assert gc.get_threshold() == (20_000, 20, 10)
