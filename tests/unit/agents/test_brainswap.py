"""Brain swapping helpers: the collector is paused only while building, an old brain is emptied
only when nobody else holds it, and emptying leaves nothing behind."""

from __future__ import annotations

import gc

import pytest

from pipeline.agents.brainswap import dismantle, unshared, without_gc
from pipeline.core.brain import BrainIndex
from pipeline.core.pages import Page


def test_without_gc_pauses_the_collector_and_restores_it() -> None:
    seen: list[bool] = []

    def build(n: int) -> list[int]:
        seen.append(gc.isenabled())
        return list(range(n))

    assert gc.isenabled()
    assert without_gc(build, 3) == [0, 1, 2]
    assert seen == [False]
    assert gc.isenabled()


def test_without_gc_restores_the_collector_after_an_error() -> None:
    def fail() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        without_gc(fail)
    assert gc.isenabled()


def test_without_gc_leaves_a_disabled_collector_disabled() -> None:
    gc.disable()
    try:
        without_gc(lambda: None)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_unshared_counts_other_holders() -> None:
    index = BrainIndex.build([Page(1, "people/alice", "Alice Example")])
    assert unshared(index)
    other = index
    assert not unshared(index)
    del other
    assert unshared(index)


def test_dismantle_empties_every_container_of_the_old_brain() -> None:
    pages = [Page(i, f"people/p{i}", f"Person {i}", type="person", frontmatter={"aliases": [f"P{i}"]})
             for i in range(1, 200)]
    index = BrainIndex.build(pages)
    assert index.ids_with_title("person 5")
    freed = dismantle(index)
    assert freed >= 2 * len(pages)  # at least the by-id and by-key maps
    assert not index.ids_with_title("person 5")
    names = getattr(BrainIndex, "__slots__", None) or BrainIndex.__mypyc_attrs__  # type: ignore[attr-defined]
    containers = [getattr(index, name) for name in names]
    containers = [c for c in containers if isinstance(c, dict | list | set)]
    assert containers
    assert all(not c for c in containers)
