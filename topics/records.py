"""Record schemas of the three topics (docs/contracts.md "Records"), with strict decoding.

Decoding never raises anything but :class:`InvalidRecord`, whose ``code`` is the machine-readable
dead-letter reason. Encoding is orjson; key order is fixed so records are byte-stable.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import MISSING, dataclass, fields
from datetime import UTC, datetime
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import orjson

from pipeline.core.turn_record import (
    DEFAULT_MAX_TEXT_BYTES,
    MAX_SESSION_ID_CHARS,
    MAX_TURN_NUMBER,
    ROLES,
    InvalidRecord,
    TurnFields,
    check_identifier,
    check_turn_number,
    decode_turn_fields,
    parse_ts_ms,
)
from pipeline.core.types import PAGE_FIELDS, VolunteeredPage

# The Turn record's field rules live beside the core (compiled with it) and are part of this module's API.
__all__ = [
    "DEFAULT_MAX_TEXT_BYTES", "MAX_SESSION_ID_CHARS", "MAX_TURN_NUMBER", "ROLES", "VOLUNTEERED_FIELDS", "DeadLetter",
    "InvalidRecord", "Turn", "TurnFields", "Volunteered", "check_identifier", "check_turn_number", "decode_turn",
    "decode_turn_fields", "event_id_for", "parse_ts_ms", "rfc3339_ms",
]


# ----------------------------------------------------------------------------- Turn


@dataclass(frozen=True, slots=True)
class Turn:
    """One thing said in one session. ``text`` is already trimmed and non-empty."""

    session_id: str
    role: str
    text: str
    turn: int | None = None
    ts_ms: int | None = None
    source_id: str | None = None
    channel: str | None = None

    def to_json(self) -> bytes:
        out: dict[str, Any] = {"session_id": self.session_id, "role": self.role, "text": self.text}
        if self.turn is not None:
            out["turn"] = self.turn
        if self.ts_ms is not None:
            out["ts"] = self.ts_ms
        if self.source_id is not None:
            out["source_id"] = self.source_id
        if self.channel is not None:
            out["channel"] = self.channel
        return orjson.dumps(out)


def decode_turn(
    value: bytes | None,
    key: bytes | None = None,
    *,
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
    max_session_id_chars: int = MAX_SESSION_ID_CHARS,
) -> Turn | None:
    """Validate a raw ``turns`` record. ``None`` means "not a turn" (blank text): skip, no error.

    When ``key`` is given it must equal the session id: the key decides the partition and so the
    worker that owns the session's state.
    """
    fields = decode_turn_fields(value, key, max_text_bytes=max_text_bytes, max_session_id_chars=max_session_id_chars)
    return None if fields is None else Turn(*fields)


# ----------------------------------------------------------------------------- Volunteered


def event_id_for(session_id: str, turn: int, source_id: str, slug: str, channel: str) -> str:
    """Stable identity of one volunteered page, so redelivery and replay are recognisable."""
    raw = "\x1f".join((session_id, str(turn), source_id, slug, channel)).encode("utf-8")
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def rfc3339_ms(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z"
    )


@dataclass(frozen=True, slots=True)
class Volunteered:
    """One page volunteered to one session at one turn (topic ``volunteered``): an envelope (which
    event, to whom, when, on which channel) around the core's :class:`VolunteeredPage`.

    On the wire the record is flat, the envelope's fields in their order with the page's fields in
    its place (docs/contracts.md "Records"); :meth:`to_dict` and :meth:`from_json` derive that from
    the two dataclasses' fields (:data:`VOLUNTEERED_FIELDS`), so no field is listed twice. A field
    with a default is written only when it differs from it (``kind``).
    """

    event_id: str
    session_id: str
    turn: int
    page: VolunteeredPage
    channel: str
    volunteered_at: str
    kind: str = "page"
    """``pointer`` for a reflex pointer (turn context); ``page`` (the default, not written) otherwise."""

    def to_dict(self) -> dict[str, Any]:
        out = dict(zip(_ALWAYS_KEYS, _ALWAYS_GET(self), strict=True))
        for name, default in _OPTIONAL:
            value = getattr(self, name)
            if value != default:
                out[name] = value
        return out

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_json(cls, value: bytes) -> Volunteered:
        try:
            obj = orjson.loads(value)
            args: dict[str, Any] = {}
            for name, default in _ENVELOPE:
                if name == "page":
                    args["page"] = VolunteeredPage.from_dict(obj)
                elif default is _REQUIRED or name in obj:
                    args[name] = _COERCE[name](obj[name])
            return cls(**args)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise InvalidRecord("invalid_volunteered", f"not a Volunteered record: {exc}") from None

    if not TYPE_CHECKING:
        def __getattr__(self, name: str) -> Any:
            """``record.slug`` for ``record.page.slug``: the flat spelling applications used before the
            envelope keeps working (typed code spells ``record.page.slug``)."""
            if name in PAGE_FIELDS:
                return getattr(self.page, name)
            raise AttributeError(f"'Volunteered' object has no attribute '{name}'")


_REQUIRED = object()
_ENVELOPE: tuple[tuple[str, Any], ...] = tuple(
    (f.name, _REQUIRED if f.default is MISSING else f.default) for f in fields(Volunteered))
"""The envelope's fields in wire order, each with its default (or :data:`_REQUIRED`)."""
_COERCE: dict[str, Any] = {f.name: {"int": int, "str": str}.get(str(f.type), str) for f in fields(Volunteered)}
"""How a decoded JSON value becomes each envelope field's type (``turn`` is the one number)."""

VOLUNTEERED_FIELDS: tuple[str, ...] = tuple(
    name for field, _ in _ENVELOPE for name in (PAGE_FIELDS if field == "page" else (field,)))
"""The keys of a ``volunteered`` record, in wire order (the envelope's, the page's in its place)."""

_OPTIONAL = tuple((name, default) for name, default in _ENVELOPE if default is not _REQUIRED)
"""Fields written only when they differ from their default (they come last: dataclass order)."""
_ALWAYS_KEYS = tuple(name for name in VOLUNTEERED_FIELDS if name not in dict(_OPTIONAL))
_ALWAYS_GET = attrgetter(*(f"page.{name}" if name in PAGE_FIELDS else name for name in _ALWAYS_KEYS))
"""Reads every always-written value in one C call (a page field through ``page``)."""


# ----------------------------------------------------------------------------- Dead letter


def _as_text(raw: bytes | None) -> tuple[str | None, str]:
    if raw is None:
        return None, "none"
    try:
        return raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii"), "base64"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record that could not be processed, with where it came from and why (topic ``turns-dlq``)."""

    key: str | None
    key_encoding: str
    value: str | None
    value_encoding: str
    topic: str
    partition: int
    offset: int
    error: str
    message: str
    failed_at: str

    @classmethod
    def build(
        cls, *, key: bytes | None, value: bytes | None, topic: str, partition: int, offset: int,
        error: str, message: str, now_ms: int,
    ) -> DeadLetter:
        key_text, key_enc = _as_text(key)
        value_text, value_enc = _as_text(value)
        return cls(key_text, key_enc, value_text, value_enc, topic, partition, offset, error, message,
                   rfc3339_ms(now_ms))

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "key_encoding": self.key_encoding,
            "value": self.value,
            "value_encoding": self.value_encoding,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "error": self.error,
            "message": self.message,
            "failed_at": self.failed_at,
        }

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

    def original_value(self) -> bytes | None:
        """The exact bytes that failed, for re-driving a fixed record."""
        if self.value is None:
            return None
        return base64.b64decode(self.value) if self.value_encoding == "base64" else self.value.encode("utf-8")
