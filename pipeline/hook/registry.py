"""Where hooks find workers: one small file per running worker in ``<state dir>/workers/``.

A fixed port is not enough: a port can be taken, a worker can be told to use any free one
(``--web-port 0``), and several stacks can run on one machine. So each worker with its web server
on writes its **advertised URL** to ``<state dir>/workers/<stack key>.<pid>.json`` (0600, in a
0700 directory), touches it every :data:`HEARTBEAT_S` seconds and removes it on a clean exit. A
hook reads the entries of its stack, skips stale ones (process gone, or not touched for
:data:`STALE_S`), and tries the freshest first within its deadline (:mod:`pipeline.hook.user_prompt`).

**Which stack.** The stack key is a digest of the broker and the app id (consumer group). A hook
knows them from the same variables as the worker: ``VOLUNTEER_BROKER`` and ``VOLUNTEER_APP_ID``
(``volunteer bootstrap`` can bake them into the hook command). A hook that names no broker takes
the workers of its app id (default ``volunteer-stream``) — the default stack — but only when they
all share one broker: with two brokers and the same app id it cannot tell which stack is meant and
prints nothing (heartbeat reason ``ambiguous_stack``) rather than send the prompt to the wrong one.

Light on purpose (the hook process imports it): :mod:`pipeline.jsonlite`, ``_blake2``, ``_socket`` and
``os`` only.
"""

from __future__ import annotations

import os
import stat
import time
from _socket import gethostname  # socket.gethostname, without socket.py (enum, selectors)

from pipeline import jsonlite

try:  # the bare BLAKE2 module: hashlib would also load OpenSSL, a few ms of the hook's start-up
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - other Python builds
    from hashlib import blake2b

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy honours the name)
if TYPE_CHECKING:
    from collections.abc import Mapping

REGISTRY_DIR = "workers"
DEFAULT_APP_ID = "volunteer-stream"  # pipeline.settings.Settings.app_id (not imported: the hook stays light)
DEFAULT_BROKER = "kafka://127.0.0.1:9092"  # pipeline.settings.Settings.broker
HEARTBEAT_S = 5.0
STALE_S = 30.0
MAX_ENTRIES = 64
MAX_ENTRY_BYTES = 4096


def normalize_broker(broker: str) -> str:
    """One spelling per broker list: lower case, default scheme, sorted, no trailing slashes."""
    servers = []
    for part in broker.split(","):
        part = part.strip().lower().rstrip("/")
        if not part:
            continue
        servers.append(part if "://" in part else "kafka://" + part)
    return ",".join(sorted(servers))


def stack_key(broker: str, app_id: str) -> str:
    raw = normalize_broker(broker) + "\n" + app_id
    return blake2b(raw.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def registry_dir(state_base: str) -> str:
    return os.path.join(state_base, REGISTRY_DIR)


def entry_path(state_base: str, broker: str, app_id: str, pid: int) -> str:
    return os.path.join(registry_dir(state_base), f"{stack_key(broker, app_id)}.{pid}.json")


def entry_body(broker: str, app_id: str, url: str, pid: int) -> bytes:
    return jsonlite.dumps({"v": 1, "app_id": app_id, "broker": normalize_broker(broker), "url": url, "pid": pid,
                       "host": gethostname(), "started": int(time.time() * 1000)},
                          separators=(", ", ": ")).encode("utf-8")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's (cannot be ours, but do not guess)
    return True


class Entry:
    __slots__ = ("app_id", "broker", "key", "mtime", "url")

    def __init__(self, key: str, app_id: str, broker: str, url: str, mtime: float) -> None:
        self.key = key
        self.app_id = app_id
        self.broker = broker
        self.url = url
        self.mtime = mtime


def _read_entry(directory: str, name: str, now: float, hostname: str) -> Entry | None:
    """One live entry, or ``None`` (unreadable, not ours, stale, or its process is gone)."""
    key, _, rest = name.partition(".")
    pid_text, _, ext = rest.partition(".")
    if ext != "json" or not pid_text.isdigit():
        return None
    try:
        fd = os.open(os.path.join(directory, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
            return None
        if now - info.st_mtime > STALE_S:
            return None
        data = os.read(fd, MAX_ENTRY_BYTES)
    finally:
        os.close(fd)
    try:
        obj = jsonlite.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or not all(isinstance(obj.get(k), str) for k in ("app_id", "broker", "url")):
        return None
    if obj.get("host") == hostname and not _pid_alive(int(pid_text)):
        return None
    if stack_key(obj["broker"], obj["app_id"]) != key:
        return None
    return Entry(key, obj["app_id"], obj["broker"], obj["url"], info.st_mtime)


def live_entries(state_base: str) -> list[Entry]:
    """The registry's live entries, freshest first; nothing if the directory is not private."""
    directory = registry_dir(state_base)
    try:
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
            return []
        names = sorted(os.listdir(directory))[:MAX_ENTRIES * 4]
    except OSError:
        return []
    now, hostname = time.time(), gethostname()
    entries = [e for e in (_read_entry(directory, n, now, hostname) for n in names) if e is not None]
    entries.sort(key=lambda e: -e.mtime)
    return entries[:MAX_ENTRIES]


class Ambiguous(Exception):
    """Live workers of the hook's app id run on more than one broker, and the hook names none."""


def urls_for(state_base: str, env: Mapping[str, str]) -> list[str]:
    """The advertised URLs of the live workers of the hook's stack, freshest first."""
    app_id = env.get("VOLUNTEER_APP_ID", "").strip() or DEFAULT_APP_ID
    broker = env.get("VOLUNTEER_BROKER", "").strip()
    entries = [e for e in live_entries(state_base) if e.app_id == app_id]
    if broker:
        key = stack_key(broker, app_id)
        entries = [e for e in entries if e.key == key]
    elif len({e.key for e in entries}) > 1:
        raise Ambiguous()
    return list(dict.fromkeys(e.url for e in entries))
