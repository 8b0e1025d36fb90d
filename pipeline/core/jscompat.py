"""JavaScript semantics the reference relies on, for the few places Python differs.

gbrain is TypeScript: string lengths are UTF-16 code units, ``\\s`` is JS whitespace, ``Number()``
and ``parseFloat`` accept different spellings than ``float()``, and ``toFixed`` rounds ties away from
zero. Each helper here reproduces exactly one of those so the core can match the reference byte for
byte.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Final, TypeGuard

from pipeline.core.normalize import JS_WHITESPACE

JS_WS: Final = "".join(
    f"\\u{ord(c):04x}" for c in JS_WHITESPACE
)
"""Body of a regex character class equal to JS ``\\s`` (for both ``re`` and ``regex`` patterns)."""

JS_LINE_TERMINATORS: Final = "\\n\\r\\u2028\\u2029"
"""Body of a character class of what JS ``.`` does not match and JS ``^``/``$`` (m flag) treat as line ends."""



def utf16_len(text: str) -> int:
    """``String.prototype.length``: astral characters count twice. (``isascii`` first: it reads a
    flag of the string. Another text is measured by its UTF-16 encoding, which ``surrogatepass``
    lets a lone surrogate into as the one unit JS counts: done in C, where ``max`` over the text,
    which this replaced, walked it character by character as objects and was most of the cost of
    clipping a long synopsis line.)"""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) >> 1


def utf16_prefix(text: str, units: int) -> str:
    """``text.slice(0, units)`` in UTF-16 units; a surrogate pair cut in half is dropped whole.

    JavaScript would keep the lone high surrogate, which is not valid UTF-8 and cannot be stored in
    PostgreSQL or encoded by orjson; dropping it is the one deliberate divergence (docs/decision-core.md).
    """
    head = text[:units]
    if head.isascii() or len(head.encode("utf-16-le", "surrogatepass")) == 2 * len(head):
        return head  # no astral character in the first ``units`` characters: each is one unit
    out: list[str] = []
    used = 0
    for ch in text:
        width = 2 if ch > "\uffff" else 1
        if used + width > units:
            break
        out.append(ch)
        used += width
    return "".join(out)


def is_js_number(value: Any) -> TypeGuard[int | float]:
    """``typeof value === 'number'``: ints and floats, never bools. (A tuple of the types, not
    ``int | float``, which built a new union object at every call: the op asks this twice per call.)"""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_DECIMAL_LITERAL: Final = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|Infinity)")
_HEX: Final = re.compile(r"0[xX][0-9a-fA-F]+")
_OCT: Final = re.compile(r"0[oO][0-7]+")
_BIN: Final = re.compile(r"0[bB][01]+")


def js_number(text: str) -> float:
    """``Number(text)`` for a string: whitespace-trimmed, ``''`` is 0, anything unparsable is NaN."""
    body = text.strip(JS_WHITESPACE)
    if not body:
        return 0.0
    if _DECIMAL_LITERAL.fullmatch(body):
        return float(body.replace("Infinity", "inf"))
    for pattern, base in ((_HEX, 16), (_OCT, 8), (_BIN, 2)):
        if pattern.fullmatch(body):
            return float(int(body[2:], base))
    return math.nan


_PARSE_FLOAT_PREFIX: Final = re.compile(r"[+-]?(?:Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)")
_PARSE_INT_PREFIX: Final = re.compile(r"[+-]?\d+")


def js_parse_float(text: str) -> float:
    """``parseFloat(text)``: the longest numeric prefix after leading whitespace, else NaN."""
    m = _PARSE_FLOAT_PREFIX.match(text.lstrip(JS_WHITESPACE))
    if not m:
        return math.nan
    return float(m.group(0).replace("Infinity", "inf"))


def js_parse_int(text: str) -> float:
    """``parseInt(text, 10)``: the leading decimal integer after whitespace, else NaN."""
    m = _PARSE_INT_PREFIX.match(text.lstrip(JS_WHITESPACE))
    if not m:
        return math.nan
    return float(int(m.group(0)))


def js_to_fixed(value: float, digits: int) -> str:
    """``Number.prototype.toFixed``: exact binary value, ties rounded away from zero."""
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if abs(value) >= 1e21:
        return js_number_str(value)
    quantum = Decimal(1).scaleb(-digits)
    text = str(Decimal(value).quantize(quantum, rounding=ROUND_HALF_UP))
    if value == 0:
        text = text.lstrip("-")  # JS prints -0 as "0.00" (but -0.001 as "-0.00", like Decimal)
    return text


def js_number_str(value: float | int) -> str:
    """``String(number)`` for the values the reference prints (integers and short decimals)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0"
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    if "e" in text:
        mantissa, exponent = text.split("e")
        exp = int(exponent)
        if -7 < exp < 21:
            return format(Decimal(text), "f")
        return f"{mantissa}e{'+' if exp > 0 else '-'}{abs(exp)}"
    return text
