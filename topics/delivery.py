"""The delivery record (topic ``turns``): what a harness hook printed for one turn of one session.

A **delivery record** is how the hook says "I printed these pages for turn T": it travels on the
``turns`` topic, keyed by the session id, so the window agent applies it in order with the
session's turns (a delivery is always applied before the next prompt is decided; see
:mod:`pipeline.agents.hooklane`). Its value starts with :data:`DELIVERY_PREFIX`, which is what the
window agent checks before decoding a Turn (docs/contracts.md "Records", docs/hooks.md).

Light on purpose: the hook process imports this module to report what it printed (after its
output; its start-up counts against the hook's latency goal), so it uses only what the hook's fast
path already loaded: :mod:`pipeline.jsonlite` (the stdlib's C JSON without ``json``, ``re``
or ``math``). It also holds the record's limits and the harness channels, which the hook's
:mod:`pipeline.hook.protocol` imports from here (the hook depends on the record, never the
other way round) — no orjson,
dataclasses or typing at run time, and not :mod:`topics.records` (which pulls in the core).
Decoding raises only :class:`topics.records.InvalidRecord` (imported when one is raised), whose
code becomes the dead letter's reason.
"""

from __future__ import annotations

from pipeline import jsonlite

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy honours the name)
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from topics.records import InvalidRecord

MAX_SESSION_ID_CHARS = 256  # topics.records.MAX_SESSION_ID_CHARS (not imported: records pulls in the core)
MAX_TURN_NUMBER = 2_147_483_647  # topics.records.MAX_TURN_NUMBER
MAX_SLUG_CHARS = 1024

HOOK_CHANNELS: tuple[str, ...] = ("claude-code", "codex", "opencode")
"""Channels whose pages count only once the hook reports them printed (the reference's harness channels)."""

DELIVERY_PREFIX = b'{"kind":"delivered",'
MAX_SLUGS_PER_DELIVERY = 64


def is_delivery(value: bytes) -> bool:
    """Cheap test the window agent runs on every ``turns`` record before decoding a Turn."""
    return value.startswith(DELIVERY_PREFIX)


class Delivery:
    """The pages (by slug) the hook printed for one turn of one session, and when."""

    __slots__ = ("channel", "session_id", "slugs", "ts_ms", "turn")

    def __init__(self, session_id: str, turn: int, slugs: Iterable[str], channel: str, ts_ms: int) -> None:
        self.session_id = session_id
        self.turn = turn
        self.slugs = tuple(dict.fromkeys(slugs))
        self.channel = channel
        self.ts_ms = ts_ms

    def to_obj(self) -> dict[str, Any]:
        # Key order is part of the format: the JSON must start with DELIVERY_PREFIX.
        return {"kind": "delivered", "session_id": self.session_id, "turn": self.turn, "slugs": list(self.slugs),
                "channel": self.channel, "ts": self.ts_ms}

    def to_json(self) -> bytes:
        """Compact JSON, non-ASCII kept as is (the hook's own encoding, :func:`pipeline.hook.protocol.dumps`)."""
        return jsonlite.dumps(self.to_obj(), ensure_ascii=False).encode("utf-8")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Delivery) and self.to_obj() == other.to_obj()

    def __hash__(self) -> int:
        return hash((self.session_id, self.turn, self.slugs, self.channel, self.ts_ms))

    def __repr__(self) -> str:
        return f"Delivery({self.session_id!r}, {self.turn}, {self.slugs!r}, {self.channel!r}, {self.ts_ms})"


def _invalid(code: str, message: str) -> InvalidRecord:
    from topics.records import InvalidRecord  # the worker's dead-letter error; imported only when needed

    return InvalidRecord(code, message)


def _int_field(obj: dict[str, Any], name: str, low: int, high: int) -> int:
    value = obj.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or value - value != 0:  # inf and NaN
        raise _invalid("invalid_delivery", f"field '{name}' must be an integer")
    if value != int(value) or not low <= int(value) <= high:
        raise _invalid("invalid_delivery", f"field '{name}' must be an integer in {low}..{high}")
    return int(value)


def delivery_from_obj(obj: Any, key: bytes | None = None) -> Delivery:
    """Validate a decoded delivery object (from the topic or from the hook's HTTP request)."""
    if not isinstance(obj, dict):
        raise _invalid("invalid_delivery", "a delivery must be a JSON object")
    session_id = obj.get("session_id")
    if not isinstance(session_id, str) or not 0 < len(session_id) <= MAX_SESSION_ID_CHARS:
        raise _invalid("invalid_delivery", "field 'session_id' must be a string of 1-256 characters")
    if key is not None and key != session_id.encode("utf-8", "surrogatepass"):
        raise _invalid("key_mismatch", "record key differs from the delivery's session_id")
    channel = obj.get("channel")
    if channel not in HOOK_CHANNELS:
        raise _invalid("invalid_delivery", f"field 'channel' must be one of {', '.join(HOOK_CHANNELS)}")
    slugs = obj.get("slugs")
    if not isinstance(slugs, list) or len(slugs) > MAX_SLUGS_PER_DELIVERY:
        raise _invalid("invalid_delivery", f"field 'slugs' must be a list of at most {MAX_SLUGS_PER_DELIVERY}")
    if not all(isinstance(s, str) and 0 < len(s) <= MAX_SLUG_CHARS for s in slugs):
        raise _invalid("invalid_delivery", "every slug must be a non-empty string")
    return Delivery(session_id, _int_field(obj, "turn", 1, MAX_TURN_NUMBER), slugs, str(channel),
                    _int_field(obj, "ts", 0, 253_402_300_799_000))


def decode_delivery(value: bytes, key: bytes | None = None) -> Delivery:
    """A delivery record from the ``turns`` topic; raises :class:`InvalidRecord` (dead-lettered)."""
    try:
        obj = jsonlite.loads(value)
    except (ValueError, RecursionError) as exc:
        raise _invalid("invalid_json", f"value is not valid JSON: {exc}") from None
    return delivery_from_obj(obj, key)
