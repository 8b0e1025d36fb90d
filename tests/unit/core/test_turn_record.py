"""The ``turns`` record's field rules (``pipeline.core.turn_record``) on both builds.

The rules moved beside the decision core to be compiled with it; the suite imports whichever build
is selected, so this module also loads the plain source under another name and checks that both
give the same fields, or the same dead-letter code and message, for good and broken records alike
(the fuzzer of the reliability tests makes them). ``topics.records`` must keep re-exporting the
very same objects, since the worker, the client and the tests catch ``topics.records.InvalidRecord``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import orjson
import pytest
from hypothesis import HealthCheck, given, settings

import pipeline.core.turn_record as selected
import topics.records as records
from tests.reliability.fuzz_records import MAX_TEXT_BYTES, FuzzRecord, fuzz_record

SOURCE = Path(selected.__file__).with_name("turn_record.py")
WORKER_ONLY = frozenset({"missing_key", "fake_delivery"})
"""Defects the worker's edge catches before these rules run (a record without a key, a hook delivery
record): the fields' own codes for them are not the dead letter's, so only agreement is checked."""


def _plain() -> ModuleType:
    spec = importlib.util.spec_from_file_location("turn_record_plain", SOURCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PLAIN = _plain()


def _outcome(module: ModuleType, value: bytes | None, key: bytes | None) -> object:
    try:
        return module.decode_turn_fields(value, key, max_text_bytes=MAX_TEXT_BYTES)
    except module.InvalidRecord as exc:
        return ("invalid", exc.code, exc.message)


def test_topics_records_re_exports_the_same_objects() -> None:
    for name in ("InvalidRecord", "decode_turn_fields", "parse_ts_ms", "check_turn_number", "MAX_TURN_NUMBER",
                 "MAX_SESSION_ID_CHARS", "DEFAULT_MAX_TEXT_BYTES", "ROLES"):
        assert getattr(records, name) is getattr(selected, name), name
    assert issubclass(records.InvalidRecord, ValueError)
    assert PLAIN.__file__ == str(SOURCE)  # the comparison below really runs the plain source


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(fuzz_record())
def test_both_builds_agree_on_every_fuzzed_record(record: FuzzRecord) -> None:
    key = record.key if record.kind != "missing_key" else None
    mine, plain = _outcome(selected, record.value, key), _outcome(PLAIN, record.value, key)
    assert mine == plain
    if record.kind == "good":
        assert (isinstance(mine, tuple) and mine[0] != "invalid") or mine is None
    elif record.kind not in WORKER_ONLY and isinstance(mine, tuple) and mine[0] == "invalid":
        assert mine[1] in record.codes, (record.kind, mine)


@pytest.mark.parametrize(("obj", "expected"), [
    ({"session_id": "s", "role": " User ", "text": "  hi  ", "turn": 2.0, "ts": "2026-05-01T12:00:00Z"},
     ("s", "user", "hi", 2, 1777636800000, None, None)),
    ({"session_id": "s", "role": "assistant", "text": "\u3000\ufeff"}, None),  # blank by JavaScript's trim
    ({"session_id": "s", "role": "user", "text": "x", "turn": True}, ("invalid", "invalid_turn")),
    ({"session_id": "s", "role": "user", "text": "x", "turn": 2.5}, ("invalid", "invalid_turn")),
    ({"session_id": "s", "role": "user", "text": "x", "ts": "2026-05-01T12:00:00"}, ("invalid", "invalid_ts")),
    ({"session_id": "s\x00", "role": "user", "text": "x"}, ("invalid", "control_characters")),
    ({"session_id": "s", "role": "user", "text": "x", "channel": ""}, ("invalid", "empty_field")),
])
def test_fields_and_codes(obj: dict[str, object], expected: object) -> None:
    for module in (selected, PLAIN):
        got = _outcome(module, orjson.dumps(obj), None)
        assert (got[:2] if isinstance(got, tuple) and got[0] == "invalid" else got) == expected


def test_a_lone_surrogate_and_a_key_mismatch_are_refused() -> None:
    raw = b'{"session_id":"s","role":"user","text":"a\\ud800b"}'
    for module in (selected, PLAIN):
        assert _outcome(module, raw, None)[:2] in (("invalid", "invalid_json"), ("invalid", "invalid_utf8"))
        assert _outcome(module, b'{"session_id":"s","role":"user","text":"x"}', b"t")[:2] == ("invalid", "key_mismatch")
