"""The page-open feedback record (topic ``page-opens``): an application opened a page it was offered.

``{"slug": str, "source_id": str, "session_id"?: str, "opened_at"?: RFC 3339 | epoch ms}``. The
worker turns these into the reference's "used" signal (``pages.last_retrieved_at``, reference-behaviour.md §1.2, §11),
so ``volunteer stats`` measures real precision. The record key is ``source_id`` + ``/`` + ``slug``:
every open of one page lands on one partition, so one worker updates a given row and opens of one
page are applied in order. Decoding raises only :class:`InvalidRecord`, whose code becomes the
dead letter's reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from topics.records import InvalidRecord, check_identifier, parse_ts_ms, rfc3339_ms

if TYPE_CHECKING:
    from pipeline.settings import Settings

MAX_SLUG_CHARS = 1024
MAX_SOURCE_CHARS = 256
MAX_SESSION_CHARS = 256
MAX_RECORD_BYTES = 64 * 1024
"""A page open is a few hundred bytes; anything much larger is not one."""


@dataclass(frozen=True, slots=True)
class PageOpen:
    """One page opened by a user or agent. ``opened_at_ms`` None means "when the worker applies it"."""

    slug: str
    source_id: str
    session_id: str | None = None
    opened_at_ms: int | None = None

    def key(self) -> bytes:
        return f"{self.source_id}/{self.slug}".encode()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"slug": self.slug, "source_id": self.source_id}
        if self.session_id is not None:
            out["session_id"] = self.session_id
        if self.opened_at_ms is not None:
            out["opened_at"] = rfc3339_ms(self.opened_at_ms)
        return out

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())


def _identifier(obj: dict[str, Any], name: str, *, required: bool, max_chars: int) -> str | None:
    value = check_identifier(obj, name, required=required, max_chars=max_chars)
    if value is not None and value != value.strip():
        raise InvalidRecord("invalid_field", f"field '{name}' has leading or trailing whitespace")
    return value


def decode_page_open(value: bytes | None) -> PageOpen:
    """Validate a raw ``page-opens`` record (strict: unknown fields are ignored, wrong ones are not)."""
    if value is None:
        raise InvalidRecord("missing_value", "record has no value (tombstone)")
    if len(value) > MAX_RECORD_BYTES:
        raise InvalidRecord("oversize", f"record is {len(value)} bytes, over the limit of {MAX_RECORD_BYTES}")
    try:
        obj = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise InvalidRecord("invalid_json", f"value is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise InvalidRecord("not_an_object", f"value must be a JSON object, got {type(obj).__name__}")
    slug = _identifier(obj, "slug", required=True, max_chars=MAX_SLUG_CHARS)
    source_id = _identifier(obj, "source_id", required=True, max_chars=MAX_SOURCE_CHARS)
    session_id = _identifier(obj, "session_id", required=False, max_chars=MAX_SESSION_CHARS)
    opened_at = obj.get("opened_at")
    opened_at_ms = None
    if opened_at is not None:
        try:
            opened_at_ms = parse_ts_ms(opened_at)
        except InvalidRecord as exc:
            raise InvalidRecord("invalid_opened_at", exc.message.replace("'ts'", "'opened_at'")) from None
    assert slug is not None and source_id is not None
    return PageOpen(slug, source_id, session_id, opened_at_ms)


async def produce_page_opens(settings: Settings, opens: list[PageOpen]) -> int:
    """Publish ``opens`` to ``settings.topic_page_opens`` (keyed by page) and wait until the broker has them.

    What an application does when a user opens a page; ``volunteer opened`` and the demo use it.
    """
    from topics.clients import make_producer
    from topics.io import send_records

    producer = make_producer(settings)
    await producer.start()
    try:
        return await send_records(producer, settings.topic_page_opens, ((o.key(), o.to_json()) for o in opens))
    finally:
        await producer.stop()
