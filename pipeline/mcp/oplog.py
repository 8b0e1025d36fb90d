"""Op-channel event logging that can never slow down or fail the call it belongs to.

The reference logs each op call's pages fire-and-forget and swallows insert errors
(docs/reference-behaviour.md §8, §10). Here a call only puts its rows on a bounded in-memory queue
(``submit`` never blocks and never raises); one daemon thread writes them to
``context_volunteer_events`` in batches over its own connection:

- a batch that fails is retried a bounded number of times with a short back-off, then dropped;
- when the queue is full (the database has been down for a while), new rows are dropped;
- what was dropped is said on stderr in one line, at most once per :data:`WARN_EVERY_S` seconds,
  and once more when writing works again. Nothing else is printed; no window text is ever kept
  (a row holds the page, its arm, confidence and rationale, and the caller's session and turn);
- rows carry the time of the call, not of the write, so a delayed write still compares correctly
  with ``pages.last_retrieved_at`` in ``volunteer stats``;
- the insert is ``ON CONFLICT DO NOTHING`` on the event identity, so a retried call (same
  ``session_id`` and ``turn``) and a retried batch write each row once.

``close`` waits for the queue to drain for at most a few seconds (the reference's drain waits 5 s),
so a CLI exits promptly even with the database gone.
"""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg

from sinks.db import redact
from sinks.events import OpEvent, insert_op_events_sync, op_event_storable

MAX_PENDING_CALLS = 10_000
"""Calls waiting to be written; beyond this, rows are dropped (counted, warned)."""
MAX_BATCH_CALLS = 500
ATTEMPTS = 3
"""Tries per batch before it is dropped."""
BACKOFF_S = (0.2, 1.0)
"""Pause before the second and third try."""
CONNECT_TIMEOUT_S = 2
STATEMENT_TIMEOUT_MS = 5000
DRAIN_TIMEOUT_S = 5.0
WARN_EVERY_S = 60.0

Warn = Callable[[str], None]


def stderr_line(message: str) -> None:
    """The default warning sink: one line on stderr (never stdout, which may carry a protocol)."""
    try:
        sys.stderr.write(message.replace("\n", " ") + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def rows_for(pages: Sequence[Mapping[str, Any]], session_id: str | None, turn: int | None,
             at: datetime) -> list[OpEvent]:
    """The op rows of one call (§10 row shape): confidence after boost, the page's arm and rationale."""
    return [
        OpEvent(
            source_id=str(p["source_id"]),
            slug=str(p["slug"]),
            confidence=float(p["confidence"]),
            arm=str(p["arm"]),
            rationale=str(p["rationale"]),
            session_id=session_id,
            turn=turn,
            volunteered_at=at,
        )
        for p in pages
    ]


class OpEventLog:
    """A best-effort writer of op rows, one background thread per instance."""

    def __init__(self, database_url: str, *, warn: Warn = stderr_line,
                 max_pending: int = MAX_PENDING_CALLS) -> None:
        self.database_url = database_url
        self._warn = warn
        self._queue: queue.Queue[list[OpEvent] | None] = queue.Queue(maxsize=max_pending)
        self._stop = threading.Event()
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()
        self.written = 0
        """Rows the database accepted (duplicates of a retried call count 0)."""
        self.dropped = 0
        """Rows given up on: queue full, unstorable, or every attempt failed."""
        self._unreported = 0
        self._failing = False
        self._last_warning = 0.0
        self._thread = threading.Thread(target=self._run, name="volunteer-op-events", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ caller side (never blocks)

    def submit(self, pages: Sequence[Mapping[str, Any]], session_id: str | None, turn: int | None,
               at: datetime | None = None) -> bool:
        """Queue one call's rows (already clamped attribution). False when they had to be dropped."""
        if not pages:
            return True
        rows = rows_for(pages, session_id, turn, at or datetime.now(UTC))
        try:
            self._queue.put_nowait(rows)
        except queue.Full:
            self._drop(len(rows), "the queue of unwritten events is full")
            return False
        return True

    def close(self, timeout: float = DRAIN_TIMEOUT_S) -> int:
        """Write what is queued (for at most ``timeout`` seconds), stop; returns rows left unwritten."""
        deadline = time.monotonic() + timeout
        while not self._queue.empty() and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.01)
        self._stop.set()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        self._thread.join(max(0.0, deadline - time.monotonic()) + 0.1)
        left = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item:
                left += len(item)
        if left:
            self._drop(left, "not written before exit", force=True)
        elif self._unreported:
            self._report("not written (see the warning above)", force=True)
        return left

    # ------------------------------------------------------------------ writer thread

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                first = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if first is None:
                break
            batch = list(first)
            for _ in range(MAX_BATCH_CALLS - 1):
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._stop.set()
                    break
                batch.extend(more)
            try:
                self._write(batch)
            except Exception as exc:  # a bug must not end the writer (the queue would only fill up)
                self._disconnect()
                self._drop(len(batch), f"unexpected {type(exc).__name__}")
        self._disconnect()

    def _write(self, batch: list[OpEvent]) -> None:
        rows = [r for r in batch if op_event_storable(r)]
        if len(rows) < len(batch):
            self._drop(len(batch) - len(rows), "a value PostgreSQL cannot store (NUL or a lone surrogate)")
        if not rows:
            return
        error = ""
        for attempt in range(ATTEMPTS):
            if attempt:
                self._stop.wait(BACKOFF_S[min(attempt - 1, len(BACKOFF_S) - 1)])  # no pause once closing
            try:
                conn = self._connection()
                with conn.transaction():
                    inserted = insert_op_events_sync(conn, rows)
            except psycopg.Error as exc:
                error = " ".join(str(exc).split()) or type(exc).__name__
                self._disconnect()
                continue
            with self._lock:
                self.written += inserted
            if self._failing:
                self._failing = False
                self._report("", recovered=True)
            return
        self._failing = True
        self._drop(len(rows), f"cannot write to the database at {redact(self.database_url)}: {error[:200]}")

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(
                self.database_url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
            )
        return self._conn

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    # ------------------------------------------------------------------ warnings

    def _drop(self, rows: int, why: str, *, force: bool = False) -> None:
        with self._lock:
            self.dropped += rows
            self._unreported += rows
        self._report(why, force=force)

    def _report(self, why: str, *, force: bool = False, recovered: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            if not (force or recovered) and self._last_warning and now - self._last_warning < WARN_EVERY_S:
                return  # counted in _unreported, said with the next warning
            dropped, self._unreported = self._unreported, 0
            self._last_warning = now
        if recovered:
            tail = f"; {dropped} event row(s) were dropped meanwhile" if dropped else ""
            self._warn(f"volunteer: op event logging works again{tail}")
        elif dropped:
            self._warn(f"volunteer: warning: op event logging dropped {dropped} event row(s): {why} "
                       "(answers are not affected)")
