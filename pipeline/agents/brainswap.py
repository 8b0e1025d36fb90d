"""Replacing a large brain without stalling the event loop that runs the streams.

The reload already runs in a thread, but two things in it still held the interpreter lock for
hundreds of milliseconds at a time with a 100,000-page brain (bench/brain_refresh_bench.py: a 5 ms
ticker on the loop woke up to 280 ms late, p99 210 ms):

- garbage collections triggered by the build's millions of allocations: a collection walks every
  tracked object of its generations in one C call, whichever thread triggers it. :func:`without_gc`
  keeps the collector paused while the brain is built (nothing it builds is cyclic garbage) and
  moves the result out of the collector's reach before resuming it;
- freeing the old brain: dropping its last reference frees every page, string and dict in one
  C-level cascade, on the event loop thread. :func:`dismantle` empties it piece by piece in a
  thread instead, so the lock changes hands between pieces.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def without_gc(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` with the cyclic garbage collector paused, then everything it built frozen
    (``gc.freeze``) before the collector resumes: otherwise the first allocation after resuming
    starts a young-generation collection that walks every object of the new brain in one go
    (measured: one 170 ms stall per 100,000-page reload)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        result = fn(*args)
        gc.freeze()
        return result
    finally:
        if was_enabled:
            gc.enable()


def unshared(obj: object, holders: int = 1) -> bool:
    """True when nothing but the caller's ``holders`` references holds ``obj``."""
    return sys.getrefcount(obj) <= holders + 2  # + this function's parameter and getrefcount's argument


def dismantle(obj: object) -> int:
    """Empty ``obj``'s dict, list and set attributes item by item; returns how many items.

    Only for an object nobody else uses any more (see :func:`unshared`): afterwards it is empty.
    Each item is freed by its own bytecode step, so another thread can take the interpreter lock
    between items instead of waiting for one long free.
    """
    names: list[str] = list(getattr(obj, "__dict__", {}))
    for cls in type(obj).__mro__:
        names.extend(getattr(cls, "__slots__", ()))
        names.extend(getattr(cls, "__mypyc_attrs__", ()))  # the compiled core's classes have no __slots__
    freed = 0
    for name in names:
        value = getattr(obj, name, None)
        if isinstance(value, dict):
            while value:
                value.popitem()
                freed += 1
        elif isinstance(value, list | set):
            while value:
                value.pop()
                freed += 1
    return freed
