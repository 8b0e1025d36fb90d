"""The cyclic garbage collector paused while a brain is loaded, and tuned for a long-running worker.

Loading 100,000 pages allocates millions of objects, none of them cyclic garbage (refcounting frees
every temporary). With the collector on, those allocations trigger hundreds of young collections
and several full ones over the growing heap: about a third of a directory load's CPU
(docs/performance.md, "Brain index"). The collector's state is restored afterwards; freezing the
loaded brain out of later full collections stays the caller's choice (``gc.freeze``; a reload in a
worker does it in :mod:`pipeline.agents.brainswap`). A worker also collects less often than Python's
defaults (:func:`tune_for_worker`).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the collector for the ``with`` block (a no-op when it is already off)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


OLDER_THRESHOLDS = (20, 10)
"""The middle and old generations' thresholds a long-running worker uses (Python's: 10 and 10). The
old one stays Python's.

Off by default (``gc_young_threshold`` 0): with any raised young threshold tried (5,000 or 20,000,
old 10 or 100) the worker's peak memory under a slow database's back pressure grew by up to
39-41 MiB in some runs, where Python's thresholds gave 24-29 (``tests/reliability/test_db_outage.py``
allows 38): garbage of the fetched records waits longer for a collection."""


def tune_for_worker(young: int) -> tuple[int, ...]:
    """Collect less often in a long-running worker; returns the thresholds now in force.

    A worker allocates a few tracked objects per turn that live for a batch (its records, outputs,
    the states it decided) and keeps up to 20,000 decoded session states between batches. With
    Python's thresholds (700, 10, 10) the batch's objects were walked by young and middle
    collections while still alive and promoted, and every few tens of thousands of turns a full
    collection walked the whole cache of states (200-300 ms each): about 2 s of collection in a
    60,000-turn burst that found almost no cyclic garbage (a few hundred objects). A young threshold
    of ``young`` net allocations lets most of a batch die by reference counting before any
    collection sees it, and a middle collection comes after 20 young ones instead of 10; a full
    collection (the only one that walks the kept states) still needs 10 middle ones and Python's
    rule that the old generation has grown by a quarter since the last. Cycles are still
    collected, only later; ``young`` 0 keeps Python's thresholds.
    """
    if young > 0:
        gc.set_threshold(young, *OLDER_THRESHOLDS)
    return gc.get_threshold()
