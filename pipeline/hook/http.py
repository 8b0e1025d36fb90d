"""A tiny JSON-over-HTTP client for the hook (``http.client``: no aiohttp, no asyncio)."""

from __future__ import annotations

import http.client
from typing import Any
from urllib.parse import urlsplit

import orjson


class WorkerUnavailable(Exception):
    """No worker answered (refused, reset, timed out, or not our endpoint); ``reason`` is a code."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def post_json(base_url: str, path: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """POST ``body`` and return the decoded JSON object; any failure is :class:`WorkerUnavailable`."""
    if timeout_s <= 0:
        raise WorkerUnavailable("deadline")
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "") or not parts.hostname:
        raise WorkerUnavailable("bad_url", base_url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout_s)
    try:
        data = orjson.dumps(body)
        conn.request("POST", parts.path.rstrip("/") + path, body=data,
                     headers={"Content-Type": "application/json", "Connection": "close"})
        response = conn.getresponse()
        raw = response.read()
        status = response.status
    except TimeoutError:
        raise WorkerUnavailable("deadline") from None
    except ConnectionRefusedError:
        raise WorkerUnavailable("no_worker") from None
    except (OSError, http.client.HTTPException) as exc:
        raise WorkerUnavailable("worker_io", type(exc).__name__) from None
    finally:
        conn.close()
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise WorkerUnavailable("not_a_worker", f"HTTP {status}") from None
    if not isinstance(obj, dict):
        raise WorkerUnavailable("not_a_worker", f"HTTP {status}")
    if status >= 400:
        raise WorkerUnavailable(f"http_{status}", str(obj.get("error", ""))[:80])
    return obj
