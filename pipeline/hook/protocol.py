"""What the hook and the worker agree on: harness channels, endpoint paths, the answer's items.

The delivery record the hook sends back (what it printed) is a record type like the others and
lives beside them in :mod:`topics.delivery`, which takes its limits from here. The hook imports it
only once it has printed its block, so the fast path up to the output loads no ``topics`` module.

Light on purpose (the hook process imports it): :mod:`pipeline.jsonlite` only (not ``json``, which
loads ``re``, nor ``math``).
"""

from __future__ import annotations

from pipeline import jsonlite
from topics.delivery import MAX_SESSION_ID_CHARS, MAX_SLUG_CHARS

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy honours the name)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any


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

MAX_WAIT_MS = 10_000
MAX_DELIVERIES_PER_REQUEST = 16
"""Delivery records one ``/turns`` request may carry (the hook sends older unsent ones in later calls)."""


def dumps(obj: Any) -> str:
    """Compact JSON, non-ASCII kept as is (what the hook prints and sends)."""
    return jsonlite.dumps(obj, ensure_ascii=False)


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
