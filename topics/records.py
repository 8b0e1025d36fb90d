"""Record schemas of the three topics (docs/contracts.md "Records"), with strict decoding.

Decoding never raises anything but :class:`InvalidRecord`, whose ``code`` is the machine-readable
dead-letter reason. Encoding is orjson; key order is fixed so records are byte-stable.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
from dataclasses import MISSING, dataclass, fields
from datetime import UTC, datetime
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import orjson

from pipeline.core.normalize import js_trim
from pipeline.core.types import PAGE_FIELDS, VolunteeredPage

MAX_SESSION_ID_CHARS = 256
DEFAULT_MAX_TEXT_BYTES = 5_000_000
MAX_TURN_NUMBER = 2_147_483_647  # PostgreSQL INTEGER, as the reference clamps it
ROLES = ("user", "assistant")


class InvalidRecord(ValueError):
    """A record that cannot be processed; ``code`` goes into the dead letter's ``error``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


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


_CONTROL_RE = re.compile("[\x00-\x1f\x7f]")


def _check_identifier(obj: dict[str, Any], name: str, *, required: bool, max_chars: int) -> str | None:
    """Session ids, sources and channels end up in PostgreSQL text columns: no NUL, bounded."""
    if name not in obj or obj[name] is None:
        if required:
            raise InvalidRecord("missing_field", f"field '{name}' is required")
        return None
    value = obj[name]
    if not isinstance(value, str):
        raise InvalidRecord("wrong_type", f"field '{name}' must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidRecord("empty_field", f"field '{name}' must not be empty")
    if len(value) > max_chars:
        code = "session_id_too_long" if name == "session_id" else "field_too_long"
        raise InvalidRecord(code, f"field '{name}' has {len(value)} characters, more than {max_chars}")
    if _CONTROL_RE.search(value) is not None:
        raise InvalidRecord("control_characters", f"field '{name}' contains NUL or control characters")
    return value


def parse_ts_ms(value: Any) -> int:
    """RFC 3339 string or epoch milliseconds -> epoch milliseconds (UTC)."""
    if isinstance(value, bool):
        raise InvalidRecord("invalid_ts", "field 'ts' must be an RFC 3339 string or epoch milliseconds")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0 or value > 253_402_300_799_000:
            raise InvalidRecord("invalid_ts", "field 'ts' is out of range")
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise InvalidRecord("invalid_ts", "field 'ts' is not an RFC 3339 timestamp") from None
        if parsed.tzinfo is None:
            raise InvalidRecord("invalid_ts", "field 'ts' needs a UTC offset (RFC 3339)")
        return int(parsed.timestamp() * 1000)
    raise InvalidRecord("invalid_ts", "field 'ts' must be an RFC 3339 string or epoch milliseconds")


TurnFields = tuple[str, str, str, int | None, int | None, str | None, str | None]
"""A :class:`Turn`'s fields in its order: what :func:`decode_turn_fields` returns."""


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


def decode_turn_fields(
    value: bytes | None,
    key: bytes | None = None,
    *,
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
    max_session_id_chars: int = MAX_SESSION_ID_CHARS,
) -> TurnFields | None:
    """:func:`decode_turn` without building the frozen :class:`Turn` (a third of its cost), for
    loops that only read the fields (``volunteer replay``)."""
    if value is None:
        raise InvalidRecord("missing_value", "record has no value (tombstone)")
    if len(value) > max_text_bytes + 64 * 1024:
        raise InvalidRecord("oversize", f"record is {len(value)} bytes, over the limit of {max_text_bytes}")
    try:
        obj = orjson.loads(value)  # orjson validates all of the input as UTF-8 before parsing it
    except orjson.JSONDecodeError as exc:
        try:
            value.decode("utf-8")
        except UnicodeDecodeError as bad:
            raise InvalidRecord("invalid_utf8", f"value is not valid UTF-8 at byte {bad.start}") from None
        raise InvalidRecord("invalid_json", f"value is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise InvalidRecord("not_an_object", f"value must be a JSON object, got {type(obj).__name__}")

    session_id = obj.get("session_id")
    # The usual id passes every test of _check_identifier; it runs (and names the error) otherwise.
    if (type(session_id) is not str or not session_id or len(session_id) > max_session_id_chars
            or _CONTROL_RE.search(session_id) is not None):
        session_id = _check_identifier(obj, "session_id", required=True, max_chars=max_session_id_chars)
        assert session_id is not None
    if key is not None:
        try:
            key_text = key.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRecord("key_mismatch", "record key is not UTF-8 and cannot equal the session id") from None
        if key_text != session_id:
            raise InvalidRecord("key_mismatch", "record key differs from the value's session_id")

    role = obj.get("role")
    if role is None:
        raise InvalidRecord("missing_field", "field 'role' is required")
    if not isinstance(role, str):
        raise InvalidRecord("wrong_type", f"field 'role' must be a string, got {type(role).__name__}")
    role_lc = role if role == "user" or role == "assistant" else role.strip().lower()
    if role_lc not in ROLES:
        raise InvalidRecord("unknown_role", "field 'role' must be 'user' or 'assistant'")

    text = obj.get("text")
    if text is None:
        raise InvalidRecord("missing_field", "field 'text' is required")
    if not isinstance(text, str):
        raise InvalidRecord("wrong_type", f"field 'text' must be a string, got {type(text).__name__}")
    if len(text) > max_text_bytes:
        raise InvalidRecord("text_too_large", f"field 'text' is over the limit of {max_text_bytes} bytes")
    if text.isascii():  # a flag of the string: its UTF-8 is its length, and it holds no surrogate
        encoded_len = len(text)
    else:
        try:
            # One C-speed pass both measures the UTF-8 size and rejects lone surrogates (JSON "\ud800").
            encoded_len = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidRecord("invalid_utf8", "field 'text' contains a lone surrogate") from None
    if encoded_len > max_text_bytes:
        raise InvalidRecord("text_too_large", f"field 'text' is over the limit of {max_text_bytes} bytes")

    turn_no = obj.get("turn")
    if turn_no is not None:
        if isinstance(turn_no, bool) or not isinstance(turn_no, int | float):
            raise InvalidRecord("invalid_turn", "field 'turn' must be an integer >= 1")
        if isinstance(turn_no, float):
            if not turn_no.is_integer():
                raise InvalidRecord("invalid_turn", "field 'turn' must be an integer >= 1")
            turn_no = int(turn_no)
        if turn_no < 1 or turn_no > MAX_TURN_NUMBER:
            raise InvalidRecord("invalid_turn", f"field 'turn' must be between 1 and {MAX_TURN_NUMBER}")

    ts_ms = parse_ts_ms(obj["ts"]) if obj.get("ts") is not None else None
    # Most records name neither: no call then.
    source_id = None if obj.get("source_id") is None else _check_identifier(obj, "source_id", required=False, max_chars=256)
    channel = None if obj.get("channel") is None else _check_identifier(obj, "channel", required=False, max_chars=64)

    stripped = js_trim(text)  # the reference trims with JavaScript's whitespace set
    if not stripped:
        return None
    return (session_id, role_lc, stripped, turn_no, ts_ms, source_id, channel)


def check_turn_number(last_turn: int, turn_no: int | None) -> None:
    """An unnumbered turn after turn :data:`MAX_TURN_NUMBER` cannot be numbered (its events would not
    fit the INTEGER ``turn`` column): raise ``turn_overflow`` so it is dead-lettered, not stored half-way."""
    if turn_no is None and last_turn >= MAX_TURN_NUMBER:
        raise InvalidRecord("turn_overflow", f"the session is at turn {MAX_TURN_NUMBER}, the highest possible; "
                                             "a turn without a number cannot follow it")


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
