"""The ``turns`` record's field rules: what a Turn record must hold, and its dead-letter codes.

Every turn is decoded once per delivery (the worker's window agent, ``volunteer replay``, the
client), and on the replay's whole process the decoding was a tenth of the CPU per turn. The rules
are pure (bytes in, fields or an :class:`InvalidRecord` out), so they live beside the decision core
and are compiled with it: the mypyc build runs them as C, the plain module is the same code.
:mod:`topics.records` re-exports everything here; docs/contracts.md "Records" is the contract.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any, Final

import orjson

from pipeline.core.normalize import js_trim

MAX_SESSION_ID_CHARS: Final = 256
DEFAULT_MAX_TEXT_BYTES: Final = 5_000_000
MAX_TURN_NUMBER: Final = 2_147_483_647  # PostgreSQL INTEGER, as the reference clamps it
ROLES: Final = ("user", "assistant")


class InvalidRecord(ValueError):
    """A record that cannot be processed; ``code`` goes into the dead letter's ``error``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


_CONTROL_RE: Final = re.compile("[\x00-\x1f\x7f]")


def check_identifier(obj: dict[str, Any], name: str, *, required: bool, max_chars: int) -> str | None:
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


def _required_str(obj: dict[str, Any], name: str) -> str:
    """A field that must be there and be a string (``role``, ``text``); any string, even empty."""
    value = obj.get(name)
    if value is None:
        raise InvalidRecord("missing_field", f"field '{name}' is required")
    if not isinstance(value, str):
        raise InvalidRecord("wrong_type", f"field '{name}' must be a string, got {type(value).__name__}")
    return value


def parse_ts_ms(value: Any) -> int:
    """RFC 3339 string or epoch milliseconds -> epoch milliseconds (UTC)."""
    if isinstance(value, bool):
        raise InvalidRecord("invalid_ts", "field 'ts' must be an RFC 3339 string or epoch milliseconds")
    if isinstance(value, (int, float)):
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



def decode_turn_fields(
    value: bytes | None,
    key: bytes | None = None,
    *,
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
    max_session_id_chars: int = MAX_SESSION_ID_CHARS,
) -> TurnFields | None:
    """A raw ``turns`` record's fields, validated; ``None`` means "not a turn" (blank text).

    :func:`topics.records.decode_turn` builds the frozen ``Turn`` from them; loops that only read
    the fields (``volunteer replay``) take the tuple. When ``key`` is given it must equal the
    session id: the key decides the partition and so the worker that owns the session's state.
    """
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
    # The usual id passes every test of check_identifier; it runs (and names the error) otherwise.
    if (type(session_id) is not str or not session_id or len(session_id) > max_session_id_chars
            or _CONTROL_RE.search(session_id) is not None):
        session_id = check_identifier(obj, "session_id", required=True, max_chars=max_session_id_chars)
        assert session_id is not None
    if key is not None:
        try:
            key_text = key.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRecord("key_mismatch", "record key is not UTF-8 and cannot equal the session id") from None
        if key_text != session_id:
            raise InvalidRecord("key_mismatch", "record key differs from the value's session_id")

    role = _required_str(obj, "role")
    role_lc = role if role == "user" or role == "assistant" else role.strip().lower()
    if role_lc not in ROLES:
        raise InvalidRecord("unknown_role", "field 'role' must be 'user' or 'assistant'")

    text = _required_str(obj, "text")
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
        if isinstance(turn_no, bool) or not isinstance(turn_no, (int, float)):
            raise InvalidRecord("invalid_turn", "field 'turn' must be an integer >= 1")
        if isinstance(turn_no, float):
            if not turn_no.is_integer():
                raise InvalidRecord("invalid_turn", "field 'turn' must be an integer >= 1")
            turn_no = int(turn_no)
        if turn_no < 1 or turn_no > MAX_TURN_NUMBER:
            raise InvalidRecord("invalid_turn", f"field 'turn' must be between 1 and {MAX_TURN_NUMBER}")

    ts_ms = parse_ts_ms(obj["ts"]) if obj.get("ts") is not None else None
    # Most records name neither: no call then.
    source_id = None if obj.get("source_id") is None else check_identifier(obj, "source_id", required=False, max_chars=256)
    channel = None if obj.get("channel") is None else check_identifier(obj, "channel", required=False, max_chars=64)

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
