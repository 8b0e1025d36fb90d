"""Per-session hook state: turn numbering, how far the transcript was read, unreported deliveries.

The hook numbers a session's turns itself (the worker ignores a number at or below the last one
it processed), so the numbers are reserved here *before* publishing: a crash after reserving only
leaves a gap, which the worker accepts, never a reused number. One small JSON file per session,
read and replaced under an exclusive ``flock`` so two hooks of one session cannot interleave.
"""

from __future__ import annotations

import fcntl
import os
import time

from pipeline import jsonlite
from pipeline.hook.private import open_private, private_dir, write_private

try:  # the bare BLAKE2 module: hashlib would also load OpenSSL, a few ms of the hook's start-up
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - other Python builds
    from hashlib import blake2b

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy honours the name)
if TYPE_CHECKING:
    from types import TracebackType
    from typing import Any

RECENT_PROMPTS_KEPT = 16
PENDING_KEPT = 32
SESSION_FILE_MAX_AGE_S = 14 * 24 * 3600.0


def prompt_digest(text: str) -> str:
    return blake2b(text.strip().encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def session_file_name(session_id: str) -> str:
    """A safe file name for any session id (ids are untrusted input)."""
    return blake2b(session_id.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest() + ".json"


class SessionHookState:
    __slots__ = ("file_id", "is_new", "last_turn", "offset", "pending", "pressure", "recent_prompts")

    def __init__(self, last_turn: int = 0, offset: int | None = None, file_id: str | None = None,
                 recent_prompts: list[str] | None = None, pending: list[dict[str, Any]] | None = None,
                 is_new: bool = True, pressure: dict[str, Any] | None = None) -> None:
        self.last_turn = last_turn
        self.offset = offset
        self.file_id = file_id
        self.recent_prompts = recent_prompts if recent_prompts is not None else []
        self.pending = pending if pending is not None else []  # delivery objects not yet acknowledged
        self.is_new = is_new
        self.pressure = pressure  # the context-pressure notice's state (pipeline.hook.pressure); None: never measured

    def to_json(self, session_id: str) -> bytes:
        obj: dict[str, Any] = {
            "session_id": session_id,
            "last_turn": self.last_turn,
            "offset": self.offset,
            "file_id": self.file_id,
            "recent_prompts": self.recent_prompts[-RECENT_PROMPTS_KEPT:],
            "pending": self.pending[-PENDING_KEPT:],
            "updated_ms": int(time.time() * 1000),
        }
        if self.pressure is not None:  # only with the notice on: files stay as they were without it
            obj["pressure"] = self.pressure
        return jsonlite.dumps(obj).encode("utf-8", "surrogatepass")

    @classmethod
    def from_json(cls, data: bytes) -> SessionHookState:
        obj = jsonlite.loads(data)
        if not isinstance(obj, dict):
            raise ValueError("not an object")
        last = obj.get("last_turn")
        offset = obj.get("offset")
        file_id = obj.get("file_id")
        return cls(
            last_turn=last if isinstance(last, int) and last >= 0 else 0,
            offset=offset if isinstance(offset, int) and offset >= 0 else None,
            file_id=file_id if isinstance(file_id, str) else None,
            recent_prompts=[p for p in obj.get("recent_prompts") or [] if isinstance(p, str)],
            pending=[p for p in obj.get("pending") or [] if isinstance(p, dict)],
            is_new=False,
            pressure=obj["pressure"] if isinstance(obj.get("pressure"), dict) else None,
        )

    def reserve(self, count: int) -> list[int]:
        """The next ``count`` turn numbers, now used up."""
        numbers = list(range(self.last_turn + 1, self.last_turn + 1 + count))
        self.last_turn += count
        return numbers

    def remember_prompt(self, text: str) -> None:
        self.recent_prompts.append(prompt_digest(text))
        del self.recent_prompts[:-RECENT_PROMPTS_KEPT]


class SessionStateFile:
    """``with SessionStateFile(dir, channel, session) as f:`` -> ``f.state`` locked; ``f.save()``."""

    def __init__(self, state_dir: str | os.PathLike[str], channel: str, session_id: str) -> None:
        self.dir = os.path.join(os.fspath(state_dir), "sessions", channel)
        self.path = os.path.join(self.dir, session_file_name(session_id))
        self.session_id = session_id
        self.state = SessionHookState()
        self._fd: int | None = None

    def __enter__(self) -> SessionStateFile:
        private_dir(self.dir)
        fd = open_private(self.path + ".lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        try:
            with open(self.path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return self
        try:
            self.state = SessionHookState.from_json(data)
        except (ValueError, TypeError, RecursionError):
            self.state = SessionHookState(is_new=False)  # unreadable: keep going, numbers restart
        return self

    def save(self) -> None:
        write_private(self.path, self.state.to_json(self.session_id))

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:  # noqa: SIM105 - contextlib stays off the hook path
                fcntl.flock(fd, fcntl.LOCK_UN)
            except OSError:
                pass
            os.close(fd)


def sweep_old_sessions(state_dir: str | os.PathLike[str], now: float | None = None,
                       max_age_s: float = SESSION_FILE_MAX_AGE_S) -> int:
    """Delete session files untouched for ``max_age_s`` (run when a new session starts)."""
    now = time.time() if now is None else now
    removed = 0
    root = os.path.join(os.fspath(state_dir), "sessions")
    try:
        channels = [entry.path for entry in os.scandir(root) if entry.is_dir()]
    except OSError:
        return 0
    for channel_dir in channels:
        try:
            entries = list(os.scandir(channel_dir))
        except OSError:
            continue
        names = {entry.name for entry in entries}
        for entry in entries:
            # A session's .json is rewritten on every call; its .lock goes only with it.
            if entry.name.endswith(".lock") and entry.name[:-5] in names:
                continue
            try:
                if now - entry.stat().st_mtime <= max_age_s:
                    continue
                os.unlink(entry.path)
                removed += 1
                if entry.name.endswith(".json"):
                    try:  # noqa: SIM105 - contextlib stays off the hook path
                        os.unlink(entry.path + ".lock")
                    except OSError:
                        pass
            except OSError:
                continue
    return removed
