"""The worker's brain: loaded before the stream starts, reloaded in a thread when PostgreSQL changes.

The window agent reads :attr:`BrainHolder.index` once per batch; a reload builds a complete new
index off the event loop and replaces the attribute in one assignment, so a batch always sees one
consistent brain and the stream never waits for a reload.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg

from pipeline.agents.brainswap import dismantle, unshared, without_gc
from pipeline.braindir import load_brain_dir
from pipeline.core.brain import BrainIndex

log = logging.getLogger(__name__)


class BrainLoadError(RuntimeError):
    """The brain could not be loaded at start (a worker without a brain is useless)."""


class BrainHolder:
    """The current :class:`BrainIndex` and where it comes from (a directory or PostgreSQL)."""

    def __init__(self, index: BrainIndex, *, version: str | None = None, database_url: str | None = None,
                 source_ids: Sequence[str] | None = None, origin: str = "") -> None:
        self.index = index
        self.version = version
        self.database_url = database_url
        self.source_ids = list(source_ids) if source_ids is not None else None
        self.origin = origin
        self.reloads = 0
        self.loaded_at = time.time()
        """When the current index was installed (epoch seconds; metrics show its age)."""
        self.checked_at = self.loaded_at
        """When the brain was last confirmed current (a successful version poll or a load)."""
        self._lock = asyncio.Lock()

    @classmethod
    def from_directory(cls, path: str | Path) -> BrainHolder:
        try:
            index = load_brain_dir(path)
        except (OSError, ValueError) as exc:
            raise BrainLoadError(f"cannot load the brain directory {path}: {exc}") from None
        return cls(index, origin=f"directory {path}")

    @classmethod
    def from_database(cls, database_url: str, source_ids: Sequence[str] | None = None) -> BrainHolder:
        from sinks.brain_pg import load_brain_snapshot
        from sinks.db import redact

        try:
            snap = load_brain_snapshot(database_url, source_ids)
        except (psycopg.Error, OSError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BrainLoadError(f"cannot load the brain from {redact(database_url)}: {first}") from None
        log.info("brain loaded from PostgreSQL: %d pages, %d alias rows, version %s, %.2fs",
                 snap.pages, snap.alias_rows, snap.version, snap.load_seconds)
        return cls(snap.index, version=snap.version, database_url=database_url, source_ids=source_ids,
                   origin="postgresql")

    @property
    def refreshable(self) -> bool:
        return self.database_url is not None

    async def refresh(self) -> bool:
        """Poll the brain version; on a change load the new brain in a thread and swap it in.

        Returns True when a new brain was installed. Errors keep the current brain (logged).
        """
        if self.database_url is None:
            return False
        from sinks.brain_pg import brain_version, load_brain_snapshot

        async with self._lock:
            url = self.database_url
            try:
                version = await asyncio.to_thread(brain_version, url)
                if version == self.version:
                    self.checked_at = time.time()
                    return False
                started = time.monotonic()
                # GC paused while it builds, so no full collection holds the loop up (agents/brainswap.py)
                snap = await asyncio.to_thread(without_gc, _load_ready, load_brain_snapshot, url, self.source_ids)
            except (psycopg.Error, OSError) as exc:
                log.warning("brain refresh failed, keeping the loaded brain: %s", str(exc).strip()[:200])
                return False
            old, self.index = self.index, snap.index  # one assignment: the next batch sees the new brain
            gc.freeze()  # keep the new brain out of full collections
            if unshared(old):  # free the old one piece by piece off the loop, not in one long stall
                await asyncio.to_thread(dismantle, old)
            del old
            self.version = snap.version
            self.reloads += 1
            self.loaded_at = self.checked_at = time.time()
            log.info("brain reloaded: %d pages, %d alias rows, version %s, %.2fs",
                     snap.pages, snap.alias_rows, snap.version, time.monotonic() - started)
            return True


def _load_ready(load: Callable[..., Any], url: str, source_ids: Sequence[str] | None) -> Any:
    """Load a brain snapshot and build the lazy alias view the resolver reads (``BrainIndex.alias_index``)
    in the loading thread, so the first batch after a reload does not build it on the event loop
    (about 66 ms for 100,000 pages)."""
    snap = load(url, source_ids)
    snap.index.alias_index  # noqa: B018 - built on first access; this is that access
    return snap
