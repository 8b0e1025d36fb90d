"""JSON for the hook process, straight from the interpreter's ``_json`` accelerator.

``import json`` loads ``re`` (and with it ``enum``, ``functools``, ``collections``): about a
quarter of the hook's start-up, for the two C functions it ends up calling anyway. This module
builds the same C scanner and encoder that ``json.loads`` and ``json.dumps`` use, with the same
settings, so the results are the stdlib's byte for byte (``tests/unit/hook/test_jsonlite.py``
compares them): ``NaN``/``Infinity`` accepted, duplicate keys last-wins, the same nesting limit
(:class:`RecursionError`), :class:`ValueError` for malformed text (the stdlib's
``JSONDecodeError`` when the C scanner raises it, which imports ``json.decoder`` only then).

Anything unusual goes to the stdlib module itself (imported only then): an interpreter without
``_json``, and bytes in UTF-16 or UTF-32.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy honours the name)
if TYPE_CHECKING:
    from typing import Any

try:
    import _json
except ImportError:  # pragma: no cover - an interpreter built without the accelerator
    _json = None  # type: ignore[assignment]

_WHITESPACE = " \t\n\r"
_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class _Context:
    """What the C scanner reads off a ``json.JSONDecoder``: the stdlib's defaults."""

    __slots__ = ("object_hook", "object_pairs_hook", "parse_constant", "parse_float", "parse_int", "strict")

    def __init__(self) -> None:
        self.strict = True
        self.object_hook = None
        self.object_pairs_hook = None
        self.parse_float = float
        self.parse_int = int
        self.parse_constant = _CONSTANTS.__getitem__


def _not_serializable(obj: object) -> None:
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


if _json is not None:
    # typeshed wants a JSONDecoder; the C type reads only the six attributes _Context has
    _scan = _json.make_scanner(_Context())  # type: ignore[arg-type]  # no state kept between calls


def loads(data: str | bytes | bytearray) -> Any:
    """``json.loads(data)``: the same value, or :class:`ValueError` / :class:`RecursionError`."""
    if _json is None:
        import json

        return json.loads(data)
    if isinstance(data, bytes | bytearray):
        if data[:4].count(0):  # UTF-16 or UTF-32: the stdlib detects which
            import json

            return json.loads(data)
        text = bytes(data).decode("utf-8-sig" if data[:3] == b"\xef\xbb\xbf" else "utf-8", "surrogatepass")
    elif isinstance(data, str):
        if data.startswith("\ufeff"):
            raise ValueError("Unexpected UTF-8 BOM (decode using utf-8-sig)")
        text = data
    else:
        raise TypeError(f"the JSON object must be str, bytes or bytearray, not {type(data).__name__}")
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration as exc:
        raise ValueError(f"Expecting value: char {exc.value}") from None
    if text[end:].strip(_WHITESPACE):
        raise ValueError(f"Extra data: char {end}")
    return value


def dumps(obj: Any, *, ensure_ascii: bool = True, separators: tuple[str, str] = (",", ":")) -> str:
    """``json.dumps(obj, ensure_ascii=..., separators=...)`` for the two separator pairs the hook
    uses (compact, and the stdlib's default); a value JSON cannot hold is :class:`TypeError`."""
    if _json is None or separators not in ((",", ":"), (", ", ": ")):
        import json

        return json.dumps(obj, ensure_ascii=ensure_ascii, separators=separators)
    quote = _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring
    if isinstance(obj, str):
        text: str = quote(obj)
        return text
    # A fresh encoder per call, as json.dumps makes one: its circular-reference markers start empty.
    encode = _json.make_encoder({}, _not_serializable, quote, None, separators[1], separators[0], False, False, True)
    return "".join(encode(obj, 0))
