"""Idle sessions leave the table after ``session_idle_seconds``: the choice of which, kept pure.

The sweep reads only each value's 19-byte header (see :mod:`pipeline.agents.session_table`), and only
sessions of partitions this worker owns are deleted (a deletion is a changelog write, which must
come from the partition's owner).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from pipeline.agents.session_table import CorruptState, read_header

MIN_SWEEP_S: Final = 0.5
MAX_SWEEP_S: Final = 60.0


def sweep_interval(idle_seconds: float) -> float:
    """How often to sweep: a quarter of the idle time, between half a second and a minute."""
    return min(MAX_SWEEP_S, max(MIN_SWEEP_S, idle_seconds / 4))


def is_idle(value: bytes, cutoff_ms: int, partitions: set[int]) -> int | None:
    """The session's partition if it is idle (last activity before ``cutoff_ms``) and owned, else None."""
    try:
        partition, _offset, activity = read_header(value)
    except CorruptState:
        return None
    if activity < cutoff_ms and partition in partitions:
        return partition
    return None


def idle_sessions(items: Iterable[tuple[bytes, bytes]], cutoff_ms: int,
                  partitions: set[int]) -> list[tuple[bytes, int]]:
    """``(key, partition)`` of every idle session owned here."""
    found = []
    for key, value in items:
        partition = is_idle(value, cutoff_ms, partitions)
        if partition is not None:
            found.append((key, partition))
    return found
