"""The hook's heartbeat: per channel, calls, what was printed and reported, and when.

One small JSON file (``<state dir>/heartbeat.json``) updated at the end of every call, so the
doctor can tell "installed but never called" from "called but never delivered", and reconcile
the pages the hook printed with the rows in ``context_volunteer_events``. Counters, codes and
durations only: never prompt text or slugs. Updating never raises and never waits long for the
lock (a busy lock skips one update rather than delay the prompt).
"""

from __future__ import annotations

import fcntl
import os
import time

from pipeline import jsonlite
from pipeline.hook.private import open_private, private_dir, write_private

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy honours the name)
if TYPE_CHECKING:
    from typing import Any

HEARTBEAT_FILE = "heartbeat.json"
DAYS_KEPT = 14
RECENT_KEPT = 50
LOCK_TRIES = 20
LOCK_PAUSE_S = 0.001
COUNTERS = ("calls", "printed_calls", "pages_printed", "pages_reported")
DAY_MS = 86_400_000


class CallRecord:
    """What one hook call did (filled in as the call goes)."""

    __slots__ = ("channel", "duration_ms", "outcome", "pages_printed", "pages_reported", "reason", "warmup")

    def __init__(self, channel: str, outcome: str = "error", reason: str | None = None, pages_printed: int = 0,
                 pages_reported: int = 0, duration_ms: float = 0.0, warmup: str | None = None) -> None:
        self.channel = channel
        self.outcome = outcome  # ok | nothing | degraded | error
        self.reason = reason
        self.pages_printed = pages_printed
        self.pages_reported = pages_reported
        self.duration_ms = duration_ms
        self.warmup = warmup  # why the transcript warm-up was skipped (transcript_symlink, ...), if it was


def heartbeat_path(state_dir: str | os.PathLike[str]) -> str:
    return os.path.join(os.fspath(state_dir), HEARTBEAT_FILE)


def day_key(ms: int) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(ms / 1000))


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            obj = jsonlite.loads(fh.read())
    except (OSError, ValueError, RecursionError):
        return {"version": 1, "channels": {}}
    if not isinstance(obj, dict) or not isinstance(obj.get("channels"), dict):
        return {"version": 1, "channels": {}}
    return obj


def apply_call(data: dict[str, Any], call: CallRecord, now_ms: int) -> None:
    """Fold one call into the heartbeat object (pure; exposed for tests)."""
    channels: dict[str, Any] = data.setdefault("channels", {})
    ch: dict[str, Any] = channels.setdefault(call.channel, {})
    for name in COUNTERS:
        ch[name] = int(ch.get(name, 0))
    ch["calls"] += 1
    ch.setdefault("first_call_ms", now_ms)
    ch["last_call_ms"] = now_ms
    ch["last_outcome"] = call.outcome
    ch["last_reason"] = call.reason
    ch["last_duration_ms"] = round(call.duration_ms, 1)
    if call.pages_printed:
        ch["printed_calls"] += 1
        ch["pages_printed"] += call.pages_printed
        ch["last_delivery_ms"] = now_ms
    ch["pages_reported"] += call.pages_reported
    ch["last_warmup_skipped"] = call.warmup
    if call.warmup:
        skipped: dict[str, int] = ch.setdefault("warmup_skipped", {})
        skipped[call.warmup] = int(skipped.get(call.warmup, 0)) + 1
    reasons: dict[str, int] = ch.setdefault("reasons", {})
    code = call.reason or call.outcome
    reasons[code] = int(reasons.get(code, 0)) + 1
    recent: list[Any] = ch.setdefault("recent", [])
    recent.append([now_ms, round(call.duration_ms, 1), call.outcome, call.reason])
    del recent[:-RECENT_KEPT]
    days: dict[str, Any] = ch.setdefault("days", {})
    today = days.setdefault(day_key(now_ms), {})
    today["calls"] = int(today.get("calls", 0)) + 1
    if call.pages_printed:
        today["printed_calls"] = int(today.get("printed_calls", 0)) + 1
        today["pages_printed"] = int(today.get("pages_printed", 0)) + call.pages_printed
    if call.pages_reported:
        today["pages_reported"] = int(today.get("pages_reported", 0)) + call.pages_reported
    oldest = day_key(now_ms - DAYS_KEPT * DAY_MS)
    for key in [k for k in days if k < oldest]:
        del days[key]


def record_call(state_dir: str | os.PathLike[str], call: CallRecord, now_ms: int | None = None) -> bool:
    """Add one call to the heartbeat file; False if it could not (never raises)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    path = heartbeat_path(state_dir)
    try:
        private_dir(os.fspath(state_dir))
        fd = open_private(path + ".lock")
    except OSError:
        return False
    try:
        for _ in range(LOCK_TRIES):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                time.sleep(LOCK_PAUSE_S)
        else:
            return False
        data = _load(path)
        apply_call(data, call, now_ms)
        write_private(path, jsonlite.dumps(data).encode("utf-8"))
        return True
    except OSError:
        return False
    finally:
        try:  # noqa: SIM105 - contextlib stays off the hook path
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            pass
        os.close(fd)


def read_heartbeat(state_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The whole heartbeat object (empty channels when there is none)."""
    return _load(heartbeat_path(state_dir))


def totals_since(channel_data: dict[str, Any], days: int, now_ms: int | None = None) -> dict[str, int]:
    """Counter sums over the last ``days`` calendar days (UTC, today included)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    first = day_key(now_ms - (days - 1) * DAY_MS)
    out = dict.fromkeys(COUNTERS, 0)
    for key, counts in (channel_data.get("days") or {}).items():
        if key >= first and isinstance(counts, dict):
            for name in COUNTERS:
                out[name] += int(counts.get(name, 0))
    return out
