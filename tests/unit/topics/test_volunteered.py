"""The ``volunteered`` record: an envelope around the core's page, its JSON derived from the fields
and byte-identical to the format the topic has always carried (docs/contracts.md "Records")."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from pipeline.core.types import PAGE_FIELDS, VolunteeredPage
from topics.records import VOLUNTEERED_FIELDS, InvalidRecord, Volunteered

PAGE = VolunteeredPage("people/a", "default", 'A "x"', 0.8500000000000001, "title", "r\n", "syn")
EVENT = Volunteered("e1", "sé", 3, PAGE, "claude-code", "2026-01-01T00:00:00.000Z")
POINTER = Volunteered("e2", "s", 2**31 - 1, VolunteeredPage("p", "d", "D", 1.0, "alias", "", ""), "stream", "t",
                      "pointer")

# Written by the field-by-field encoder this one replaced (issue 14 item 6), byte for byte.
GOLDEN_EVENT = ('{"event_id":"e1","session_id":"sé","turn":3,"slug":"people/a","source_id":"default",'
                '"display":"A \\"x\\"","confidence":0.8500000000000001,"arm":"title","rationale":"r\\n",'
                '"synopsis":"syn","channel":"claude-code","volunteered_at":"2026-01-01T00:00:00.000Z"}').encode()
GOLDEN_POINTER = (b'{"event_id":"e2","session_id":"s","turn":2147483647,"slug":"p","source_id":"d","display":"D",'
                  b'"confidence":1.0,"arm":"alias","rationale":"","synopsis":"","channel":"stream",'
                  b'"volunteered_at":"t","kind":"pointer"}')


def test_the_json_is_byte_identical_to_the_established_format() -> None:
    assert EVENT.to_json() == GOLDEN_EVENT
    assert POINTER.to_json() == GOLDEN_POINTER  # kind is written only when it is not the default


def test_decoding_gives_back_the_envelope_and_its_page() -> None:
    assert Volunteered.from_json(GOLDEN_EVENT) == EVENT
    assert Volunteered.from_json(GOLDEN_POINTER) == POINTER
    assert Volunteered.from_json(GOLDEN_EVENT).page == PAGE


def test_the_key_order_is_the_envelope_with_the_page_in_its_place() -> None:
    envelope = [f.name for f in dataclasses.fields(Volunteered)]
    at = envelope.index("page")
    assert list(VOLUNTEERED_FIELDS) == envelope[:at] + list(PAGE_FIELDS) + envelope[at + 1:]
    assert list(orjson.loads(GOLDEN_POINTER)) == list(VOLUNTEERED_FIELDS)


def test_values_are_coerced_as_before_and_bad_records_name_the_first_missing_field() -> None:
    loose = orjson.loads(GOLDEN_EVENT) | {"turn": 3.0, "confidence": "0.5", "event_id": 7}
    decoded = Volunteered.from_json(orjson.dumps(loose))
    assert (decoded.turn, decoded.page.confidence, decoded.event_id) == (3, 0.5, "7")
    for bad, word in ((b"{}", "event_id"), (b"[1]", "list"), (b"nope", "not a Volunteered"),
                      (orjson.dumps({k: v for k, v in orjson.loads(GOLDEN_EVENT).items() if k != "synopsis"}),
                       "synopsis"), (orjson.dumps(orjson.loads(GOLDEN_EVENT) | {"turn": "x"}), "int")):
        with pytest.raises(InvalidRecord) as err:
            Volunteered.from_json(bad)
        assert err.value.code == "invalid_volunteered" and word in str(err.value), (bad, str(err.value))


def test_the_flat_spelling_of_earlier_releases_reads_the_page() -> None:
    assert (EVENT.slug, EVENT.confidence, EVENT.synopsis) == ("people/a", 0.8500000000000001, "syn")  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        _ = EVENT.no_such_field  # type: ignore[attr-defined]
