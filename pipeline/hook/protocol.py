"""What the hook and the worker agree on: harness channels, endpoint paths, delivery records.

A **delivery record** is how the hook says "I printed these pages for turn T": it travels on the
``turns`` topic, keyed by the session id, so the window agent applies it in order with the
session's turns (a delivery is always applied before the next prompt is decided). Its value starts
with :data:`DELIVERY_PREFIX`, which is what the window agent checks before decoding a Turn.

Light on purpose (the hook process imports it): :mod:`pipeline.hook.jsonlite` only (not ``json``, which
loads ``re``, nor ``math``).
"""

from __future__ import annotations

from pipeline.hook import jsonlite

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy honours the name)
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

    from topics.records import InvalidRecord

MAX_SESSION_ID_CHARS = 256  # topics.records.MAX_SESSION_ID_CHARS (not imported: the hook stays light)
MAX_TURN_NUMBER = 2_147_483_647  # topics.records.MAX_TURN_NUMBER

HOOK_CHANNELS: tuple[str, ...] = ("claude-code", "codex", "opencode")
"""Channels whose pages count only once the hook reports them printed (the reference's harness channels)."""

DEFAULT_HARNESS = "claude-code"

TURNS_PATH = "/volunteer/hook/turns"
"""POST: publish a session's new turns (and pending deliveries), then wait for one turn's pages."""
DELIVERED_PATH = "/volunteer/hook/delivered"
"""POST: publish a delivery record (what the hook printed)."""
HELLO_PATH = "/volunteer/hook/hello"
"""POST ``{}``: the handshake. Answers nothing but the worker's proof (:mod:`pipeline.hook.credential`),
so the hook knows it talks to a worker holding the secret before it sends a prompt."""
HEALTH_PATH = "/volunteer/hook/health"
"""GET: the worker answers hooks (used by the bench and the doctor)."""
HOOK_PATHS: tuple[str, ...] = (TURNS_PATH, DELIVERED_PATH, HELLO_PATH, HEALTH_PATH)
"""The only paths a worker's web server answers (Faust's own routes are refused, see agents/edge.py)."""
ROUTED_HEADER = "X-Volunteer-Routed"
"""Set on a request a worker forwarded to the partition owner, so it is never forwarded again."""

DELIVERY_PREFIX = b'{"kind":"delivered",'
MAX_SLUGS_PER_DELIVERY = 64
MAX_SLUG_CHARS = 1024
MAX_WAIT_MS = 10_000
MAX_DELIVERIES_PER_REQUEST = 16
"""Delivery records one ``/turns`` request may carry (the hook sends older unsent ones in later calls)."""


def dumps(obj: Any) -> str:
    """Compact JSON, non-ASCII kept as is (what the hook prints and sends)."""
    return jsonlite.dumps(obj, ensure_ascii=False)


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
        return dumps(self.to_obj()).encode("utf-8")

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


PAGE_FIELDS = ("slug", "source_id", "display", "confidence", "arm", "rationale", "synopsis")
ITEM_KINDS = ("pointer", "page")
ARMS = ("alias", "title", "title-surname", "cjk-title", "slug-suffix")  # pipeline.core.types.ARMS
MAX_ITEMS = 32
"""Most items one answer may carry (the worker sends at most 10 pointers and 5 pages)."""
FIELD_MAX_CHARS = {"slug": MAX_SLUG_CHARS, "source_id": MAX_SESSION_ID_CHARS, "display": 1024, "arm": 32,
                   "rationale": 2048, "synopsis": 1024}
"""Size limits of an answer's text fields: generous for real pages, small enough to bound the block."""


class BadReply(ValueError):
    """The worker's answer is not what the hook prints; ``reason`` is a short heartbeat code."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def item_from_obj(obj: Any) -> dict[str, Any]:
    """One answered item (a pointer or a page), checked field by field; raises :class:`BadReply`.

    ``kind`` is ``pointer`` or ``page``; an item without one is a page (a worker without the
    reflex). Text fields must be strings within :data:`FIELD_MAX_CHARS`, the confidence a number
    in [0, 1], the arm a resolver arm."""
    if not isinstance(obj, dict):
        raise BadReply("bad_reply:item")
    kind = obj.get("kind", "page")
    if kind not in ITEM_KINDS:
        raise BadReply("bad_reply:kind")
    for name in PAGE_FIELDS:
        value = obj.get(name)
        if name == "confidence":
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise BadReply("bad_reply:confidence")
        elif not isinstance(value, str) or len(value) > FIELD_MAX_CHARS[name]:
            raise BadReply(f"bad_reply:{name}")
    if not obj["slug"] or obj["arm"] not in ARMS:
        raise BadReply("bad_reply:slug" if not obj["slug"] else "bad_reply:arm")
    item = {name: obj[name] for name in PAGE_FIELDS}
    item["kind"] = kind
    return item


def items_from_answer(raw: Any) -> list[dict[str, Any]]:
    """All items of an answer, or :class:`BadReply`: one malformed item spoils the whole answer
    (a reply that is wrong in one place is not trusted in the others)."""
    if not isinstance(raw, list):
        raise BadReply("bad_reply:shape")
    if len(raw) > MAX_ITEMS:
        raise BadReply("bad_reply:size")
    items = [item_from_obj(x) for x in raw]
    if len({i["slug"] for i in items}) != len(items):
        raise BadReply("bad_reply:duplicate")
    return items


def slugs_of(pages: Sequence[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(str(p["slug"]) for p in pages))
