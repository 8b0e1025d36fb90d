"""The hook's JSON (pipeline.jsonlite) against the stdlib's: the same values and the same text
for anything, and an error wherever the stdlib raises one."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import jsonlite

scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
           | st.text())
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=5), max_leaves=30)


def same(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to NaN (json round-trips it)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@settings(max_examples=300, deadline=None)
@given(values)
def test_dumps_is_the_stdlibs_text(value: Any) -> None:
    for ascii in (True, False):
        for separators in ((",", ":"), (", ", ": ")):
            assert jsonlite.dumps(value, ensure_ascii=ascii, separators=separators) == json.dumps(
                value, ensure_ascii=ascii, separators=separators)


@settings(max_examples=300, deadline=None)
@given(values, st.sampled_from(["", " ", "\n\t ", "\r\n"]))
def test_loads_gives_the_stdlibs_value(value: Any, pad: str) -> None:
    text = pad + json.dumps(value) + pad
    assert same(jsonlite.loads(text), json.loads(text))
    raw = (pad + json.dumps(value, ensure_ascii=False) + pad).encode("utf-8", "surrogatepass")
    assert same(jsonlite.loads(raw), json.loads(raw))
    assert same(jsonlite.loads(bytearray(raw)), json.loads(raw))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40) | st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_loads_fails_exactly_where_the_stdlib_fails(raw: bytes) -> None:
    try:
        expected: Any = json.loads(raw)
    except (ValueError, RecursionError):
        with pytest.raises((ValueError, RecursionError)):
            jsonlite.loads(raw)
        return
    assert same(jsonlite.loads(raw), expected)


@pytest.mark.parametrize("text", ["", " ", "{", "[1,]", "1 2", '{"a" 1}', "\ufeff[1]", "nul", '"\\x"', "[" * 100_000])
def test_malformed_text_raises_like_the_stdlib(text: str) -> None:
    with pytest.raises((ValueError, RecursionError)) as ours:
        jsonlite.loads(text)
    with pytest.raises((ValueError, RecursionError)) as theirs:
        json.loads(text)
    assert isinstance(ours.value, RecursionError) == isinstance(theirs.value, RecursionError)


def test_bom_utf16_and_duplicate_keys_follow_the_stdlib() -> None:
    assert jsonlite.loads(b"\xef\xbb\xbf[1]") == [1]
    assert jsonlite.loads('[1, "\u00e9"]'.encode("utf-16")) == [1, "\u00e9"]
    assert jsonlite.loads('{"a": 1, "a": 2}') == {"a": 2}
    assert jsonlite.dumps("\ud800") == json.dumps("\ud800")


def test_unserializable_values_raise_type_error_and_leave_no_state() -> None:
    shared: dict[str, Any] = {"x": 1}
    with pytest.raises(TypeError, match="not JSON serializable"):
        jsonlite.dumps({"a": shared, "b": object()})
    assert jsonlite.dumps({"again": shared}) == '{"again":{"x":1}}'  # no stale circular-reference marker
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        jsonlite.dumps(loop)


def test_importing_it_loads_neither_json_nor_re() -> None:
    code = "import sys, pipeline.jsonlite as j; j.loads(b'{\"a\":[1]}'); j.dumps({'a': 1}); " \
           "print(sorted({'json', 're', 'enum'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
