"""The collector's tuning for a long-running worker: the thresholds it sets, 0 leaving Python's, and
the backstop that collects the young generations only when nothing else has."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from pipeline.gcpause import (
    OLDER_THRESHOLDS,
    CollectionBackstop,
    collections_so_far,
    collector_paused,
    tune_for_worker,
)


@pytest.fixture(autouse=True)
def _restore_thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


@pytest.fixture
def no_automatic_collections() -> None:
    """Only the collections a test runs itself (the backstop counts every collection); the collector
    stays enabled, as in a worker."""
    gc.set_threshold(1_000_000_000, 1_000_000_000, 1_000_000_000)


def test_a_worker_collects_after_the_given_young_threshold_and_the_older_ones() -> None:
    assert tune_for_worker(20_000) == (20_000, *OLDER_THRESHOLDS)
    assert gc.get_threshold() == (20_000, 20, 10)


def test_zero_keeps_the_thresholds_in_force() -> None:
    gc.set_threshold(700, 10, 10)
    assert tune_for_worker(0) == (700, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_collections_so_far_counts_every_generation(no_automatic_collections: None) -> None:
    before = collections_so_far()
    gc.collect(0)
    gc.collect(1)
    gc.collect(2)
    assert collections_so_far() == before + 3


def test_the_backstop_collects_the_young_and_middle_generations_when_nothing_was_collected(
        no_automatic_collections: None) -> None:
    backstop = CollectionBackstop()
    middle, full = gc.get_stats()[1]["collections"], gc.get_stats()[2]["collections"]
    assert backstop.tick() is True
    assert gc.get_stats()[1]["collections"] == middle + 1  # gc.collect(1), not a young collection alone
    assert gc.get_stats()[2]["collections"] == full  # never a full one (it would walk the kept states)


def test_the_backstop_frees_a_cycle_the_thresholds_would_leave(no_automatic_collections: None) -> None:
    class Node:
        def __init__(self) -> None:
            self.next: object = self

    backstop = CollectionBackstop()
    node = Node()
    alive = weakref.ref(node)
    del node
    assert alive() is not None  # cyclic garbage: reference counting cannot free it
    assert backstop.tick() is True
    assert alive() is None


def test_the_backstop_waits_while_collections_run_by_themselves(no_automatic_collections: None) -> None:
    backstop = CollectionBackstop()
    gc.collect(0)  # as the thresholds would between two ticks
    before = collections_so_far()
    assert backstop.tick() is False
    assert collections_so_far() == before
    assert backstop.tick() is True  # a quiet interval: it collects
    assert backstop.tick() is True  # and again after the next one (its own collection is not activity)


def test_the_backstop_collects_nothing_while_the_collector_is_paused(no_automatic_collections: None) -> None:
    backstop = CollectionBackstop()
    with collector_paused():
        before = collections_so_far()
        assert backstop.tick() is False
        assert collections_so_far() == before
