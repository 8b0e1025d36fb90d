"""The cyclic garbage collector paused while a brain is loaded.

Loading 100,000 pages allocates millions of objects, none of them cyclic garbage (refcounting frees
every temporary). With the collector on, those allocations trigger hundreds of young collections
and several full ones over the growing heap: about a third of a directory load's CPU
(docs/performance.md, "Brain index"). The collector's state is restored afterwards; freezing the
loaded brain out of later full collections stays the caller's choice (``gc.freeze``; a reload in a
worker does it in :mod:`pipeline.agents.brainswap`).
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
