"""The cyclic garbage collector paused while a brain is loaded, and tuned for a long-running worker.

Loading 100,000 pages allocates millions of objects, none of them cyclic garbage (refcounting frees
every temporary). With the collector on, those allocations trigger hundreds of young collections
and several full ones over the growing heap: about a third of a directory load's CPU
(docs/performance.md, "Brain index"). The collector's state is restored afterwards; freezing the
loaded brain out of later full collections stays the caller's choice (``gc.freeze``; a reload in a
worker does it in :mod:`pipeline.agents.brainswap`). A worker also collects less often than Python's
defaults (:func:`tune_for_worker`, on by default), with a timer that collects the young generations
when none has been collected for a while (:class:`CollectionBackstop`).
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
old one stays Python's."""

BACKSTOP_EVERY_S = 30.0
"""How often a tuned worker checks that some collection ran (:class:`CollectionBackstop`)."""


def tune_for_worker(young: int) -> tuple[int, ...]:
    """Collect less often in a long-running worker; returns the thresholds now in force.

    A worker allocates a few tracked objects per turn that live for a batch (its records, outputs,
    the states it decided) and keeps up to 20,000 decoded session states between batches. With
    Python's thresholds (700, 10, 10) the batch's objects were walked by young and middle
    collections while still alive and promoted, and every few tens of thousands of turns a full
    collection walked the whole cache of states (200-300 ms each): about 2 s of collection in a
    60,000-turn burst. A young threshold of ``young`` net allocations lets most of a batch die by
    reference counting before any collection sees it, and a middle collection comes after 20 young
    ones instead of 10; a full collection (the only one that walks the kept states) still needs 10
    middle ones and Python's rule that the old generation has grown by a quarter since the last.
    ``young`` 0 keeps Python's thresholds.

    Collecting later costs no memory here because the worker makes next to no cyclic garbage: with
    every collection's unreachable objects saved (``gc.DEBUG_SAVEALL``) and a full collection
    forced every 2 s, a 30,000-turn burst and the slow database's back pressure
    (``tests/reliability/test_db_outage.py``, 60,000 fetched records waiting) left 0 unreachable
    objects in each 2 s after start-up (20-180 before it, 40 at the end). Everything the fetch,
    delivery and sink paths drop is freed by reference counting, whatever the thresholds; that test's
    peak growth was the same with Python's thresholds and (20,000, 20, 10) in alternated runs
    (docs/performance.md). What is left to a collection is rare (an error's traceback, a rebalance),
    and :class:`CollectionBackstop` bounds how long it waits in a worker that allocates slowly.
    """
    if young > 0:
        gc.set_threshold(young, *OLDER_THRESHOLDS)
    return gc.get_threshold()


def collections_so_far() -> int:
    """Collections of any generation this process has run (``gc.get_stats``)."""
    return sum(generation["collections"] for generation in gc.get_stats())


class CollectionBackstop:
    """A young and middle collection when none has run for a while (a tuned worker's timer).

    Python's thresholds count net allocations, not time: a worker that is waiting (an idle stream,
    a database outage's retries, back pressure) allocates slowly, so with a raised young threshold
    a cycle made then (an exception whose traceback holds the frame that caught it, a cancelled
    task) could wait minutes for the next collection, with whatever it holds. :meth:`tick`, called
    every :data:`BACKSTOP_EVERY_S`, runs ``gc.collect(1)`` only if no collection ran since the
    previous tick, so a busy worker (several young collections a second in a burst) never
    pays for it, and an idle one walks its few young objects twice a minute. The old generation
    is left to Python's rule: a full collection would walk the kept session states (200-300 ms).
    Nothing runs while the collector is paused (:func:`collector_paused`, a brain load).
    """

    def __init__(self) -> None:
        self._seen = collections_so_far()

    def tick(self) -> bool:
        """Collect the young and middle generations if nothing was collected since the last tick;
        True when it did."""
        seen, self._seen = self._seen, collections_so_far()
        if self._seen != seen or not gc.isenabled():
            return False
        gc.collect(1)
        self._seen = collections_so_far()
        return True
