"""The collector's tuning for a long-running worker: the thresholds it sets, and 0 leaving Python's."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from pipeline.gcpause import OLDER_THRESHOLDS, tune_for_worker


@pytest.fixture(autouse=True)
def _restore_thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_a_worker_collects_after_the_given_young_threshold_and_the_older_ones() -> None:
    assert tune_for_worker(20_000) == (20_000, *OLDER_THRESHOLDS)
    assert gc.get_threshold() == (20_000, 20, 10)


def test_zero_keeps_the_thresholds_in_force() -> None:
    gc.set_threshold(700, 10, 10)
    assert tune_for_worker(0) == (700, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)
